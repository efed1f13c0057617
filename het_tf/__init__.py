"""het_tf: HET-style cached embedding training for TensorFlow and Keras.

Embedding tables live on parameter-server shards; each worker keeps a cache
of hot rows whose staleness is bounded by per-row clocks.
"""
from het_tf import _op_library
from het_tf._op_library import OpLibraryError
from het_tf.cache import WorkerCache, lookup_without_cache, push_without_cache
from het_tf.config import CacheConfig, OptimizerConfig, TableConfig
from het_tf.table import ShardedTable

__version__ = "0.1.0"

# Load once, at import, so a broken build is reported before any model code runs.
ops = _op_library.load()

__all__ = [
    "CacheConfig", "OpLibraryError", "OptimizerConfig", "ShardedTable", "TableConfig",
    "WorkerCache", "lookup_without_cache", "ops", "push_without_cache",
]

from het_tf.export import export_saved_model  # noqa: E402
from het_tf.keras_layers import HetEmbedding  # noqa: E402  (needs the ops loaded above)

__all__ += ["HetEmbedding", "export_saved_model"]
