"""Exact access counts per id of one table, kept by the HetAccessCounter op
on the caller's device: FAE's profile of which rows are hot."""
import itertools

import numpy as np
import tensorflow as tf

from het_tf import _op_library
from het_tf.runtime.config import TableConfig

_instances = itertools.count()


class AccessCounts:
    """A fresh set of counts for `config`'s table (each instance its own)."""

    def __init__(self, config: TableConfig):
        self.config = config
        self._ops = _op_library.load()
        with tf.init_scope():
            self._handle = self._ops.het_access_counter(
                table_name=config.name, vocabulary_size=config.vocabulary_size,
                shared_name=f"het_access_counts/{config.name}/{next(_instances)}")

    def count(self, ids):
        """Counts one access of each id (any shape); the op checks them."""
        return self._ops.het_count_accesses(self._handle, tf.reshape(tf.cast(ids, tf.int64), [-1]))

    def hottest(self, k):
        """(keys, counts) of the k most accessed ids as NumPy arrays, most
        first, ties in ascending id order; and the accesses counted in all
        and the distinct ids (eager)."""
        keys, counts, total, distinct = self._ops.het_hottest_keys(
            self._handle, tf.constant(k, tf.int64))
        return (np.asarray(keys), np.asarray(counts), int(total), int(distinct))
