"""Run as every Horovod rank next to PS tasks (tests/test_hybrid.py).

Records when this rank's connection to the PS tasks started and ended
inside het_tf.hybrid.init(), then has every rank build and run a function
on the PS tasks (a new kernel in each rank's context there, which is what
crashed a PS task whose collective executor manager two simultaneous
connections had replaced).

    hybrid_connect_probe.py RESULT STEPS

Rank 0 writes every rank's record to RESULT.
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod.tensorflow as hvd  # noqa: E402
import tensorflow as tf  # noqa: E402

from het_tf import hybrid  # noqa: E402
from het_tf.runtime.config import TableConfig  # noqa: E402
from het_tf.runtime.table import ShardedTable  # noqa: E402

result_path, steps = sys.argv[1], int(sys.argv[2])
connect = tf.config.experimental_connect_to_cluster
window = {}


def timed_connect(*args, **kwargs):
    window["start"] = time.monotonic()  # one clock for every process on this host
    try:
        return connect(*args, **kwargs)
    finally:
        window["end"] = time.monotonic()


tf.config.experimental_connect_to_cluster = timed_connect
num_ps = hybrid.init()
rank = hybrid.rank()
table = ShardedTable(TableConfig(name="connect_probe", dim=4, vocabulary_size=1000),
                     devices=[f"/job:ps/task:{i}" for i in range(num_ps)], instance="probe")


@tf.function
def step(keys):
    rows = table.gather(keys)
    table.push(keys, tf.ones_like(rows), tf.ones_like(keys), 0.1, return_rows=False)
    return tf.reduce_sum(rows)


for i in range(steps):
    step(tf.constant([rank, 100 + i], tf.int64))
hybrid.barrier()  # every rank's pushes are on the shards
clocks = table.export_all()[3].numpy()
records = hvd.allgather_object({"rank": rank, "start": window["start"], "end": window["end"],
                                "clock_sum": int(clocks.sum())})
if rank == 0:
    with open(result_path, "w") as f:
        json.dump(records, f)
