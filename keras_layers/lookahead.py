"""Deprecated alias, for one release: het_tf.keras_layers.lookahead moved to
het_tf.pipeline.lookahead. Importing the old name warns and gives the new module."""
import sys
import warnings

import het_tf.pipeline.lookahead as _moved

warnings.warn(f"{__name__} moved to {_moved.__name__}; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)
# The old name is the new module: every name, private ones too, is the same object.
sys.modules[__name__] = _moved
