"""A plain NumPy model of het_tf's table, cache and clock rules, written from
the design rules rather than from the C++, to check the ops against."""
import ctypes
import ctypes.util
import itertools
import math

import numpy as np

MASK = (1 << 64) - 1

_LIBM = ctypes.CDLL(ctypes.util.find_library("m"))
_LIBM.powf.restype = ctypes.c_float
_LIBM.powf.argtypes = (ctypes.c_float, ctypes.c_float)


def powf(x, p):
    """C's powf, elementwise, as the C++ calls it. NumPy's float32 power
    takes a square root for an exponent of 0.5, which powf need not match
    in the last bit."""
    x = np.asarray(x, np.float32)
    return np.array([_LIBM.powf(float(v), float(p)) for v in x.ravel()],
                    np.float32).reshape(x.shape)


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def shard_of(key, num_shards):
    return mix64((key & MASK) ^ 0x5BD1E9955BD1E995) % num_shards


def initial_row(key, dim, seed, low=-0.05, high=0.05):
    stream = mix64((seed & MASK) ^ 0x243F6A8885A308D3) ^ mix64(key & MASK)
    span = float(np.float32(high) - np.float32(low))
    row = []
    for j in range(dim):
        bits = mix64((stream + mix64(j)) & MASK)
        u = (bits >> 11) * (1.0 / 9007199254740992.0)
        row.append(float(np.float32(low)) + span * u)
    return np.array(row, np.float32)


# The fields of a row's state, in the order the ops carry them.
FIELDS = {"sgd": ("w",), "adagrad": ("w", "acc"), "adam": ("w", "m", "v"),
          "ftrl": ("w", "acc", "lin")}


def initial_state(key, dim, seed):
    """A new row's every field: its initializer's values and the
    optimizer's initial slots (Adagrad's and FTRL's accumulator at 0.1)."""
    return dict(w=initial_row(key, dim, seed), acc=np.full(dim, 0.1, np.float32),
                m=np.zeros(dim, np.float32), v=np.zeros(dim, np.float32),
                lin=np.zeros(dim, np.float32))


def ftrl_weight(lr, linear, acc):
    """FTRL-proximal's row from its slots, at l1 = l2 = beta = 0 and
    learning_rate_power -0.5 (the table's defaults)."""
    quadratic = powf(acc, 0.5) / np.float32(lr) + np.float32(2.0) * np.float32(0.0)
    return np.where(np.abs(linear) > 0, (np.float32(0.0) - linear) / quadratic,
                    np.float32(0.0)).astype(np.float32)


def project(constraint, state):
    """A row constraint, (kind, min_value, max_value, rate) or None, applied
    to state's row as Keras' constraint computes it for one row."""
    if constraint is None:
        return
    kind, low, high, rate = constraint
    w = state["w"]
    if kind == "non_neg":
        projected = np.where(w >= 0, w, np.float32(0)).astype(np.float32)
    else:
        squares = np.float32(0)
        for x in w:  # in order, as the C++ sums
            squares = np.float32(squares + x * x)
        norm = np.sqrt(squares)
        if kind == "unit_norm":
            desired = np.float32(1)
        elif kind == "max_norm":
            desired = min(norm, np.float32(high))
        else:
            clipped = min(max(norm, np.float32(low)), np.float32(high))
            desired = np.float32(rate) * clipped + (np.float32(1) - np.float32(rate)) * norm
        projected = w * np.float32(desired / (np.float32(1e-7) + norm))
    state["w"] = projected


def optimizer_step(optimizer, state, g, lr, step, constraint=None):
    """One update of `state` (a dict of the FIELDS arrays) with gradient g,
    then the row constraint; returns the new step count."""
    def average(field, x, decay):
        decay = np.float32(decay)
        state[field] = decay * state[field] + np.float32(1 - decay) * x

    lr32 = np.float32(lr)
    if optimizer == "sgd":
        state["w"] = state["w"] + -(lr32 * g)
    elif optimizer == "adagrad":
        state["acc"] = state["acc"] + g * g
        state["w"] = state["w"] + -(lr32 * g / np.sqrt(state["acc"] + np.float32(1e-7)))
    elif optimizer == "adam":
        step += 1
        # The C++ takes powers of the float32 betas in double precision.
        b1, b2 = float(np.float32(0.9)), float(np.float32(0.999))
        alpha = np.float32(float(lr32) * math.sqrt(1 - b2 ** step) / (1 - b1 ** step))
        average("m", g, 0.9)
        average("v", g * g, 0.999)
        state["w"] = state["w"] + -(alpha * state["m"] / (np.sqrt(state["v"]) + np.float32(1e-7)))
    elif optimizer == "ftrl":
        acc_new = state["acc"] + g * g
        sigma = (powf(acc_new, 0.5) - powf(state["acc"], 0.5)) / lr32
        state["lin"] = state["lin"] + (g - sigma * state["w"])
        state["acc"] = state["acc"] + g * g
        state["w"] = ftrl_weight(lr, state["lin"], state["acc"])
    else:
        raise ValueError(optimizer)
    project(constraint, state)
    return step


def copy_state(state):
    return {f: v.copy() for f, v in state.items()}


def decay(optimizer, field, count):
    """beta^count of an Adam moment (1 for every other field), as the C++
    takes it: the float32 beta's power in double precision, rounded."""
    if optimizer != "adam" or field not in ("m", "v"):
        return np.float32(1)
    return np.float32(float(np.float32(0.9 if field == "m" else 0.999)) ** count)


