"""A worker's cache of one table, and the lookup and update steps that keep
it consistent with the table's shards under HET's clock rules."""
import itertools

import tensorflow as tf

from het_tf import _op_library
from het_tf.config import CacheConfig
from het_tf.table import ShardedTable

_instance = itertools.count()


class WorkerCache:
    def __init__(self, table: ShardedTable, config: CacheConfig, device=None, shared_name=None):
        self.table = table
        self.config = config.validate(table.config.name)
        self.device = device
        # Caches are private to the process that makes them unless named.
        self.shared_name = shared_name or f"het_cache/{table.config.name}/{next(_instance)}"
        self._ops = _op_library.load()

    @property
    def dim(self):
        return self.table.dim

    def handle(self):
        c = self.config
        with tf.device(self.device):
            return self._ops.het_cache(
                table_name=self.table.config.name, dim=self.dim, capacity=c.capacity,
                vocabulary_size=self.table.config.vocabulary_size, policy=c.policy,
                pin_threshold=c.pin_threshold, read_staleness=c.read_staleness,
                write_staleness=c.write_staleness, shared_name=self.shared_name)

    def stats(self):
        with tf.device(self.device):
            names, values = self._ops.het_cache_stats(self.handle())
        return {n.decode(): int(v) for n, v in zip(names.numpy(), values.numpy())}

    def clear(self):
        with tf.device(self.device):
            return self._ops.het_cache_clear(self.handle())

    def lookup(self, ids, training):
        """Rows of int64 `ids` (any shape) plus the batch's unique keys and
        the inverse map, for the gradient step."""
        ids = self.table.check_ids(ids)
        with tf.device(self.device):
            unique, inverse, clocks = self._ops.het_cache_prepare(self.handle(), ids,
                                                                  training=training)
        positions, values, row_clocks = self.table.pull(unique, clocks,
                                                        self.config.read_staleness)
        with tf.device(self.device):
            rows = self._ops.het_cache_complete(self.handle(), unique, positions, values,
                                                row_clocks, dim=self.dim, training=training)
        return rows, unique, inverse

    def apply_gradients(self, unique_keys, unique_grads, learning_rate):
        """One local update per unique key; pushes whatever is due."""
        with tf.device(self.device):
            keys, grads, counts = self._ops.het_cache_accumulate(
                self.handle(), unique_keys, unique_grads, tf.cast(learning_rate, tf.float32),
                dim=self.dim)
        return self._push_and_ack(keys, grads, counts, learning_rate)

    def flush(self, learning_rate):
        """Pushes every pending update; returns the op that acknowledges them."""
        with tf.device(self.device):
            keys, grads, counts = self._ops.het_cache_flush(self.handle(), dim=self.dim)
        return self._push_and_ack(keys, grads, counts, learning_rate)

    def _push_and_ack(self, keys, grads, counts, learning_rate):
        values, clocks = self.table.push(keys, grads, counts, learning_rate, return_rows=True)
        with tf.device(self.device):
            return self._ops.het_cache_ack_push(self.handle(), keys, counts, values, clocks)


def lookup_without_cache(table: ShardedTable, ids):
    """The no-cache read: unique ids go to the shards, rows come back."""
    ids = table.check_ids(ids)
    flat = tf.reshape(ids, [-1])
    unique, inverse = tf.unique(flat, out_idx=tf.int32)
    rows = table.gather(unique)
    return rows, unique, tf.reshape(inverse, tf.shape(ids))


def push_without_cache(table: ShardedTable, unique_keys, unique_grads, learning_rate):
    counts = tf.ones_like(unique_keys)
    return table.push(unique_keys, unique_grads, counts, learning_rate, return_rows=False)
