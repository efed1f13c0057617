"""The pinned stack is installed and works together: Horovod built against
this TensorFlow, tensorflow-io, tf_keras."""
import os
import subprocess
import sys

import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_pinned_versions():
    import numpy
    import tensorflow_io
    import tf_keras

    assert tf.__version__ == "2.16.2"
    assert tf_keras.__version__ == "2.16.0"
    assert tensorflow_io.__version__ == "0.37.1"
    assert numpy.__version__.startswith("1.")


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
