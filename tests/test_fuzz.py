"""Property-based fuzzing of every op in the library and of HetEmbedding.

Every op gets inputs of random dtypes, ranks and sizes (empty ones among
them), extreme int64 values, non-finite floats, handles of the wrong kind and
odd attribute values. Whatever it gets, it must either succeed or raise one
of the errors that name a caller's mistake, and a failed call must leave the
table and the cache exactly as they were. Valid inputs are checked against
the NumPy model in tests/reference.py.

`make test` runs a bounded number of examples; `make fuzz` sets
HET_TF_FUZZ_EXAMPLES to run many more.
"""
import os
import re

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorflow.python.framework import op_def_registry

import het_tf
from het_tf import _op_library
from het_tf.keras_layers import HetEmbedding
from tests.keras_steps import apply_gradients
from tests.reference import RefTable, initial_row

EXAMPLES = int(os.environ.get("HET_TF_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 100,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])

INT64_MIN, INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
EXTREME_INTS = [INT64_MIN, INT64_MIN + 1, -(1 << 32), -1, 0, 1, 2, 7, (1 << 31) - 1, 1 << 32,
                INT64_MAX - 1, INT64_MAX]
ODD_FLOATS = [0.0, -0.0, 1.0, -1.0, 1e-30, 1e30, 3.4e38, float("nan"), float("inf"),
              float("-inf")]
# What an op may raise on a caller's mistake: TypeError and ValueError come
# from the Python wrapper (dtype or attr type), the rest from the kernels.
CALLER_ERRORS = (TypeError, ValueError, tf.errors.InvalidArgumentError,
                 tf.errors.OutOfRangeError, tf.errors.ResourceExhaustedError,
                 tf.errors.NotFoundError, tf.errors.FailedPreconditionError,
                 # a cache's sync answered with another shard epoch
                 tf.errors.AbortedError)

DIM = 3
OPS = _op_library.load()


def snake(name):
    out = "".join("_" + c.lower() if c.isupper() else c for c in name)
    return out.lstrip("_")


def _op_defs():
    """The library's ops, read from its generated module and the registry."""
    names = ["".join(w.title() for w in fn.split("_")) for fn in dir(OPS)
             if fn.startswith("het_") and not fn.endswith("_eager_fallback")]
    return {name: op_def_registry.get(name) for name in names}


OP_DEFS = _op_defs()


# ----- random tensors -----

shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3)


@st.composite
def int_tensors(draw, dtype=tf.int64):
    shape = draw(shapes)
    n = int(np.prod(shape)) if shape else 1
    info = np.iinfo(dtype.as_numpy_dtype)
    values = draw(st.lists(st.one_of(st.sampled_from(EXTREME_INTS), st.integers(-3, 40)),
                           min_size=n, max_size=n))
    values = np.clip(np.array(values, dtype=np.float64 if dtype != tf.int64 else np.int64),
                     info.min, info.max)
    return tf.constant(np.array(values).astype(dtype.as_numpy_dtype).reshape(shape))


@st.composite
def float_tensors(draw, dtype=tf.float32):
    shape = draw(shapes)
    n = int(np.prod(shape)) if shape else 1
    values = draw(st.lists(st.one_of(st.sampled_from(ODD_FLOATS), st.floats(-2, 2)),
                           min_size=n, max_size=n))
    return tf.constant(np.array(values, np.float64).astype(dtype.as_numpy_dtype).reshape(shape))


@st.composite
def string_tensors(draw):
    shape = draw(shapes)
    n = int(np.prod(shape)) if shape else 1
    # Criteo-like lines, cut and garbled ones among them.
    pieces = st.sampled_from(["1", "0", "", "\t", "12", "-3", "68fd1e64", "zz", "\x00", "\n",
                              "9" * 30, "ffffffff", "\t" * 39])
    values = draw(st.lists(st.lists(pieces, max_size=50).map("".join), min_size=n, max_size=n))
    return tf.constant(np.array(values, dtype=object).reshape(shape))


def any_tensor():
    return st.one_of(int_tensors(tf.int64), int_tensors(tf.int32), float_tensors(),
                     float_tensors(dtype=tf.float64), string_tensors(),
                     st.lists(st.booleans(), max_size=5).map(lambda v: tf.constant(v, tf.bool)))


def attr_values(attr):
    """Usual values and values that break the attr's constraints; 2^40 for
    sizes is refused or harmless (a cache that large is refused before it is
    allocated: tests/test_ops_errors.py)."""
    kind = attr.type
    if kind == "int":
        base = [-(1 << 40), -1, 0, 1, 2, DIM, 5, 100, 1 << 32, 1 << 40]
    elif kind == "float":
        base = ODD_FLOATS
    elif kind == "bool":
        base = [True, False]
    elif kind == "string":
        base = ["", "sgd", "adagrad", "adam", "ftrl", "lfu", "lru", "lfu_opt", "uniform",
                "normal", "truncated_normal", "constant", "bogus", "records", "x" * 300]
    else:
        return None
    return st.sampled_from(base)


# ----- valid calls, one per op -----
#
# Each builder draws a call that is valid for the fuzz table (dim DIM,
# Adagrad, no vocabulary) and its cache; the test then maybe breaks one
# input or attribute of it.

KEYS = st.one_of(st.sampled_from(EXTREME_INTS), st.integers(-5, 30))


def unique_keys(draw, max_size=6, min_size=0):
    return np.array(draw(st.lists(KEYS, min_size=min_size, max_size=max_size, unique=True)),
                    np.int64)


def finite(draw, shape):
    n = int(np.prod(shape))
    return np.array(draw(st.lists(st.floats(-3, 3, width=32), min_size=n, max_size=n)),
                    np.float32).reshape(shape)


def criteo_lines(draw, n):
    lines = OPS.het_synthetic_criteo_lines(0, draw(st.integers(0, 1000)), n, scale=0.001)
    out = [line.decode() for line in lines.numpy()]
    # Some lines cut, emptied or with a field changed.
    for i in range(n):
        cut = draw(st.sampled_from([None, None, 0, 5, -1, "field"]))
        if cut == "field":
            fields = out[i].split("\t")
            fields[draw(st.integers(0, 39))] = draw(st.sampled_from(["", "x", "-9", "1" * 25]))
            out[i] = "\t".join(fields)
        elif cut is not None:
            out[i] = out[i][:cut]
    return out


def build_call(draw, op, ctx):
    """(inputs, attrs) of a valid call of `op`."""
    table, cache = ctx["table"], ctx["cache"]
    th, ch = table.handle(0), cache.handle()
    if op == "HetBuildInfo":
        return [], {}
    if op == "HetTableShard":
        vocabulary_size = draw(st.sampled_from([-1, 1, 50]))
        max_rows = draw(st.sampled_from([-1, 1, 1000]))
        dynamic = vocabulary_size == -1
        return [], dict(table_name=ctx["name"], dim=DIM, shared_name=ctx["fresh"],
                        vocabulary_size=vocabulary_size, max_rows=max_rows,
                        on_full=draw(st.sampled_from(
                            ["refuse", "evict"] if dynamic and max_rows > 0 else ["refuse"])),
                        eviction=draw(st.sampled_from(["lru", "lfu"])),
                        ttl_seconds=draw(st.sampled_from([-1, 1, 3600] if dynamic else [-1])),
                        admit_after=draw(st.sampled_from([0, 1, 2, 255] if dynamic else [0])),
                        initializer=draw(st.sampled_from(["uniform", "normal",
                                                          "truncated_normal", "constant"])),
                        optimizer=draw(st.sampled_from(["sgd", "adagrad", "adam", "ftrl"])),
                        seed=draw(st.integers(-5, 5)))
    if op == "HetCache":
        return [], dict(table_name=ctx["name"], dim=DIM, shared_name=ctx["fresh"],
                        capacity=draw(st.integers(1, 64)),
                        policy=draw(st.sampled_from(["lfu", "lru", "lfu_opt"])),
                        pin_threshold=draw(st.integers(1, 4)),
                        read_staleness=draw(st.integers(-1, 5)),
                        write_staleness=draw(st.integers(-1, 5)),
                        staleness_ramp=draw(st.integers(0, 3)))
    if op == "HetAccessCounter":
        return [], dict(table_name=ctx["name"], shared_name=ctx["fresh"],
                        vocabulary_size=draw(st.sampled_from([-1, 1, 50])))
    if op in ("HetCountAccesses", "HetHottestKeys"):
        counter = OPS.het_access_counter(table_name=ctx["name"], vocabulary_size=50,
                                         shared_name=ctx["fresh"])
        if op == "HetHottestKeys":
            return [counter, np.int64(draw(st.integers(0, 8)))], {}
        return [counter, np.array(draw(st.lists(st.integers(0, 49), max_size=8)), np.int64)], {}
    if op in ("HetTableClear", "HetTableStats", "HetTableForgetChanges", "HetTableSketch"):
        return [th], {}
    if op == "HetTableMergeSketch":  # its own sketch: empty unless the table admits
        return [th, OPS.het_table_sketch(th)], {}
    if op == "HetTableTakeChanges":
        return [th, draw(st.booleans())], {}
    if op == "HetTableErase":
        return [th, unique_keys(draw)], {}
    if op == "HetTableReadHeld":
        return [th, unique_keys(draw)], dict(dim=DIM, num_slots=1)
    if op in ("HetCacheClear", "HetCacheStats"):
        return [ch], {}
    if op == "HetCacheFlush":
        return [ch], dict(dim=DIM)
    if op == "HetTableGather":
        return [th, unique_keys(draw)], dict(dim=DIM, training=draw(st.booleans()))
    if op == "HetTablePull":
        keys = unique_keys(draw)
        clocks = np.array([draw(st.integers(-1, 4)) for _ in keys], np.int64)
        return ([th, keys, clocks, np.int64(draw(st.integers(-1, 3)))],
                dict(dim=DIM, num_slots=draw(st.sampled_from([0, 1])),
                     training=draw(st.booleans())))
    if op == "HetTablePush":
        keys = unique_keys(draw)
        counts = np.array([draw(st.integers(1, 4)) for _ in keys], np.int64)
        return ([th, keys, finite(draw, (len(keys), DIM)), counts,
                 np.float32(draw(st.floats(0, 1)))], dict(dim=DIM, return_rows=draw(st.booleans())))
    if op == "HetTablePushDeltas":
        keys = unique_keys(draw)
        counts = np.array([draw(st.integers(1, 4)) for _ in keys], np.int64)
        deltas = finite(draw, (len(keys), 2 * DIM))
        deltas[:, DIM:] = np.abs(deltas[:, DIM:])  # Adagrad's accumulator only grows
        bases = np.array([draw(st.integers(0, 6)) for _ in keys], np.int64)
        # A sender (worker, generation, sequence, epoch), sequenced or not.
        sender = np.array([draw(st.sampled_from([0, 5, -1])), draw(st.integers(0, 3)),
                           draw(st.integers(0, 2)), 0], np.int64)
        return ([th, keys, deltas, counts, np.float32(draw(st.floats(0, 1))), bases, sender,
                 np.int64(draw(st.integers(0, len(keys))))],
                dict(dim=DIM, num_slots=1))
    if op == "HetTableExchange":
        _unique, _inverse, request = OPS.het_cache_begin_exchange(ch, unique_keys(draw),
                                                                  num_shards=1)
        return [th, request[0]], dict(dim=DIM)
    if op == "HetTableExport":
        return ([th, np.int64(draw(st.integers(0, 5))), np.int64(draw(st.integers(0, 5)))],
                dict(dim=DIM, num_slots=1))
    if op in ("HetCachePin", "HetCacheDrop"):
        return [ch, unique_keys(draw)], {}
    if op == "HetCacheMostUsed":
        return [ch, np.int64(draw(st.integers(0, 8)))], {}
    if op == "HetCacheStaged":
        return [ch, unique_keys(draw)], dict(batches=draw(st.integers(0, 3)))
    if op == "HetAssignSamples":
        sizes = np.array(draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)), np.int64)
        scores = np.array(draw(st.lists(st.integers(0, 5), min_size=int(sizes.sum() * len(sizes)),
                                        max_size=int(sizes.sum() * len(sizes)))), np.int32)
        return ([scores.reshape(int(sizes.sum()), len(sizes)), sizes],
                dict(stay_bonus=draw(st.integers(0, 2))))
    if op == "HetKeySummary":
        return [unique_keys(draw)], {}
    if op == "HetBeladyFloor":
        steps = [unique_keys(draw, max_size=4) for _ in range(draw(st.integers(0, 4)))]
        offsets = np.cumsum([0] + [len(s) for s in steps]).astype(np.int64)
        keys = np.concatenate(steps) if steps else np.zeros([0], np.int64)
        return [keys, offsets, np.int64(draw(st.integers(0, 3))), unique_keys(draw)], dict(
            table_name=ctx["name"], capacity=draw(st.integers(1, 4)), width=2 * DIM,
            write_staleness=draw(st.integers(-1, 3)),
            sync=draw(st.sampled_from(["refresh", "check"])), num_shards=draw(st.integers(1, 3)))
    if op == "HetKeySummaryHolds":
        summary = OPS.het_key_summary(unique_keys(draw))
        shape = draw(st.lists(st.integers(0, 3), max_size=2))
        keys = draw(st.lists(KEYS, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        return [summary, np.array(keys, np.int64).reshape(shape)], {}
    if op == "HetTableRead":
        return [th, unique_keys(draw)], dict(dim=DIM, num_slots=1)
    if op == "HetTableImport":
        keys = unique_keys(draw)
        n = len(keys)
        return [th, keys, finite(draw, (n, DIM)), np.abs(finite(draw, (n, 1, DIM))) + 0.1,
                np.array([draw(st.integers(0, 9)) for _ in keys], np.int64),
                np.array([draw(st.integers(0, 9)) for _ in keys], np.int64)], {}
    if op == "HetShardIndex":
        return [unique_keys(draw)], dict(num_shards=draw(st.integers(1, 4)))
    if op == "HetUnique":
        shape = draw(st.lists(st.integers(0, 3), max_size=2))
        keys = draw(st.lists(KEYS, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        return [np.array(keys, np.int64).reshape(shape)], {}
    if op in ("HetExpandRows", "HetSumSlices"):
        count = draw(st.integers(0, 4))
        places = st.lists(st.integers(0, count - 1), max_size=6) if count else st.just([])
        at = np.array(draw(places), np.int32)
        if op == "HetExpandRows":
            return [finite(draw, (count, DIM)), at], {}
        return [finite(draw, (len(at), DIM)), at, np.int32(count)], {}
    if op in ("HetCachePrepare", "HetCacheBeginExchange", "HetCacheStage",
              "HetCacheBeginPrefetch"):
        shape = draw(st.lists(st.integers(1, 2), min_size=1, max_size=3))  # at most 8 ids
        ids = np.array(draw(st.lists(KEYS, min_size=int(np.prod(shape)),
                                     max_size=int(np.prod(shape)))), np.int64).reshape(shape)
        if op == "HetCacheBeginPrefetch":
            # The batch after ids, staged, so that there is one to prefetch.
            OPS.het_cache_stage(ch, ids)
            OPS.het_cache_stage(ch, unique_keys(draw))
        attrs = {"HetCacheBeginExchange": dict(num_shards=1, carry_updates=draw(st.booleans())),
                 "HetCacheBeginPrefetch": dict(num_shards=1)}.get(op, {})
        return [ch, ids], attrs
    if op == "HetCacheEndExchange":
        unique, _inverse, request = OPS.het_cache_begin_exchange(ch, unique_keys(draw),
                                                                 num_shards=1)
        answer = OPS.het_table_exchange(th, request[0], dim=DIM)
        return [ch, unique, [answer]], dict(dim=DIM)
    if op == "HetCacheEndPrefetch":
        current = unique_keys(draw)
        OPS.het_cache_stage(ch, current)
        OPS.het_cache_stage(ch, unique_keys(draw))
        unique, request = OPS.het_cache_begin_prefetch(ch, current, num_shards=1)
        answer = OPS.het_table_exchange(th, request[0], dim=DIM)
        return [ch, unique, [answer]], {}
    if op == "HetCacheComplete":
        training = draw(st.booleans())
        unique, _inverse, clocks, _bound = OPS.het_cache_prepare(ch, unique_keys(draw))
        positions, values, row_clocks, epochs = table.pull(unique, clocks, 2, with_slots=training)
        return [ch, unique, positions, values, row_clocks, epochs], dict(dim=DIM, training=training)
    if op == "HetCacheAccumulate":
        keys = unique_keys(draw, max_size=4)
        cache.lookup(tf.constant(keys), training=True)
        return [ch, keys, finite(draw, (len(keys), DIM)), np.float32(0.1)], dict(dim=DIM)
    if op == "HetCacheAckPush":
        keys, deltas, counts, bases, evicted, senders = OPS.het_cache_flush(ch, dim=DIM)
        values, clocks, epochs, lean, refused = table.push_deltas(
            keys, deltas, counts, bases, 0.1, senders=senders, unanswered=evicted)
        return [ch, keys, counts, values, clocks, epochs, lean, refused], {}
    if op == "HetParseCriteo":
        n = draw(st.integers(0, 4))
        return ([criteo_lines(draw, n), np.int64(draw(st.integers(0, 9))), "fuzz.tsv"],
                # Garbled lines are valid input when they are skipped.
                dict(has_label=True, skip_malformed=True, counter=ctx["fresh"]))
    if op == "HetParseStats":
        return [], dict(counter=ctx["fresh"])
    if op == "HetCountRecords":
        return ([np.array(draw(st.lists(st.booleans(), max_size=5)), bool)],
                dict(counter=ctx["fresh"]))
    synthetic = dict(seed=draw(st.integers(0, 9)),
                     scale=draw(st.sampled_from([0.0001, 0.01, 1.0])),
                     zipf_exponent=draw(st.sampled_from([0.5, 1.1, 2.0])))
    if op == "HetSyntheticCriteoCardinalities":
        return [], synthetic
    if op in ("HetSyntheticCriteo", "HetSyntheticCriteoLines"):
        return ([np.int64(draw(st.integers(0, 3))), np.int64(draw(st.integers(0, 1 << 40))),
                 np.int64(draw(st.integers(0, 8)))], synthetic)
    raise AssertionError(f"no valid call for {op}: add one to build_call")


@st.composite
def mutated_tensor(draw, value):
    """`value` made wrong in one way: dtype, rank, size or contents."""
    value = tf.convert_to_tensor(value)
    how = draw(st.sampled_from(["other", "rank_up", "rank_down", "size", "extreme", "empty"]))
    if how == "other" or value.dtype == tf.resource:
        return draw(any_tensor())
    if how == "rank_up":
        return tf.expand_dims(value, 0)
    if how == "rank_down":
        flat = tf.reshape(value, [-1])
        if value.shape.rank > 1:
            return flat
        return flat[0] if value.shape.num_elements() else tf.zeros([], value.dtype)
    if how == "size":
        flat = tf.reshape(value, [-1])
        return tf.concat([flat, flat[:1]], 0) if value.shape.rank == 1 else flat
    if how == "empty":
        return tf.zeros([0] + value.shape.as_list()[1:], value.dtype)
    if value.dtype.is_unsigned:  # bytes: every one of them the largest
        return tf.fill(tf.shape(value), tf.constant(value.dtype.max, value.dtype))
    if value.dtype.is_integer:
        fill = draw(st.sampled_from(EXTREME_INTS))
        return tf.fill(tf.shape(value), tf.cast(fill, value.dtype)) if value.dtype == tf.int64 \
            else tf.fill(tf.shape(value), tf.constant(-1, value.dtype))
    if value.dtype.is_floating:
        return tf.fill(tf.shape(value), tf.constant(draw(st.sampled_from(ODD_FLOATS)),
                                                     value.dtype))
    return draw(any_tensor())


# How the fuzz table makes and drops rows: as usual, evicting at a limit a
# few rows above what the cache and a call hold, expiring, or admitting ids
# at their second training read.
LIFETIMES = (dict(), dict(max_rows=24, on_full="evict"), dict(max_rows=24, on_full="evict",
                                                               eviction="lfu", ttl=3600),
             dict(admit_after=2))


def table_and_cache(name, lifetime=None):
    table = het_tf.ShardedTable(het_tf.TableConfig(name, DIM, seed=1, **(lifetime or {})),
                                [None])
    cache = het_tf.WorkerCache(table, het_tf.CacheConfig(8, "lfu", 2, 2, 2))
    # Rows and pending updates, so that a wrong call has state to spoil.
    rows, unique, _ = cache.lookup(tf.constant([1, 2, 3], tf.int64), training=True)
    cache.apply_gradients(unique, tf.ones_like(rows), 0.1)
    return table, cache


def state_of(table, cache):
    keys, values, slots, clocks, steps = table.export_shard(0, 0, 1 << 20)
    order = np.argsort(keys.numpy())
    parts = [t.numpy()[order] for t in (keys, values, slots, clocks, steps)]
    stats = {k: v for k, v in cache.stats().items() if "memory" not in k}
    return parts, stats


def assert_same_state(before, after, what):
    for a, b in zip(before[0], after[0]):
        np.testing.assert_array_equal(a, b, err_msg=f"{what} changed the table")
    assert before[1] == after[1], f"{what} changed the cache"


# ----- every op -----

FUZZED_OPS = sorted(OP_DEFS)


def test_every_op_is_fuzzed():
    """The fuzz below covers the library's whole op list, found at run time."""
    assert len(FUZZED_OPS) == 52 and all(OP_DEFS[name] is not None for name in FUZZED_OPS)


@pytest.mark.parametrize("op_name", FUZZED_OPS)
@FUZZ
@given(data=st.data())
def test_op_survives_broken_inputs_and_a_failed_call_changes_nothing(unique_name, op_name,
                                                                     data):
    """A valid call succeeds. The same call with one input or attribute
    broken succeeds or raises a caller's error, and if it fails, neither
    the table nor the cache changed."""
    op_def = OP_DEFS[op_name]
    name = unique_name("fuzz")
    table, cache = table_and_cache(name, data.draw(st.sampled_from(LIFETIMES), label="lifetime"))
    ctx = dict(table=table, cache=cache, name=name, fresh=unique_name("fresh"))
    inputs, attrs = build_call(data.draw, op_name, ctx)
    if any(a.name == "wire_version" for a in op_def.attr):  # ops that carry rows
        attrs["wire_version"] = _op_library.WIRE_VERSION
    targets = [f"input:{i}" for i in range(len(inputs))] + \
        [f"attr:{a.name}" for a in op_def.attr if a.name != "container"]
    target = data.draw(st.sampled_from([None] + targets), label="broken")
    if target is None:
        pass
    elif target.startswith("input:"):
        i = int(target[6:])
        if op_def.input_arg[i].type == tf.resource.as_datatype_enum:
            inputs[i] = data.draw(st.sampled_from(["swap", "float"]), label="handle")
            inputs[i] = (tf.constant(1.0) if inputs[i] == "float" else
                         cache.handle() if "table" in op_def.input_arg[i].name else table.handle(0))
        else:
            inputs[i] = data.draw(mutated_tensor(inputs[i]), label=op_def.input_arg[i].name)
    else:
        attr = next(a for a in op_def.attr if a.name == target[5:])
        if attr.name in ("table_name", "shared_name", "counter"):
            attrs[attr.name] = data.draw(st.sampled_from(["", name, table.shared_name(0),
                                                          "x" * 300]), label=attr.name)
        else:
            attrs[attr.name] = data.draw(attr_values(attr), label=attr.name)
    before = state_of(table, cache)
    try:
        with tf.device("/cpu:0"):
            getattr(OPS, snake(op_name))(*inputs, **attrs)
    except CALLER_ERRORS as error:
        assert target is not None, f"a valid call of {op_name} failed: {error}"
        assert_same_state(before, state_of(table, cache), f"a failed {op_name}")


# ----- extreme keys against the NumPy table -----

@FUZZ
@given(keys=st.lists(KEYS, min_size=1, max_size=8, unique=True),
       optimizer=st.sampled_from(["sgd", "adagrad", "adam"]),
       shards=st.integers(1, 3), pushes=st.integers(1, 3), data=st.data())
def test_any_int64_key_has_its_own_row_matching_the_reference(unique_name, keys, optimizer,
                                                               shards, pushes, data):
    """Dynamic keys cover the whole int64 range, int64 min and max and
    negative ids included, across shards, with each optimizer."""
    config = het_tf.TableConfig(unique_name(), DIM, seed=3,
                                optimizer=het_tf.OptimizerConfig(optimizer))
    table = het_tf.ShardedTable(config, [None] * shards)
    reference = RefTable(DIM, optimizer, seed=3)
    key_tensor = tf.constant(keys, tf.int64)
    np.testing.assert_allclose(table.gather(key_tensor).numpy(),
                               [initial_row(k, DIM, 3) for k in keys], rtol=1e-6)
    for _ in range(pushes):
        grads = finite(data.draw, (len(keys), DIM))
        counts = [data.draw(st.integers(1, 3)) for _ in keys]
        values, clocks = table.push(key_tensor, tf.constant(grads), tf.constant(counts, tf.int64),
                                    0.1)
        expected = [reference.push(k, g, c, 0.1) for k, g, c in zip(keys, grads, counts)]
        np.testing.assert_allclose(values.numpy(), [row for row, _ in expected], rtol=2e-5,
                                   atol=1e-6)
        assert clocks.numpy().tolist() == [clock for _, clock in expected]


# ----- the layer -----

def numpy_layer(ids_rows, rows_of, combiner, dim, dense_shape=None):
    """HetEmbedding's forward pass and each id's gradient coefficient, for
    a dense id array (dense_shape given) or a list of id lists."""
    if dense_shape is not None:
        ids = np.asarray(ids_rows).reshape(dense_shape)
        emb = np.array([rows_of(k) for k in ids.reshape(-1)], np.float32).reshape(
            tuple(dense_shape) + (dim,))
        if combiner is None:
            return emb
        n = dense_shape[-1]
        summed = emb.sum(axis=-2)
        return summed * scale_of(combiner, n)
    out = np.zeros((len(ids_rows), dim), np.float32)
    for r, row in enumerate(ids_rows):
        for k in row:
            out[r] += rows_of(k)
        out[r] *= scale_of(combiner, len(row))
    return out


def scale_of(combiner, n):
    if combiner == "mean":
        return 1.0 / max(n, 1)
    if combiner == "sqrtn":
        return 1.0 / np.sqrt(max(n, 1))
    return 1.0


@FUZZ
@given(data=st.data())
def test_layer_on_random_inputs_matches_numpy_or_names_itself(data):
    """Random vocabularies, dims, combiners, cache and staleness settings,
    and dense, ragged or sparse ids of random dtypes, shapes (empty ones
    too) and values. Valid ids give NumPy's rows and, after one SGD step and
    a flush, NumPy's updated rows; anything else raises an error naming the
    layer, with nothing changed."""
    draw = data.draw
    vocab = draw(st.sampled_from([None, 40]), label="input_dim")
    dim = draw(st.integers(1, 4), label="dim")
    kind = draw(st.sampled_from(["dense", "ragged", "sparse"]), label="kind")
    # Ragged and sparse ids without a combiner: test_embedding_behaviours.py.
    combiner = draw(st.sampled_from([None, "sum", "mean", "sqrtn"] if kind == "dense"
                                    else ["sum", "mean", "sqrtn"]), label="combiner")
    dtype = draw(st.sampled_from([tf.int64, tf.int64, tf.int32, tf.float32, tf.string, tf.int16]),
                 label="dtype")
    layer = HetEmbedding(
        vocab, dim, combiner=combiner, seed=11, optimizer=tf_keras.optimizers.SGD(0.5),
        cache_capacity=draw(st.sampled_from([0, 64, 500]), label="cache_capacity"),
        cache_policy=draw(st.sampled_from(["lfu", "lru", "lfu_opt"]), label="policy"),
        staleness=draw(st.sampled_from([0, 1, 100, None]), label="staleness"),
        pin_threshold=draw(st.integers(1, 3)))
    in_range = st.integers(0, vocab - 1) if vocab else KEYS
    wrong = st.sampled_from(EXTREME_INTS) if vocab else st.nothing()
    values = st.one_of(in_range, wrong) if vocab and draw(st.booleans()) else in_range
    if kind == "dense":
        shape = draw(st.lists(st.integers(0, 4), min_size=1, max_size=3), label="shape")
        flat = draw(st.lists(values, min_size=int(np.prod(shape)),
                             max_size=int(np.prod(shape))), label="ids")
        rows_list = None
    else:
        rows_list = draw(st.lists(st.lists(values, max_size=4), max_size=4), label="ids")
        flat = [k for row in rows_list for k in row]
    if dtype == tf.int32:
        flat = [int(np.clip(k, -2**31, 2**31 - 1)) for k in flat]
        rows_list = rows_list and [[int(np.clip(k, -2**31, 2**31 - 1)) for k in row]
                                   for row in rows_list]
    np_dtype = object if dtype == tf.string else dtype.as_numpy_dtype

    def to_input(values_list):
        array = (np.array([str(k).encode() for k in values_list], object) if dtype == tf.string
                 else np.array(values_list, np.float64 if dtype.is_floating else np.int64))
        if dtype.is_integer:
            info = np.iinfo(np_dtype)
            array = np.clip(array, info.min, info.max)
        return array.astype(np_dtype)

    if kind == "dense":
        inputs = tf.constant(to_input(flat).reshape(shape), dtype)
    elif kind == "ragged":
        lengths = [len(row) for row in rows_list]
        inputs = tf.RaggedTensor.from_row_lengths(tf.constant(to_input(flat), dtype),
                                                  tf.constant(lengths, tf.int64))
    else:
        indices = [[r, j] for r, row in enumerate(rows_list) for j in range(len(row))]
        inputs = tf.SparseTensor(tf.constant(indices, tf.int64, shape=[len(indices), 2]),
                                 tf.constant(to_input(flat), dtype),
                                 [len(rows_list), max([len(r) for r in rows_list] + [0])])
    layer.build(None)
    if dtype.is_integer and dtype != tf.int16 and vocab is not None:
        outside = [k for k in flat if not 0 <= k < vocab]
    else:
        outside = []
    # In the layer's order of checks. Float ids are taken where the
    # vocabulary is exact in float32, and must be whole and in it.
    if dtype == tf.float32 and vocab is None:
        expected_error = (ValueError, "got float32 ids, which cannot hold every id")
    elif dtype == tf.float32:
        outside = [k for k in flat if not 0 <= k < vocab]
        expected_error = (tf.errors.InvalidArgumentError,
                          f"float32 ids must be whole numbers in [0, {vocab})") if outside else None
    else:
        expected_error = (
            (ValueError, "ids must be int32 or int64") if dtype not in (tf.int32, tf.int64) else
            (tf.errors.InvalidArgumentError, f"id {outside[0]} is outside") if outside else None)

    weights_seed = draw(st.integers(0, 1000))
    if expected_error is not None:
        rows_before = layer.table.stats()["rows"]
        # "HetEmbedding 'name': ..." or "table 'name': ...", on one line.
        with pytest.raises(expected_error[0],
                           match=f"'{layer.name}'[^\n]*{re.escape(expected_error[1])}"):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(layer(inputs, training=True))
            apply_gradients(tape, loss, layer)
        assert layer.table.stats()["rows"] == rows_before
        return

    initial = {k: initial_row(k, dim, 11) for k in flat}
    out = layer(inputs, training=False)
    expected = numpy_layer(rows_list if kind != "dense" else flat, initial.__getitem__,
                           combiner, dim, None if kind != "dense" else shape)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)

    # One SGD step with loss sum(out * w): each id's gradient is its
    # sample's w scaled by the combiner.
    w = np.random.default_rng(weights_seed).normal(size=expected.shape).astype(np.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(inputs, training=True) * w)
    apply_gradients(tape, loss, layer)
    layer.flush()
    grads = {}
    if kind == "dense":
        ids = np.asarray(flat, np.int64).reshape(shape)
        for index in np.ndindex(*shape):
            coefficient = (w[index] if combiner is None else
                           w[index[:-1]] * scale_of(combiner, shape[-1]))
            grads[int(ids[index])] = grads.get(int(ids[index]), 0) + coefficient
    else:
        for r, row in enumerate(rows_list):
            for k in row:
                grads[k] = grads.get(k, 0) + w[r] * scale_of(combiner, len(row))
    updated = {k: initial[k] - np.float32(0.5) * np.float32(g) for k, g in grads.items()}
    if updated:
        keys = sorted(updated)
        np.testing.assert_allclose(layer.table.gather(tf.constant(keys, tf.int64)).numpy(),
                                   [updated[k] for k in keys], rtol=1e-4, atol=1e-5)
    again = layer(inputs, training=False)
    np.testing.assert_allclose(again.numpy(),
                               numpy_layer(rows_list if kind != "dense" else flat,
                                           lambda k: updated.get(k, initial[k]), combiner, dim,
                                           None if kind != "dense" else shape),
                               rtol=1e-4, atol=1e-5)
