"""Multi-hot inputs: ids in the last axis of a dense tensor, or in the rows
of a ragged or sparse one, reduced to one vector per row by a combiner."""
import tensorflow as tf

COMBINERS = ("sum", "mean", "sqrtn")


def _combine(combiner, summed, counts):
    if combiner == "mean":
        return summed / tf.maximum(counts, 1.0)
    if combiner == "sqrtn":
        return summed / tf.sqrt(tf.maximum(counts, 1.0))
    return summed


def lookup_ids(inputs):
    """The ids embed_and_combine looks up, in the order it looks them up."""
    if isinstance(inputs, tf.RaggedTensor):
        return inputs.flat_values
    if isinstance(inputs, tf.SparseTensor):
        return inputs.values
    return tf.convert_to_tensor(inputs)


def embed_and_combine(inputs, embed, combiner, output_dim, sparse=False):
    """embed(flat or dense ids) -> vectors, then per row the combiner's
    reduction. Without a combiner, one vector per id, shaped as
    tf_keras.layers.Embedding shapes it: ragged in, ragged out; sparse in,
    dense out with missing ids read as id 0, or with `sparse` a SparseTensor
    of the ids' vectors."""
    if isinstance(inputs, tf.RaggedTensor):
        emb = inputs.with_flat_values(embed(inputs.flat_values))
        if combiner is None:
            return emb
        counts = tf.reduce_sum(tf.ones_like(inputs, tf.float32), axis=-1)[..., tf.newaxis]
        return _combine(combiner, tf.reduce_sum(emb, axis=-2), counts)
    if isinstance(inputs, tf.SparseTensor) and combiner is None:
        if not sparse:
            return embed(tf.sparse.to_dense(inputs))
        return _sparse_vectors(inputs, embed(inputs.values), output_dim)
    if isinstance(inputs, tf.SparseTensor):
        shape = tf.shape(inputs, out_type=tf.int64)
        # The row count spelled out: -1 cannot be inferred for an empty input.
        flat = tf.sparse.reshape(inputs, tf.stack([tf.reduce_prod(shape[:-1]), shape[-1]]))
        rows = flat.indices[:, 0]
        nrows = tf.shape(flat, out_type=tf.int64)[0]
        summed = tf.math.unsorted_segment_sum(embed(flat.values), rows, nrows)
        counts = tf.math.unsorted_segment_sum(tf.ones_like(rows, tf.float32), rows,
                                              nrows)[:, tf.newaxis]
        out = _combine(combiner, summed, counts)
        return tf.reshape(out, tf.concat([shape[:-1], [output_dim]], 0))
    inputs = tf.convert_to_tensor(inputs)
    emb = embed(inputs)
    if combiner is None:
        return tf.sparse.from_dense(emb) if sparse else emb
    counts = tf.cast(tf.shape(inputs)[-1], tf.float32)
    return _combine(combiner, tf.reduce_sum(emb, axis=-2), counts)


def _sparse_vectors(ids, vectors, output_dim):
    """The SparseTensor [..., output_dim] holding each present id's vector."""
    count = tf.shape(ids.indices, out_type=tf.int64)[0]
    positions = tf.repeat(ids.indices, output_dim, axis=0)
    columns = tf.tile(tf.range(output_dim, dtype=tf.int64), [count])[:, tf.newaxis]
    shape = tf.concat([tf.shape(ids, out_type=tf.int64), [output_dim]], 0)
    return tf.SparseTensor(tf.concat([positions, columns], 1), tf.reshape(vectors, [-1]), shape)
