"""A fixed-vocabulary HetEmbedding's table as one Keras weight, so that
`get_weights()` / `set_weights()` (the layer's and the model's) read and
write it as the `[input_dim, output_dim]` matrix tf_keras.layers.Embedding
has, through the shards and every worker's cache."""
import numpy as np
import tensorflow as tf
from tf_keras.src.engine import base_layer_utils

from het_tf.distribute import horovod
from het_tf.runtime.config import MATERIALIZE_LIMIT


class TableWeights(base_layer_utils.TrackableWeightHandler):
    """Keras' handle for state that is not a variable (as its lookup layers
    keep their vocabularies): one tensor, the table's rows in id order."""

    def __init__(self, layer):
        # Not super().__init__: that wants a variable-like saveable; the
        # fields below are what Keras and tf.distribute read of a handler.
        self._layer = layer
        self._dtype = tf.float32
        self._distribute_strategy = tf.distribute.get_strategy()

    @property
    def num_tensors(self):
        return 1

    def _check_size(self):
        layer = self._layer
        if layer.input_dim * layer.output_dim > MATERIALIZE_LIMIT:
            raise ValueError(
                f"{layer._owner}: the table has {layer.input_dim} x {layer.output_dim} "
                f"values, more than get_weights()/set_weights() make whole at once "
                f"({MATERIALIZE_LIMIT}); save and restore it with tf.train.Checkpoint, and "
                "serve it with het_tf.export_saved_model")

    def get_tensors(self):
        """The rows of ids 0 .. input_dim - 1 with every pending cached update
        pushed first (rows never touched are made as a lookup makes them)."""
        self._check_size()
        layer = self._layer
        with tf.init_scope():
            layer.flush()
            return [layer.table.gather(tf.range(layer.input_dim, dtype=tf.int64))]

    def set_weights(self, weights):
        """Writes the matrix as the table's rows (`_write`), empties every
        worker's cache, whose copies it made stale, and gives the hot block
        its new rows.

        In hybrid mode every rank keeps its own cache, so every rank calls
        it, as it calls het_tf.hybrid.save: all ranks push their pending
        updates, rank 0 writes its matrix, and then all ranks empty their
        caches and reload their hot rows."""
        self._check_size()
        layer = self._layer
        if len(weights) != 1:
            raise ValueError(f"{layer._owner}: set_weights takes the table as one matrix, "
                             f"got {len(weights)} arrays")
        matrix = np.asarray(weights[0], np.float32)
        if matrix.shape != (layer.input_dim, layer.output_dim):
            raise ValueError(f"{layer._owner}: the table is [{layer.input_dim}, "
                             f"{layer.output_dim}], got a matrix of shape {matrix.shape}")
        hybrid = horovod.num_ps() is not None
        with tf.init_scope():
            layer.flush()
            if hybrid:
                horovod.barrier()  # every rank's pending updates are in
            if not hybrid or horovod.rank() == 0:
                self._write(matrix)
            if hybrid:
                horovod.barrier()  # no rank reads before the rows are written
            layer.clear_cache()
            layer.reload_hot_rows()

    def _write(self, matrix):
        """The matrix as the shards' rows, each keeping its optimizer state
        and taking one more clock tick (eager)."""
        layer = self._layer
        keys, _, slots, clocks, steps = (t.numpy() for t in layer.table.export_all())
        all_slots = layer.table.config.initial_slots(layer.input_dim)
        all_clocks = np.zeros(layer.input_dim, np.int64)
        all_steps = np.zeros(layer.input_dim, np.int64)
        inside = keys < layer.input_dim
        all_slots[keys[inside]] = slots[inside]
        all_clocks[keys[inside]] = clocks[inside]
        all_steps[keys[inside]] = steps[inside]
        layer.table.import_rows(tf.range(layer.input_dim, dtype=tf.int64), matrix,
                                all_slots, all_clocks + 1, all_steps)


def model_variables(model):
    """A model's variables without the tables' weight handles, which are no
    variables (for broadcasting and exporting what is)."""
    return [v for v in model.variables if not isinstance(v, TableWeights)]