def take_delta(optimizer, state, base, count):
    """The delta that takes `base` to `state` in `count` local updates, as
    merge() takes it back: each field's difference from its base (an Adam
    moment's from its decayed base); sums and averages of squared
    gradients never below 0."""
    delta = {}
    for f in FIELDS[optimizer]:
        d = state[f] - (decay(optimizer, f, count) * base[f] if f in ("m", "v") else base[f])
        delta[f] = np.where(d < 0, np.float32(0), d) if f in ("acc", "v") else d
    return delta


def concurrent_share(optimizer, count, others):
    """The share of an Adam delta's change of the row that a merge keeps
    when `others` updates by other writers came since the copy was taken
    (all of a residual: a delta of no update)."""
    if optimizer != "adam" or others <= 0 or count <= 0:
        return np.float32(1)
    return np.float32(count / (count + others))


def merge(optimizer, state, delta, count, lr, share=None, constraint=None):
    """A delta of `count` updates merged into `state`: sums add, Adam's
    moments decay by beta^count and take the averages, FTRL's row follows
    its slots; the row keeps `share` of its change, then the constraint."""
    for f in FIELDS[optimizer]:
        if optimizer == "adam" and f in ("m", "v"):
            state[f] = decay(optimizer, f, count) * state[f] + delta[f]
        elif f == "w" and share is not None and share != 1:
            state[f] = state[f] + share * delta[f]
        else:
            state[f] = state[f] + delta[f]
    if optimizer == "ftrl":
        state["w"] = ftrl_weight(lr, state["lin"], state["acc"])
    project(constraint, state)


# The field of a sum or average of squared gradients (never negative).
SQUARES = {"adagrad": "acc", "adam": "v", "ftrl": "acc"}


