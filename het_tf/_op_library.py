"""The one loader of het_tf's compiled op library.

The library must be built against the TensorFlow that loads it: C++ op
libraries have no stable ABI across TensorFlow releases. The library carries
the version it was compiled against as a tagged string, readable without
loading it; a mismatch or a missing library is reported with both versions
and the command that rebuilds it.
"""
import os

import tensorflow as tf

_HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY_NAME = "_het_ops.so"
# Written into the library by cc_ops/common/build_tag.cc.
BUILD_TAG = b"HET_TF_BUILT_FOR_TENSORFLOW="
# Points the loader at another build, e.g. the one Bazel makes.
LIBRARY_ENV = "HET_TF_OPS_LIBRARY"

REBUILD_HINT = (
    "Rebuild it against the installed TensorFlow with "
    "`pip install --no-build-isolation --force-reinstall .` (or `make build`) "
    "from the het_tf source tree."
)

# The version of the messages between workers and parameter servers that
# this library speaks (cc_ops/embedding/core/exchange_wire.h kWireVersion):
# every op that carries rows to or from a table shard is given it, and the
# shard refuses another, naming both.
WIRE_VERSION = 6

_ops = None


class OpLibraryError(ImportError):
    """The op library is missing, unloadable, or built for another TensorFlow."""


def library_path():
    return os.environ.get(LIBRARY_ENV) or os.path.join(_HERE, LIBRARY_NAME)


def built_for_version(path):
    """The TensorFlow version the library at `path` was compiled against."""
    with open(path, "rb") as f:
        data = f.read()
    start = data.find(BUILD_TAG)
    if start < 0:
        return None
    start += len(BUILD_TAG)
    return data[start:data.index(b"\0", start)].decode("ascii", "replace")


def load():
    """Loads the op library once and returns its generated op module."""
    global _ops
    if _ops is not None:
        return _ops
    path = library_path()
    running = tf.__version__
    if not os.path.exists(path):
        raise OpLibraryError(
            f"het_tf's op library is missing: {path} does not exist. "
            f"The installed TensorFlow is {running}. {REBUILD_HINT}"
        )
    built_for = built_for_version(path)
    if built_for is not None and built_for != running:
        raise OpLibraryError(
            f"het_tf's op library {path} was built for TensorFlow {built_for}, "
            f"but TensorFlow {running} is installed. {REBUILD_HINT}"
        )
    try:
        ops = tf.load_op_library(path)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, OSError) as e:
        raise OpLibraryError(
            f"het_tf's op library {path} could not be loaded into TensorFlow "
            f"{running} (built for {built_for or 'an unrecorded version'}): {e}. {REBUILD_HINT}"
        ) from e
    _ops = ops
    return ops
