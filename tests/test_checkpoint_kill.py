"""A process killed while it writes a checkpoint leaves the previous one
loadable: TensorFlow writes a checkpoint under temporary names and only then
points `checkpoint` at it."""
import hashlib
import os
import signal
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

from het_tf.runtime.checkpoint import TableCheckpoint
from het_tf.runtime.config import TableConfig
from het_tf.runtime.table import ShardedTable

WRITER = r"""
import hashlib, os, sys
import numpy as np, tensorflow as tf
from het_tf.runtime.checkpoint import TableCheckpoint
from het_tf.runtime.config import TableConfig
from het_tf.runtime.table import ShardedTable

directory, rows = sys.argv[1], int(sys.argv[2])
table = ShardedTable(TableConfig("big", 16), [None, None], instance="writer")
holder = tf.Module()
holder.table = TableCheckpoint(table, lambda: [], lambda: [])
manager = tf.train.CheckpointManager(tf.train.Checkpoint(holder=holder), directory, max_to_keep=5)

def fill(value):
    for first in range(0, rows, 1 << 18):
        n = min(1 << 18, rows - first)
        keys = tf.range(first, first + n, dtype=tf.int64)
        table.import_rows(keys, tf.fill([n, 16], value), tf.zeros([n, 1, 16]),
                          tf.fill([n], tf.constant(1, tf.int64)), tf.zeros([n], tf.int64))

fill(1.0)
path = manager.save()
keys, values, _, _, _ = (t.numpy() for t in table.export_all())
order = np.argsort(keys)
digest = hashlib.sha256(values[order].tobytes()).hexdigest()
print("SAVED", path, digest, flush=True)
fill(2.0)
print("SAVING", flush=True)
while True:  # save until killed
    manager.save()
"""


def digest_of(table):
    keys, values, _, _, _ = (t.numpy() for t in table.export_all())
    return hashlib.sha256(values[np.argsort(keys)].tobytes()).hexdigest(), len(keys)


def test_kill_during_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    rows = 1_500_000
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(rows)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        saved = None
        deadline = time.monotonic() + 300
        for line in writer.stdout:
            if line.startswith("SAVED"):
                saved = line.split()
            if line.startswith("SAVING"):
                break
            assert time.monotonic() < deadline
        assert saved is not None
        time.sleep(1.5)  # well inside the next save of 1.5M rows
        os.killpg(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        if writer.poll() is None:
            os.killpg(writer.pid, signal.SIGKILL)
            writer.wait()
    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert latest is not None
    table = ShardedTable(TableConfig("big", 16), [None], instance="reader")
    holder = tf.Module()
    holder.table = TableCheckpoint(table, lambda: [], lambda: [])
    tf.train.Checkpoint(holder=holder).restore(latest).assert_consumed()
    digest, count = digest_of(table)
    assert count == rows
    if latest == saved[1]:
        assert digest == saved[2]  # the first checkpoint, exactly
    else:  # a later save that completed before the kill: all rows of value 2
        keys, values, _, _, _ = (t.numpy() for t in table.export_all())
        assert np.all(values == 2.0)
