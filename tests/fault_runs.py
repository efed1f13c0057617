"""A worker's cache driven through the faults that exactly-once guards
against, and the oracle its rows are held to: the data. Used in one process
by tests/test_exactly_once.py and across processes by
tests/exactly_once_worker.py (`make soak`).

With SGD each row ends at its initial row (tests.reference, apart from the
ops) minus the learning rate times the sum of the gradients it was trained
with, and its clock at their number, whatever the staleness
(docs/consistency.md, "Exactly once")."""
import numpy as np
import tensorflow as tf

from het_tf import _op_library
from tests.reference import FIELDS, RefTable, initial_row, shard_of

LR = 0.5
DIM = 2
SEED = 5
OPS = _op_library.load()


class Oracle:
    """What each key was trained with: the sum of its gradients and their number."""

    def __init__(self, sums=None, counts=None):
        self.sums, self.counts = dict(sums or {}), dict(counts or {})

    def trained(self, keys, grads):
        for k, g in zip(np.asarray(keys).tolist(), np.asarray(grads, np.float64)):
            self.sums[k] = self.sums.get(k, 0.0) + g
            self.counts[k] = self.counts.get(k, 0) + 1

    def copy(self):
        return Oracle(self.sums, self.counts)

    def add(self, other):
        for k, g in other.sums.items():
            self.sums[k] = self.sums.get(k, 0.0) + np.asarray(g, np.float64)
        for k, c in other.counts.items():
            self.counts[k] = self.counts.get(k, 0) + c

    def to_json(self):
        return {"sums": {str(k): np.asarray(v).tolist() for k, v in self.sums.items()},
                "counts": {str(k): c for k, c in self.counts.items()}}

    @classmethod
    def from_json(cls, data):
        return cls({int(k): np.asarray(v) for k, v in data["sums"].items()},
                   {int(k): c for k, c in data["counts"].items()})

    def rows(self, keys):
        """The rows of `keys` as the data says."""
        return np.stack([initial_row(k, DIM, SEED) - LR * self.sums.get(k, 0.0) for k in keys])

    def check(self, table):
        """Every row the shards hold is what the data says."""
        for s in range(table.num_shards):
            keys, values, _slots, clocks, _steps = table.export_shard(s, 0, 1 << 30)
            for k, v, c in zip(keys.numpy().tolist(), values.numpy(), clocks.numpy()):
                np.testing.assert_allclose(v, self.rows([k])[0], atol=1e-5, err_msg=f"row {k}")
                assert c == self.counts.get(k, 0), f"row {k}: clock {c}"


class ReplayOracle:
    """The steps one worker trained on keys no other worker trains,
    replayed without a fault in a NumPy table of the same optimizer
    (tests.reference): each key one optimizer step a step, in order. Its
    rows are what the shards must hold after a flush, slots included, and
    what the worker's reads must give at any time (each reads its own
    writes, and no one else writes them).

    Within TOLERANCE: a cache pushes each field's change from its base,
    and the shard adds it to its row, so each push may round once more than
    the replay's step does (Adam's moments and values, over a thousand
    pushes of a row, drifted 1.7e-5 apart). An update merged twice or lost
    moves a row by about the learning rate times its gradient, 0.1 or more
    here, four orders of magnitude past it."""

    TOLERANCE = dict(rtol=1e-4, atol=1e-5)

    def __init__(self, optimizer):
        self.ref = RefTable(DIM, optimizer, SEED)

    def trained(self, keys, grads):
        for k, g in zip(np.asarray(keys).tolist(), np.asarray(grads, np.float32)):
            self.ref.push(k, g, 1, LR)

    def rows(self, keys):
        return np.stack([self.ref.row(k)["w"] for k in keys])

    def check(self, table, keys):
        """The shards' rows of `keys`, values and slots, are the replay's."""
        values, slots, clocks, _steps = (t.numpy() for t in table.read_rows(
            tf.constant(keys, tf.int64)))
        fields = FIELDS[self.ref.optimizer][1:]
        for i, k in enumerate(keys):
            row = self.ref.row(k)
            np.testing.assert_allclose(values[i], row["w"], **self.TOLERANCE,
                                       err_msg=f"row {k}")
            for j, field in enumerate(fields):
                np.testing.assert_allclose(slots[i][j], row[field], **self.TOLERANCE,
                                           err_msg=f"row {k} {field}")
            assert clocks[i] == row["clock"], f"row {k}: clock {clocks[i]}, {row['clock']}"


def keys_on(shard, count, shards=2):
    return [k for k in range(10_000) if shard_of(k, shards) == shard][:count]


