"""A synthetic Criteo-like data set, deterministic by seed.

Criteo Kaggle's 26 categorical fields with its per-field cardinalities
(fields above 64 ids scaled by `scale`), Zipf-skewed ids, 13 count-like
integer features with Criteo-like empty rates, and labels drawn from a
hidden logistic model over the integer features and per-id effects derived
from a hash, so AUC measures real learning and nothing the size of the
vocabulary is held in memory. Row r of stream s depends only on
(seed, scale, zipf_exponent, s, r): every worker can make its own part, and
held-out data is simply another stream. The rows are made by a C++ op
(cc_ops/data/core/synthetic_criteo.h), so pipelines run on remote workers too.
"""
import math
import os

import numpy as np
import tensorflow as tf

from het_tf import _op_library
from het_tf.runtime.config import is_whole

# Held-out rows come from this stream; training streams are 0, 1, 2, ...
HELD_OUT_STREAM = 1 << 40


class SyntheticCriteo:
    def __init__(self, seed=0, scale=0.01, zipf_exponent=1.1):
        if not is_whole(seed):
            raise ValueError(f"synthetic criteo: seed must be an int, got {seed!r}")
        for name, value, top in (("scale", scale, 1e3), ("zipf_exponent", zipf_exponent, 10)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 < value <= top or not math.isfinite(value):
                raise ValueError(f"synthetic criteo: {name} must be in (0, {top:g}], got "
                                 f"{value!r}")
        self.seed = int(seed)
        self.scale = float(scale)
        self.zipf_exponent = float(zipf_exponent)
        self._attrs = dict(seed=self.seed, scale=self.scale, zipf_exponent=self.zipf_exponent)
        self._ops = _op_library.load()

    @property
    def cardinalities(self):
        """Ids per categorical field, C1..C26."""
        with tf.init_scope():
            return tuple(int(c) for c in
                         self._ops.het_synthetic_criteo_cardinalities(**self._attrs).numpy())

    @property
    def vocabulary_size(self):
        """Distinct keys the data can hold: every id plus one empty key per field."""
        return sum(self.cardinalities) + len(self.cardinalities)

    def rows(self, stream, first_row, num_rows, with_logits=False):
        """Rows first_row .. first_row + num_rows - 1 of a stream, as
        ({"dense", "categorical"}, labels[, hidden-model logits])."""
        labels, dense, keys, logits = self._ops.het_synthetic_criteo(
            stream, first_row, num_rows, **self._attrs)
        features = {"dense": dense, "categorical": keys}
        return (features, labels, logits) if with_logits else (features, labels)

    def dataset(self, batch_size, stream=0, num_samples=None):
        """Batches of a stream from row 0: endless, or num_samples rows."""
        if not is_whole(batch_size, at_least=1):
            raise ValueError(f"synthetic criteo: batch_size must be a positive int, got "
                             f"{batch_size!r}")
        if num_samples is None:
            batches = tf.data.Dataset.counter()
            sizes = batches.map(lambda b: (b, tf.constant(batch_size, tf.int64)))
        else:
            full, rest = divmod(int(num_samples), batch_size)
            sizes = tf.data.Dataset.from_tensor_slices(
                (np.arange(full + bool(rest), dtype=np.int64),
                 np.array([batch_size] * full + ([rest] if rest else []), np.int64)))
        return (sizes.map(lambda b, n: self.rows(stream, b * batch_size, n),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                .prefetch(tf.data.AUTOTUNE))

    def held_out(self, batch_size, num_samples):
        """The held-out rows every configuration is evaluated on."""
        return self.dataset(batch_size, HELD_OUT_STREAM, num_samples)

    def write_tsv(self, path, num_rows, stream=0, chunk=1 << 16, progress=None):
        """Writes rows 0..num_rows-1 of a stream as a Criteo TSV file; the TSV
        reader gives back exactly what `rows` gives. The file appears only
        when complete. progress(done, total) is called after each chunk."""
        tmp = f"{path}.partial-{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                for first in range(0, num_rows, chunk):
                    n = min(chunk, num_rows - first)
                    lines = self._ops.het_synthetic_criteo_lines(stream, first, n, **self._attrs)
                    f.write(b"\n".join(lines.numpy().tolist()) + b"\n")
                    if progress:
                        progress(first + n, num_rows)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return path
