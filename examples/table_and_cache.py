"""A table on two shards and a worker cache, driven step by step: lookups,
local updates, clock-checked refreshes and a final flush, with counters.

Run: python examples/table_and_cache.py
"""
import numpy as np
import tensorflow as tf

import het_tf

rng = np.random.default_rng(0)
table = het_tf.ShardedTable(
    het_tf.TableConfig("clicks", dim=8, optimizer=het_tf.OptimizerConfig("adagrad")),
    devices=["/cpu:0", "/cpu:0"])  # in a cluster: "/job:ps/task:0", "/job:ps/task:1"
cache = het_tf.WorkerCache(table, het_tf.CacheConfig(capacity=2000, policy="lfu",
                                                     read_staleness=10, write_staleness=10))

for step in range(200):
    ids = tf.constant(rng.zipf(1.2, size=(256, 4)) % 100_000, tf.int64)  # skewed, like real ids
    rows, unique, inverse = cache.lookup(ids, training=True)
    embeddings = tf.gather(rows, inverse)  # [256, 4, 8]
    # A stand-in gradient: pull every row towards zero.
    grads = tf.math.unsorted_segment_sum(tf.reshape(embeddings, [-1, 8]),
                                         tf.reshape(inverse, [-1]), tf.size(unique))
    cache.apply_gradients(unique, grads, learning_rate=0.1)
    if step % 50 == 0:
        s = cache.stats()
        print(f"step {step:3d}: hit rate {s['hits'] / s['unique_keys']:.2f}, "
              f"cached rows {s['rows']}, rows pulled {s['rows_pulled']}")

cache.flush(learning_rate=0.1)
c, t = cache.stats(), table.stats()
print(f"cache: {c['hits']} hits, {c['misses']} misses, {c['stale_refreshes']} stale refreshes, "
      f"{c['evictions']} evictions, {c['updates_pushed']} updates pushed in "
      f"{c['rows_pushed']} rows")
print(f"table: {t['rows']} rows of {t['bytes_per_row']} bytes on {table.num_shards} shards, "
      f"{t['updates_applied']} updates applied")
print(f"bytes worker->PS {c['bytes_sent']:,}, PS->worker {c['bytes_received']:,} "
      f"for {c['lookups']:,} ids looked up")
assert t["updates_applied"] == c["updates_pushed"], "every local update reached the table"