def train(cache, oracle, ids, grads=None):
    _rows, unique, _inverse = cache.lookup(tf.constant(ids, tf.int64), training=True)
    grads = np.ones([len(unique), DIM], np.float32) if grads is None else grads
    cache.apply_gradients(unique, tf.constant(grads), LR)
    oracle.trained(unique.numpy(), grads)


def push_unanswered(table, pushes):
    """Sends a cache's pushes (its accumulate's or flush's outputs) to the
    shards, whose answer the cache never takes."""
    keys, deltas, counts, bases, evicted, senders = pushes
    return table.push_deltas(keys, deltas, counts, bases, LR, senders=senders,
                             unanswered=evicted)


def gradients(count, scale):
    """Exact in float32 whatever they sum to here."""
    return np.outer(np.arange(1, count + 1) % 3 - 1, [1.0, -0.5]).astype(np.float32) * scale / 2


class FaultyWorker:
    """One worker's cache on a 2-shard SGD table (max_rows at least 48, so
    that `refuse` overflows shard 1 and nothing else does), recording what it
    trains in `oracle`."""

    def __init__(self, table, cache, oracle):
        self.table, self.cache, self.oracle = table, cache, oracle
        self.unanswered = None  # the last round sent without an answer
        self.answered = False  # the cache has had an exchange answered
        self.faults = {"dropped": 0, "refused": 0, "replayed": 0, "replays_refused": 0}
        self.replay_ids = [0, 1]  # what a new incarnation trains

    def train(self, ids, scale):
        train(self.cache, self.oracle, ids, gradients(len(ids), scale))
        self.answered = True

    def train_twice(self, ids, scale, more):
        """A layer called twice in a step: two lookups, then one update of
        every id either read (through the cache, or pushed as without one
        if the second lookup took its row's place)."""
        for read in (ids, more):
            self.cache.lookup(tf.constant(read, tf.int64), training=True)
        unique = np.unique(np.array(ids + more, np.int64))
        grads = gradients(len(unique), scale)
        self.cache.apply_gradients(tf.constant(unique), tf.constant(grads), LR)
        self.oracle.trained(unique, grads)
        self.answered = True

    def drop_answer(self, ids, scale):
        """A step whose shards merge and whose answer never comes back."""
        self.faults["dropped"] += 1
        if self.cache.config.sync == "refresh":
            _unique, _inverse, requests = OPS.het_cache_begin_exchange(
                self.cache.handle(), tf.constant(ids, tf.int64), num_shards=2)
            self.table.exchange(requests)
            self.unanswered = requests
            return
        _rows, unique, _ = self.cache.lookup(tf.constant(ids, tf.int64), training=True)
        self.answered = True  # the pull's answer carried the epochs
        grads = gradients(len(unique), scale)
        # Every key was just looked up, so none comes back uncached: the
        # first six outputs are the push.
        pushes = tuple(OPS.het_cache_accumulate(self.cache.handle(), unique, grads, LR,
                                                dim=DIM)[:6])
        self.oracle.trained(unique.numpy(), grads)
        push_unanswered(self.table, pushes)
        self.unanswered = pushes

    def refuse(self):
        """A step with more new rows than shard 1 may hold: it fails, shard 0
        having answered, and changes nothing."""
        self.faults["refused"] += 1
        try:
            self.cache.lookup(tf.constant(keys_on(1, 40), tf.int64), training=True)
        except tf.errors.ResourceExhaustedError:
            return
        raise AssertionError("a step with 40 new rows on shard 1 was not refused")

    def replay(self):
        """The worker restarts: its rounds are flushed, then it is a new
        incarnation, which trains once; the old round comes again, late, and
        must change nothing."""
        if self.unanswered is None:
            return
        self.faults["replayed"] += 1
        late = self.unanswered
        self.cache.flush(LR)
        self.clear()
        self.train(self.replay_ids, 1)
        try:
            if isinstance(late, tuple):
                answer = push_unanswered(self.table, late)
            else:
                answer = self.table.exchange(late)
            # A remote op's error shows when its outputs are read: here.
            tf.nest.map_structure(lambda t: t.numpy(), answer)
        except tf.errors.FailedPreconditionError as e:
            assert "generation" in str(e), e
            self.faults["replays_refused"] += 1
        self.unanswered = None

    def knows_epochs(self):
        """Whether the cache has had an answer since its last clear, which
        told it the shards' epochs: by refresh, any exchange's; by check, any
        pull's or push's."""
        return self.answered

    def clear(self):
        """Empties the cache, as a restore does: nothing in flight, no epoch
        known."""
        self.cache.clear()
        self.forget_epochs()

    def forget_epochs(self):
        """The cache met another epoch (Aborted) and empties itself at its
        next lookup: nothing in flight, no epoch known until an answer."""
        self.unanswered, self.answered = None, False
