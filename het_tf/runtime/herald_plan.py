"""Herald's communication plan for one worker cache (docs/herald.md): exact
reads, as one synchronous table gives, without a per-key check and without
pushing every update.

Each step, before any rank reads:

1. Each rank pushes the gradients its last step gave its *direct* rows
   (below), which it kept back until now.
2. The ranks share the unique ids their steps will read (`allgather`).
3. A rank's direct rows this step are those another rank reads too, and
   those it neither read in its own last step nor reads again within its
   window (the next window - 1 batches the input pipeline staged in its
   cache, het_tf.lookahead). It drops from its cache
   every row another rank reads and every direct row; the pending updates
   of those it held, and its outbox (rows evicted), go to the shards in one
   exchange.
4. A sum over the ranks (`sum_over_ranks`) that follows every rank's pushes
   is the barrier.

Then a rank reads its other rows, which it alone reads, from its cache,
where no other rank has written them since it cached them, and its direct
rows from the shards, where every update of the earlier steps has landed
and none of this step's has (they wait for step 1 of the next one, which no
rank reaches before every rank has read: the allgather waits for all). A
row one rank alone reads step after step stays in its cache with no
traffic, pending until evicted, dropped or flushed; a direct row costs what
the cache-off path costs (its read, and its gradient pushed once).
"""
import tensorflow as tf

from het_tf.runtime.counters import counter

# What a rank sends each other rank per id it shares (an int64 key), and
# the cache-off path's wire sizes (cc_ops/embedding/core/wire_sizes.h): a
# read sends 8 bytes a key and takes 4 * dim a row; a push sends
# 4 * dim + 16 a key and 4 a shard.
_ID_BYTES = 8


