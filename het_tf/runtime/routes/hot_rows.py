"""FAE's hot rows (docs/fae.md): a block every process keeps of the rows
most ids hit, trained in place and kept the same on every Horovod rank; the
other rows go through the cache."""
import tensorflow as tf

from het_tf.runtime.routes.split import SplitRoute


class HotRowsRoute(SplitRoute):
    def __init__(self, cache, hot_block):
        super().__init__(cache, lambda unique, ids: hot_block.is_hot(unique), hot_block.is_hot,
                         hot_block.gather, hot_block.apply_gradients)
        self.hot_block = hot_block

    @property
    def hot_keys(self):
        return self.hot_block.keys

    def set_hot_keys(self, ids, keys, flush_and_clear):
        """Pending updates and the old hot set's rows go to the shards, the
        caches are emptied (their copies of rows now hot would go stale),
        and the new hot rows come from the shards."""
        flush_and_clear()
        self.hot_block.load(keys)

    def reload(self):
        self.hot_block.reload()

    def flush(self, learning_rate):
        return tf.nest.flatten(self.hot_block.write_back()) + super().flush(learning_rate)

    def stats(self):
        counters, traffic, lookups = super().stats()
        counters.update({f"hot_{k}": v for k, v in self.hot_block.stats().items()})
        return counters, traffic + counters["hot_bytes_exchanged"], lookups
