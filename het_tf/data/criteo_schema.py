"""Criteo's columns and the field-salted key layout shared by every reader.

A categorical value v (32 bits) of field f becomes the int64 key
`f << 33 | v`; an empty value becomes `f << 33 | 1 << 32`. Keys of two fields
never collide, and a key tells its field and value back (`split_key`). The
C++ parser (cc_ops/data/core/criteo_format.h) uses the same layout.
"""
import numpy as np

DENSE_FIELDS = tuple(f"I{i}" for i in range(1, 14))
CATEGORICAL_FIELDS = tuple(f"C{i}" for i in range(1, 27))
# Distinct values per field in Criteo's Kaggle display-advertising data.
KAGGLE_CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683,
                        8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15,
                        286181, 105, 142572)
FIELD_SHIFT = 33
MISSING_BIT = 1 << 32
VALUE_MASK = (1 << 32) - 1


def criteo_key(field, value):
    """The key of `value` (0 <= value < 2**32) in categorical field `field` (0-based)."""
    return (np.int64(field) << FIELD_SHIFT) | np.int64(value)


def missing_key(field):
    """The key of an empty value in categorical field `field`."""
    return (np.int64(field) << FIELD_SHIFT) | np.int64(MISSING_BIT)


def split_key(keys):
    """(field, value, missing) arrays of int64 keys."""
    keys = np.asarray(keys, np.int64)
    return keys >> FIELD_SHIFT, keys & VALUE_MASK, (keys & MISSING_BIT) != 0
