"""Herald's communication plan for one worker cache (docs/herald.md): exact
reads without a per-key check and without pushing every update.

The cache runs the sync by refresh with a read bound of 0 and no write
bound: a row's updates stay pending in the cache that made them, and any
push by another writer makes this cache's copy stale, to be refreshed with
its next exchange. Before each training lookup the ranks share the unique
ids their steps will read (`allgather`), and each pushes, from what it holds
pending, only the rows some other rank is about to read, with its outbox
(rows evicted or passed through). The pushes land before any rank reads:
a sum over the ranks (`sum_over_ranks`) that follows every rank's push is
the barrier. So every read sees every update made before it in the step
order, as one synchronous table would give, while a row that only one rank
touches is pushed only when it leaves that rank's cache or at a flush.
"""
import tensorflow as tf

# Bytes a rank sends to each other rank per id it shares (an int64 key).
_ID_BYTES = 8


class HeraldPlan:
    """`allgather(tensor)`: every rank's tensor concatenated in rank order;
    `sum_over_ranks(tensor)`: the elementwise sum over the `ranks` ranks;
    this is rank `rank`."""

    def __init__(self, cache, ranks, rank, allgather, sum_over_ranks):
        self.cache = cache
        self._ranks, self._rank = int(ranks), int(rank)
        self._allgather, self._sum = allgather, sum_over_ranks
        with tf.init_scope():
            # What this rank sent to and received from the others for the
            # plan: the ids, their counts and the barrier's sum.
            self._bytes = tf.Variable(0, dtype=tf.int64, trainable=False,
                                      name="het_plan_bytes")
            self._pushed_for_others = tf.Variable(0, dtype=tf.int64, trainable=False,
                                                  name="het_plan_pushes")

    def before_read(self, ids):
        """Runs the plan for a training lookup of `ids` (checked by the
        caller); returns the tensor the lookup must wait for."""
        unique, _ = tf.unique(tf.reshape(ids, [-1]))
        count = tf.size(unique, out_type=tf.int64)
        counts = self._allgather(tf.reshape(count, [1]))
        everyone = self._allgather(unique)
        start = tf.reduce_sum(counts[:self._rank])
        place = tf.range(tf.size(everyone, out_type=tf.int64))
        others = tf.boolean_mask(everyone, (place < start) | (place >= start + count))
        pending = self.cache.mark_due(others)
        pushed = tf.cond(pending > 0, self.cache.push_due,
                         lambda: tf.constant(0, tf.int64))
        with tf.control_dependencies([pushed]):
            # The barrier: no rank reads before every rank's pushes landed.
            total = self._sum(tf.reshape(tf.cast(pending, tf.float32), [1]))
        shared = (count * (self._ranks - 1) + tf.size(others, out_type=tf.int64)) * _ID_BYTES
        counted = self._bytes.assign_add(shared + 2 * _ID_BYTES * (self._ranks - 1) + 8)
        noted = self._pushed_for_others.assign_add(pending)
        with tf.control_dependencies([counted, noted]):
            return tf.identity(total)

    def stats(self):
        return {"plan_bytes": int(self._bytes.numpy()),
                "plan_push_rounds": int(self._pushed_for_others.numpy())}
