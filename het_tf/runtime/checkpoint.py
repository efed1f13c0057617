"""Checkpointing of a table through TensorFlow's object-based checkpoints.

A table is saved as one logical table (keys, values, slots, clocks, steps),
whatever its number of shards, so it restores onto any number of shards.
Saving flushes the caches, exports, then empties the caches; restoring
replaces every row and empties the caches, whose copies and pending updates
belong to the abandoned run. Both leave a cold cache, so a run resumed from a
checkpoint continues exactly as the run that wrote it.
"""
import tensorflow as tf
from tensorflow.python.training.saving import saveable_object

_FIELDS = ("keys", "values", "slots", "clocks", "steps")
_DTYPES = (tf.int64, tf.float32, tf.float32, tf.int64, tf.int64)


class TableCheckpoint(tf.__internal__.tracking.Trackable):
    def __init__(self, table, flush, clear_caches):
        """`flush()` and `clear_caches()` return the ops that push pending
        cache updates and that empty the caches."""
        self._table = table
        self._flush = flush
        self._clear_caches = clear_caches
        self._exported = {}

    def _export_field(self, field, flushed):
        # TensorFlow asks for each field separately; one flush and export
        # serves all five.
        if not self._exported:
            with tf.control_dependencies([] if flushed else self._flush()):
                exported = self._table.export_all()
            # Empty the caches too, so that training after a save goes on
            # exactly as training after a restore of that save would.
            if not flushed:
                with tf.control_dependencies(exported):
                    cleared = tf.nest.flatten(self._clear_caches())
                with tf.control_dependencies(cleared):
                    exported = [tf.identity(t) for t in exported]
            self._exported = dict(zip(_FIELDS, exported))
        return self._exported.pop(field)

    def _serialize_to_tensors(self):
        # Eagerly (TensorFlow asks here before it traces a multi-device save),
        # flush and empty the caches now, worker by worker, so that a worker
        # that died only costs its own pending updates.
        flushed = tf.executing_eagerly()
        if flushed:
            self._flush()
            self._clear_caches()
        # Callables: restore only needs names and dtypes, and must not
        # export the whole table to learn them.
        return {
            field: saveable_object.SaveSpec(
                lambda field=field: self._export_field(field, flushed), "", field, dtype=dtype,
                device="/cpu:0")
            for field, dtype in zip(_FIELDS, _DTYPES)
        }

    def _restore_from_tensors(self, restored_tensors):
        return self.restore_rows(*(restored_tensors[f] for f in _FIELDS))

    def restore_rows(self, keys, values, slots, clocks, steps):
        """Replaces the table's rows; works eagerly and inside the
        tf.function that TensorFlow's restore runs."""
        cleared = tf.nest.flatten(self._clear_caches()) + self._table.clear()
        with tf.control_dependencies(cleared):
            return tf.group(self._table.import_rows(keys, values, slots, clocks, steps))
