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
    when `others` updates by other writers came since the copy was taken."""
    if optimizer != "adam" or others <= 0:
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


class RefTable:
    def __init__(self, dim, optimizer="sgd", seed=0, vocabulary_size=None, constraint=None):
        self.dim, self.optimizer, self.seed = dim, optimizer, seed
        self.constraint = constraint
        self.vocabulary_size = vocabulary_size
        self.fields = FIELDS[optimizer]
        self.rows = {}  # key -> dict(w, acc, m, v, clock, step)
        self.updates_applied = 0
        # sync="refresh": worker -> its record of copies: generation, read
        # bound, key -> server clock of the copy, and the queue of copies
        # that other writers moved past the bound.
        self.records = {}

    def row(self, key):
        if key not in self.rows:
            self.rows[key] = dict(initial_state(key, self.dim, self.seed), clock=0, step=0)
        return self.rows[key]

    def state(self, key):
        r = self.row(key)
        return {f: r[f].copy() for f in self.fields}

    def pull(self, keys, clocks, read_staleness):
        """(position, state, clock) of each missing or stale key."""
        out = []
        for i, (k, c) in enumerate(zip(keys, clocks)):
            r = self.row(k)
            if c < 0 or (read_staleness >= 0 and r["clock"] - c > read_staleness):
                out.append((i, self.state(k), r["clock"]))
        return out

    def sync(self, worker, generation, misses, evicted, read_staleness):
        """The sync by refresh: ([(state, clock)] of the misses, [(key,
        state, clock)] of the sender's queued copies, oldest first). A row
        made for a miss comes as (None, clock): the worker makes it (a
        first touch moves no row)."""
        rec = self.records.get(worker)
        if rec is None or rec["generation"] != generation:
            rec = self.records[worker] = dict(generation=generation, clocks={}, queue=[])
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
        """After a push by `sender` (worker, generation) moved key's row:
        the sender's copy is the row now; others' copies may go stale."""
        clock = self.row(key)["clock"]
        for worker, rec in self.records.items():
            if (worker, rec["generation"]) == sender:
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
        the row's state, its clock and whether the push is lean: no other
        writer reached the row since base_clock (not FTRL's), so the cache
        computes this merge itself."""
        lean = key in self.rows and self.optimizer != "ftrl"
        r = self.row(key)
        lean = lean and r["clock"] == base_clock
        merge(self.optimizer, r, delta, count, lr,
              concurrent_share(self.optimizer, count, r["clock"] - base_clock), self.constraint)
        r["step"] += count
        r["clock"] += count
        self.updates_applied += count
        self._moved(key, sender)
        return self.state(key), r["clock"], lean


class RefCache:
    """Entries hold a state (row and slots), c_s, c_c and the pending delta of
    every field. Local steps follow the table's optimizer, with Adam's step
    count taken from the local clock. The victim is the attached entry with
    the lowest (bucket, attach order)."""

    _workers = itertools.count(1)

    def __init__(self, table, capacity, policy, read_staleness, write_staleness, pin_threshold,
                 sync="check"):
        self.table, self.capacity, self.policy = table, capacity, policy
        self.s_r, self.s_w, self.pin = read_staleness, write_staleness, pin_threshold
        self.sync = sync
        self.worker, self.generation = next(self._workers), 0
        self.unreported = []  # sync="refresh": evictions since the last sync
        self.passing = {}
        self.entries = {}
        self.outbox = []  # (key, delta, count, base clock)
        self.due = []  # sync="refresh": keys made due, pushed with the next exchange
        self.seq = 0
        self.lr = 0.0
        self.batch = []  # the last training lookup's unique keys
        self.staged = []  # [ids, taken] of the batches the lookahead staged
        self.fetched_ahead = set()  # inserted by the last prefetch, until the next lookup
        self.counters = dict(lookups=0, unique_keys=0, hits=0, misses=0, stale_refreshes=0,
                             evictions=0, dirty_evictions=0, passed_through=0, rows_pulled=0,
                             rows_pushed=0, rows_pushed_lean=0, updates_pushed=0, prefetched=0,
                             prefetch_hits=0, rows_rebuilt=0)

    def _bucket(self, touches):
        if self.policy == "lru":
            return 0
        if self.policy == "lfu_opt" and touches >= self.pin:
            return math.inf
        return touches

    def _attach(self, e, touches):
        e["touches"], e["attached"], e["seq"] = touches, True, self.seq
        self.seq += 1

    def clear(self):
        """As after a restore: nothing cached or pending, a new generation."""
        self.entries, self.outbox, self.unreported, self.passing = {}, [], [], {}
        self.due, self.batch, self.fetched_ahead = [], [], set()
        self.generation += 1

    def _pending(self, e):
        return take_delta(self.table.optimizer, e["state"], e["base"], e["cc"] - e["cs"])

    def _rebase(self, e, fresh, clock):
        """The entry takes a fresh state as its base, its pending delta
        merged back (the share the merge would keep, for Adam's row)."""
        pending = e["cc"] - e["cs"]
        state = copy_state(fresh)
        if pending:
            delta = self._pending(e)
            delta["w"] = delta["w"] * concurrent_share(self.table.optimizer, pending,
                                                       clock - e["cs"])
            merge(self.table.optimizer, state, delta, pending, self.lr,
                  constraint=self.table.constraint)
        e["state"], e["base"] = state, copy_state(fresh)
        e["cs"], e["cc"] = clock, clock + pending

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

    def _exchange(self, keys, pushes, evicted):
        """One exchange: the pushes are merged first, then the shard
        answers the sync; the refreshes are applied. Returns the misses'
        (state, clock) by key."""
        self._push_and_ack(pushes, self.lr)
        misses = [k for k in keys if k not in self.entries]
        fetched, refreshes = self.table.sync(self.worker, self.generation, misses, evicted,
                                             self.s_r)
        for k, state, clock in refreshes:
            # A lookahead lookup reports only its misses' evictions, so a
            # copy evicted since may be refreshed: it is dropped.
            if k in self.entries:
                self._refresh(self.entries[k], state, clock)
        self.counters["rows_pulled"] += len(fetched) + len(refreshes)
        made = {}
        for k, (state, clock) in zip(misses, fetched):
            if state is None:  # the shard made it: so does the cache
                state = {f: v for f, v in initial_state(k, self.table.dim, self.table.seed).items()
                         if f in self.table.fields}
                self.counters["rows_rebuilt"] += 1
            made[k] = (state, clock)
        return made

    def lookup(self, ids, training, lookahead=False):
        """lookahead: the step's prefetch carries the updates, so the
        exchange carries only the misses' outbox rows and eviction reports."""
        unique = list(dict.fromkeys(ids))
        self.counters["lookups"] += len(ids)
        self.counters["unique_keys"] += len(unique)
        if training and self.sync == "refresh":
            if lookahead:
                wanted = {k for k in unique if k not in self.entries}
                pushes = [p for p in self.outbox if p[0] in wanted]
                evicted = [k for k in self.unreported if k in wanted]
                self.unreported = [k for k in self.unreported if k not in wanted]
            else:
                pushes, self.due = self._exchange_pushes(), []
                evicted, self.unreported = self.unreported, []
            fetched = self._exchange(unique, pushes, evicted)
            answer = {unique.index(k): a for k, a in fetched.items()}
            self.batch = unique
            return unique, self._fill(unique, answer)
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
        return unique, self._fill(unique, answer)

    def _fill(self, unique, answer):
        """A training lookup's rows: answer[i] = (state, clock) refreshes
        or inserts unique key i; the others are hits."""
        for k in unique:
            if k in self.entries:
                self.entries[k]["attached"] = False
        inserted = set()
        self.passing = {}  # rows with no room beside the batch's: key -> (state, clock)
        out = {}
        for i, k in enumerate(unique):
            if i not in answer:
                self.counters["prefetch_hits" if k in self.fetched_ahead else "hits"] += 1
                continue
            fresh, clock = answer[i]
            e = self.entries.get(k)
            if e is not None:
                self._refresh(e, fresh, clock)
                continue
            attached = [e for e in self.entries.values() if e["attached"]]
            if len(self.entries) >= self.capacity and not attached:
                self.passing[k] = (fresh, clock)
                if self.sync == "refresh":
                    self.unreported.append(k)
                out[k] = fresh["w"].copy()
                self.counters["misses"] += 1
                self.counters["passed_through"] += 1
                continue
            if len(self.entries) >= self.capacity:
                self._evict(attached)
            self._insert(k, fresh, clock)
            inserted.add(k)
            self.counters["misses"] += 1
        self.fetched_ahead = set()
        self._check_bound([k for k in unique if k not in self.passing])
        for k in unique:
            if k in self.passing:
                continue
            e = self.entries[k]
            self._attach(e, 1 if k in inserted else e["touches"] + 1)
            out[k] = e["state"]["w"].copy()
        return [out[k] for k in unique]

    def _evict(self, attached):
        victim = min(attached, key=lambda e: (self._bucket(e["touches"]), e["seq"]))
        if victim["cc"] > victim["cs"]:
            self.outbox.append((victim["key"], self._pending(victim), victim["cc"] - victim["cs"],
                                victim["cs"]))
            self.counters["dirty_evictions"] += 1
        del self.entries[victim["key"]]
        if self.sync == "refresh":
            self.unreported.append(victim["key"])
        self.counters["evictions"] += 1

    def _insert(self, k, fresh, clock):
        self.entries[k] = e = dict(key=k, state=fresh, base=copy_state(fresh), cs=clock,
                                   cc=clock, touches=0, attached=False)
        return e

    def stage(self, ids):
        self.staged = self.staged[-63:] + [[list(ids), False]]

    def _next_staged(self, current):
        """The batch staged after `current`: found by content, after the
        batch the last prefetch took; earlier ones are dropped."""
        start = 1 if self.staged and self.staged[0][1] else 0
        for i in range(start, len(self.staged)):
            if self.staged[i][0] == list(current):
                self.staged = self.staged[i:]
                self.staged[0][1] = True
                return self.staged[1][0] if len(self.staged) > 1 else []
        return []

    def prefetch(self, current_ids):
        """The lookahead's exchange after a training lookup of current_ids
        (sync="refresh"): the pushes due, every eviction, and the keys not
        cached of the batch staged next (none of the rows passing through
        this step). Their rows go in without evicting this batch's rows or
        the next batch's cached ones; a row with no room is dropped and
        reported evicted."""
        next_ids = self._next_staged(current_ids)
        upcoming = [k for k in dict.fromkeys(next_ids) if k not in self.passing]
        pushes, self.due = self._exchange_pushes(), []
        evicted, self.unreported = self.unreported, []
        fetched = self._exchange(upcoming, pushes, evicted)
        held = []
        for k in self.batch + upcoming:
            e = self.entries.get(k)
            if e is not None and e["attached"]:
                e["attached"] = False
                held.append(e)
        inserted = []
        for k, (fresh, clock) in fetched.items():
            attached = [e for e in self.entries.values() if e["attached"]]
            if len(self.entries) >= self.capacity and not attached:
                self.unreported.append(k)
                continue
            if len(self.entries) >= self.capacity:
                self._evict(attached)
            inserted.append(self._insert(k, fresh, clock))
        for e in held:
            self._attach(e, e["touches"])
        for e in inserted:  # not touched until the lookup that uses them
            self._attach(e, 0)
        self.counters["prefetched"] += len(inserted)
        self.fetched_ahead |= {e["key"] for e in inserted}

    def apply_gradients(self, keys, grads, lr):
        self.lr = lr  # FTRL's refreshes recompute rows with it
        for k, g in zip(keys, grads):  # rows passed through: one step, pushed now
            if k in self.passing:
                base, clock = self.passing[k]
                state = copy_state(base)
                optimizer_step(self.table.optimizer, state, g.astype(np.float32), lr, clock,
                               constraint=self.table.constraint)
                self.outbox.append((k, take_delta(self.table.optimizer, state, base, 1), 1, clock))
        self.passing = {}
        due = []
        for k, g in zip(keys, grads):
            if k not in self.entries:
                continue
            e = self.entries[k]
            optimizer_step(self.table.optimizer, e["state"], g.astype(np.float32), lr, e["cc"],
                           constraint=self.table.constraint)
            e["cc"] += 1
            if self.s_w >= 0 and e["cc"] - e["cs"] > self.s_w:
                due.append(k)
        if self.sync == "refresh":  # they go with the next exchange
            self.due += due
        else:
            self._push_and_ack(list(self.outbox) + [self._take(self.entries[k]) for k in due], lr)

    def drop(self, keys):
        """Herald's plan: drops the copies of `keys` (the rows other workers
        read next); pending updates join the outbox. Returns the outbox's
        length (0: the next exchange has nothing to push)."""
        for k in dict.fromkeys(keys):
            e = self.entries.pop(k, None)
            if e is None:
                continue
            if e["cc"] > e["cs"]:
                self.outbox.append((k, self._pending(e), e["cc"] - e["cs"], e["cs"]))
                self.counters["dirty_evictions"] += 1
            self.unreported.append(k)
            self.counters["evictions"] += 1
        return len(self.outbox)

    def _exchange_pushes(self):
        """What an exchange carries: the outbox, then the entries the last
        update made due that are still cached and pending (and not beside
        an outbox row of the same key)."""
        pushes, queued = list(self.outbox), {k for k, *_ in self.outbox}
        for k in self.due:
            e = self.entries.get(k)
            if e is None or e["cc"] == e["cs"] or k in queued:
                continue
            queued.add(k)
            pushes.append(self._take(e))
        return pushes

    def _take(self, e):
        """An entry's push as its round starts: its pending delta, and the
        entry becomes the merge a shard makes of it where no other writer
        reached the row since its base."""
        count, base_clock = e["cc"] - e["cs"], e["cs"]
        delta = self._pending(e)
        state = copy_state(e["base"])
        merge(self.table.optimizer, state, delta, count, self.lr,
              constraint=self.table.constraint)
        e["state"], e["base"], e["cs"] = state, copy_state(state), e["cc"]
        return (e["key"], delta, count, base_clock)

    def flush(self, lr):
        due = list(self.outbox) + [self._take(e) for e in self.entries.values()
                                   if e["cc"] > e["cs"]]
        self.due = []  # all of it pending, so in the flush
        self._push_and_ack(due, lr)

    def _push_and_ack(self, due, lr):
        outbox_keys = {k for k, _, _, _ in self.outbox}
        for k, delta, count, base_clock in due:
            state, clock, lean = self.table.push_delta(k, delta, count, base_clock, lr,
                                                       sender=(self.worker, self.generation))
            self.counters["rows_pushed"] += 1
            self.counters["updates_pushed"] += count
            if k in outbox_keys:
                continue
            e = self.entries[k]
            if lean:
                # The proof of the rule: the entry computed the shard's merge.
                self.counters["rows_pushed_lean"] += 1
                assert e["cc"] == e["cs"] == clock
                for f in self.table.fields:
                    assert np.array_equal(e["state"][f], state[f]), (k, f, e["state"][f], state[f])
                continue
            e["state"], e["base"] = state, copy_state(state)
            e["cs"], e["cc"] = clock, clock
        pushed = {k for k, *_ in due}
        self.outbox = [p for p in self.outbox if p[0] not in pushed]
