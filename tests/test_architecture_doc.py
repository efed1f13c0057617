"""docs/architecture.md names only what exists: every file, every Python
`Class.member` and every C++ `Class::Member` it names in backticks is in
the tree, so the walk through a step cannot drift from the code. No
TensorFlow needed: the sources are read as text."""
import ast
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"


def tracked_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return [path for path in out if (ROOT / path).exists()]


def named(pattern):
    return sorted(set(re.findall(pattern, DOC.read_text())))


def test_every_file_it_names_exists():
    files = tracked_files()
    basenames = {pathlib.PurePosixPath(path).name for path in files}
    missing = []
    for name in named(r"`([^`\s]+\.(?:py|cc|h|md|sh|toml))`"):
        if "/" in name:  # a path, from the root or from a folder named before it
            found = any(path == name or path.endswith("/" + name) for path in files)
        else:
            found = name in basenames
        if not found:
            missing.append(name)
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def python_members():
    """{class name: the names its body defines}, over the library's modules."""
    members = {}
    for folder in ("het_tf", "keras_layers"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    defined = members.setdefault(node.name, set())
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            defined.add(item.name)
                        elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                            targets = item.targets if isinstance(item, ast.Assign) else [
                                item.target]
                            defined.update(t.id for t in targets if isinstance(t, ast.Name))
    return members


def test_every_python_member_it_names_exists():
    members = python_members()
    missing = [f"{cls}.{member}" for cls, member in named(r"`([A-Z]\w+)\.(\w+)`")
               if member not in members.get(cls, ())]
    assert not missing, f"docs/architecture.md names Python members that do not exist: {missing}"


def test_every_cpp_member_it_names_exists():
    """A member is defined out of line (`Class::Member`) or named in a file
    that declares the class."""
    sources = [path.read_text() for path in (ROOT / "cc_ops").rglob("*")
               if path.suffix in (".cc", ".h")]
    missing = []
    for cls, member in named(r"`([A-Z]\w+)::(\w+)`"):
        declaring = [text for text in sources if re.search(rf"\b(class|struct) {cls}\b", text)]
        if not any(re.search(rf"\b{cls}::{member}\b", text) for text in sources) and not any(
                re.search(rf"\b{member}\b", text) for text in declaring):
            missing.append(f"{cls}::{member}")
    assert not missing, f"docs/architecture.md names C++ members that do not exist: {missing}"
