"""The share of samples FAE would train as hot, on the synthetic data.

    python tools/measure_hot_samples.py --zipf 1.1 1.3 --hot-rows 10000 100000

For each Zipf exponent, profiles (het_tf.profile_hot_rows, its default 5%
share) the first --samples samples of the synthetic Criteo stream that
`het-tf train` trains WDL on, for each budget of hot rows, and reports the
share of accesses the hot rows take and the share of samples whose every
id is hot, in the profiled sample and in all --samples samples (hot rows
picked from a sample can only be ids the sample saw, so the share in the
sample is higher).
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure_memory import write_figures  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=0.01)
    p.add_argument("--zipf", type=float, nargs="+", default=[1.1, 1.3])
    p.add_argument("--hot-rows", type=int, nargs="+", default=[1_000, 10_000, 50_000])
    p.add_argument("--samples", type=int, default=2_000_000)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--share", type=float, default=0.05)
    p.add_argument("--out", help="also write the figures to this JSON file")
    args = p.parse_args()

    import het_tf
    from het_tf.data import SyntheticCriteo
    from het_tf.models import EmbeddingSpec, build_model
    from het_tf.pipeline.hot_rows import count_hot_samples

    figures = {"scale": args.scale, "samples": args.samples, "share": args.share, "runs": []}
    for zipf in args.zipf:
        data = SyntheticCriteo(scale=args.scale, zipf_exponent=zipf)
        model = build_model("wdl", EmbeddingSpec("het", data.cardinalities), dim=16)
        dataset = data.dataset(args.batch_size, num_samples=args.samples)
        for hot_rows in args.hot_rows:
            started = time.perf_counter()
            profile = het_tf.profile_hot_rows(model, dataset, hot_rows=hot_rows,
                                              share=args.share)
            (name, table), = profile.items()
            hot, total = count_hot_samples(model, dataset, profile)
            figures["runs"].append({
                "zipf": zipf, "hot_rows": hot_rows, "vocabulary": data.vocabulary_size,
                "sampled_samples": profile.samples, "distinct_ids": table.distinct_ids,
                "access_coverage": round(table.coverage, 4),
                "hot_sample_share_of_the_sample": round(profile.hot_sample_share, 4),
                "hot_sample_share": round(hot / total, 4),
                "seconds": round(time.perf_counter() - started, 1)})
            print(figures["runs"][-1], flush=True)
    write_figures(figures, args.out)


if __name__ == "__main__":
    main()
