"""Run as every Horovod rank (tests/test_dense_allreduce.py): hybrid mode's
dense allreduce in float16 against float32 on the same gradients.

    dense_allreduce_probe.py RESULT_DIR STEPS

Each rank draws its own gradients, spanning 1e-7 to 1 in magnitude, and
averages them both ways for STEPS steps; then rank 1 alone sends 1e6 (past
float16 at any scale over 1), and both ranks average once more. Each rank
writes rank<N>.json: its gradients, both averages, the skip decisions and
the loss scale after each step.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from het_tf.distribute.dense_allreduce import DenseAllreduce  # noqa: E402

result_dir, steps = sys.argv[1], int(sys.argv[2])
hvd.init()
rng = np.random.default_rng(7 + hvd.rank())
float32, float16 = DenseAllreduce(hvd, "float32"), DenseAllreduce(hvd, "float16")


@tf.function
def both(grads):
    exact, _ = float32(grads)
    half, applied = float16(grads)
    return exact, half, applied, float16.scale.read_value()


record = {"rank": hvd.rank(), "grads": [], "float32": [], "float16": [], "applied": [],
          "scale": []}
for step in range(steps + 1):
    shapes = [(16, 8), (8,)]
    grads = [(rng.standard_normal(s) * 10.0 ** rng.uniform(-7, 0, s)).astype(np.float32)
             for s in shapes]
    if step == steps and hvd.rank() == 1:
        grads[0][3, 4] = 1e6
    exact, half, applied, scale = both([tf.constant(g) for g in grads])
    record["grads"].append([g.tolist() for g in grads])
    record["float32"].append([t.numpy().tolist() for t in exact])
    record["float16"].append([t.numpy().tolist() for t in half])
    record["applied"].append(bool(applied))
    record["scale"].append(float(scale))
record["skipped_steps"] = int(float16.skipped_steps.numpy())
with open(os.path.join(result_dir, f"rank{hvd.rank()}.json"), "w") as f:
    json.dump(record, f)
