"""A table split into shards, one per device, keyed by a stable hash.

Each shard is a resource created on its own device (normally a parameter
server task) and found there by shared name, so every client that names the
same table reaches the same rows. These methods only route keys to shards
and put the answers back in order; the shards do the work.
"""
import tensorflow as tf

from het_tf import _op_library
from het_tf.runtime.config import SQUARED_GRADIENT_SLOT, TableConfig
from het_tf.runtime.handles import FunctionHandles

WIRE = dict(wire_version=_op_library.WIRE_VERSION)  # every op that carries rows

# What a row is, field by field, as export_shard and export_all give rows and
# import_rows takes them: a saved table is these five arrays.
ROW_FIELDS = ("keys", "values", "slots", "clocks", "steps")


class ShardedTable:
    """`instance` tells apart tables that share a display name: shards are
    found by (name, instance), so two layers called "embedding" in one
    process get different rows unless they pass the same instance."""

    def __init__(self, config: TableConfig, devices=(None,), instance=""):
        if not devices:
            raise ValueError(f"{config.label}: needs at least one shard device")
        self.config = config
        self.devices = list(devices)
        self.instance = instance
        self._ops = _op_library.load()
        self._handles = FunctionHandles()

    @property
    def num_shards(self):
        return len(self.devices)

    @property
    def dim(self):
        return self.config.dim

    def shared_name(self, shard):
        return f"het_table/{self.config.name}/{self.instance}/{shard}_of_{self.num_shards}"

    def handle(self, shard):
        def make():
            with tf.device(self.devices[shard]):
                return self._ops.het_table_shard(shared_name=self.shared_name(shard),
                                                 **self.config.op_attrs(self.num_shards, shard))

        return self._handles.get(shard, make)

    def _partition(self, keys, *values, keys_checked=False):
        """Splits keys (and rows that go with them) by shard; also returns
        where each part came from, to put answers back in request order."""
        shard_of = self._shard_of(keys, keys_checked)
        origin = tf.dynamic_partition(tf.range(tf.size(keys)), shard_of, self.num_shards)
        parts = [tf.dynamic_partition(t, shard_of, self.num_shards) for t in (keys,) + values]
        return origin, parts

    def _shard_of(self, keys, keys_checked=False):
        """The shard of each key. Checks every id first, unless the caller
        already has: a bad one must fail before any shard changes."""
        vocabulary = -1 if keys_checked else self.config.vocabulary_size
        return self._ops.het_shard_index(keys, num_shards=self.num_shards,
                                         vocabulary_size=vocabulary, table_name=self.config.name)

    def shard_counts(self, keys):
        """How many of the int64 `keys` each shard owns now (eager)."""
        return tf.math.bincount(self._shard_of(keys), minlength=self.num_shards).numpy()

    def _on_shards(self, fn, keys, *values, keys_checked=False, per_shard=None):
        """Calls fn(shard, handle, keys_part, *value_parts, *extra) on every
        shard, extra = per_shard(origin_part) (or none): tensors made from
        where the part came from, here on the caller's device rather than
        on the shard's."""
        if self.num_shards == 1:
            extra = per_shard(tf.range(tf.size(keys))) if per_shard else ()
            return None, [fn(0, self.handle(0), keys, *values, *extra)]
        origin, parts = self._partition(keys, *values, keys_checked=keys_checked)
        extras = [per_shard(o) if per_shard else () for o in origin]
        results = []
        for s in range(self.num_shards):
            with tf.device(self.devices[s]):
                results.append(fn(s, self.handle(s), *[p[s] for p in parts], *extras[s]))
        return origin, results

    def check_ids(self, ids, what="ids"):
        """Integer ids as int64; anything else is refused naming the table
        (or the layer that owns it). Their range is checked by the first op
        that reads them: HetCacheBeginExchange (sync "refresh"),
        HetCachePrepare (sync "check"), or the gather of a lookup without
        cache."""
        ids = tf.convert_to_tensor(ids) if not isinstance(ids, tf.Tensor) else ids
        if ids.dtype not in (tf.int32, tf.int64):
            raise ValueError(f"{self.config.label}: {what} must be int32 or int64, "
                             f"got {ids.dtype.name}; pass integer ids")
        return tf.cast(ids, tf.int64)

    def gather(self, keys, training=True):
        """Rows of unique int64 `keys` (rank 1), created on first touch (a
        table that admits ids creates only the admitted ids of a training
        read, and the others read zeros)."""
        origin, rows = self._on_shards(
            lambda s, h, k: self._ops.het_table_gather(h, k, dim=self.dim, training=training,
                                                       **WIRE),
            keys)
        return rows[0] if origin is None else tf.dynamic_stitch(origin, rows)

    def pull(self, keys, clocks, read_staleness, with_slots=False, keys_checked=False,
             training=None):
        """The clock-checked read: (positions, rows, clocks) of the keys
        whose cached copy is missing or staler than the read bound, shard
        after shard (the positions are distinct, not sorted), and each
        shard's epoch as its pull began. With slots,
        each row comes as its whole state (values, then the optimizer's
        slots), as a training cache needs it.

        keys_checked: the caller has checked every key against the
        vocabulary (a cache's own Prepare did), so routing them need not.
        training: whether the read counts toward admission and may create
        rows (default: with_slots, as a training cache reads)."""
        training = with_slots if training is None else training
        staleness = tf.cast(read_staleness, tf.int64)
        num_slots = self.config.num_slots if with_slots else 0
        origin, answers = self._on_shards(
            lambda s, h, k, c: self._ops.het_table_pull(h, k, c, staleness, dim=self.dim,
                                                        num_slots=num_slots, training=training,
                                                        **WIRE),
            keys, clocks, keys_checked=keys_checked)
        epochs = tf.stack([a[3] for a in answers])
        if origin is None:
            return (*answers[0][:3], epochs)
        return (tf.concat([tf.gather(origin[s], a[0]) for s, a in enumerate(answers)], 0),
                tf.concat([a[1] for a in answers], 0), tf.concat([a[2] for a in answers], 0),
                epochs)

    def exchange(self, requests):
        """A worker cache's exchange (sync="refresh"): requests[s], the
        bytes HetCacheBeginExchange wrote for shard s, goes to that shard's
        HetTableExchange; returns the answers in shard order."""
        answers = []
        for shard, request in enumerate(requests):
            with tf.device(self.devices[shard]):
                answers.append(self._ops.het_table_exchange(self.handle(shard), request,
                                                            dim=self.dim))
        return answers

    def push(self, keys, grads, counts, learning_rate, return_rows=True, keys_checked=False):
        """Applies gradient sums; with return_rows, the updated rows and
        clocks come back in the order of `keys`. keys_checked as for pull."""
        lr = tf.cast(learning_rate, tf.float32)
        if self.num_shards > 1:
            grads = self._check_overflow(keys, grads, lr)
        return self._push(
            lambda h, k, g, c: self._ops.het_table_push(h, k, g, c, lr, dim=self.dim,
                                                        return_rows=return_rows, **WIRE),
            keys, grads, counts, "gradient", return_rows, keys_checked=keys_checked)

    def push_deltas(self, keys, deltas, counts, base_clocks, learning_rate, keys_checked=False,
                    senders=None, unanswered=0):
        """Merges caches' state deltas, taken from rows at `base_clocks` (see
        HetTablePushDeltas). Returns, for the keys after the first
        `unanswered` (rows the cache evicted, which get no answer) in the
        order of `keys`: the rows' states after the merge but for those
        acknowledged lean (by their clocks alone: no other writer reached
        them, and the cache computes the merge itself), their clocks, each
        shard's epoch (a shard restored since the sender's round began
        merged nothing), whether each was lean, and the keys whose update a
        shard refused in a round (it would have made the row non-finite).
        keys_checked as for pull; senders: the pushing cache's round, a row
        for each shard of (worker id, generation, sequence, epoch) as its
        accumulate and flush ops give it, so that each shard merges the
        round once; None for a push with no sender."""
        if senders is None:
            senders = tf.zeros([self.num_shards, 4], tf.int64)
        lr = tf.cast(learning_rate, tf.float32)
        unanswered = tf.cast(unanswered, tf.int64)

        def push(shard, handle, k, d, c, b, leading):
            return self._ops.het_table_push_deltas(handle, k, d, c, lr, b, senders[shard],
                                                   leading, dim=self.dim,
                                                   num_slots=self.config.num_slots, **WIRE)

        def leading(origin_part):
            # The part keeps the push's order, so its unanswered rows lead.
            return (tf.reduce_sum(tf.cast(tf.cast(origin_part, tf.int64) < unanswered,
                                          tf.int64)),)

        if self.num_shards > 1:
            # One shard checks its whole push itself; several must refuse a
            # bad push before any of them merges its part.
            deltas = self._check_finite(deltas, "state delta")
            deltas, base_clocks = self._check_deltas(deltas, base_clocks)
        origin, answers = self._on_shards(push, keys, deltas, counts, base_clocks,
                                          keys_checked=keys_checked, per_shard=leading)
        epochs = tf.stack([a[2] for a in answers])
        refused = tf.concat([a[4] for a in answers], 0)
        if origin is None:
            return answers[0][0], answers[0][1], epochs, answers[0][3], refused
        # Each part's answered rows, numbered among the push's answered rows.
        answered = [tf.boolean_mask(o, tf.cast(o, tf.int64) >= unanswered)
                    - tf.cast(unanswered, o.dtype) for o in origin]
        lean = tf.dynamic_stitch(answered, [a[3] for a in answers])
        # The states that came, numbered among the push's rows not lean.
        place = tf.cumsum(tf.cast(~lean, tf.int32)) - 1
        whole = [tf.gather(place, tf.boolean_mask(at, ~a[3])) for at, a in zip(answered, answers)]
        return (tf.dynamic_stitch(whole, [a[0] for a in answers]),
                tf.dynamic_stitch(answered, [a[1] for a in answers]), epochs, lean, refused)

    def _check_finite(self, values, what):
        return tf.debugging.check_numerics(
            values, f"{self.config.label}: non-finite {what}; nothing was applied")

    def _check_overflow(self, keys, grads, lr):
        """A shard refuses an update that would make its row non-finite, but
        only its own part: with several, a gradient whose square (for the
        optimizers that sum squared gradients) or whose step overflows is
        refused here, before any shard merges, naming the first such id."""
        # Non-finite gradients are _push's to refuse, as such.
        grow = grads * grads if self.config.optimizer.name in SQUARED_GRADIENT_SLOT else lr * grads
        bad = tf.reduce_any(tf.math.is_finite(grads) & ~tf.math.is_finite(grow), axis=1)
        check = tf.debugging.Assert(
            ~tf.reduce_any(bad),
            [f"{self.config.label}: the update of id", tf.boolean_mask(keys, bad)[:1],
             "would make its row or optimizer slots non-finite (is its gradient, or the learning "
             "rate, too large?); nothing was applied"])
        with tf.control_dependencies([check]):
            return tf.identity(grads)

    def _check_deltas(self, deltas, base_clocks):
        label = self.config.label
        checks = [tf.debugging.assert_non_negative(
            base_clocks, message=f"{label}: negative base clock; nothing was applied")]
        slot = SQUARED_GRADIENT_SLOT.get(self.config.optimizer.name)
        if slot is not None:
            at = self.dim * (1 + slot)
            checks.append(tf.debugging.assert_non_negative(
                deltas[:, at:at + self.dim],
                message=f"{label}: negative squared-gradient change; nothing was applied"))
        with tf.control_dependencies(checks):
            return tf.identity(deltas), tf.identity(base_clocks)

    def _push(self, push_op, keys, values, counts, what, return_rows, keys_checked):
        """push_op(handle, keys, values, counts) on every shard, each
        with its part of the inputs; the answers back in the order of `keys`
        (empty without return_rows)."""
        if self.num_shards > 1:  # one shard checks its whole push itself
            values = self._check_finite(values, what)
        origin, answers = self._on_shards(lambda s, h, *parts: push_op(h, *parts),
                                          keys, values, counts, keys_checked=keys_checked)
        if origin is None:
            return tuple(answers[0])
        if not return_rows:
            deps = [a[1] for a in answers]
            with tf.control_dependencies(deps):
                return tf.zeros([0, self.dim]), tf.zeros([0], tf.int64)
        return (tf.dynamic_stitch(origin, [a[0] for a in answers]),
                tf.dynamic_stitch(origin, [a[1] for a in answers]))

    def chunk_rows(self, chunk_bytes):
        """Rows of whole states in `chunk_bytes`: what a save or export
        reads at a time (the export op holds a chunk twice, its rows and
        then its outputs)."""
        # key, clock and step, then the values and the optimizer's slots
        row_bytes = 24 + 4 * self.dim * (1 + self.config.num_slots)
        return max(1, chunk_bytes // row_bytes)

    def export_shard(self, shard, offset, limit):
        """(keys, values, slots, clocks, steps) of rows [offset, offset+limit)."""
        with tf.device(self.devices[shard]):
            return self._ops.het_table_export(self.handle(shard), offset, limit, dim=self.dim,
                                              num_slots=self.config.num_slots)

    def read_rows(self, keys):
        """(values, slots, clocks, steps) of each of the int64 `keys` (rank
        1), in their order, rows created on first touch: whole states, as a
        hot block takes them (het_tf.runtime.hot_block)."""
        origin, parts = self._on_shards(
            lambda s, h, k: self._ops.het_table_read(h, k, dim=self.dim,
                                                     num_slots=self.config.num_slots, **WIRE),
            keys)
        if origin is None:
            return tuple(parts[0])
        return tuple(tf.dynamic_stitch(origin, [p[i] for p in parts]) for i in range(4))

    def import_rows(self, keys, values, slots, clocks, steps):
        """Writes rows to whichever shard owns them now, so rows exported
        from any number of shards load onto any other number."""
        return self._on_shards(
            lambda s, h, k, v, sl, c, st: self._ops.het_table_import(h, k, v, sl, c, st),
            keys, values, slots, clocks, steps)[1]

    # ----- incremental checkpoints (het_tf.runtime.checkpoint) -----

    def forget_changes(self):
        """Starts tracking every shard's changes, or drops those tracked:
        the cut of a full checkpoint or of a restore."""
        ops = []
        for s in range(self.num_shards):
            with tf.device(self.devices[s]):
                ops.append(self._ops.het_table_forget_changes(self.handle(s)))
        return ops

    def take_changes(self, shard, kept):
        """(tracked, changed keys, dropped keys) of shard `shard` since the
        last cut; `kept`: whether the last checkpoint that took changes was
        kept (if not, its changes come again)."""
        with tf.device(self.devices[shard]):
            return self._ops.het_table_take_changes(self.handle(shard), kept)

    def read_held(self, shard, keys):
        """(held keys, absent keys, values, slots, clocks, steps) of those of
        `keys` shard `shard` holds; makes no row."""
        with tf.device(self.devices[shard]):
            return self._ops.het_table_read_held(self.handle(shard), keys, dim=self.dim,
                                                 num_slots=self.config.num_slots, **WIRE)

    def erase_rows(self, keys):
        """Drops the rows of `keys`, on whichever shard holds them now."""
        return self._on_shards(lambda s, h, k: self._ops.het_table_erase(h, k), keys)[1]

    def clear(self):
        """Drops every row on every shard."""
        ops = []
        for s in range(self.num_shards):
            with tf.device(self.devices[s]):
                ops.append(self._ops.het_table_clear(self.handle(s)))
        return ops

    def export_all(self):
        """Every row of every shard, concatenated: one logical table whatever
        the number of shards, so it restores onto any other number."""
        parts = [self.export_shard(s, 0, tf.int64.max) for s in range(self.num_shards)]
        return tuple(tf.concat([p[i] for p in parts], 0) for i in range(5))

    def shard_stats(self, shard):
        with tf.device(self.devices[shard]):
            names, values = self._ops.het_table_stats(self.handle(shard))
        return names, values

    def shard_rows(self, shard):
        """Rows shard `shard` holds (eager)."""
        names, values = self.shard_stats(shard)
        return int(dict(zip((n.decode() for n in names.numpy()), values.numpy()))["rows"])

    def stats(self):
        """Counters summed over shards, as a dict of Python ints (eager)."""
        total = {}
        for s in range(self.num_shards):
            names, values = self.shard_stats(s)
            for name, value in zip(names.numpy(), values.numpy()):
                key = name.decode()
                if key == "bytes_per_row":
                    total[key] = int(value)
                else:
                    total[key] = total.get(key, 0) + int(value)
        return total
