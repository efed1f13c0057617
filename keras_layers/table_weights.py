"""A HetEmbedding's table as Keras sees its weights.

A fixed vocabulary's table is one Keras weight, so that `get_weights()` /
`set_weights()` (the layer's and the model's) read and write it as the
`[input_dim, output_dim]` matrix tf_keras.layers.Embedding has, through the
shards and every worker's cache. Keras' own files (`model.save("m.keras")`,
`save_weights("w.weights.h5")`) hold any table as the rows it holds, with
their optimizer slots, clocks and steps: what a checkpoint holds, so a
loaded model trains on as a restored one does. Keras' HDF5 files and its
SavedModel cannot hold a table and are refused (saving.py)."""

import numpy as np
import tensorflow as tf
from tf_keras.src.engine import base_layer_utils

from het_tf.distribute import horovod
from het_tf.keras_layers import every_rank
from het_tf.runtime.config import MATERIALIZE_LIMIT
from het_tf.runtime.table import ROW_FIELDS

# Keras' files a model is saved to: the .keras file (and its .weights.h5),
# the legacy HDF5 file, the SavedModel.
KERAS_FILE, HDF5, SAVEDMODEL = "keras", "h5", "savedmodel"
# The calls that save and load a table, for the refusals.
_FORMATS_THAT_WORK = (
    "use model.save('model.keras') and load_model (architecture, rows and optimizer "
    "state), model.save_weights('dir/weights') and load_weights (a TensorFlow checkpoint, "
    "chunked, any size), or het_tf.export_saved_model(model, dir) to serve (stock "
    "TensorFlow ops, which TensorFlow Serving loads)")
# The layer's variables in a Keras file, by name (the table is not one).
_VARIABLES = ("anchor", "updates", "samples")


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

    # What Keras' and TensorBoard's walkers of `model.weights` read of a
    # weight (histograms, summary, count_params): the matrix's name, as
    # tf_keras.layers.Embedding names its own, its shape and its dtype. The
    # compiled optimizer does not train it (the layer's own optimizer does).
    @property
    def name(self):
        prefix = self._layer.gradient_anchor.name.rpartition("/")[0]
        return f"{prefix}/embeddings:0" if prefix else "embeddings:0"

    @property
    def shape(self):
        return tf.TensorShape([self._layer.input_dim, self._layer.output_dim])

    @property
    def dtype(self):
        return self._dtype

    trainable = False

    def numpy(self):
        return self.get_tensors()[0].numpy()

    def _check_size(self):
        layer = self._layer
        if layer.input_dim * layer.output_dim > MATERIALIZE_LIMIT:
            raise ValueError(
                f"{layer._owner}: the table has {layer.input_dim} x {layer.output_dim} "
                f"values, more than get_weights()/set_weights() (or a TensorBoard "
                f"histogram) make whole at once ({MATERIALIZE_LIMIT}); save and restore it "
                "with tf.train.Checkpoint, and serve it with het_tf.export_saved_model")

    def get_tensors(self):
        """The rows of ids 0 .. input_dim - 1 with every pending cached update
        pushed first (rows never touched are made as a lookup makes them)."""
        self._check_size()
        layer = self._layer
        with tf.init_scope():
            every_rank.check_flushed(layer, "get_weights", "het_tf.hybrid.flush_and_clear(model)")
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
        _write_everywhere(layer, lambda: self._write(matrix))

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


def _as_tensor(weights, dtype=None, name=None, as_ref=False):
    """The matrix, where TensorFlow wants the weight as a tensor (as
    tf.summary.histogram does)."""
    if as_ref:
        raise ValueError(f"{weights._layer._owner}: the table's matrix is read whole, not "
                         "assigned as a variable; use set_weights")
    if dtype is not None and tf.as_dtype(dtype) != weights.dtype:  # as a variable refuses
        raise ValueError(f"{weights._layer._owner}: the table's matrix is float32, not "
                         f"{tf.as_dtype(dtype).name}")
    return weights.get_tensors()[0]


