"""A plain NumPy model of het_tf's table, cache and clock rules, written from
the design rules rather than from the C++, to check the ops against."""
import math

import numpy as np

MASK = (1 << 64) - 1


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


class RefTable:
    def __init__(self, dim, optimizer="sgd", seed=0, vocabulary_size=None):
        self.dim, self.optimizer, self.seed = dim, optimizer, seed
        self.vocabulary_size = vocabulary_size
        self.rows = {}  # key -> dict(w, acc, m, v, clock, step)
        self.updates_applied = 0

    def row(self, key):
        if key not in self.rows:
            self.rows[key] = dict(w=initial_row(key, self.dim, self.seed),
                                  acc=np.full(self.dim, 0.1, np.float32),
                                  m=np.zeros(self.dim, np.float32),
                                  v=np.zeros(self.dim, np.float32), clock=0, step=0)
        return self.rows[key]

    def pull(self, keys, clocks, read_staleness):
        out = []
        for i, (k, c) in enumerate(zip(keys, clocks)):
            r = self.row(k)
            if c < 0 or (read_staleness >= 0 and r["clock"] - c > read_staleness):
                out.append((i, r["w"].copy(), r["clock"]))
        return out

    def push(self, key, grad, count, lr):
        r = self.row(key)
        g = grad.astype(np.float32)
        if self.optimizer == "sgd" or count == 1:
            self._step(r, g, lr)
        else:  # count steps with the mean gradient
            mean = g * np.float32(1.0 / np.float32(count))
            for _ in range(count):
                self._step(r, mean, lr)
        r["clock"] += count
        self.updates_applied += count
        return r["w"].copy(), r["clock"]

    def _step(self, r, g, lr):
        lr32 = np.float32(lr)
        if self.optimizer == "sgd":
            r["w"] = r["w"] - lr32 * g
        elif self.optimizer == "adagrad":
            r["acc"] = r["acc"] + g * g
            r["w"] = r["w"] - lr32 * g / np.sqrt(r["acc"] + np.float32(1e-7))
        elif self.optimizer == "adam":
            r["step"] += 1
            t = r["step"]
            # The C++ takes powers of the float32 betas in double precision.
            b1, b2 = float(np.float32(0.9)), float(np.float32(0.999))
            alpha = np.float32(float(lr32) * math.sqrt(1 - b2 ** t) / (1 - b1 ** t))
            r["m"] = r["m"] + (g - r["m"]) * np.float32(1 - np.float32(0.9))
            r["v"] = r["v"] + (g * g - r["v"]) * np.float32(1 - np.float32(0.999))
            r["w"] = r["w"] - alpha * r["m"] / (np.sqrt(r["v"]) + np.float32(1e-7))
        else:
            raise ValueError(self.optimizer)


class RefCache:
    """Entries hold row, c_s, c_c, pending gradient and pending local delta.
    The victim is the attached entry with the lowest (bucket, attach order)."""

    def __init__(self, table, capacity, policy, read_staleness, write_staleness, pin_threshold):
        self.table, self.capacity, self.policy = table, capacity, policy
        self.s_r, self.s_w, self.pin = read_staleness, write_staleness, pin_threshold
        self.entries = {}
        self.outbox = []  # (key, grad, count)
        self.seq = 0
        self.counters = dict(lookups=0, unique_keys=0, hits=0, misses=0, stale_refreshes=0,
                             evictions=0, dirty_evictions=0, rows_pulled=0, rows_pushed=0,
                             updates_pushed=0)

    def _bucket(self, touches):
        if self.policy == "lru":
            return 0
        if self.policy == "lfu_opt" and touches >= self.pin:
            return math.inf
        return touches

    def _attach(self, e, touches):
        e["touches"], e["attached"], e["seq"] = touches, True, self.seq
        self.seq += 1

    def lookup(self, ids, training):
        unique = list(dict.fromkeys(ids))
        if training and len(unique) > self.capacity:
            raise ValueError("batch larger than cache")
        clocks = [self.entries[k]["cc"] if k in self.entries else -1 for k in unique]
        self.counters["lookups"] += len(ids)
        self.counters["unique_keys"] += len(unique)
        answer = {i: (w, c) for i, w, c in self.table.pull(unique, clocks, self.s_r)}
        self.counters["rows_pulled"] += len(answer)
        out = []
        if not training:
            for i, k in enumerate(unique):
                e = self.entries.get(k)
                if i not in answer:
                    out.append(e["row"].copy())
                    self.counters["hits"] += 1
                elif e is None:
                    out.append(answer[i][0])
                    self.counters["misses"] += 1
                else:
                    out.append(answer[i][0] + e["pd"])
                    self.counters["stale_refreshes"] += 1
            return unique, out
        for k in unique:
            if k in self.entries:
                self.entries[k]["attached"] = False
        inserted = set()
        for i, k in enumerate(unique):
            if i not in answer:
                self.counters["hits"] += 1
                continue
            w, clock = answer[i]
            e = self.entries.get(k)
            if e is not None:
                pending = e["cc"] - e["cs"]
                e["row"] = w + e["pd"]
                e["cs"], e["cc"] = clock, clock + pending
                self.counters["stale_refreshes"] += 1
                continue
            if len(self.entries) >= self.capacity:
                victim = min((e for e in self.entries.values() if e["attached"]),
                             key=lambda e: (self._bucket(e["touches"]), e["seq"]))
                if victim["cc"] > victim["cs"]:
                    self.outbox.append((victim["key"], victim["pg"].copy(),
                                        victim["cc"] - victim["cs"]))
                    self.counters["dirty_evictions"] += 1
                del self.entries[victim["key"]]
                self.counters["evictions"] += 1
            zeros = np.zeros(self.table.dim, np.float32)
            self.entries[k] = dict(key=k, row=w, cs=clock, cc=clock, pg=zeros.copy(),
                                   pd=zeros.copy(), touches=0, attached=False)
            inserted.add(k)
            self.counters["misses"] += 1
        for k in unique:
            e = self.entries[k]
            self._attach(e, 1 if k in inserted else e["touches"] + 1)
            out.append(e["row"].copy())
        return unique, out

    def apply_gradients(self, keys, grads, lr):
        due = list(self.outbox)
        step_scale = np.float32(-lr)
        for k, g in zip(keys, grads):
            e = self.entries[k]
            g = g.astype(np.float32)
            step = step_scale * g
            e["pg"] = e["pg"] + g
            e["row"] = e["row"] + step
            e["pd"] = e["pd"] + step
            e["cc"] += 1
            if self.s_w >= 0 and e["cc"] - e["cs"] > self.s_w:
                due.append((k, e["pg"].copy(), e["cc"] - e["cs"]))
        self._push_and_ack(due, lr)

    def flush(self, lr):
        due = list(self.outbox) + [(k, e["pg"].copy(), e["cc"] - e["cs"])
                                   for k, e in self.entries.items() if e["cc"] > e["cs"]]
        self._push_and_ack(due, lr)

    def _push_and_ack(self, due, lr):
        outbox_keys = {k for k, _, _ in self.outbox}
        for k, g, count in due:
            w, clock = self.table.push(k, g, count, lr)
            self.counters["rows_pushed"] += 1
            self.counters["updates_pushed"] += count
            if k in outbox_keys:
                continue
            e = self.entries[k]
            e["pg"] = np.zeros_like(e["pg"])
            e["pd"] = np.zeros_like(e["pd"])
            e["row"], e["cs"], e["cc"] = w, clock, clock
        self.outbox = []
