"""Keras layers of het_tf, importable as het_tf.keras_layers."""
