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
