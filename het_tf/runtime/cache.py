"""A worker's cache of one table, and the lookup and update steps that keep
it consistent with the table's shards under HET's clock rules."""
import contextlib
import itertools
import logging

import tensorflow as tf

from het_tf import _op_library
from het_tf.runtime import combinations, slices
from het_tf.runtime.config import CacheConfig, warn_renamed
from het_tf.runtime.handles import FunctionHandles
from het_tf.runtime.table import ShardedTable

_instance = itertools.count()
# How HetCacheEndExchange and HetCacheAckPush name a shard whose epoch changed.
RESTORED_SHARD = "a table shard was restarted or restored"
# What a worker that is gone raises when the chief runs an op on it; once
# the coordinator has dropped it, its device is simply unknown.
_WORKER_GONE = (tf.errors.UnavailableError, tf.errors.CancelledError, tf.errors.AbortedError,
                tf.errors.DeadlineExceededError)


# The most rounds with rows a flush sends: each carries a key once, and a
# key has more than a few rows pending only when its pushes keep failing.
FLUSH_ROUNDS = 16

# Depth of `evaluation_as_cached` blocks open while lookups are traced.
_as_cached = [0]


@contextlib.contextmanager
def evaluation_as_cached():
    """Evaluation lookups traced within read cached copies up to the cache's
    own read bound, as training does, rather than at bound 0: the model as
    the workers' caches hold it."""
    _as_cached[0] += 1
    try:
        yield
    finally:
        _as_cached[0] -= 1


def evaluating_as_cached():
    """Whether an `evaluation_as_cached` block is open."""
    return _as_cached[0] > 0


def _worker_gone(error):
    # A cache whose shard was restored answers Aborted too, naming it: that
    # worker is there, and its caller must know its pending updates went.
    if RESTORED_SHARD in str(error):
        return False
    return isinstance(error, _WORKER_GONE) or (
        isinstance(error, tf.errors.InvalidArgumentError) and "unknown device" in str(error))


def check_lifetime(table_config, cache_config):
    """Checks a cache against its table's lifetime settings, as the layer
    does (combinations.py): a shard that drops rows keeps those it records
    a cache holding, and only a cache that syncs by refresh is recorded."""
    combinations.check(combinations.Combination(
        sync=cache_config.sync, scheduler=cache_config.scheduler,
        evict=table_config.evicting or table_config.ttl is not None,
        admits=table_config.admit_after is not None), combinations.spell_argument,
        f"{table_config.label}: ")


