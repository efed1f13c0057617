"""het_tf: HET-style cached embedding training for TensorFlow and Keras.

Embedding tables live on parameter-server shards; each worker keeps a cache
of hot rows whose staleness is bounded by per-row clocks.

This module is the public API: it gathers names from the layers below
(docs/architecture.md) and nothing in the library imports it. The names
load on first use, so `import het_tf` alone, and the `het-tf` command's
--help, do not import TensorFlow; the first public name used loads the op
library, so a broken build is reported before any model code runs.
"""
import importlib

__version__ = "0.1.0"

# Public name -> (module, attribute); attribute None: the module's load().
_PUBLIC = {
    "CacheConfig": ("het_tf.runtime.config", "CacheConfig"),
    "ExportVersions": ("het_tf.keras_layers.export_versions", "ExportVersions"),
    "HetEmbedding": ("het_tf.keras_layers", "HetEmbedding"),
    "OpLibraryError": ("het_tf._op_library", "OpLibraryError"),
    "OptimizerConfig": ("het_tf.runtime.config", "OptimizerConfig"),
    "ShardedTable": ("het_tf.runtime.table", "ShardedTable"),
    "TableConfig": ("het_tf.runtime.config", "TableConfig"),
    "WorkerCache": ("het_tf.runtime.cache", "WorkerCache"),
    "compact_checkpoint": ("het_tf.runtime.checkpoint_chains", "compact_checkpoint"),
    "export_saved_model": ("het_tf.keras_layers.export", "export_saved_model"),
    "export_version": ("het_tf.keras_layers.export_versions", "export_version"),
    "hot_and_cold_batches": ("het_tf.pipeline.hot_rows", "hot_and_cold_batches"),
    "lookahead": ("het_tf.pipeline.lookahead", "lookahead"),
    "lookup_without_cache": ("het_tf.runtime.cache", "lookup_without_cache"),
    "ops": ("het_tf._op_library", None),
    "profile_hot_rows": ("het_tf.pipeline.hot_rows", "profile_hot_rows"),
    "push_without_cache": ("het_tf.runtime.cache", "push_without_cache"),
    "use_hot_rows": ("het_tf.pipeline.hot_rows", "use_hot_rows"),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name not in _PUBLIC:  # a submodule, as `het_tf.keras_layers` was after import
        try:
            return importlib.import_module(f"het_tf.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"het_tf.{name}":
                raise
            raise AttributeError(f"module 'het_tf' has no attribute {name!r}") from None
    module_name, attribute = _PUBLIC[name]
    # Any public name but the error class needs the ops: load them first, so
    # a missing or mismatched library fails here with its own message.
    ops = importlib.import_module("het_tf._op_library").load() if name != "OpLibraryError" \
        else None
    value = ops if attribute is None else getattr(importlib.import_module(module_name),
                                                  attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))
