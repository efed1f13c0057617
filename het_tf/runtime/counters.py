"""Counters kept as int64 variables (traffic, keys, samples), which a
training step advances in its graph and the stats read eagerly."""
import tensorflow as tf


def counter(name):
    """A zero counter; make it under tf.init_scope() when a step may be
    tracing."""
    return tf.Variable(0, dtype=tf.int64, trainable=False, name=name)
