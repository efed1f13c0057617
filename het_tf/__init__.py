"""het_tf: HET-style cached embedding training for TensorFlow and Keras.

Embedding tables live on parameter-server shards; each worker keeps a cache
of hot rows whose staleness is bounded by per-row clocks.

This module is the public API: it gathers names from the layers below
(docs/architecture.md) and nothing in the library imports it.
"""
from het_tf import _op_library
from het_tf._op_library import OpLibraryError
from het_tf.keras_layers import HetEmbedding
from het_tf.keras_layers.export import export_saved_model
from het_tf.keras_layers.lookahead import lookahead
from het_tf.runtime.cache import WorkerCache, lookup_without_cache, push_without_cache
from het_tf.runtime.config import CacheConfig, OptimizerConfig, TableConfig
from het_tf.runtime.table import ShardedTable

__version__ = "0.1.0"

# Loaded at import, so a broken build is reported before any model code runs.
ops = _op_library.load()

__all__ = [
    "CacheConfig", "HetEmbedding", "OpLibraryError", "OptimizerConfig", "ShardedTable",
    "TableConfig", "WorkerCache", "export_saved_model", "lookahead", "lookup_without_cache", "ops",
    "push_without_cache",
]
