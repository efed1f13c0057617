"""Checkpointing of a table through TensorFlow's object-based checkpoints.

A table is saved as one logical table (keys, values, slots, clocks, steps),
whatever its number of shards, so it restores onto any number of shards.
Saving pushes every cache's pending updates, then writes the rows; the
caches keep their copies, so a save costs the training no hit. Restoring
replaces every row and empties the caches, whose copies and pending updates
belong to the abandoned run.

The rows go in chunks of at most CHUNK_BYTES, each written by its own SaveV2
(and read back by its own RestoreV2) after the one before it is done, so a
save or restore holds one chunk of a table at a time however large the table
is: one tensor per field would hold a second copy of the whole table in the
saving process (docs/scale.md). TensorFlow's registered-saver hook gives the
save its file prefix, and merges the chunk files into the checkpoint with
the other objects' tensors: a checkpoint is still written under temporary
names and only then made the latest, so a save killed half way leaves the
one before it loadable.
"""
import tensorflow as tf
from tensorflow.python.ops import io_ops
from tensorflow.python.saved_model import registration

from het_tf.runtime.table import ROW_FIELDS

_DTYPES = (tf.int64, tf.float32, tf.float32, tf.int64, tf.int64)
# The most bytes of a table a save or restore holds at once, in one chunk.
CHUNK_BYTES = 64 << 20


class TableCheckpoint(tf.__internal__.tracking.Trackable):
    def __init__(self, table, flush, clear_caches, chunk_bytes=CHUNK_BYTES, restored=None):
        """`flush()` and `clear_caches()` return the ops that push pending
        cache updates (and write hot blocks back) and that empty the caches;
        `restored()`, if given, runs once every row is restored (a hot block
        takes its rows again)."""
        self._table = table
        self._flush = flush
        self._clear_caches = clear_caches
        self._restored = restored
        self.chunk_rows = table.chunk_rows(chunk_bytes)

    def write_chunks(self, file_prefix, name, after):
        """Writes the table as chunks under `file_prefix` (a string tensor),
        the first after the ops `after`; returns (the chunks' prefixes, the
        last write)."""
        with tf.init_scope():
            # Now, whether or not TensorFlow traces the save: each worker's
            # pending updates reach the shards before any row is read.
            tf.nest.flatten(self._flush())
            rows = [self._table.shard_rows(s) for s in range(self._table.num_shards)]
        prefixes, chunk = [], 0
        for shard, count in enumerate(rows):
            offsets = list(range(0, count, self.chunk_rows)) or [0]
            for i, offset in enumerate(offsets):
                # The last chunk of a shard takes whatever is left.
                limit = self.chunk_rows if i + 1 < len(offsets) else tf.int64.max
                with tf.control_dependencies(after):
                    fields = self._table.export_shard(shard, offset, limit)
                with tf.device("/cpu:0"):
                    prefix = tf.strings.join([file_prefix, f"_{chunk}"])
                    names = [_chunk_name(name, chunk, f) for f in ROW_FIELDS]
                    after = [io_ops.save_v2(prefix, names, [""] * len(ROW_FIELDS), fields)]
                prefixes.append(prefix)
                chunk += 1
        with tf.device("/cpu:0"), tf.control_dependencies(after):
            prefix = tf.strings.join([file_prefix, "_chunks"])
            after = [io_ops.save_v2(prefix, [f"{name}/chunks"], [""],
                                    [tf.constant(chunk, tf.int64)])]
        return prefixes + [prefix], after

    def read_chunks(self, merged_prefix, name):
        """Replaces the table's rows with the chunks saved under `name`."""
        with tf.init_scope():
            with tf.device("/cpu:0"):
                (count,) = io_ops.restore_v2(merged_prefix, [f"{name}/chunks"], [""],
                                             [tf.int64])
            after = tf.nest.flatten(self._clear_caches()) + self._table.clear()
            for chunk in range(int(count)):
                with tf.device("/cpu:0"), tf.control_dependencies(after):
                    fields = io_ops.restore_v2(merged_prefix,
                                               [_chunk_name(name, chunk, f) for f in ROW_FIELDS],
                                               [""] * len(ROW_FIELDS), _DTYPES)
                after = [self.restore_rows(*fields)]
            if self._restored is not None:
                with tf.control_dependencies(after):
                    self._restored()

    def restore_rows(self, keys, values, slots, clocks, steps):
        """Adds rows to the table, on the shards that own them now."""
        return tf.group(self._table.import_rows(keys, values, slots, clocks, steps))


def _chunk_name(name, chunk, field):
    return f"{name}/chunk_{chunk}/{field}"


def _save_tables(trackables, file_prefix):
    prefixes, after = [], []
    for i, (name, table) in enumerate(sorted(trackables.items())):
        written, after = table.write_chunks(tf.strings.join([file_prefix, f"_{i}"]), name, after)
        prefixes += written
    # When TensorFlow traces the save (a cluster's), its merge of the files
    # must wait for the writes: it depends on the prefixes returned here.
    with tf.control_dependencies(after):
        return [tf.identity(prefix) for prefix in prefixes]


def _restore_tables(trackables, merged_prefix):
    for name, table in sorted(trackables.items()):
        table.read_chunks(merged_prefix, name)


registration.register_checkpoint_saver(
    package="het_tf", name="TableCheckpoint",
    predicate=lambda x: isinstance(x, TableCheckpoint),
    save_fn=_save_tables, restore_fn=_restore_tables)
