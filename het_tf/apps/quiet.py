"""The `het-tf` command's quiet start: TensorFlow's C++ log at errors only,
and without the start-up lines that are no error on a machine without a GPU.

A user's own TF_CPP_MIN_LOG_LEVEL is left alone, and so is everything
TensorFlow prints with it; --verbose turns TensorFlow's log back on. The
choice travels to the cluster tasks and ranks a command starts through
QUIET_ENV, so they are as quiet as the command that started them.
"""
import os
import re
import sys
import tempfile

LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
QUIET_ENV = "HET_TF_QUIET"
ERRORS_ONLY = "2"  # TensorFlow's levels: 0 info, 1 warnings, 2 errors, 3 fatal only
# What a CPU-only TensorFlow prints at start-up whatever the level: 2.16's
# three GPU-plugin lines at error level (XLA's CUDA plugins register twice);
# 2.21's info lines, logged before absl's log is set up, with absl's notice
# saying so, and its error that CUDA found no driver. None of it says
# anything about this machine or run.
_START_UP_NOISE = re.compile(
    r"Unable to register cu(DNN|FFT|BLAS) factory"
    r"|^WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|^I\d{4} [\d:.]+ +\d+ [\w.]+:\d+\]"
    r"|failed call to cuInit")


def configure(verbose):
    """Sets this process's (and its children's) TensorFlow log level before
    TensorFlow is imported; returns whether start-up noise is filtered."""
    if verbose:
        os.environ[QUIET_ENV] = "0"
        os.environ.setdefault(LOG_LEVEL_ENV, "0")
    elif os.environ.get(QUIET_ENV) == "1" or LOG_LEVEL_ENV not in os.environ:
        os.environ[QUIET_ENV] = "1"
        os.environ.setdefault(LOG_LEVEL_ENV, ERRORS_ONLY)
    return os.environ.get(QUIET_ENV) == "1"


def import_tensorflow():
    """Imports TensorFlow and tf_keras; when quiet, what their import prints
    on stderr is passed on without the start-up noise. Everything else, real
    errors and a failed import's traceback included, still reaches stderr."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    if os.environ.get(QUIET_ENV) != "1" or "tensorflow" in sys.modules:
        import tensorflow  # noqa: F401
        import tf_keras  # noqa: F401

        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow
            import tf_keras  # noqa: F401

            tensorflow.config.list_physical_devices()  # the devices' start-up log, here
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors="replace").splitlines(keepends=True):
                if not _START_UP_NOISE.search(line):
                    sys.stderr.write(line)
            sys.stderr.flush()