class HeraldPlan:
    """`allgather(tensor)`: every rank's tensor concatenated in rank order;
    `sum_over_ranks(tensor)`: the elementwise sum over the `ranks` ranks;
    this is rank `rank`."""

    def __init__(self, cache, ranks, rank, allgather, sum_over_ranks):
        self.cache = cache
        self.table = cache.table
        self._ranks, self._rank = int(ranks), int(rank)
        self._allgather, self._sum = allgather, sum_over_ranks
        dim = self.table.dim
        with tf.init_scope():
            # The last step's gradients of its direct rows, pushed before the
            # next step reads (or by a flush).
            self._kept_keys = tf.Variable(tf.zeros([0], tf.int64), trainable=False,
                                          shape=tf.TensorShape([None]), name="het_plan_keys")
            self._kept_grads = tf.Variable(tf.zeros([0, dim]), trainable=False,
                                           shape=tf.TensorShape([None, dim]),
                                           name="het_plan_grads")
            self._kept_rate = tf.Variable(0.0, trainable=False, name="het_plan_rate")
            # Their number, kept apart: TensorFlow may rewrite the size of a
            # variable's read into the variable's shape, read after a later
            # assignment in the same function.
            self._kept_count = counter("het_plan_count")
            # Bytes this rank sent and received for the plan: the ids shared
            # with the other ranks and the barrier; and for the direct rows,
            # read and pushed as the cache-off path does.
            self._plan_bytes = counter("het_plan_bytes")
            self._direct_bytes = counter("het_plan_direct_bytes")
            self._direct_keys = counter("het_plan_direct_keys")
            # Rows read through the cache because the window sees them again.
            self._ahead_keys = counter("het_plan_ahead_keys")
            # The unique keys of this rank's last step, sorted.
            self._last_keys = tf.Variable(tf.zeros([0], tf.int64), trainable=False,
                                          shape=tf.TensorShape([None]), name="het_plan_last")
            # The direct keys of the step's lookup, sorted, for its update.
            self._step_direct = tf.Variable(tf.zeros([0], tf.int64), trainable=False,
                                            shape=tf.TensorShape([None]),
                                            name="het_plan_direct")

    # ----- the step -----

    def _push_kept(self):
        """Pushes the kept-back gradients and forgets them; returns the op."""
        keys, grads = self._kept_keys.read_value(), self._kept_grads.read_value()
        n = self._kept_count.read_value()

        def push():
            # The keys were checked by the lookup that read them.
            update = self.table.push(keys, grads, tf.ones(tf.reshape(n, [1]), tf.int64),
                                     self._kept_rate,
                                     return_rows=False, keys_checked=True)
            with tf.control_dependencies(tf.nest.flatten(update)):
                return tf.identity(n)

        pushed = tf.cond(n > 0, push, lambda: tf.constant(0, tf.int64))
        with tf.control_dependencies([pushed]):
            cleared = [self._kept_keys.assign(tf.zeros([0], tf.int64)),
                       self._kept_grads.assign(tf.zeros([0, self.table.dim])),
                       self._kept_count.assign(0),
                       self._direct_bytes.assign_add(
                           n * (4 * self.table.dim + 16)
                           + tf.cast(n > 0, tf.int64) * 4 * self.table.num_shards)]
        with tf.control_dependencies(cleared):
            return tf.identity(pushed)

    def direct(self, unique, ids):
        """Runs the plan before a training lookup of the unique keys
        `unique` of the step's `ids` (checked, flat); returns which of them
        this step reads and writes on the shards directly (the rest through
        the cache), once no rank can read before every rank's pushes have
        landed."""
        pushed = self._push_kept()
        count = tf.shape(unique, out_type=tf.int64)[0]
        counts = self._allgather(tf.reshape(count, [1]))
        everyone = self._allgather(unique)
        start = tf.reduce_sum(counts[:self._rank])
        place = tf.range(tf.shape(everyone, out_type=tf.int64)[0])
        others = tf.sort(tf.boolean_mask(everyone, (place < start) | (place >= start + count)))
        # A row only this rank reads goes through the cache if this rank
        # read it last step or reads it again within the window: a row read
        # once would cost its whole state (slots too) both ways, where the
        # shards' path moves a row and a gradient.
        last = members(unique, self._last_keys.read_value())
        ahead = members(unique, self._ahead(ids))
        is_other = members(unique, others)
        is_direct = is_other | ~(last | ahead)
        with tf.control_dependencies([is_direct]):
            remembered = [self._last_keys.assign(tf.sort(unique)),
                          self._step_direct.assign(tf.sort(tf.boolean_mask(unique, is_direct)))]
        outbox = self.cache.drop(tf.concat([others, tf.boolean_mask(unique, is_direct)], 0))
        sent = tf.cond(outbox > 0, self.cache.push_due, lambda: tf.constant(0, tf.int64))
        with tf.control_dependencies([pushed, sent]):
            # The barrier: no rank reads before every rank's pushes landed.
            done = self._sum(tf.reshape(tf.cast(outbox, tf.float32), [1]))
        direct_count = tf.reduce_sum(tf.cast(is_direct, tf.int64))
        counted = [self._plan_bytes.assign_add(
                       (count * (self._ranks - 1) + tf.shape(others, out_type=tf.int64)[0]
                        + 2 * (self._ranks - 1)) * _ID_BYTES + 8),
                   # The direct rows' read: a key out, a row back.
                   self._direct_bytes.assign_add(direct_count * (8 + 4 * self.table.dim)),
                   self._direct_keys.assign_add(direct_count),
                   self._ahead_keys.assign_add(tf.reduce_sum(
                       tf.cast(ahead & ~last & ~is_other, tf.int64)))]
        with tf.control_dependencies([done, *remembered, *counted]):
            return tf.identity(is_direct)

    def was_direct(self, keys):
        """Which of the step's update's `keys` its lookup read directly. A
        key read through the cache but evicted since is not: the cache
        pushes its gradient itself."""
        return members(keys, self._step_direct.read_value())

    def _ahead(self, ids):
        """This rank's ids of the window's batches after the step's, sorted."""
        window = self.cache.config.window
        if window == 1:
            return tf.zeros([0], tf.int64)
        return self.cache.staged(ids, window - 1)

    def read(self, keys):
        """The direct rows of a step, from the shards (after `direct`)."""
        return tf.cond(tf.size(keys) > 0, lambda: self.table.gather(keys),
                       lambda: tf.zeros([0, self.table.dim], tf.float32))

    def keep(self, keys, grads, learning_rate):
        """Keeps this step's gradient sums of its direct rows for the next
        step's start (or a flush)."""
        return [self._kept_keys.assign(keys), self._kept_grads.assign(grads),
                # The shape, not tf.size: under a custom gradient, the size of a
                # tensor assigned to a variable was read as the variable's.
                self._kept_count.assign(tf.shape(keys, out_type=tf.int64)[0]),
                self._kept_rate.assign(tf.cast(learning_rate, tf.float32))]

    # ----- outside the steps (eager) -----

    def flush(self):
        """Pushes the kept-back gradients."""
        return self._push_kept()

    def clear(self):
        """Forgets the kept-back gradients (after a restore they belong to an
        abandoned timeline)."""
        self._kept_keys.assign(tf.zeros([0], tf.int64))
        self._kept_grads.assign(tf.zeros([0, self.table.dim]))
        self._kept_count.assign(0)
        self._last_keys.assign(tf.zeros([0], tf.int64))
        self._step_direct.assign(tf.zeros([0], tf.int64))

    def stats(self):
        return {"plan_bytes": int(self._plan_bytes.numpy()),
                "plan_direct_bytes": int(self._direct_bytes.numpy()),
                "plan_direct_keys": int(self._direct_keys.numpy()),
                "plan_ahead_keys": int(self._ahead_keys.numpy())}


def members(keys, sorted_keys):
    """[n] bool: which of `keys` are in the ascending `sorted_keys`."""
    at = tf.searchsorted(sorted_keys, keys)
    n = tf.shape(sorted_keys, out_type=at.dtype)[0]
    found = tf.gather(tf.concat([sorted_keys, [0]], 0), at) == keys
    return found & (at < n)
