"""HET's cache: each worker's cached rows within the staleness bound, synced
by refresh or by check (docs/consistency.md), with the lookahead's fetch of
the batch het_tf.lookahead staged (refresh only)."""
import tensorflow as tf

from het_tf.runtime.cache import hit_rate
from het_tf.runtime.routes.route import Route


class CachedRoute(Route):
    def __init__(self, cache):
        super().__init__(cache.table)
        self.cache = cache
        self._pinned = super().hot_keys

    @property
    def hot_keys(self):
        return self._pinned

    def set_hot_keys(self, ids, keys, flush_and_clear):
        """Under ParameterServerStrategy the workers have no collective to
        keep a block the same: the hot rows are pinned in their caches."""
        self.cache.pin(ids)
        self._pinned = keys

    @property
    def lookahead_active(self):
        config = self.cache.config
        return self.lookahead and config.sync == "refresh" and config.scheduler is None

    def lookup(self, ids, training):
        lookahead = self.lookahead_active and training
        rows, unique, inverse = self.cache.lookup(ids, training, lookahead=lookahead)
        if lookahead:
            self.cache.prefetch(ids, rows)
        return rows, unique, inverse

    def apply(self, unique, grads, learning_rate):
        return self.cache.apply_gradients(unique, grads, learning_rate)

    def flush(self, learning_rate):
        return tf.nest.flatten(self.cache.flush(learning_rate))

    def clear(self):
        return [self.cache.clear()]

    def settle(self, learning_rate):
        # Under ParameterServerStrategy the updates wait in the workers'
        # caches, which the chief's reads do not meet.
        if any(device is not None for device in self.cache.worker_devices):
            return self.flush(learning_rate)
        return []

    def stats(self):
        counters, _, _ = super().stats()
        counters.update({f"cache_{k}": v for k, v in self.cache.stats().items()})
        counters["hit_rate"] = hit_rate(counters, "cache_")
        traffic = counters["cache_bytes_sent"] + counters["cache_bytes_received"]
        return counters, traffic, counters.get("cache_lookups", 0)
