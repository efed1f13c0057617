"""A custom training loop's step, as docs/keras_layer.md shows it."""
import tf_keras


def apply_gradients(tape, loss, layer):
    """The tape's gradients of `loss` for `layer`'s trainable weights,
    applied by a tf_keras optimizer: it updates the HetEmbedding tables."""
    weights = layer.trainable_weights
    grads = tape.gradient(loss, weights)
    tf_keras.optimizers.SGD().apply_gradients(zip(grads, weights))
