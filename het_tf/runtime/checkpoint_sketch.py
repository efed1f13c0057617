"""A table's admission sketch in its checkpoints (row_admission.h): the
sightings of ids not admitted yet, so that a restored table admits an id at
the same training read the saved one would have, not admit_after reads
later.

Each shard's sketch is saved whole (4 MiB a shard, uint8 counters) beside
the table's chunks, in every checkpoint, full or incremental. A restore
onto the same number of shards gives each shard its own; onto another, each
shard takes the cellwise maximum of all the saved ones, which still bounds
every id's sightings from above (a count-min sketch's counts are upper
bounds, and each id was counted by one saved shard). Checkpoints written
before sketches were kept hold none: they restore with an empty sketch, as
a table made anew starts."""
import tensorflow as tf
from tensorflow.python.ops import io_ops

from het_tf import _op_library


def _key(name, shard):
    return f"{name}/admission_sketch_{shard}"


def _kept(table):
    # Only admit_after > 1 counts sightings (admit_after 1 admits at once).
    return (table.config.admit_after or 0) > 1


def write(table, file_prefix, name, after):
    """Saves each shard's sketch in a file of its own under `file_prefix`
    (a string tensor), after the ops `after`. Returns (the prefixes written,
    for the checkpoint to merge, and the write)."""
    if not _kept(table):
        return [], after
    ops = _op_library.load()
    counts = []
    for s in range(table.num_shards):
        with tf.device(table.devices[s]), tf.control_dependencies(after):
            counts.append(ops.het_table_sketch(table.handle(s)))
    with tf.device("/cpu:0"):
        prefix = tf.strings.join([file_prefix, "_sketch"])
        shards = range(table.num_shards)
        saved = io_ops.save_v2(prefix, [_key(name, s) for s in shards], [""] * len(counts),
                               counts)
    return [prefix], [saved]


def read(table, path, name, after):
    """Takes the sketches saved in the checkpoint at `path` back into the
    table's shards, after the ops `after` (the rows' restore, which cleared
    the shards' sketches). Returns the ops."""
    if not _kept(table):
        return after
    reader = tf.train.load_checkpoint(path)
    saved = 0
    while reader.has_tensor(_key(name, saved)):
        saved += 1
    if saved == 0:  # written before sketches were kept
        return after
    with tf.device("/cpu:0"), tf.control_dependencies(after):
        counts = io_ops.restore_v2(path, [_key(name, s) for s in range(saved)], [""] * saved,
                                   [tf.uint8] * saved)
    if saved != table.num_shards:
        counts = [tf.reduce_max(tf.stack(counts), axis=0)] * table.num_shards
    ops = _op_library.load()
    merged = []
    for s in range(table.num_shards):
        with tf.device(table.devices[s]):
            merged.append(ops.het_table_merge_sketch(table.handle(s), counts[s]))
    return [tf.group(merged)]
