"""Files do one job: no source file of the library is over 360 lines
(tests aside). A file that grows past it is split by job, as
docs/architecture.md lists them. No TensorFlow needed."""
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIMIT = 360
SOURCES = ("*.py", "*.cc", "*.h")


def library_files():
    for top in ("het_tf", "keras_layers", "cc_ops"):
        for pattern in SOURCES:
            for path in (ROOT / top).rglob(pattern):
                rel = path.relative_to(ROOT)
                # Tests, and the link to keras_layers/ a development tree may hold.
                if "tests" in rel.parts or rel.parts[:2] == ("het_tf", "keras_layers"):
                    continue
                yield rel, path


def test_the_library_has_sources_to_check():
    names = {rel.name for rel, _ in library_files()}
    assert {"het_embedding.py", "worker_cache.h", "table_shard.cc"} <= names


def test_no_library_file_is_over_the_limit():
    long = {str(rel): n for rel, path in library_files()
            if (n := len(path.read_text().splitlines())) > LIMIT}
    assert not long, f"files over {LIMIT} lines (split them by job): {long}"