tf.register_tensor_conversion_function(TableWeights, _as_tensor)


def write_initial_rows(layer, initializer):
    """weights= or an initializer the shards cannot run: the rows of a
    fixed vocabulary, evaluated once at build."""
    n = layer.input_dim
    with tf.init_scope():
        values = tf.cast(initializer(shape=(n, layer.output_dim), dtype=tf.float32),
                         tf.float32)
        layer.table.import_rows(tf.range(n, dtype=tf.int64), values,
                                layer.table.config.initial_slots(n),
                                tf.zeros([n], tf.int64), tf.zeros([n], tf.int64))


def matrix_of(layer):
    """The layer's table as one Keras weight (a fixed vocabulary's)."""
    if layer._table_weights is None:
        raise ValueError(f"{layer._owner}: a dynamic table (input_dim=None) has no matrix to "
                         "get or set; save and restore it with tf.train.Checkpoint")
    return layer._table_weights


def _write_everywhere(layer, write):
    """Runs `write()`, which writes the table's rows, where every worker's
    cache sees it (eager): pending updates are pushed first, and every cache
    is emptied after, as its copies are stale; the hot block then reloads.

    In hybrid mode every rank keeps its own cache, so every rank calls it,
    as it calls het_tf.hybrid.save: all ranks push their pending updates,
    rank 0 writes, and then all ranks empty their caches and reload their
    hot rows. If rank 0's write fails, every rank raises."""
    hybrid = horovod.num_ps() is not None

    def written():
        write()
        # Eager ops on a PS task are streamed to it and run in order there:
        # a read of every shard returns only once the write has run, so the
        # barrier after it means the rows are in.
        layer.table.stats()

    with tf.init_scope():
        layer.flush()
        if hybrid:
            horovod.barrier()  # every rank's pending updates are in
            # No rank reads before the rows are written.
            horovod.on_rank_zero(written, f"{layer._owner}: writing the table")
        else:
            write()
        layer.clear_cache()
        layer.reload_hot_rows()
        every_rank.flushed([layer], cleared=True)


def check_savable(layer, file_format):
    """Refuses, before Keras opens any file, a format that cannot hold the
    layer's table, and a Keras file it cannot write whole."""
    owner = layer._owner
    if file_format == HDF5:
        raise ValueError(f"{owner}: Keras' HDF5 format (.h5) holds only tf.Variables, not "
                         f"the table's rows on the parameter servers; {_FORMATS_THAT_WORK}")
    if file_format == SAVEDMODEL:
        raise ValueError(f"{owner}: a Keras SavedModel (model.save(dir), tf.saved_model.save) "
                         "would hold the table's het_tf ops, which TensorFlow Serving does "
                         f"not have; {_FORMATS_THAT_WORK}")
    if not layer.built:  # Keras saves an unbuilt layer's config alone
        return
    every_rank.check_flushed(layer, "writing a Keras file", "het_tf.hybrid.save(model, "
                             "'model.keras')")
    with tf.init_scope():
        rows = sum(layer.table.shard_rows(s) for s in range(layer.table.num_shards))
    if rows * layer.output_dim > MATERIALIZE_LIMIT:
        raise ValueError(f"{owner}: the table holds {rows} rows of {layer.output_dim} values, "
                         f"more than a Keras file takes ({MATERIALIZE_LIMIT} values); save it "
                         "with model.save_weights('dir/weights') or tf.train.Checkpoint (in "
                         "hybrid mode het_tf.hybrid.save(model, manager)), which write it in "
                         "chunks, and serve it with het_tf.export_saved_model(model, dir)")


def save_table(layer, store):
    """Writes the layer's variables and its table to Keras' weights store:
    every row the table holds with its optimizer slots, clock and step.
    saving.py has pushed every pending cached update and checked the layer
    (check_savable) before Keras opened the file; the caches keep their
    copies. An unbuilt layer has nothing to write, as Keras' own layers."""
    if not layer.built:
        return
    with tf.init_scope():
        rows = [t.numpy() for t in layer.table.export_all()]
    for name, variable in zip(_VARIABLES, _variables(layer)):
        store[name] = variable.numpy()
    for name, value in zip(ROW_FIELDS, rows):
        store[name] = value


