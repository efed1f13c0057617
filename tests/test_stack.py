"""The pinned stack is installed and works together: Horovod built against
this TensorFlow, tensorflow-io, tf_keras."""
import os
import subprocess
import sys

import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The two supported stacks (requirements.txt, requirements-tf2.21.txt).
STACKS = {"2.16.2": {"tf_keras": "2.16.0", "tensorflow_io": "0.37.1", "numpy": "1."},
          "2.21.0": {"tf_keras": "2.21.0", "numpy": "2."}}


def test_pinned_versions():
    import numpy
    import tf_keras

    assert tf.__version__ in STACKS
    stack = STACKS[tf.__version__]
    assert tf_keras.__version__ == stack["tf_keras"]
    assert numpy.__version__.startswith(stack["numpy"])
    if "tensorflow_io" in stack:
        import tensorflow_io

        assert tensorflow_io.__version__ == stack["tensorflow_io"]


def test_horovod_allreduces_across_two_gloo_ranks():
    code = (
        "import horovod.tensorflow as hvd, tensorflow as tf\n"
        "hvd.init()\n"
        "x = tf.constant([float(hvd.rank() + 1)] * 3)\n"
        "print('sum', hvd.rank(), hvd.allreduce(x, op=hvd.Sum).numpy().tolist())\n"
    )
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    result = subprocess.run(
        [horovodrun, "--gloo", "-np", "2", "-H", "localhost:2", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=240, start_new_session=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if "sum" in line]
    assert len(lines) == 2 and all("[3.0, 3.0, 3.0]" in line for line in lines), result.stdout
