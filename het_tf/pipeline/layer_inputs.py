"""The ids a model's HetEmbedding layers look up, computed from a batch of
its inputs outside the model's step: what the lookahead stages and what
the hot-row profile counts; and the end marker both input pipelines that
hold batches back put after the last one."""
import tensorflow as tf
import tf_keras

from het_tf.keras_layers.combiners import lookup_ids


def ids_model(model, layers, who):
    """A model from `model`'s inputs to each layer's input; `who` names the
    caller in errors."""
    if not getattr(model, "_is_graph_network", False):
        raise ValueError(f"{who} needs a functional or Sequential tf_keras model: a "
                         "subclassed model's inputs cannot be traced to its HetEmbedding layers")
    outputs = []
    for layer in layers:
        if len(layer.inbound_nodes) != 1:
            raise ValueError(f"{who}: HetEmbedding '{layer.name}' is called "
                             f"{len(layer.inbound_nodes)} times in the model; {who} "
                             "needs each layer called once per step")
        outputs.append(layer.input)
    return tf_keras.Model(model.inputs, outputs, name="het_layer_ids")


def layer_ids(ids_of, layers, element):
    """Each layer's integer ids of one dataset element (the model's x, or
    (x, y[, sample_weight])), shaped as the layer gets them: dense, ragged
    or sparse, one row a sample."""
    x, _, _ = tf_keras.utils.unpack_x_y_sample_weight(element)
    ids = ids_of(x, training=False)
    ids = ids if isinstance(ids, (list, tuple)) else [ids]
    return [layer.integer_ids(i) for layer, i in zip(layers, ids)]


def batch_ids(ids_of, layers, element):
    """Each layer's ids of one dataset element, as the layer looks them up."""
    return [lookup_ids(ids) for ids in layer_ids(ids_of, layers, element)]



def with_end_marker(dataset, who, markers=1):
    """(`dataset`'s elements as (True, element) and then `markers` times
    (False, marker), the marker, and whether elements are single rather
    than tuples). The marker is a placeholder of the element's type with every
    unknown dimension 0: a pipeline that holds elements back knows from it
    when to let them go. `who` names the caller in errors."""
    spec = dataset.element_spec

    def placeholder(spec):
        if not isinstance(spec, tf.TensorSpec):
            raise ValueError(f"{who} needs dense tensors in the dataset's elements; got "
                             f"{type(spec).__name__}")
        return tf.zeros([0 if d is None else d for d in spec.shape.as_list()], spec.dtype)

    marker = tf.nest.map_structure(placeholder, spec)
    single = not isinstance(spec, tuple)

    def tag(*element):
        return tf.constant(True), element[0] if single else element

    end = tf.data.Dataset.from_tensors((tf.constant(False), marker)).repeat(markers)
    return dataset.map(tag).concatenate(end), marker, single
