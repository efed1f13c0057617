"""How many rows a run of N samples creates, from the synthetic data's own
id distribution: the share of a Criteo-scale table that training touches.

    python tools/expected_rows.py --scale 1 --samples 4e6 1e8 1e9

Each field's ids follow the generator's power law (cc_ops/data/core/
synthetic_criteo.cc: id k of n has probability F(k + 2) - F(k + 1), with
F(x) = (x^(1-a) - 1) / ((n + 1)^(1-a) - 1)), so N samples touch
sum_k 1 - (1 - p_k)^N distinct ids of the field. Missing values (id 0) are
left out, so the figure is an upper bound.

With `--drift R` (het-tf train --drift) the id of rank k at row t of each
of the `--workers` streams is (k - floor(R t)) mod n in fields of more than
64 ids, so id i is drawn at row t with the probability of rank
(i + floor(R t)) mod n, and is never drawn with probability
prod_t (1 - p_rank)^workers: a cyclic correlation of the rows spent at each
shift with log(1 - p), taken by FFT.
"""
import argparse
import os

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the schema's package imports TensorFlow

from het_tf.data.criteo_schema import KAGGLE_CARDINALITIES

MIN_SCALED_CARDINALITY = 64  # as the generator's kMinScaledCardinality
CHUNK = 1 << 22


def field_cardinality(full, scale):
    return max(min(full, MIN_SCALED_CARDINALITY), int(round(full * scale)))


def rank_probabilities(k, n, exponent):
    """The probability of each rank in `k` (a float array) of a field of n ids."""
    span = (n + 1.0) ** (1.0 - exponent) - 1.0
    return ((k + 2.0) ** (1.0 - exponent) - (k + 1.0) ** (1.0 - exponent)) / span


def expected_distinct_drifting(n, exponent, rows, workers, drift):
    """Expected distinct ids of a drifting field of n ids after `rows` rows
    of each of `workers` streams."""
    shifts = np.floor(drift * np.arange(rows, dtype=np.float64)).astype(np.int64) % n
    rows_at = np.bincount(shifts, minlength=n).astype(np.float64)  # rows spent at each shift
    log_unseen = np.log1p(-rank_probabilities(np.arange(n, dtype=np.float64), n, exponent))
    # id i's log P(never drawn) = workers * sum_s rows_at[s] * log_unseen[(i + s) mod n]
    total = workers * np.fft.irfft(np.conj(np.fft.rfft(rows_at)) * np.fft.rfft(log_unseen), n)
    return float(np.sum(-np.expm1(np.minimum(total, 0.0))))


def expected_distinct(n, exponent, samples):
    """Expected distinct ids of one field of n ids after `samples` draws."""
    total = 0.0
    for start in range(0, n, CHUNK):
        p = rank_probabilities(np.arange(start, min(n, start + CHUNK), dtype=np.float64), n,
                               exponent)
        total += float(np.sum(-np.expm1(samples * np.log1p(-p))))
    return total


def expected_table_rows(scale, zipf, samples, drift=0.0, workers=1):
    """(rows N samples create, the vocabulary) for synthetic data, the
    samples split evenly over `workers` streams."""
    sizes = [field_cardinality(c, scale) for c in KAGGLE_CARDINALITIES]
    rows = 0.0
    for full, n in zip(KAGGLE_CARDINALITIES, sizes):
        if drift > 0 and full > MIN_SCALED_CARDINALITY and samples > 0:
            rows += expected_distinct_drifting(n, zipf, int(samples) // workers, workers, drift)
        else:
            rows += expected_distinct(n, zipf, samples)
    return rows, sum(sizes)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--zipf", type=float, default=1.1)
    p.add_argument("--samples", type=float, nargs="+", required=True)
    p.add_argument("--drift", type=float, default=0.0, help="ids per sample (het-tf train's)")
    p.add_argument("--workers", type=int, default=1, help="streams the samples split over")
    args = p.parse_args()
    vocabulary = expected_table_rows(args.scale, args.zipf, 0)[1]
    print(f"--scale {args.scale}: {vocabulary:,} ids")
    for samples in args.samples:
        rows = expected_table_rows(args.scale, args.zipf, samples, args.drift, args.workers)[0]
        print(f"{int(samples):>15,} samples: {rows:>13,.0f} rows ({rows / vocabulary:.1%})")


if __name__ == "__main__":
    main()