def _bfloat16(x, toward_zero=False):
    """float32 values rounded to bfloat16 (to nearest, ties to even, or
    toward zero), clamped to its largest finite value; NaN stays NaN."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    c = np.uint64
    sign, mag = u & c(0x80000000), u & c(0x7FFFFFFF)
    nan, inf = mag > c(0x7F800000), mag == c(0x7F800000)
    if not toward_zero:
        mag = mag + c(0x7FFF) + ((mag >> c(16)) & c(1))
    mag = np.where(mag > c(0x7F7FFFFF), np.where(inf, c(0x7F800000), c(0x7F7F0000)), mag)
    out = np.where(nan, u | c(0x00400000), sign | mag).astype(np.uint64) & c(0xFFFF0000)
    return out.astype(np.uint32).view(np.float32)


def _float16(x):
    """float32 values rounded to float16 (to nearest, ties to even),
    clamped to +-65,504; NaN stays NaN."""
    x = np.asarray(x, np.float32)
    clamped = np.where(np.isfinite(x), np.clip(x, -65504, 65504), x)
    return clamped.astype(np.float16).astype(np.float32)


def wire_rounded(wire, optimizer, state, delta=False):
    """A state (or, with `delta`, a push's delta) as a 16-bit wire carries
    it: float16 takes the row's values, bfloat16 everything else; a delta's
    sum of squared gradients rounds toward zero, so its residual is never
    negative."""
    if wire == "float32":
        return copy_state(state)
    out = {}
    for f, v in state.items():
        if f == "w" and wire == "float16":
            out[f] = _float16(v)
        else:
            out[f] = _bfloat16(v, toward_zero=delta and f == SQUARES.get(optimizer))
    return out


def same_bits(a, b):
    """Whether two states are equal bit for bit (a residual is their difference)."""
    return all(np.array_equal(np.asarray(a[f], np.float32).view(np.uint32),
                              np.asarray(b[f], np.float32).view(np.uint32)) for f in a)


class StaleRound(Exception):
    """A shard refused a round: an older generation's, or out of order.
    Nothing changed."""


class RefTable:
    """The shards' rows, their records of the copies refresh caches hold,
    and their logs of each cache's rounds (sender_log.h): a shard merges a
    cache's round q once, answers q again as a repeat (it merges nothing,
    sends again the refreshes the lost answer carried and forgets the
    misses it served), and refuses an older generation's or one out of
    order. An update that would make a row non-finite is refused alone in
    a round; the row keeps its state and clock."""

    def __init__(self, dim, optimizer="sgd", seed=0, vocabulary_size=None, constraint=None,
                 shards=1):
        self.dim, self.optimizer, self.seed = dim, optimizer, seed
        self.constraint = constraint
        self.vocabulary_size = vocabulary_size
        self.shards = shards
        self.fields = FIELDS[optimizer]
        self.rows = {}  # key -> dict(w, acc, m, v, clock, step)
        self.updates_applied = 0
        self.updates_refused = 0
        self.repeats = 0
        # sync="refresh": (worker, shard) -> its record of copies:
        # generation, read bound, key -> server clock of the copy, and the
        # queue of copies that other writers moved past the bound.
        self.records = {}
        # (worker, shard) -> the log of its rounds: generation, the last
        # round merged, and the keys its answer refreshed, served and refused.
        self.log = {}

    def shard(self, key):
        return shard_of(key, self.shards)

    def row(self, key):
        if key not in self.rows:
            self.rows[key] = dict(initial_state(key, self.dim, self.seed), clock=0, step=0)
        return self.rows[key]

    def state(self, key):
        r = self.row(key)
        return {f: r[f].copy() for f in self.fields}

    def record_copies(self):
        return sum(len(rec["clocks"]) for rec in self.records.values())

    def pull(self, keys, clocks, read_staleness):
        """(position, state, clock) of each missing or stale key."""
        out = []
        for i, (k, c) in enumerate(zip(keys, clocks)):
            r = self.row(k)
            if c < 0 or (read_staleness >= 0 and r["clock"] - c > read_staleness):
                out.append((i, self.state(k), r["clock"]))
        return out

    def _admit(self, sender, shard):
        """The log entry of a round and whether it repeats the last one."""
        worker, generation, sequence = sender
        entry = self.log.setdefault((worker, shard), dict(generation=generation, sequence=None,
                                                          refreshed=[], served=[], refused=[]))
        if generation < entry["generation"]:
            raise StaleRound(f"generation {generation} older than {entry['generation']}")
        if generation > entry["generation"]:
            entry.update(generation=generation, sequence=None, refreshed=[], served=[],
                         refused=[])
        repeat = sequence == entry["sequence"]
        if not repeat and entry["sequence"] is not None and sequence != entry["sequence"] + 1:
            raise StaleRound(f"round {sequence} after {entry['sequence']}")
        self.repeats += repeat
        return entry, repeat

    def _take_back_lost(self, sender, shard, entry):
        """A repeat: the refreshes its lost answer carried are queued again,
        and the copies of the misses it served, which the cache never took,
        are forgotten."""
        rec = self.records.get((sender[0], shard))
        if rec is None or rec["generation"] != sender[1]:
            return
        for k in entry["refreshed"]:
            if k in rec["clocks"] and k not in rec["queue"]:
                rec["queue"].append(k)
        for k in entry["served"]:
            rec["clocks"].pop(k, None)
            rec["queue"] = [q for q in rec["queue"] if q != k]

    def _merge_part(self, sender, repeat, pushes, lr):
        """A round's pushes to one shard, (key, delta, count, base clock,
        answered): {key: (state, clock, lean)} of those answered, and the
        keys refused. A repeat merges nothing and answers the rows whole."""
        answers, refused = {}, []
        for k, delta, count, base_clock, answered in pushes:
            if repeat:
                if answered:
                    self._moved(k, sender)
                    answers[k] = (self.state(k), self.row(k)["clock"], False)
                continue
            state, clock, lean, taken = self.push_delta(k, delta, count, base_clock, lr, sender)
            if not taken:
                refused.append(k)
            if answered:
                answers[k] = (state, clock, lean)
        return answers, refused

    def exchange(self, sender, pushes, misses, evicted, read_staleness, lr, reach=None):
        """A refresh cache's round to every shard in `reach` (all: None):
        its pushes merged, then its misses served and its queued copies
        refreshed, as sync() does. Returns the pushes' answers, the misses'
        (state or None, clock) by key, the refreshes and the keys refused.
        Raises StaleRound at the first shard that refuses it."""
        out = dict(pushed={}, fetched={}, refreshes=[], refused=[])
        for s in range(self.shards):
            if reach is not None and s not in reach:
                continue
            entry, repeat = self._admit(sender, s)
            if repeat:
                self._take_back_lost(sender, s, entry)
            answers, refused = self._merge_part(
                sender, repeat, [p for p in pushes if self.shard(p[0]) == s], lr)
            part = [k for k in misses if self.shard(k) == s]
            fetched, refreshes = self.sync(sender, s, part,
                                           [k for k in evicted if self.shard(k) == s],
                                           read_staleness)
            if repeat:
                refused = entry["refused"]
            entry.update(sequence=sender[2], refreshed=[k for k, *_ in refreshes], served=part,
                         refused=refused)
            out["pushed"].update(answers)
            out["fetched"].update(zip(part, fetched))
            out["refreshes"] += refreshes
            out["refused"] += refused
        return out

    def push_round(self, sender, pushes, lr):
        """A cache's round of pushes alone (a check cache's, or a flush):
        as exchange() with no misses; a repeat also takes back what its
        lost answer carried."""
        out = dict(pushed={}, refused=[])
        for s in range(self.shards):
            part = [p for p in pushes if self.shard(p[0]) == s]
            entry, repeat = self._admit(sender, s)
            answers, refused = self._merge_part(sender, repeat, part, lr)
            if repeat:
                self._take_back_lost(sender, s, entry)
                refused = entry["refused"]
            entry.update(sequence=sender[2], refreshed=[], served=[], refused=refused)
            out["pushed"].update(answers)
            out["refused"] += refused
        return out

    def sync(self, sender, shard, misses, evicted, read_staleness):
        """The sync by refresh of one shard: ([(state, clock)] of the
        misses, [(key, state, clock)] of the sender's queued copies, oldest
        first). A row made for a miss comes as (None, clock): the worker
        makes it (a first touch moves no row)."""
        worker, generation = sender[:2]
        rec = self.records.get((worker, shard))
        if rec is None or rec["generation"] != generation:
            rec = self.records[(worker, shard)] = dict(generation=generation, clocks={},
                                                       queue=[])
        rec["bound"] = read_staleness
        for k in evicted:
            rec["clocks"].pop(k, None)
        answers = []
        for k in misses:
            made = k not in self.rows
            answers.append((None if made else self.state(k), self.row(k)["clock"]))
            rec["clocks"][k] = self.row(k)["clock"]
            rec["queue"] = [q for q in rec["queue"] if q != k]
        refreshes = []
        for k in dict.fromkeys(rec["queue"]):
            if k in rec["clocks"]:
                refreshes.append((k, self.state(k), self.row(k)["clock"]))
                rec["clocks"][k] = self.row(k)["clock"]
        rec["queue"] = []
        return answers, refreshes

    def _moved(self, key, sender):
        """After a push by `sender` (worker, generation, ...) reached key's
        row: the sender's copy is the row now; others' copies may go stale."""
        clock = self.row(key)["clock"]
        for (worker, shard), rec in self.records.items():
            if shard != self.shard(key):
                continue
            if sender is not None and (worker, rec["generation"]) == tuple(sender[:2]):
                if key in rec["clocks"]:
                    rec["clocks"][key] = clock
                    rec["queue"] = [q for q in rec["queue"] if q != key]
            elif (rec["bound"] >= 0 and key in rec["clocks"] and key not in rec["queue"]
                  and clock - rec["clocks"][key] > rec["bound"]):
                rec["queue"].append(key)

    def push(self, key, grad, count, lr):
        """The no-cache write: `count` steps with the mean gradient."""
        r = self.row(key)
        g = grad.astype(np.float32)
        if (self.optimizer == "sgd" and self.constraint is None) or count == 1:
            r["step"] = optimizer_step(self.optimizer, r, g, lr, r["step"],
                                       constraint=self.constraint)
        else:  # count steps with the mean gradient
            mean = g * np.float32(1.0 / np.float32(count))
            for _ in range(count):
                r["step"] = optimizer_step(self.optimizer, r, mean, lr, r["step"],
                                           constraint=self.constraint)
        r["clock"] += count
        self.updates_applied += count
        self._moved(key, None)
        return r["w"].copy(), r["clock"]

    def push_delta(self, key, delta, count, base_clock, lr, sender=None):
        """A cache's write: every field takes its change (FTRL's row is
        recomputed from its merged slots), Adam's row its share. Returns
        the row's state, its clock, whether the push is lean (no other
        writer reached the row since base_clock, not FTRL's, so the cache
        computes this merge itself) and whether it was taken: one that
        would make the row non-finite is refused, the row kept as it was."""
        lean = key in self.rows and self.optimizer != "ftrl"
        r = self.row(key)
        lean = lean and r["clock"] == base_clock
        merged = {f: r[f].copy() for f in self.fields}
        with np.errstate(over="ignore", invalid="ignore"):
            merge(self.optimizer, merged, delta, count, lr,
                  concurrent_share(self.optimizer, count, r["clock"] - base_clock),
                  self.constraint)
        taken = all(np.isfinite(v).all() for v in merged.values())
        if taken:
            r.update(merged)
            r["step"] += count
            r["clock"] += count
            self.updates_applied += count
        else:
            self.updates_refused += count
        self._moved(key, sender)
        return self.state(key), r["clock"], lean and taken, taken


class Refused(Exception):
    """A step or flush failed naming the ids whose update was refused: by
    the shards, the round having ended (`local` False), or by the cache
    before anything changed (`local`)."""

    def __init__(self, keys, local=False):
        super().__init__(f"refused {sorted(keys)}")
        self.keys, self.local = list(keys), local


class RefCache:
    """Entries hold a state (row and slots), c_s, c_c and the pending delta of
    every field. Local steps follow the table's optimizer, with Adam's step
    count taken from the local clock. The victim is the attached entry with
    the lowest (bucket, attach order); the rows a step read are held (the
    last resort) while the same step looks up again, and a held row evicted
    passes through to the step's update.

    Pushes go in numbered rounds, one at a time: a round whose answer was
    lost (lose_answer) is sent again as it was by the next exchange or push,
    and the shards merge it once.

    On a 16-bit `wire` (sync="refresh") the exchange's answers come rounded,
    and a push's delta is rounded as its round starts: the entry's base
    becomes the shard's merge of the rounded delta and its state stays, so
    the rounding's residual (state beyond base) joins the row's next push;
    an evicted row's and a flush's go in float32, a residual alone with a
    count of 0."""

    _workers = itertools.count(1)

    def __init__(self, table, capacity, policy, read_staleness, write_staleness, pin_threshold,
                 sync="check", wire="float32"):
        self.table, self.capacity, self.policy = table, capacity, policy
        self.wire = wire
        self.s_r, self.s_w, self.pin = read_staleness, write_staleness, pin_threshold
        self.sync = sync
        self.worker, self.generation, self.lr = next(self._workers), -1, 0.0
        # [ids, taken, number] of the batches the lookahead staged, oldest first
        self.staged, self.numbers = [], 0
        self.clear()
        self.counters = dict(lookups=0, unique_keys=0, hits=0, misses=0, stale_refreshes=0,
                             evictions=0, dirty_evictions=0, passed_through=0, rows_pulled=0,
                             rows_pushed=0, rows_pushed_lean=0, updates_pushed=0, prefetched=0,
                             prefetch_hits=0, rows_rebuilt=0, rounds_resent=0, rows_refused=0)

    def _bucket(self, e):
        """Victims come from the lowest bucket: touches (none under LRU),
        then the rows a staged batch reads, the furthest read first, then
        (inf) the held and pinned rows."""
        if e.get("held") or (self.policy == "lfu_opt" and e["touches"] >= self.pin):
            return math.inf
        number = self._next_read(e["key"])
        if number is not None:
            return 2**64 - 3 - number  # above any touch count
        return 0 if self.policy == "lru" else e["touches"]

    def _attach(self, e, touches):
        e["touches"], e["attached"], e["seq"], e["held"] = touches, True, self.seq, False
        self.seq += 1

    def clear(self):
        """As after a restore or restart: nothing cached, pending or in
        flight, a new generation."""
        self.entries, self.outbox, self.unreported, self.passing = {}, [], [], {}
        self.due, self.batch, self.fetched_ahead = [], [], set()
        self.seq, self.sequence, self.ledger, self.unmerged = 0, 0, None, []
        self.lost_round = None  # (sender, rows) of the last round whose answer was lost
        self.step_open, self.step_read, self.step_held = False, [], []
        self.unreported = []  # sync="refresh": evictions not yet reported
        self.outbox = []  # (key, delta, count, base clock)
        self.generation += 1

    def _sender(self):
        return (self.worker, self.generation, self.sequence)

    def _pending(self, e):
        return take_delta(self.table.optimizer, e["state"], e["base"], e["cc"] - e["cs"])

    def _has_pending(self, e):
        """Pending updates, or a 16-bit wire's residual."""
        return e["cc"] > e["cs"] or (self.wire != "float32"
                                     and not same_bits(e["state"], e["base"]))

    def _rebase(self, e, fresh, clock, delta=None):
        """The entry takes a fresh state as its base, its pending delta
        (or `delta`, of its pending updates) merged back (the share the
        merge would keep, for Adam's row)."""
        pending = e["cc"] - e["cs"]
        state = copy_state(fresh)
        merging = delta is not None or self._has_pending(e)
        if merging:
            delta = self._pending(e) if delta is None else copy_state(delta)
            delta["w"] = delta["w"] * concurrent_share(self.table.optimizer, pending,
                                                       clock - e["cs"])
            with np.errstate(over="ignore", invalid="ignore"):
                merge(self.table.optimizer, state, delta, pending, self.lr,
                      constraint=self.table.constraint)
        e["state"], e["base"] = state, copy_state(fresh)
        e["cs"], e["cc"] = clock, clock + pending
        if merging:
            self._keep_finite(e, fresh)

    def _keep_finite(self, e, fresh):
        """A copy whose pending updates would make it non-finite drops them
        (the shards would refuse them): it takes the fresh row, and the op
        names the key once."""
        if not all(np.isfinite(v).all() for v in e["state"].values()):
            e["state"], e["cc"] = copy_state(fresh), e["cs"]
            self.unmerged.append(e["key"])

    def _merge_unsent(self, k, state, clock, rows):
        """This worker's outbox rows of k merged into a state read at
        `clock`, as its shard will merge them; returns the updates merged."""
        merged = 0
        for key, delta, count, base_clock in rows:
            if key == k:
                merge(self.table.optimizer, state, delta, count, self.lr,
                      concurrent_share(self.table.optimizer, count, max(clock - base_clock, 0)),
                      self.table.constraint)
                merged += count
        return merged

    def _reclaim(self, e, fresh, clock, unsent, taken):
        """A fetched row takes back as pending updates its key's outbox rows
        (of `unsent`, the outbox as the fill began), which the shard's row
        lacks: the first as its pending delta, the rest merged in order."""
        rows = [p for p in unsent if p[0] == e["key"] and id(p) not in taken]
        taken.update(id(p) for p in rows)
        if not rows:
            return
        _, delta, count, base_clock = rows[0]
        e["cs"], e["cc"] = base_clock, base_clock + count
        self._rebase(e, fresh, clock, delta)
        with np.errstate(over="ignore", invalid="ignore"):
            e["cc"] += self._merge_unsent(e["key"], e["state"], clock, rows[1:])
        if self._has_pending(e):
            self._keep_finite(e, fresh)

    def _refresh(self, e, fresh, clock):
        self._rebase(e, fresh, clock)
        self.counters["stale_refreshes"] += 1

    def _check_bound(self, unique):
        """No read uses a copy staler than the bound allows, at the moment
        of the exchange: by refresh, other writers' updates since the copy
        (c_g - c_s); by check, HET's c_g - c_c."""
        if self.s_r < 0:
            return
        for k in unique:
            e = self.entries[k]
            behind = self.table.row(k)["clock"] - e["cs" if self.sync == "refresh" else "cc"]
            assert behind <= self.s_r, (k, behind, self.s_r)

    def _start_round(self, build, always=True):
        """A new round of the rows `build()` gives (key, delta, count, base
        clock, answered) unless one is in flight: then that one goes again.
        Returns whether a round is to be sent: a new one with nothing in it
        is not, unless `always` (an exchange, whose misses make it one)."""
        if self.ledger is not None:
            self.counters["rounds_resent"] += 1
            return True
        rows = build()
        if not rows and not always:
            return False
        self.sequence += 1
        self.ledger = rows
        return True

    def _end_round(self, pushed, refused=()):
        """The round's answer: each answered row's entry takes the shard's
        row, updates made since merged back; a lean one already holds it.
        On a 16-bit wire a `refused` row's entry keeps none: they hold the
        rounding of the refused push, which goes with it."""
        for k, delta, count, base_clock, answered in self.ledger:
            self.counters["rows_pushed"] += 1
            self.counters["updates_pushed"] += count
            e = self.entries.get(k)
            if not answered or e is None:
                continue
            state, clock, lean = pushed[k]
            if not lean:
                self._rebase(e, state, clock)
                if self.wire != "float32" and k in refused and self._has_pending(e):
                    e["state"], e["cc"] = copy_state(state), e["cs"]
                    self.unmerged.append(k)
                continue
            self.counters["rows_pushed_lean"] += 1
            if e["cs"] == clock and e["cc"] == clock and self.wire == "float32":
                # The proof of the rule: the entry computed the shard's merge.
                for f in self.table.fields:
                    assert np.array_equal(e["state"][f], state[f]), (k, f, e["state"][f], state[f])
            if e["cs"] != base_clock or e["cs"] >= clock:
                continue
            # Fetched again at the round's base before the shard merged it:
            # the merge, made from its base.
            merged = copy_state(e["base"])
            merge(self.table.optimizer, merged, delta, count, self.lr,
                  constraint=self.table.constraint)
            self._rebase(e, merged, clock)
        self.ledger = None

    def _refused(self, keys):
        """An op's end: the keys refused by the shards or dropped by a
        refresh (unmerged), named once."""
        keys, self.unmerged = sorted(set(keys) | set(self.unmerged)), []
        if keys:
            self.counters["rows_refused"] += len(keys)
            raise Refused(keys)

    def _take_due(self):
        rows, self.due = self._round_rows(self.due), []
        return rows

    def _round_rows(self, due, misses=None, take_all=False):
        """A round's rows: the outbox's first (those of `misses` only, if
        given), each key once, unanswered; then the pending entries of
        `due` (every entry: take_all) not queued already, each taken."""
        rows, queued, left = [], set(), []
        for p in self.outbox:
            if p[0] in queued or (misses is not None and p[0] not in misses):
                left.append(p)
                continue
            queued.add(p[0])
            rows.append((*p, False))
        self.outbox = left
        keys = list(self.entries) if take_all else due
        for k in keys:
            e = self.entries.get(k)
            if e is None or not self._has_pending(e) or k in queued:
                continue
            queued.add(k)
            # A flush (take_all) sends float32: nothing follows to carry a residual.
            rows.append((*self._take(e, rounded=not take_all), True))
        return rows

    def _exchange(self, keys, lookahead=False, reach=None, lost=False):
        """One exchange (a round, pushes or none): the shards merge its
        pushes, then serve its misses and refresh the copies past the bound.
        Returns the misses' (state, clock) by key and the keys refused; lost:
        the shards in `reach` take the round, and its answer never comes."""
        misses = [k for k in keys if k not in self.entries]
        if lookahead:  # the step's prefetch carries the updates
            self._start_round(lambda: self._round_rows([], misses=set(misses)))
            evicted = [k for k in self.unreported if k in set(misses)]
        else:
            self._start_round(self._take_due)
            evicted = list(self.unreported)
        answer = self.table.exchange(self._sender(), self.ledger, misses, evicted, self.s_r,
                                     self.lr, reach)
        if lost:
            return None
        answer = self._as_sent(answer)
        reported = set(evicted)
        self.unreported = [k for k in self.unreported if k not in reported]
        self._end_round(answer["pushed"], answer["refused"])
        for k, state, clock in answer["refreshes"]:
            # A copy evicted since the shard queued it is dropped.
            if k in self.entries:
                self._refresh(self.entries[k], state, clock)
        self.counters["rows_pulled"] += len(answer["fetched"]) + len(answer["refreshes"])
        made = {}
        for k in misses:
            state, clock = answer["fetched"][k]
            if state is None:  # the shard made it: so does the cache
                state = {f: v for f, v in initial_state(k, self.table.dim, self.table.seed).items()
                         if f in self.table.fields}
                self.counters["rows_rebuilt"] += 1
            made[k] = (state, clock)
        return made, answer["refused"]

    def _as_sent(self, answer):
        """An exchange's answer as its wire carried it: every state rounded."""
        if self.wire == "float32":
            return answer
        rounded = lambda state: wire_rounded(self.wire, self.table.optimizer, state)  # noqa: E731
        return dict(answer, pushed={k: (rounded(s), c, lean)
                                    for k, (s, c, lean) in answer["pushed"].items()},
                    refreshes=[(k, rounded(s), c) for k, s, c in answer["refreshes"]],
                    fetched={k: (None if s is None else rounded(s), c)
                             for k, (s, c) in answer["fetched"].items()})

    def lose_answer(self, ids, reach=None, lookahead=False):
        """An exchange for `ids` whose answer is lost: the shards in
        `reach` (every shard: None) merge its round and serve it. Returns
        what a late copy of it would send again."""
        unique = list(dict.fromkeys(ids))
        self.counters["lookups"] += len(ids)
        self.counters["unique_keys"] += len(unique)
        self._exchange(unique, lookahead, reach, lost=True)
        misses = [k for k in unique if k not in self.entries]
        return (self._sender(), list(self.ledger), misses, list(self.unreported))

    def lookup(self, ids, training, lookahead=False):
        """lookahead: the step's prefetch carries the updates, so the
        exchange carries only the misses' outbox rows and eviction reports.
        A round the shards refused in part fails once its rows are read
        (Refused), as the op does."""
        unique = list(dict.fromkeys(ids))
        self.counters["lookups"] += len(ids)
        self.counters["unique_keys"] += len(unique)
        if training and self.sync == "refresh":
            fetched, refused = self._exchange(unique, lookahead)
            answer = {unique.index(k): a for k, a in fetched.items()}
            self.batch = unique
            rows = self._fill(unique, answer)
            self._refused(refused)
            return unique, rows
        clocks = [self.entries[k]["cc"] if k in self.entries else -1 for k in unique]
        # Evaluation reads at bound 0: a copy behind the shard by any update.
        bound = self.s_r if training else 0
        answer = {i: (state, c) for i, state, c in self.table.pull(unique, clocks, bound)}
        self.counters["rows_pulled"] += len(answer)
        out = []
        if not training:
            for i, k in enumerate(unique):
                e = self.entries.get(k)
                if i not in answer:
                    seen, clock = dict(w=e["state"]["w"].copy()), e["cs"]
                    self.counters["hits"] += 1
                elif e is None:
                    seen, clock = dict(w=answer[i][0]["w"].copy()), answer[i][1]
                    self.counters["misses"] += 1
                else:
                    clock = answer[i][1]
                    share = concurrent_share(self.table.optimizer, e["cc"] - e["cs"],
                                             clock - e["cs"])
                    seen = dict(w=answer[i][0]["w"] + share * self._pending(e)["w"])
                    project(self.table.constraint, seen)  # as the merge would
                    self.counters["stale_refreshes"] += 1
                # Every read sees this worker's writes: the outbox's rows of
                # the key, which no shard has merged, are merged in as the
                # shard will merge them.
                for key, delta, count, base_clock in self.outbox:
                    if key == k:
                        share = concurrent_share(self.table.optimizer, count,
                                                 max(clock - base_clock, 0))
                        seen["w"] = seen["w"] + share * delta["w"]
                        project(self.table.constraint, seen)
                out.append(seen["w"])
            return unique, out
        rows = self._fill(unique, answer)
        self._refused([])
        return unique, rows

    def _hold_step(self):
        """A lookup before the step's update: the rows the step read so far
        become the last resort until the update."""
        for e in self.step_read:
            if (self.entries.get(e["key"]) is not e or not e["attached"]
                    or self._bucket(e) == math.inf):
                continue
            self._attach(e, e["touches"])
            e["held"] = True
            self.step_held.append(e)
        self.step_read = []

    def _release_step(self):
        for e in self.step_held:
            if self.entries.get(e["key"]) is e and self._bucket(e) == math.inf:
                self._attach(e, e["touches"])
        self.step_open, self.step_read, self.step_held = False, [], []

    def _fill(self, unique, answer):
        """A training lookup's rows: answer[i] = (state, clock) refreshes
        or inserts unique key i; the others are hits."""
        again = self.step_open
        if again:
            self._hold_step()
        if not again or len(self.passing) > 2 * max(self.capacity, len(unique)):
            self.passing = {}  # rows with no room beside the batch's: key -> (state, clock)
        for k in unique:
            if k in self.entries:
                self.entries[k]["attached"] = False
        inserted = set()
        passed = set()
        out = {}
        unsent, taken = list(self.outbox), set()
        for i, k in enumerate(unique):
            if i not in answer:
                self.counters["prefetch_hits" if k in self.fetched_ahead else "hits"] += 1
                continue
            fresh, clock = answer[i]
            if self.ledger:
                # Read before its shard merged the round in flight (its answer
                # lost): the round's rows of k, as the shard will have them. A
                # row whose clock counts them is taken to have them.
                fresh = copy_state(fresh)
                clock += self._merge_unsent(k, fresh, clock, [
                    p[:4] for p in self.ledger if clock < p[3] + p[2]])
            e = self.entries.get(k)
            if e is not None:
                self._refresh(e, fresh, clock)
                continue
            attached = [e for e in self.entries.values() if e["attached"]]
            if len(self.entries) >= self.capacity and not attached:
                # It reads the shard's row with this worker's unsent rows.
                fresh = copy_state(fresh)
                clock += self._merge_unsent(k, fresh, clock, self.outbox)
                self.passing.setdefault(k, (fresh, clock))
                passed.add(k)
                if self.sync == "refresh":
                    self.unreported.append(k)
                out[k] = fresh["w"].copy()
                self.counters["misses"] += 1
                self.counters["passed_through"] += 1
                continue
            if len(self.entries) >= self.capacity:
                self._evict(attached)
            self._reclaim(self._insert(k, fresh, clock), fresh, clock, unsent, taken)
            inserted.add(k)
            self.counters["misses"] += 1
        self.outbox = [p for p in self.outbox if id(p) not in taken]
        self.fetched_ahead = set()
        self._check_bound([k for k in unique if k not in passed])
        for k in unique:
            if k in passed:
                continue
            e = self.entries[k]
            self._attach(e, 1 if k in inserted else e["touches"] + 1)
            out[k] = e["state"]["w"].copy()
            self.step_read.append(e)
        self.step_open = True
        return [out[k] for k in unique]

    def _evict(self, attached):
        victim = min(attached, key=lambda e: (self._bucket(e), e["seq"]))
        k = victim["key"]
        # The lookahead's rule, from the staged batches themselves: a row
        # read ahead goes only if every other is read ahead or kept, and
        # none of those is read further ahead.
        read = self._next_read(k)
        if read is not None and self._bucket(victim) != math.inf:
            others = [self._next_read(e["key"]) for e in attached
                      if self._bucket(e) != math.inf]
            assert None not in others and max(others) == read, (k, read, others)
        if self._has_pending(victim):
            self.outbox.append((k, self._pending(victim), victim["cc"] - victim["cs"],
                                victim["cs"]))
            self.counters["dirty_evictions"] += 1
        if self.step_open and self._bucket(victim) == math.inf and k not in self.passing:
            # Most likely a row the open step read: the step's update still
            # takes its step on the copy the step read.
            self.passing[k] = (copy_state(victim["state"]), victim["cc"])
        del self.entries[k]
        if self.sync == "refresh":
            self.unreported.append(k)
        self.counters["evictions"] += 1

    def _insert(self, k, fresh, clock):
        self.entries[k] = e = dict(key=k, state=fresh, base=copy_state(fresh), cs=clock,
                                   cc=clock, touches=0, attached=False, held=False)
        return e

    def _next_read(self, key):
        """The number of the first staged batch not taken yet that reads key."""
        return next((number for ids, taken, number in self.staged
                     if not taken and key in ids), None)

    def _passing(self, batch):
        """The keys whose next read is `batch`, which moves past it."""
        return [k for k in dict.fromkeys(batch[0]) if self._next_read(k) == batch[2]]

    def _forget(self):
        moved = self._passing(self.staged[0])
        self.staged = self.staged[1:]
        return moved

    def _refile(self, keys):
        """Attached rows whose next read changed go to the back of their
        new bucket, in the order the keys moved."""
        for k in keys:
            e = self.entries.get(k)
            if e is not None and e["attached"] and self._bucket(e) != math.inf:
                self._attach(e, e["touches"])

    def stage(self, ids):
        moved = self._forget() if len(self.staged) == 80 else []  # StagedBatches::kMaxStaged
        moved += [k for k in dict.fromkeys(ids) if self._next_read(k) is None]
        self.staged.append([list(ids), False, self.numbers])
        self.numbers += 1
        self._refile(moved)

    def _next_staged(self, current):
        """The batch staged after `current`: found by content, after the
        batch the last prefetch took; earlier ones are dropped, and the
        rows read next by them or by it move on to their next reads."""
        start = 1 if self.staged and self.staged[0][1] else 0
        for i in range(start, len(self.staged)):
            if self.staged[i][0] == list(current):
                moved = []
                for _ in range(i):
                    moved += self._forget()
                moved += self._passing(self.staged[0])
                self.staged[0][1] = True
                self._refile(moved)
                return self.staged[1][0] if len(self.staged) > 1 else []
        return []

    def take_staged(self, current):
        """Herald's window op (WorkerCache.staged): takes `current` as a
        prefetch does; the rows it and the batches forgotten read move on."""
        self._next_staged(current)

    def prefetch(self, current_ids):
        """The lookahead's exchange after a training lookup of current_ids
        (sync="refresh"): the pushes due, every eviction, and the keys not
        cached of the batch staged next (none of the rows passing through
        this step). Their rows go in without evicting this batch's rows or
        the next batch's cached ones; a row with no room is dropped and
        reported evicted."""
        next_ids = self._next_staged(current_ids)
        upcoming = [k for k in dict.fromkeys(next_ids) if k not in self.passing]
        fetched, refused = self._exchange(upcoming)
        held = []
        for k in self.batch + upcoming:
            e = self.entries.get(k)
            if e is not None and e["attached"]:
                e["attached"] = False
                held.append(e)
        inserted = []
        unsent, taken = list(self.outbox), set()
        for k, (fresh, clock) in fetched.items():
            attached = [e for e in self.entries.values() if e["attached"]]
            if len(self.entries) >= self.capacity and not attached:
                self.unreported.append(k)
                continue
            if len(self.entries) >= self.capacity:
                self._evict(attached)
            inserted.append(self._insert(k, fresh, clock))
            self._reclaim(inserted[-1], fresh, clock, unsent, taken)
        self.outbox = [p for p in self.outbox if id(p) not in taken]
        for e in held:
            self._attach(e, e["touches"])
        for e in inserted:  # not touched until the lookup that uses them
            self._attach(e, 0)
        self.counters["prefetched"] += len(inserted)
        self.fetched_ahead |= {e["key"] for e in inserted}
        self._refused(refused)

    def apply_gradients(self, keys, grads, lr, lost=False):
        """The step's update: a cached key's local step, a key passing
        through one step pushed from the copy it read, any other (a later
        lookup of the step evicted it) a gradient pushed as without a
        cache. A step that would make a state or its pending delta
        non-finite is refused whole (Refused, local) before anything
        changes. lost (sync="check"): the shards merge the step's round, and
        its answer is lost."""
        optimizer, constraint = self.table.optimizer, self.table.constraint
        stepped = {}
        for k, g in zip(keys, grads):
            e = self.entries.get(k)
            if e is not None:
                state, base, clock, count = copy_state(e["state"]), e["base"], e["cc"], \
                    e["cc"] - e["cs"] + 1
            elif k in self.passing:
                base, clock = self.passing[k]
                state, count = copy_state(base), 1
            else:
                continue
            with np.errstate(over="ignore", invalid="ignore"):
                optimizer_step(optimizer, state, g.astype(np.float32), lr, clock,
                               constraint=constraint)
                delta = take_delta(optimizer, state, base, count)
            if not all(np.isfinite(v).all() for v in list(state.values()) + list(delta.values())):
                raise Refused([k], local=True)
            stepped[k] = (state, delta)
        self.lr = lr  # FTRL's refreshes recompute rows with it
        for k, g in zip(keys, grads):
            e = self.entries.get(k)
            if e is not None:
                e["state"] = stepped[k][0]
                e["cc"] += 1
                if self.s_w >= 0 and e["cc"] - e["cs"] > self.s_w:
                    self.due.append(k)
            elif k in self.passing:
                self.outbox.append((k, stepped[k][1], 1, self.passing[k][1]))
            else:
                self.table.push(k, g, 1, lr)
        self.passing = {}
        self._release_step()
        # By refresh, what is due goes with the next exchange.
        if self.sync == "check" and self._start_round(self._take_due, always=False):
            self._push_round(lr, lost)

    def _push_round(self, lr, lost=False):
        answer = self.table.push_round(self._sender(), self.ledger, lr)
        if lost:
            self.lost_round = (self._sender(), list(self.ledger))
            return
        self._end_round(answer["pushed"], answer["refused"])
        self._refused(answer["refused"])

    def drop(self, keys):
        """Herald's plan: drops the copies of `keys` (the rows other workers
        read next); pending updates join the outbox. Returns the outbox's
        length (0: the next exchange has nothing to push)."""
        for k in dict.fromkeys(keys):
            e = self.entries.pop(k, None)
            if e is None:
                continue
            if self._has_pending(e):
                self.outbox.append((k, self._pending(e), e["cc"] - e["cs"], e["cs"]))
                self.counters["dirty_evictions"] += 1
            self.unreported.append(k)
            self.counters["evictions"] += 1
        return len(self.outbox)

    def _take(self, e, rounded=False):
        """An entry's push as its round starts: its pending delta, and the
        entry becomes the merge a shard makes of it where no other writer
        reached the row since its base. `rounded` on a 16-bit wire: the
        delta as the wire carries it, and only the base becomes the merge
        (the state stays: the residual is pending)."""
        count, base_clock = e["cc"] - e["cs"], e["cs"]
        delta = self._pending(e)
        sent = wire_rounded(self.wire, self.table.optimizer, delta, delta=True) if rounded \
            else delta
        state = copy_state(e["base"])
        merge(self.table.optimizer, state, sent, count, self.lr,
              constraint=self.table.constraint)
        if same_bits(sent, delta):
            e["state"] = state
        e["base"], e["cs"] = copy_state(state), e["cc"]
        return (e["key"], sent, count, base_clock)

    def flush(self, lr):
        """Rounds until one finds nothing: a round in flight goes again
        first, and each carries a key once."""
        self.due = []  # all of it pending, so in the flush
        while self._start_round(lambda: self._round_rows([], take_all=True), always=False):
            self._push_round(lr)
