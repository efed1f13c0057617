"""The modules that moved up out of keras_layers/ keep their old names for
one release (tests/test_layering.py's DEPRECATED_ALIASES): importing an old
name warns and gives the new module, so every name is the same object."""
import importlib
import sys

import pytest
from test_layering import DEPRECATED_ALIASES

PUBLIC_NAMES = {
    "het_tf.keras_layers.allocation": ["Allocation"],
    "het_tf.keras_layers.hot_rows": ["HotRows", "hot_and_cold_batches", "profile_hot_rows",
                                     "use_hot_rows"],
    "het_tf.keras_layers.hybrid_training": ["Checkpoint", "distribute", "flush_and_clear",
                                            "het_allocation", "restore", "save"],
    "het_tf.keras_layers.lookahead": ["lookahead"],
}


def forget(old):
    """Imports `old` afresh, as a first import would."""
    sys.modules.pop(old, None)
    package, _, name = old.rpartition(".")
    if package in sys.modules and hasattr(sys.modules[package], name):
        delattr(sys.modules[package], name)


@pytest.mark.parametrize("old", sorted(DEPRECATED_ALIASES))
def test_an_old_name_warns_and_is_the_new_module(old):
    new = importlib.import_module(DEPRECATED_ALIASES[old])
    forget(old)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new.__name__}; the old "
                                                "name goes in the next release"):
        aliased = importlib.import_module(old)
    assert aliased is new
    package, _, name = old.rpartition(".")
    assert getattr(sys.modules[package], name) is new
    for public in PUBLIC_NAMES[old]:
        # `from old import name`, as existing code does.
        assert getattr(importlib.import_module(old), public) is getattr(new, public)


def test_public_names_come_from_the_new_modules():
    import het_tf
    from het_tf import hybrid
    from het_tf.pipeline import hot_rows, lookahead
    from het_tf.training import hybrid_training

    assert het_tf.lookahead is lookahead.lookahead
    for name in ("profile_hot_rows", "use_hot_rows", "hot_and_cold_batches"):
        assert getattr(het_tf, name) is getattr(hot_rows, name)
    for name in PUBLIC_NAMES["het_tf.keras_layers.hybrid_training"]:
        assert getattr(hybrid, name) is getattr(hybrid_training, name)


def test_sync_herald_is_the_scheduler_and_still_loads():
    """sync="herald" named Herald's scheduler before it had an argument of its
    own: the layer, a saved config, CacheConfig and the flag take it for one
    release, with a warning, as scheduler="herald" on a sync by refresh."""
    import argparse

    import tf_keras

    import het_tf
    from het_tf.apps.train import arguments
    from het_tf.keras_layers import HetEmbedding

    with pytest.warns(DeprecationWarning, match=r"HetEmbedding 'old': sync='herald' is "
                                                r"deprecated .* use sync='refresh', "
                                                r"scheduler='herald'") as warned:
        old = HetEmbedding(50, 4, sync="herald", window=3, name="old")
    # On the user's own line, where Python shows a DeprecationWarning.
    assert warned[0].filename == __file__
    new = HetEmbedding(50, 4, scheduler="herald", window=3, name="new")
    assert (old.sync, old.scheduler) == (new.sync, new.scheduler) == ("refresh", "herald")
    assert old.combination == new.combination
    assert old.get_config()["scheduler"] == "herald" and old.get_config()["sync"] == "refresh"
    # A config saved before the scheduler had its own key.
    saved = {k: v for k, v in new.get_config().items() if k != "scheduler"}
    saved.update(sync="herald", name="loaded")
    with pytest.warns(DeprecationWarning, match="sync='herald' is deprecated"):
        loaded = tf_keras.layers.deserialize(
            {"class_name": "het_tf>HetEmbedding", "config": saved})
    assert loaded.combination == new.combination
    with pytest.raises(ValueError, match="'bad': sync='herald' is scheduler='herald'"):
        HetEmbedding(50, 4, sync="herald", scheduler="other", name="bad")

    with pytest.warns(DeprecationWarning,
                      match=r"CacheConfig\(sync='herald'\) is deprecated") as warned:
        config = het_tf.CacheConfig(10, "lfu", 0, -1, sync="herald", window=2)
    assert warned[0].filename == __file__
    assert (config.sync, config.scheduler) == ("refresh", "herald")
    assert config == het_tf.CacheConfig(10, "lfu", 0, -1, scheduler="herald", window=2)

    parser = argparse.ArgumentParser()
    arguments.add_arguments(parser)
    args = parser.parse_args(["--mode", "hybrid", "--sync", "herald", "--window", "4"])
    arguments.check(args)
    assert (args.sync, args.scheduler, args.lookahead) == ("refresh", "herald", True)


def test_staged_aheads_old_name_warns_and_answers_as_staged():
    import numpy as np
    import tensorflow as tf

    import het_tf

    table = het_tf.ShardedTable(het_tf.TableConfig("renamed_staged", 4), [None])
    cache = het_tf.WorkerCache(table, het_tf.CacheConfig(10, "lfu", 0, -1, scheduler="herald",
                                                         window=3))
    for batch in ([1, 2], [2, 3], [4]):
        cache.stage(tf.constant(batch, tf.int64))
    ids = tf.constant([1, 2], tf.int64)
    with pytest.warns(DeprecationWarning, match="WorkerCache.staged_ahead is deprecated") \
            as warned:
        old = cache.staged_ahead(ids, 2)
    assert warned[0].filename == __file__
    # The ids of the 2 batches staged after the step's own, ascending.
    np.testing.assert_array_equal(old.numpy(), [2, 3, 4])
