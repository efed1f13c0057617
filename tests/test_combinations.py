"""Every combination of the settings that choose a route, generated from the
table of what goes together (het_tf/runtime/combinations.py): the layer and
`het-tf train` either take it and work, or refuse it with a message naming
the layer or the flags.

The expected Combination of each case is worked out here from the settings
as given (which cache is on, which bound is set), apart from the code that
turns the layer's arguments or the flags into one."""
import argparse
import itertools

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import het_tf
from het_tf.apps.train import arguments
from het_tf.keras_layers import HetEmbedding
from het_tf.runtime import combinations, routes

VOCAB, DIM = 40, 4
routes.register("combinations-direct", lambda table, cache: routes.DirectRoute(table))

_LAYER_CASES = list(itertools.product(
    (0, 20),  # cache_capacity
    ("refresh", "check"),  # sync
    (None, "herald"),  # scheduler
    ("auto", 10, 0),  # staleness
    (1, 2),  # window
    (None, 5),  # hot_rows
    (None, "combinations-direct"),  # route
))


def _expected(cache_capacity, sync, scheduler, staleness, window, hot_rows, route, **given):
    """The Combination these settings make, by the layer's documented rules:
    the cache is off with capacity 0, or with both bounds 0 under refresh
    with no scheduler."""
    cache = cache_capacity != 0 and not (staleness == 0 and sync == "refresh"
                                         and scheduler is None)
    return combinations.Combination(cache=cache, sync=sync, scheduler=scheduler,
                                    staleness=staleness != "auto",
                                    window=window, hot_rows=bool(hot_rows),
                                    route=route is not None, **given)


def _name(case):
    return "-".join(str(v) for v in case)


def test_the_table_refuses_some_and_takes_some():
    refused = [case for case in _LAYER_CASES if combinations.refusals(_expected(*case))]
    assert 0 < len(refused) < len(_LAYER_CASES)


@pytest.mark.parametrize("case", _LAYER_CASES, ids=_name)
def test_a_layer_works_or_is_refused_naming_it(case):
    cache_capacity, sync, scheduler, staleness, window, hot_rows, route = case
    name = f"c_{abs(hash(case)) % 10**8}"
    rules = combinations.refusals(_expected(*case, mode="local"))

    def make():
        return HetEmbedding(VOCAB, DIM, name=name, cache_capacity=cache_capacity, sync=sync,
                            scheduler=scheduler, staleness=staleness, window=window, hot_rows=hot_rows, route=route,
                            optimizer=tf_keras.optimizers.SGD(0.5), seed=3)

    if rules:
        with pytest.raises(ValueError) as raised:
            make()
        message = str(raised.value)
        assert message.startswith(f"HetEmbedding '{name}': "), message
        assert rules[0].reason in message, message
        return
    layer = make()
    inputs = tf_keras.Input(shape=(2,), dtype="int64")
    model = tf_keras.Model(inputs, tf_keras.layers.Flatten()(layer(inputs)))
    model.compile(tf_keras.optimizers.SGD(0.5), "mse")
    assert layer.combination == _expected(*case, mode="local")
    ids, untouched = np.array([[1, 2], [3, 1]], np.int64), np.array([[7, 8]], np.int64)
    before, before_untouched = model.predict(ids, verbose=0), model.predict(untouched, verbose=0)
    model.train_on_batch(ids, np.ones((2, 2 * DIM), np.float32))
    layer.flush()
    after = model.predict(ids, verbose=0)
    # Each looked-up row moved towards the target; rows not looked up stayed.
    assert np.all(np.abs(after - 1) < np.abs(before - 1)), (before, after)
    np.testing.assert_array_equal(model.predict(untouched, verbose=0), before_untouched)
    # The lookahead stages for this layer exactly where the table says it
    # may; a route of one's own prefetches if it is a cached one (this
    # test's reads the shards directly).
    data = tf.data.Dataset.from_tensor_slices((ids, np.ones((2, 2 * DIM), np.float32))).batch(2)
    het_tf.lookahead(data, model)
    stages = combinations.stages(layer.combination)
    assert layer.lookahead_active == (stages and scheduler is None and route is None)


_FLAG_CASES = list(itertools.product(
    ("het", "keras"),  # --embedding
    ("local", "ps", "hybrid"),  # --mode
    (1, 2),  # --workers
    ("0", "0.1"),  # --cache-capacity
    ("refresh", "check"),  # --sync
    (None, "herald"),  # --scheduler
    ("auto", "10", "0"),  # --staleness
    (1, 2),  # --window
    (0, 10),  # --hot-rows
    (None, True, False),  # --lookahead
    (0, 8),  # --allocate-every
))


def _argv(embedding, mode, workers, capacity, sync, scheduler, staleness, window, hot_rows,
          lookahead, allocate_every):
    argv = ["--embedding", embedding, "--mode", mode, "--workers", str(workers),
            "--cache-capacity", capacity, "--sync", sync, "--staleness", staleness,
            "--window", str(window), "--hot-rows", str(hot_rows),
            "--allocate-every", str(allocate_every), "--samples", "100000"]
    if scheduler is not None:
        argv += ["--scheduler", scheduler]
    if lookahead is not None:
        argv.append("--lookahead" if lookahead else "--no-lookahead")
    return argv


def test_every_flag_combination_is_taken_or_refused_naming_the_flags():
    parser = argparse.ArgumentParser()
    arguments.add_arguments(parser)
    taken = refused = 0
    for case in _FLAG_CASES:
        (embedding, mode, workers, capacity, sync, scheduler, staleness, window, hot_rows,
         lookahead, allocate_every) = case
        expected = _expected(float(capacity), sync, scheduler, "auto" if staleness == "auto"
                             else int(staleness), window, hot_rows, None,
                             embedding=embedding, mode=mode, workers=workers,
                             lookahead=lookahead, allocation=bool(allocate_every))
        rules = combinations.refusals(expected)
        args = parser.parse_args(_argv(*case))
        if rules:
            with pytest.raises(ValueError) as raised:
                arguments.check(args)
            message = str(raised.value)
            named = [combinations.spell_flag(s, expected) for s in rules[0].settings]
            assert all(flag in message for flag in named), (case, message)
            assert rules[0].reason in message, (case, message)
            refused += 1
        else:
            arguments.check(args)
            assert args.lookahead == (lookahead if lookahead is not None
                                      else combinations.stages(expected)), case
            taken += 1
    assert taken and refused
