"""What `het-tf bench` needs to replay a run's caches for its reference
floor (het_tf/apps/bench/floor.py): each cached table's settings and how
many steps each worker's cache trained, and the embedding bytes that
evaluations moved (the floor replays training only)."""
import tf_keras

from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.runtime.config import UNBOUNDED


def _counters(model):
    """{layer name: (embedding bytes, ids a cache looked up)} of every layer."""
    out = {}
    for layer in het_embedding_layers(model):
        stats = layer.het_stats()
        out[layer.name] = (stats.get("embedding_bytes", 0), stats.get("cache_unique_keys", 0))
    return out


class EvaluationTraffic:
    """Counts what Keras' evaluations during fit (the timeline) moved, per
    layer: embedding bytes and ids looked up, read from the layers'
    counters around each."""

    def __init__(self, model):
        self.counts = {}  # layer name -> [bytes, unique keys]
        outer = self
        start = {}

        class Callback(tf_keras.callbacks.Callback):
            def on_test_begin(self, logs=None):
                start.update(_counters(model))

            def on_test_end(self, logs=None):
                for name, now in _counters(model).items():
                    total = outer.counts.setdefault(name, [0, 0])
                    for i in (0, 1):
                        total[i] += now[i] - start[name][i]

        self.callback = Callback()

    @property
    def bytes(self):
        return sum(b for b, _ in self.counts.values())


def cached_tables(model, evaluations):
    """Per cached table: its cache's settings, each worker's (or this
    rank's) training steps, in worker order, the copies the shards
    refreshed (what other writers caused, which the floor takes as run),
    and the bytes and ids of training alone (`evaluations`' left out)."""
    tables = []
    for layer in het_embedding_layers(model):
        cache = getattr(layer._route, "cache", None)
        if cache is None:
            continue
        workers = cache.worker_stats()
        if not workers:
            continue
        bound = cache.config.write_staleness
        evaluated = evaluations.counts.get(layer.name, (0, 0))
        tables.append({
            "table": layer.name, "route": type(layer._route).__name__,
            "capacity": workers[0]["capacity"], "width": workers[0]["width"],
            "sync": cache.config.sync, "num_shards": layer.table.num_shards,
            "wire_dtype": cache.config.wire_dtype,
            "write_staleness": -1 if bound in (UNBOUNDED, None) else int(bound),
            "worker_steps": [w["steps"] for w in workers],
            "stale_refreshes": sum(w["stale_refreshes"] for w in workers),
            "training_bytes": sum(w["bytes_sent"] + w["bytes_received"] for w in workers)
            - evaluated[0],
            "training_unique_keys": sum(w["unique_keys"] for w in workers) - evaluated[1]})
    return tables
