"""The one loader: clear errors for a missing or mismatched library, and the
Bazel-built library works like the setup.py one."""
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from het_tf import _op_library

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


TF = tf.__version__


def run_python(code, library):
    env = dict(os.environ, **{_op_library.LIBRARY_ENV: library, "TF_CPP_MIN_LOG_LEVEL": "3"})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_missing_library_says_how_to_rebuild(tmp_path):
    result = run_python("from het_tf import HetEmbedding", str(tmp_path / "nowhere.so"))
    assert result.returncode != 0
    assert "op library is missing" in result.stderr
    assert f"TensorFlow is {TF}" in result.stderr
    assert "pip install --no-build-isolation" in result.stderr


def test_library_for_another_tensorflow_names_both_versions(tmp_path):
    data = open(_op_library.library_path(), "rb").read()
    tag = _op_library.BUILD_TAG + TF.encode()
    assert tag in data
    fake = tmp_path / "_het_ops.so"
    fake.write_bytes(data.replace(tag, _op_library.BUILD_TAG + b"2.99.0"))
    result = run_python("from het_tf import HetEmbedding", str(fake))
    assert result.returncode != 0
    assert f"built for TensorFlow 2.99.0, but TensorFlow {TF} is installed" in result.stderr


def test_unloadable_library_is_reported(tmp_path):
    junk = tmp_path / "_het_ops.so"
    junk.write_bytes(b"not an ELF file " + _op_library.BUILD_TAG + TF.encode() + b"\0")
    result = run_python("from het_tf import HetEmbedding", str(junk))
    assert result.returncode != 0
    assert f"could not be loaded into TensorFlow {TF}" in result.stderr


def bazel_library():
    path = os.path.join(ROOT, "bazel-bin", "cc_ops", "_het_ops.so")
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing: run `make bazel-build` first (make test does)")
    return path


def test_bazel_built_library_runs_the_ops(tmp_path):
    # A copy, so the check does not depend on Bazel's output tree staying put.
    library = shutil.copy(bazel_library(), tmp_path / "_het_ops.so")
    code = """
import tensorflow as tf, het_tf
assert het_tf._op_library.library_path().endswith("_het_ops.so")
t = het_tf.ShardedTable(het_tf.TableConfig("bazel", 3, optimizer=het_tf.OptimizerConfig("sgd")))
c = het_tf.WorkerCache(t, het_tf.CacheConfig(4, "lru", 0, 0))
rows, keys, _ = c.lookup(tf.constant([7, 7, 8], tf.int64), True)
c.apply_gradients(keys, tf.ones([2, 3]), 1.0)
after, _, _ = c.lookup(tf.constant([7], tf.int64), True)
print(round(float(rows[0, 0] - after[0, 0]), 4), t.stats()["updates_applied"])
"""
    result = run_python(code, str(library))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1.0", "2"]
