"""A synthetic Criteo-like data set, deterministic by seed.

Criteo Kaggle's 26 categorical fields with its per-field cardinalities
(fields above 64 ids scaled by `scale`), Zipf-skewed ids, 13 count-like
integer features with Criteo-like empty rates, and labels drawn from a
hidden logistic model over the integer features and per-id effects derived
from a hash, so AUC measures real learning and nothing the size of the
vocabulary is held in memory. Row r of stream s depends only on
(seed, scale, zipf_exponent, drift, s, r): every worker can make its own
part, and held-out data is simply another stream. The rows are made by a C++
op (cc_ops/data/core/synthetic_criteo.h), so pipelines run on remote workers
too.

A drifting stream (drift R > 0) moves the popularity of each field with more
than 64 ids in Criteo: at position t of a stream, the id of Zipf rank k is
(k - floor(R t)) mod n, n the field's ids. So the hot ids have moved by R N
ids after N samples: every 1/R samples each id slips one rank and the
field's least popular id becomes its most popular. A row's position is its
index in its stream, so every worker's stream drifts at the same pace; an
id's effect on the label stays the id's own, so recent ids still carry a
learnable signal. Held-out rows can be drawn as at a position (where
training ended) to follow the stream's recent distribution.
"""
import math
import numbers
import os

import numpy as np
import tensorflow as tf

from het_tf import _op_library
from het_tf.runtime.config import is_whole

# Held-out rows come from this stream; training streams are 0, 1, 2, ...
HELD_OUT_STREAM = 1 << 40
# Beyond this a drift is noise rather than a rate (the core's kMaxDrift).
MAX_DRIFT = 1e6


def check_drift(rate, name="drift"):
    """The drift rate R, in ids per sample, as a float: a number in
    [0, MAX_DRIFT]. `name` is what the error calls the setting."""
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) \
            or not 0 <= rate <= MAX_DRIFT:  # NaN fails too
        raise ValueError(f"{name} must be a rate in [0, {MAX_DRIFT:g}] ids per sample, got "
                         f"{rate!r}")
    return float(rate)


def _position_attr(position):
    """The row ops' `position`: -1 draws each row at its own index."""
    if position is None:
        return -1
    if not is_whole(position, at_least=0):
        raise ValueError(f"synthetic criteo: position must be an int >= 0 (a row index of a "
                         f"stream) or None, got {position!r}")
    return int(position)


class SyntheticCriteo:
    def __init__(self, seed=0, scale=0.01, zipf_exponent=1.1, drift=0.0):
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
        self.drift = check_drift(drift, "synthetic criteo: drift")
        self._attrs = dict(seed=self.seed, scale=self.scale, zipf_exponent=self.zipf_exponent,
                           drift=self.drift)
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

    def rows(self, stream, first_row, num_rows, with_logits=False, position=None):
        """Rows first_row .. first_row + num_rows - 1 of a stream, as
        ({"dense", "categorical"}, labels[, hidden-model logits]); with a
        position, each drawn as at that position of the drift rather than
        at its own row index."""
        labels, dense, keys, logits = self._ops.het_synthetic_criteo(
            stream, first_row, num_rows, position=_position_attr(position), **self._attrs)
        features = {"dense": dense, "categorical": keys}
        return (features, labels, logits) if with_logits else (features, labels)

    def dataset(self, batch_size, stream=0, num_samples=None, position=None):
        """Batches of a stream from row 0: endless, or num_samples rows;
        `position` as in `rows`."""
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
        return (sizes.map(lambda b, n: self.rows(stream, b * batch_size, n, position=position),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                .prefetch(tf.data.AUTOTUNE))

    def held_out(self, batch_size, num_samples=None, position=None, part=0):
        """The held-out rows every configuration is evaluated on (endless
        without num_samples). Of a drifting stream, pass the position where
        training ended, the samples each worker's stream gave, to draw them
        as the training streams stand there; by default they drift along
        their own rows. `part` k is another held-out stream, for worker k."""
        return self.dataset(batch_size, HELD_OUT_STREAM + part, num_samples, position)

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
