"""Exports a model with HetEmbedding layers as a SavedModel that stock
TensorFlow Serving loads: no het_tf op is in it.

Each table becomes plain variables. A fixed vocabulary of up to
MATERIALIZE_LIMIT values exports every row, so every id serves exactly as in
training. A dynamic table (input_dim=None), or a larger one, exports the rows
it holds, with their keys sorted and a binary search (tf.searchsorted) from
key to row; ids it does not hold get a zero vector.
"""
import contextlib
import gc

import tensorflow as tf

from het_tf.keras_layers import every_rank
from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.keras_layers.table_weights import model_variables
from het_tf.runtime.config import MATERIALIZE_LIMIT
from het_tf.runtime.progress import Progress

# The rows read from a shard at a time. Each chunk (its rows, then the op's
# outputs) is freed before the next is read, so small chunks reuse the same
# freed blocks: at 3M rows, 64 MB chunks (a checkpoint's) left the export's
# peak 0.27 GB higher than 4 MB ones, at no gain in time.
EXPORT_CHUNK_BYTES = 4 << 20


class ServingLookup(tf.Module):
    """A table's rows as stock TensorFlow state."""

    def __init__(self, layer, chunk_bytes=EXPORT_CHUNK_BYTES, progress=None):
        """`progress` (a het_tf.runtime.progress.Progress) counts the rows read."""
        super().__init__(name=f"{layer.name}_serving")
        table, dim = layer.table, layer.output_dim
        advance = progress.advance if progress is not None else (lambda rows: None)
        self.keys = None  # every row is held: an id is its row
        self.held_nothing = False
        if _materialized(layer):
            keys = tf.range(layer.input_dim, dtype=tf.int64)
            self.values = tf.Variable(table.gather(keys), trainable=False, name="embeddings")
            advance(layer.input_dim)
            return
        # The rows the table holds, in the shards' order, one chunk at a
        # time, and one zero row last for the ids it does not hold. The keys
        # are variables too, sorted, with each one's row: a
        # tf.lookup.StaticHashTable would write every key into the graph,
        # which protobuf's 2 GB limit caps at about 100M rows.
        counts = [table.shard_rows(s) for s in range(table.num_shards)]
        held = sum(counts)
        self.values = _resizable_variable([dim], tf.float32, "embeddings")
        tf.function(lambda: self.values.assign(tf.zeros([held + 1, dim])), autograph=False)()
        if not held:  # every id gets the zero row
            self.held_nothing = True
            return
        keys, first, chunk_rows = [], 0, table.chunk_rows(chunk_bytes)
        for shard, count in enumerate(counts):
            for offset in range(0, count, chunk_rows):
                n = min(chunk_rows, count - offset)
                chunk_keys, values, _, _, _ = table.export_shard(shard, offset, n)
                # In place: `self.values[a:b].assign` reads the variable for
                # the slice first, and the write then copies all of it.
                tf.raw_ops.ResourceStridedSliceAssign(
                    ref=self.values.handle, begin=[first, 0], end=[first + n, dim],
                    strides=[1, 1], value=values)
                keys.append(chunk_keys)
                first += n
                advance(n)
        self.keys = _resizable_variable([], tf.int64, "keys")
        self.rows = _resizable_variable([], tf.int64, "rows")

        @tf.function(autograph=False)
        def sort_keys():
            held_keys = tf.concat(keys, 0)
            order = tf.argsort(held_keys, stable=True)
            self.keys.assign(tf.gather(held_keys, order))
            self.rows.assign(tf.cast(order, tf.int64))
        sort_keys()

    # Saved with the model, so a loaded SavedModel can look rows up too.
    @tf.function(input_signature=[tf.TensorSpec(None, tf.int64)])
    def __call__(self, ids):
        if self.keys is not None:
            flat = tf.reshape(ids, [-1])
            held = tf.size(self.keys, tf.int64)
            # Where each id would sit among the sorted keys: the row of the
            # key there if it is the id, else the zero row (index `held`).
            at = tf.searchsorted(self.keys, flat, out_type=tf.int64)
            inside = tf.minimum(at, held - 1)
            found = (at < held) & tf.equal(tf.gather(self.keys, inside), flat)
            ids = tf.reshape(tf.where(found, tf.gather(self.rows, inside), held), tf.shape(ids))
        elif self.held_nothing:
            ids = tf.zeros_like(ids)
        return tf.gather(self.values, ids)


def _materialized(layer):
    """Whether every row of the layer's vocabulary is exported."""
    return layer.input_dim is not None and layer.input_dim * layer.output_dim <= \
        MATERIALIZE_LIMIT


def _rows_to_read(layer):
    if _materialized(layer):
        return layer.input_dim
    return sum(layer.table.shard_rows(s) for s in range(layer.table.num_shards))


def _resizable_variable(row_shape, dtype, name):
    """An empty variable of rows of `row_shape`, to be assigned inside a
    tf.function: there the assigned tensor's only reference is the assign,
    so the variable takes its buffer, where tf.Variable(tensor) copies it
    while the caller still holds the tensor (a second table at its peak)."""
    return tf.Variable(tf.zeros([0] + row_shape, dtype), shape=[None] + row_shape,
                       trainable=False, name=name)


