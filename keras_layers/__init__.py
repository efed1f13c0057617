"""Keras (tf_keras) layers of het_tf, importable as het_tf.keras_layers."""
from het_tf.keras_layers import evaluation, saving
from het_tf.keras_layers.export_versions import ExportVersions, export_version
from het_tf.keras_layers.het_embedding import HetEmbedding
from het_tf.keras_layers.metrics_callback import HetMetricsCallback

evaluation.install()
saving.install()

__all__ = ["ExportVersions", "HetEmbedding", "HetMetricsCallback", "export_version"]
