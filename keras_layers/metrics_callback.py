"""Logs each HetEmbedding layer's cache and traffic figures once an epoch."""
import tensorflow as tf
import tf_keras

from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.runtime.cache import hit_rate

# Counters reported as per-epoch differences.
_PER_EPOCH = ("cache_unique_keys", "cache_hits", "cache_evictions", "cache_rows_pulled",
              "cache_rows_pushed", "embedding_bytes", "samples", "table_rows_sent",
              "table_rows_pushed", "table_rows_evicted", "table_rows_expired",
              "table_ids_not_admitted")


class HetMetricsCallback(tf_keras.callbacks.Callback):
    """Adds `<layer>/hit_rate` and `evictions` (a cache's, for a layer with
    one), `rows_pulled_per_sample`, `rows_pushed_per_sample`,
    `bytes_per_sample`, and the table's `rows_evicted`, `rows_expired` and `ids_not_admitted`
    for the epoch to the logs (so History keeps them), prints them when
    verbose, and writes them as TensorBoard scalars when `log_dir` is given."""

    def __init__(self, log_dir=None, verbose=1):
        super().__init__()
        self.log_dir = log_dir
        self.verbose = verbose
        self._last = {}
        self._writer = None

    def _layers(self):
        return [layer for layer in het_embedding_layers(self.model) if layer.table is not None]

    def on_train_begin(self, logs=None):
        self._last = {layer.name: layer.het_stats() for layer in self._layers()}
        if self.log_dir and self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)

    def epoch_figures(self, layer):
        now = layer.het_stats()
        before = self._last.get(layer.name, {})
        self._last[layer.name] = now
        delta = {k: now.get(k, 0) - before.get(k, 0) for k in _PER_EPOCH}
        samples = max(delta["samples"], 1)
        cached = layer.cache is not None
        pulled = delta["cache_rows_pulled"] if cached else delta["table_rows_sent"]
        pushed = delta["cache_rows_pushed"] if cached else delta["table_rows_pushed"]
        # A layer without a cache has no hit rate and no evictions of its
        # own: a 0 would read as a cache that never hits.
        own = ({"hit_rate": hit_rate(delta, "cache_"),
                "evictions": float(delta["cache_evictions"])} if cached else {})
        return {
            **own,
            "rows_pulled_per_sample": pulled / samples,
            "rows_pushed_per_sample": pushed / samples,
            "bytes_per_sample": delta["embedding_bytes"] / samples,
            # The shards' own, under the names metrics.json gives them.
            "rows_evicted": float(delta["table_rows_evicted"]),
            "rows_expired": float(delta["table_rows_expired"]),
            "ids_not_admitted": float(delta["table_ids_not_admitted"]),
        }

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        for layer in self._layers():
            figures = self.epoch_figures(layer)
            for name, value in figures.items():
                logs[f"{layer.name}/{name}"] = value
            if self.verbose:
                print(f"{layer.name}: " + ", ".join(f"{k} {v:.4g}" for k, v in figures.items()))
            if self._writer is not None:
                with self._writer.as_default():
                    for name, value in figures.items():
                        tf.summary.scalar(f"{layer.name}/{name}", value, step=epoch)
                self._writer.flush()
