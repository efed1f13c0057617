"""Checkpointing of a table through TensorFlow's object-based checkpoints.

A table is saved as one logical table (keys, values, slots, clocks, steps),
whatever its number of shards, so it restores onto any number of shards.
Saving flushes the caches first; restoring replaces every row and empties the
caches, whose copies and pending updates belong to the abandoned run.
"""
import tensorflow as tf
from tensorflow.python.training.saving import saveable_object

# The rows restored per import op: bounds the size of any one op's inputs.
RESTORE_CHUNK_ROWS = 1 << 20
_FIELDS = ("keys", "values", "slots", "clocks", "steps")
_DTYPES = (tf.int64, tf.float32, tf.float32, tf.int64, tf.int64)


class TableCheckpoint(tf.__internal__.tracking.Trackable):
    def __init__(self, table, flush, clear_caches):
        """`flush()` pushes pending cache updates; `clear_caches()` empties them."""
        self._table = table
        self._flush = flush
        self._clear_caches = clear_caches
        self._exported = {}

    def _export_field(self, field):
        # TensorFlow asks for each field separately; one flush and export
        # serves all five.
        if not self._exported:
            with tf.control_dependencies(self._flush()):
                self._exported = dict(zip(_FIELDS, self._table.export_all()))
        return self._exported.pop(field)

    def _serialize_to_tensors(self):
        # Callables: restore only needs names and dtypes, and must not flush
        # or export the whole table to learn them.
        return {
            field: saveable_object.SaveSpec(
                lambda field=field: self._export_field(field), "", field, dtype=dtype,
                device="/cpu:0")
            for field, dtype in zip(_FIELDS, _DTYPES)
        }

    def _restore_from_tensors(self, restored_tensors):
        if tf.executing_eagerly():
            return self.restore_rows(*(restored_tensors[f] for f in _FIELDS))
        raise NotImplementedError("het_tf tables restore eagerly (tf.train.Checkpoint.restore "
                                  "or model.load_weights outside tf.function)")

    def restore_rows(self, keys, values, slots, clocks, steps):
        self._clear_caches()
        self._table.clear()
        total = int(keys.shape[0])
        for start in range(0, max(total, 1), RESTORE_CHUNK_ROWS):
            end = min(start + RESTORE_CHUNK_ROWS, total)
            self._table.import_rows(keys[start:end], values[start:end], slots[start:end],
                                    clocks[start:end], steps[start:end])
        return tf.no_op()