@contextlib.contextmanager
def _serving_lookups(layers, progress):
    lookups = []
    try:
        for layer in layers:
            lookups.append(ServingLookup(layer, progress=progress))
            layer.set_serving_lookup(lookups[-1])
        yield lookups
    finally:
        for layer in layers:
            layer.set_serving_lookup(None)


def _built_het_layers(model):
    layers = het_embedding_layers(model)
    for layer in layers:
        if layer.table is None:
            raise ValueError(f"HetEmbedding '{layer.name}' is not built: call or fit the "
                             "model before exporting it")
    return layers


def _input_signature(model):
    """(the signature's TensorSpecs, a function from its tensors to the
    model's flat inputs). Serving signatures take dense tensors only, so a
    ragged input comes as its components, `<name>_values` and
    `<name>_row_splits` (`_row_splits_<i>` for each ragged dimension past
    the first), and a sparse one as `<name>_indices`, `<name>_values` and
    `<name>_dense_shape`, as a client builds them."""
    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise ValueError("export_saved_model needs a model with known inputs (a functional or "
                         "Sequential model built on tf_keras.Input)")
    specs, parts = [], []  # parts: (kind, first tensor, tensor count) of each input
    for t in inputs:
        name, spec = t.name.split(":")[0], t.type_spec
        start = len(specs)
        if isinstance(spec, tf.RaggedTensorSpec):
            if spec.ragged_rank < 1 or spec.flat_values_spec is not None:
                raise ValueError(f"input '{name}': only ragged inputs with plain values can be "
                                 "exported")
            splits = ["row_splits"] + [f"row_splits_{i}" for i in range(1, spec.ragged_rank)]
            specs.append(tf.TensorSpec([None] + spec.shape[spec.ragged_rank + 1:].as_list(),
                                       spec.dtype, name=f"{name}_values"))
            specs += [tf.TensorSpec([None], spec.row_splits_dtype, name=f"{name}_{split}")
                      for split in splits]
            kind = "ragged"
        elif isinstance(spec, tf.SparseTensorSpec):
            rank = spec.shape.rank
            specs += [tf.TensorSpec([None, rank], tf.int64, name=f"{name}_indices"),
                      tf.TensorSpec([None], spec.dtype, name=f"{name}_values"),
                      tf.TensorSpec([rank], tf.int64, name=f"{name}_dense_shape")]
            kind = "sparse"
        else:
            specs.append(tf.TensorSpec(t.shape, t.dtype, name=name))
            kind = "dense"
        parts.append((kind, start, len(specs) - start))

    def model_inputs(args):
        flat = []
        for kind, i, n in parts:
            if kind == "ragged":
                flat.append(tf.RaggedTensor.from_nested_row_splits(args[i], args[i + 1:i + n]))
            elif kind == "sparse":
                flat.append(tf.SparseTensor(*args[i:i + n]))
            else:
                flat.append(args[i])
        return flat

    return specs, model_inputs


def export_saved_model(model, path):
    """Writes `model` to `path` as a SavedModel with a `serving_default`
    signature of stock TensorFlow ops; returns `path`. An export that takes
    more than a few seconds prints a line per tenth of the rows read."""
    return write_saved_model(model, path, f"export to {path}")


def write_saved_model(model, path, what, flushed=False, verbose=True):
    """export_saved_model, its progress lines naming `what` (none unless
    `verbose`); `flushed`: the caller has just pushed every pending update."""
    specs, model_inputs = _input_signature(model)
    layers = _built_het_layers(model)
    if not flushed:
        for layer in layers:
            every_rank.check_flushed(layer, "het_tf.export_saved_model",
                                     "het_tf.hybrid.export_saved_model(model, path)")
        for layer in layers:
            layer.flush()  # before the rows are counted: a flush may make rows
    progress = Progress(what, sum(_rows_to_read(layer) for layer in layers), verbose=verbose)
    with _serving_lookups(layers, progress) as lookups:
        def serve(*args):
            # model.inputs is the flattened model.input, so this rebuilds a
            # dict or list input as the model was built on.
            flat = model_inputs(args)
            outputs = model(tf.nest.pack_sequence_as(model.input, flat, expand_composites=False),
                            training=False)
            if isinstance(outputs, dict):
                return outputs
            names = list(getattr(model, "output_names", None) or [])
            flat = tf.nest.flatten(outputs)
            if len(names) != len(flat):
                names = [f"output_{i}" for i in range(len(flat))]
            return dict(zip(names, flat))

        concrete = tf.function(serve).get_concrete_function(*specs)
    root = tf.Module()
    root.lookups = lookups
    root.model_variables = model_variables(model)
    root.serve = concrete
    progress.phase("rows read, writing the SavedModel")
    tf.saved_model.save(root, path, signatures={"serving_default": concrete})
    progress.finish()
    # The export's variables (a copy of every table) sit in reference cycles
    # of the functions traced for it: freed only by a full collection, which
    # Python may not run for many exports (each one grew the process by its
    # table's size).
    del root, lookups, concrete
    gc.collect()
    return path