class WorkerCache:
    """`device` None means the device the calling function runs on: under
    ParameterServerStrategy each worker then has its own cache of the same
    name. `worker_devices` lists those devices, for the flush, clear and
    stats that the chief runs on every worker's cache."""

    def __init__(self, table: ShardedTable, config: CacheConfig, device=None, shared_name=None,
                 worker_devices=None):
        self.table = table
        self.config = config.validate(table.config.label)
        check_lifetime(table.config, self.config)
        self.device = device
        self.worker_devices = list(worker_devices) if worker_devices else [device]
        # Caches are private to the process that makes them unless named.
        self.shared_name = shared_name or f"het_cache/{table.config.name}/{next(_instance)}"
        self._ops = _op_library.load()
        self._handles = FunctionHandles()

    def _placed(self, device):
        return contextlib.nullcontext() if device is None else tf.device(device)

    def _on_every_worker(self, fn):
        """fn(device) for each worker's cache. Eagerly, a worker that is gone
        is skipped with a warning: its cache went with it."""
        results = []
        for device in self.worker_devices:
            if not tf.executing_eagerly():
                results.append(fn(device))
                continue
            try:
                results.append(fn(device))
            except tf.errors.OpError as e:
                if not _worker_gone(e):
                    raise
                logging.getLogger("het_tf").warning(
                    "table '%s': the cache on %s is unreachable (%s); skipping it",
                    self.table.config.name, device, type(e).__name__)
        return results

    @property
    def dim(self):
        return self.table.dim

    def handle(self, device=None):
        device = device or self.device
        c = self.config

        def make():
            with self._placed(device):
                return self._ops.het_cache(
                    table_name=self.table.config.name, dim=self.dim, capacity=c.capacity,
                    vocabulary_size=self.table.config.vocabulary_size, policy=c.policy,
                    pin_threshold=c.pin_threshold, read_staleness=c.read_staleness,
                    write_staleness=c.write_staleness, staleness_ramp=c.staleness_ramp,
                    sync=c.sync, wire_dtype=c.wire_dtype, num_shards=self.table.num_shards,
                    rows_leave=self.table.config.evicting or self.table.config.ttl is not None,
                    # A row a shard makes for a miss is made here instead:
                    # its clock alone comes back (rows written otherwise,
                    # by weights, a restore or a push, come whole).
                    rebuild_rows=True, **self.table.config.initializer_attrs(),
                    shared_name=self.shared_name, **self.table.config.optimizer.op_attrs())

        return self._handles.get(device, make)

    def worker_stats(self):
        """Each worker's cache's counters, in worker order (eager)."""
        def one(device):
            with self._placed(device):
                names, values = self._ops.het_cache_stats(self.handle(device))
            return {n.decode(): int(v) for n, v in zip(names.numpy(), values.numpy())}

        return self._on_every_worker(one)

    def stats(self):
        """Counters summed over every worker's cache (eager)."""
        total = {}
        for stats in self.worker_stats():
            for key, value in stats.items():
                total[key] = total.get(key, 0) + value
        return total

    def pin(self, keys):
        """Pins the rows of int64 `keys` in every worker's cache (replacing
        the last pinned set): once cached, they are evicted only when
        nothing else is left (FAE's hot rows under ParameterServerStrategy)."""
        keys = self.table.check_ids(keys, "pinned ids")

        def one(device):
            with self._placed(device):
                return self._ops.het_cache_pin(self.handle(device), keys)

        return self._on_every_worker(one)

    def clear(self):
        """Empties every worker's cache."""
        def one(device):
            with self._placed(device):
                return self._ops.het_cache_clear(self.handle(device))

        return self._on_every_worker(one)

    def lookup(self, ids, training, lookahead=False):
        """Rows of int64 `ids` (any shape) plus the batch's unique keys and
        the inverse map, for the gradient step. Training syncs as the
        config says; evaluation checks every key, so that it changes
        nothing, at read bound 0 (unless traced within
        `evaluation_as_cached`): a copy behind the shard's row by any
        update is read from the shard (with this worker's own pending
        updates merged in). With `lookahead` (sync "refresh", training) the step's own
        exchange asks only for ids not cached: the step's `prefetch` carries
        its updates."""
        ids = self.table.check_ids(ids)
        if training and self.config.sync == "refresh":
            return self._lookup_by_refresh(ids, carry_updates=not lookahead)
        with self._placed(self.device):
            unique, inverse, clocks, read_staleness = self._ops.het_cache_prepare(
                self.handle(), ids)
        if not training and not evaluating_as_cached():
            read_staleness = tf.zeros_like(read_staleness)
        # Training takes whole states: local steps need the optimizer's slots.
        positions, values, row_clocks, epochs = self.table.pull(
            unique, clocks, read_staleness, with_slots=training, keys_checked=True)
        with self._placed(self.device):
            rows = self._ops.het_cache_complete(self.handle(), unique, positions, values,
                                                row_clocks, epochs, dim=self.dim, training=training)
        return rows, unique, inverse

    def _lookup_by_refresh(self, ids, carry_updates):
        """One exchange with each shard: out go the pushes the last update
        made due, the evictions since the last exchange and the keys not
        cached; back come the pushed rows, the missing rows and the fresh
        states of this worker's copies that went past the read bound."""
        with self._placed(self.device):
            unique, inverse, requests = self._ops.het_cache_begin_exchange(
                self.handle(), ids, num_shards=self.table.num_shards,
                carry_updates=carry_updates)
        answers = self.table.exchange(requests)
        with self._placed(self.device):
            rows = self._ops.het_cache_end_exchange(self.handle(), unique, answers, dim=self.dim)
        return rows, unique, inverse

    def drop(self, keys):
        """Herald's plan: drops the cached copies of `keys`, the rows other
        ranks read next; the pending updates of those held join the outbox.
        Returns the rows the next exchange will push (0: it need not run)."""
        with self._placed(self.device):
            return self._ops.het_cache_drop(self.handle(), keys)

    def push_due(self):
        """An exchange that asks for no rows: it pushes what is due and the
        outbox, and takes the refreshes the shards queued. A round still in
        flight (its answer lost) goes first, and then a second exchange
        pushes the rest. Returns a scalar to wait on."""
        none = tf.zeros([0], tf.int64)
        rows, _, _ = self._lookup_by_refresh(none, carry_updates=True)
        with tf.control_dependencies([rows]):
            left = self.drop(none)  # drops nothing: counts what is still to push
        return tf.cond(
            left > 0,
            lambda: tf.size(self._lookup_by_refresh(none, carry_updates=True)[0],
                            out_type=tf.int64),
            lambda: tf.size(rows, out_type=tf.int64))

    def most_used(self, count):
        """Up to `count` cached keys, the most touched first."""
        with self._placed(self.device):
            return self._ops.het_cache_most_used(self.handle(), tf.constant(count, tf.int64))

    def staged(self, ids, batches):
        """Herald's window: the distinct ids, ascending, of up to `batches`
        batches staged after the step's batch of `ids` (checked)."""
        with self._placed(self.device):
            return self._ops.het_cache_staged(self.handle(), ids, batches=batches)

    def staged_ahead(self, ids, batches):
        """staged's old name, for one release."""
        warn_renamed("WorkerCache.staged_ahead", "WorkerCache.staged", stacklevel=3)
        return self.staged(ids, batches)

    def stage(self, ids):
        """The lookahead's input side, run by the input pipeline on the
        worker that will train on the batch: stages the ids a training
        lookup will take soon (see het_tf.lookahead)."""
        with self._placed(self.device):
            return self._ops.het_cache_stage(self.handle(), self.table.check_ids(ids))

    def prefetch(self, ids, lookup_rows):
        """The lookahead's exchange in a training step whose lookup of
        `ids` gave `lookup_rows`: the batch staged after `ids` comes into
        the cache, and the step's pushes and evictions go out, while the
        step computes. Returns the op to run the step's update after."""
        with tf.control_dependencies([lookup_rows]), self._placed(self.device):
            unique, requests = self._ops.het_cache_begin_prefetch(
                self.handle(), self.table.check_ids(ids), num_shards=self.table.num_shards)
        answers = self.table.exchange(requests)
        with self._placed(self.device):
            return self._ops.het_cache_end_prefetch(self.handle(), unique, answers)

    def apply_gradients(self, unique_keys, unique_grads, learning_rate):
        """One local optimizer step per unique key cached. By check, pushes
        whatever is due now; by refresh, what is due goes with the next
        exchange, so the step sends nothing. A key not cached (a later
        lookup of the step evicted it) has its gradient pushed to the
        shards, as without a cache. Returns the ops to wait on."""
        with self._placed(self.device):
            *pushes, uncached = self._ops.het_cache_accumulate(
                self.handle(), unique_keys, unique_grads, tf.cast(learning_rate, tf.float32),
                dim=self.dim)

        def push_uncached():
            keys, grads = tf.gather(unique_keys, uncached), tf.gather(unique_grads, uncached)
            return tf.nest.flatten(push_without_cache(self.table, keys, grads, learning_rate))

        direct = tf.cond(tf.size(uncached) > 0, push_uncached,
                         lambda: [tf.zeros([0, self.dim]), tf.zeros([0], tf.int64)])
        if self.config.sync == "refresh":
            return [pushes[0], *direct]
        return [self._push_and_ack(pushes, learning_rate), *direct]

    def flush(self, learning_rate):
        """Pushes every pending update of every worker's cache; returns the
        ops that acknowledge them. Rounds go until one finds nothing left:
        a round in flight (its answer lost) goes again first, and a round
        carries each key once, so a key with several outbox rows, or with a
        cached entry besides, takes a round for each. A flush that still
        finds rows after FLUSH_ROUNDS rounds fails naming the table: a
        checkpoint or export after it would not be a consistent cut."""
        name = self.table.config.name

        def one(device):
            # All of it on the worker, the routing to shards too: placed on
            # the caller (the chief), a whole cache's pending rows would pass
            # through it (4.4 GB of the chief's peak at --scale 3).
            with self._placed(device):
                def push_round(rounds, _):
                    pushes = self._ops.het_cache_flush(self.handle(device), dim=self.dim)
                    acked = self._push_and_ack(pushes, learning_rate, device)
                    with tf.control_dependencies([acked]):
                        return rounds + 1, tf.size(pushes[0], out_type=tf.int64)

                # A round that pushes nothing ends it from the second on (the
                # first may resend an empty round in flight, an exchange's).
                rounds, pushed = tf.while_loop(
                    lambda rounds, pushed: ((rounds < 2) | (pushed > 0)) & (rounds <= FLUSH_ROUNDS),
                    push_round, (tf.constant(0), tf.constant(1, tf.int64)))
                done = tf.debugging.assert_equal(
                    pushed, tf.constant(0, tf.int64),
                    message=f"table '{name}': a flush still had rows to push after "
                            f"{FLUSH_ROUNDS} rounds (a shard refuses them, or their answers "
                            "are lost); nothing pending was dropped")
                with tf.control_dependencies([done]):
                    return tf.identity(rounds)

        return self._on_every_worker(one)

    def _push_and_ack(self, pushes, learning_rate, device=None):
        """pushes: (keys, deltas, counts, base clocks, evicted, senders) as
        the cache's accumulate and flush ops give them; the `evicted`
        leading rows get no state back."""
        keys, deltas, counts, base_clocks, evicted, senders = pushes
        # The cache pushes only keys its Prepare checked.
        values, clocks, epochs, lean, refused = self.table.push_deltas(
            keys, deltas, counts, base_clocks, learning_rate, keys_checked=True, senders=senders,
            unanswered=evicted)
        with self._placed(device or self.device):
            return self._ops.het_cache_ack_push(self.handle(device), keys, counts, values,
                                                clocks, epochs, lean, refused)


def hit_rate(counters, prefix=""):
    """Share of unique keys served from the cache, from cache counters (or
    from their difference over an interval); 0.0 before any lookup."""
    return counters.get(prefix + "hits", 0) / max(counters.get(prefix + "unique_keys", 0), 1)


def lookup_without_cache(table: ShardedTable, ids, training=True):
    """The no-cache read: unique ids go to the shards, rows come back."""
    unique, inverse = slices.unique(table.check_ids(ids), table.config.label)
    return table.gather(unique, training=training), unique, inverse


def push_without_cache(table: ShardedTable, unique_keys, unique_grads, learning_rate,
                       keys_checked=False):
    """One update of each unique key with its gradient sum, on its shard;
    keys_checked as for ShardedTable.pull (a caller that has not checked
    them may have been handed anything)."""
    counts = tf.ones_like(unique_keys)
    return table.push(unique_keys, unique_grads, counts, learning_rate, return_rows=False,
                      keys_checked=keys_checked)
