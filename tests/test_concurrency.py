"""Many threads pushing and pulling the same hot rows lose no update."""
import threading

import numpy as np
import tensorflow as tf

import het_tf


def test_concurrent_pushes_keep_every_update(unique_name):
    config = het_tf.TableConfig(unique_name(), 8, initializer="zeros",
                                optimizer=het_tf.OptimizerConfig("sgd"))
    table = het_tf.ShardedTable(config, [None, None])
    hot = tf.constant([0, 1, 2, 3], tf.int64)
    threads, rounds = 6, 40
    errors = []

    def worker(w):
        try:
            for r in range(rounds):
                keys = tf.concat([hot, tf.constant([1000 + w], tf.int64)], 0)
                counts = tf.constant([1, 2, 1, 3, 1], tf.int64)
                # Powers of two: every sum is exact in any order.
                table.push(keys, tf.fill([5, 8], 0.25), counts, 1.0, return_rows=(r % 2 == 0))
                table.pull(hot, tf.constant([0, 0, 0, 0], tf.int64), 0)
        except Exception as e:  # surfaced below, not lost in the thread
            errors.append(e)

    pool = [threading.Thread(target=worker, args=(w,)) for w in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors
    rows = {}
    for s in range(2):
        keys, values, _, clocks, _ = table.export_shard(s, 0, 100)
        for k, v, c in zip(keys.numpy(), values.numpy(), clocks.numpy()):
            rows[int(k)] = (v, int(c))
    for key, count in zip(range(4), [1, 2, 1, 3]):
        values, clock = rows[key]
        assert clock == threads * rounds * count
        np.testing.assert_array_equal(values, np.full(8, -0.25 * threads * rounds, np.float32))
    for w in range(threads):
        assert rows[1000 + w][1] == rounds
    assert table.stats()["updates_applied"] == sum(c for _, c in rows.values())
