"""How many rows a run of N samples creates, from the synthetic data's own
id distribution: the share of a Criteo-scale table that training touches.

    python tools/expected_rows.py --scale 1 --samples 4e6 1e8 1e9

Each field's ids follow the generator's power law (cc_ops/data/core/
synthetic_criteo.cc: id k of n has probability F(k + 2) - F(k + 1), with
F(x) = (x^(1-a) - 1) / ((n + 1)^(1-a) - 1)), so N samples touch
sum_k 1 - (1 - p_k)^N distinct ids of the field. Missing values (id 0) are
left out, so the figure is an upper bound.
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


def expected_distinct(n, exponent, samples):
    """Expected distinct ids of one field of n ids after `samples` draws."""
    span = (n + 1.0) ** (1.0 - exponent) - 1.0
    total = 0.0
    for start in range(0, n, CHUNK):
        k = np.arange(start, min(n, start + CHUNK), dtype=np.float64)
        p = ((k + 2.0) ** (1.0 - exponent) - (k + 1.0) ** (1.0 - exponent)) / span
        total += float(np.sum(-np.expm1(samples * np.log1p(-p))))
    return total


def expected_table_rows(scale, zipf, samples):
    """(rows N samples create, the vocabulary) for synthetic data."""
    sizes = [field_cardinality(c, scale) for c in KAGGLE_CARDINALITIES]
    return sum(expected_distinct(n, zipf, samples) for n in sizes), sum(sizes)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--zipf", type=float, default=1.1)
    p.add_argument("--samples", type=float, nargs="+", required=True)
    args = p.parse_args()
    vocabulary = expected_table_rows(args.scale, args.zipf, 0)[1]
    print(f"--scale {args.scale}: {vocabulary:,} ids")
    for samples in args.samples:
        rows = expected_table_rows(args.scale, args.zipf, samples)[0]
        print(f"{int(samples):>15,} samples: {rows:>13,.0f} rows ({rows / vocabulary:.1%})")


if __name__ == "__main__":
    main()