def load_table(layer, store):
    """Replaces the layer's variables and its table's rows with those
    save_table wrote; every worker's cache is emptied. The file is checked
    whole first: a file the table cannot take changes nothing."""
    owner = layer._owner
    if not layer.built:
        if not len(store):  # saved unbuilt: nothing to load, as Keras' own layers
            return
        raise ValueError(f"{owner} is not built: build the model before loading its weights")
    missing = [name for name in _VARIABLES + ROW_FIELDS if name not in store]
    if missing:
        raise ValueError(f"{owner}: the file holds no table for this layer (no "
                         f"{', '.join(missing)}); was it saved from another model?")
    variables = [np.asarray(store[name]) for name in _VARIABLES]
    keys, values, slots, clocks, steps = (np.asarray(store[name]) for name in ROW_FIELDS)
    _check_rows(layer, variables, keys, values, slots, clocks, steps)

    def replace_rows():
        layer.table.clear()
        layer.table.import_rows(keys, values, slots, clocks, steps)

    _write_everywhere(layer, replace_rows)
    with tf.init_scope():
        for variable, value in zip(_variables(layer), variables):
            variable.assign(value)


def _check_rows(layer, variables, keys, values, slots, clocks, steps):
    """Refuses a file's rows that the table could not take whole."""
    owner, config, n = layer._owner, layer.table.config, len(keys)
    if any(value.shape != () for value in variables):
        raise ValueError(f"{owner}: the file's {', '.join(_VARIABLES)} must be scalars, got "
                         f"shapes {[value.shape for value in variables]}")
    expected = {"keys": (n,), "values": (n, layer.output_dim),
                "slots": (n,) + config.initial_slots(0).shape[1:], "clocks": (n,),
                "steps": (n,)}
    for name, value in zip(ROW_FIELDS, (keys, values, slots, clocks, steps)):
        if value.shape != expected[name]:
            raise ValueError(f"{owner}: the file's table has {name} of shape {value.shape}, "
                             f"this layer's takes {expected[name]} (another output_dim or "
                             "table optimizer?)")
    for name, value in (("keys", keys), ("clocks", clocks), ("steps", steps)):
        if value.dtype != np.int64:
            raise ValueError(f"{owner}: the file's table has {value.dtype} {name}, not int64")
    if not n:
        return
    if (clocks < 0).any() or (steps < 0).any():
        raise ValueError(f"{owner}: the file's table has negative clocks or steps")
    if len(np.unique(keys)) != n:
        raise ValueError(f"{owner}: the file's table has an id twice")
    if layer.input_dim is not None and (keys.min() < 0 or keys.max() >= layer.input_dim):
        raise ValueError(f"{owner}: the file's table has ids from {keys.min()} to "
                         f"{keys.max()}, outside this layer's [0, {layer.input_dim})")
    shards = layer.table.num_shards
    if config.max_rows is not None:
        shares = np.array([config.shard_max_rows(shards, s) for s in range(shards)])
        with tf.init_scope():
            counts = layer.table.shard_counts(keys)
        over = int(np.argmax(counts - shares))
        if counts[over] > shares[over]:
            raise ValueError(f"{owner}: the file's table has {n} rows, {counts[over]} of them "
                             f"on one shard, more than its share of max_rows={config.max_rows} "
                             f"({shares[over]} on that shard of {shards})")


def _variables(layer):
    """The layer's variables, in the order of _VARIABLES."""
    return [layer.gradient_anchor, layer._updates, layer._samples]


def model_variables(model):
    """A model's variables without the tables' weight handles, which are no
    variables (for broadcasting and exporting what is)."""
    return [v for v in model.variables if not isinstance(v, TableWeights)]
