"""`het-tf bench` end to end on a reduced plan: configurations run as real
`het-tf train` processes, figures, ratios, plots and the report."""
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HET_TF = [sys.executable, "-m", "het_tf.apps.cli", "bench"]


def run(args, timeout=900):
    return subprocess.run(HET_TF + args, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_bench_runs_configurations_and_writes_figures_and_plots(tmp_path):
    out = tmp_path / "bench"
    # The cluster run behind shaped links (tests run as root; test_link.py
    # checks the links themselves).
    done = run(["--only", "limit", "het-nocache", "het-s100", "--dim", "16", "--samples", "40960",
                "--eval-samples", "8192", "--timeline-samples", "2048", "--link", "1gbit",
                "--out", str(out)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert [s["key"] for s in results["sections"]] == ["wdl-d16-1gbit"]
    section = results["sections"][0]
    runs = section["runs"]
    assert set(runs) == {"limit", "het-nocache", "het-s100"}
    assert results["link"] == "1gbit" and "## WDL, dim 16: 1gbit" in done.stdout
    assert runs["het-nocache"]["config"]["link"] == "1gbit"
    assert runs["het-nocache"]["config"]["dim"] == 16
    assert runs["limit"]["config"]["link"] is None  # one process: nothing to shape
    rows = {r["name"]: r for r in section["table"]}
    assert rows["limit"]["ratio_to_limit"] == 1.0
    nocache = rows["het-nocache"]
    assert nocache["samples_per_second"] > 0 and nocache["embedding_bytes_per_sample"] > 0
    assert 0.55 < nocache["auc"] < 0.9
    # The wire to the PS task carries the rows, and the dense variables besides.
    assert nocache["wire_ps_bytes_per_sample"] > runs["het-nocache"]["shard_bytes_per_sample"]
    assert section["targets"]["wire_ps_minus_counted"]["het-nocache"] > 0
    # AUC at each tenth of training, against training time.
    timeline = runs["het-nocache"]["timeline"]
    assert len(timeline) == 10
    assert all(a["seconds"] < b["seconds"] for a, b in zip(timeline, timeline[1:]))
    assert section["targets"]["target_auc"] > 0.5
    # Per batch of 1024, thousands of distinct keys: the baseline's traffic is from them.
    assert 1000 < section["unique_id_traffic"]["unique_ids_per_batch"] < 1024 * 26
    lfu = [p["miss_rate"] for p in results["miss_rates"]["lfu"]]
    assert all(a >= b for a, b in zip(lfu, lfu[1:])) and 0 < lfu[-1] < lfu[0] < 1
    for name in ("throughput-wdl-d16-1gbit.png", "auc_time-wdl-d16-1gbit.png", "miss_rate.png",
                 "auc_staleness.png", "report.md"):
        assert (out / name).stat().st_size > 0
    assert "| limit:" in (out / "report.md").read_text()
    # The cached run against its Belady floor: the replay trained on the ids
    # the workers' caches trained on (their own count, evaluations left
    # out), and a cache that cannot see the future moved no fewer bytes.
    floor = runs["het-s100"]["floor"]
    assert floor["unique_keys"] == floor["trained_unique_keys"] > 0
    assert floor["ratio"] >= 1.0 and floor["floor_bytes_per_sample"] > 0
    assert runs["het-nocache"].get("floor") is None
    assert "| het-s100 | " in (out / "report.md").read_text()
    assert "Belady floor" in (out / "report.md").read_text()
    assert not re.search(r"issue \d", (out / "report.md").read_text(), re.IGNORECASE)
    assert results["versions"]["tensorflow-recommenders-addons"] == "0.8.1"


def test_time_to_target_is_the_first_point_past_a_share_of_the_best_auc():
    from het_tf.apps.bench.report import time_to_target

    runs = {"a": {"timeline": [{"seconds": 1, "auc": 0.60}, {"seconds": 2, "auc": 0.70}]},
            "b": {"timeline": [{"seconds": 3, "auc": 0.75}, {"seconds": 4, "auc": 0.80}]},
            "c": {"failed": True}}
    target, seconds = time_to_target(runs, 0.9)
    assert abs(target - 0.72) < 1e-12
    assert seconds == {"a": None, "b": 3}
    assert time_to_target({"c": {"failed": True}}, 0.99) == (None, {})


def test_herald_targets_compare_with_hets_cache_in_the_same_section():
    """Herald's targets: the allocation's hit rate against HET's cache at
    s=100, Herald's bytes and time to target against HET's s=0. The report
    names each target by what it measures, never by an issue."""
    from het_tf.apps.bench.report import _section_report, summarize

    def run(seconds, hit_rate, misses, nbytes):
        return {"config": {"mode": "hybrid"}, "samples_per_second": 1000.0,
                "embedding_bytes_per_sample": nbytes, "cache_hit_rate": hit_rate,
                "cache_misses_per_sample": misses, "auc": 0.79, "logloss": 0.48,
                "timeline": [{"seconds": seconds, "auc": 0.79}]}

    section = {"model": "wdl", "dim": 16, "link": "100mbit",
               "unique_id_traffic": {"bytes_per_sample": 700.0},
               "runs": {"hybrid-s0-check": run(100, 0.38, 16.0, 1800.0),
                        "hybrid-s100": run(47, 0.80, 0.90, 290.0),
                        "herald-alloc": run(50, 0.8005, 0.89, 300.0),
                        "herald-alloc-b0": run(52, 0.82, 0.80, 400.0),
                        "herald": run(76, 0.09, 20.0, 880.0)}}
    section["table"], section["targets"] = summarize(section, 0.99)
    targets = section["targets"]
    assert abs(targets["herald_alloc_hit_rate_minus_s100"]["herald-alloc-b0"] - 0.02) < 1e-9
    assert abs(targets["herald_bytes_reduction_vs_s0_check"] - (1 - 880 / 1800)) < 1e-9
    assert abs(targets["herald_speedup_to_target_vs_s0_check"] - 100 / 76) < 1e-9
    report = "\n".join(_section_report(section, None))
    assert "herald-alloc +0.0005 (missed), herald-alloc-b0 +0.0200 (met)" in report
    assert "48%): 51.1% (met); time to target, HET's s=0 over Herald" in report
    assert "| 0.820 | 0.800 | 0.7900 |" in report  # hit rate, misses per sample, AUC
    assert "target: a raise" in report and not re.search(r"issue \d", report, re.IGNORECASE)


def test_bench_refuses_what_it_cannot_do(tmp_path):
    done = run(["--link", "fast", "--out", str(tmp_path / "b")], timeout=120)
    assert done.returncode == 2 and "give a rate as tc writes it" in done.stderr
    done = run(["--only", "fastest", "--out", str(tmp_path / "b")], timeout=120)
    assert done.returncode == 2 and "no such configuration" in done.stderr
    done = run(["--sweep", "--only", "adagrad-s7", "--out", str(tmp_path / "b")], timeout=120)
    assert done.returncode == 2 and "no such configuration of the sweep" in done.stderr
    done = run(["--sweep", "--repeats", "0", "--out", str(tmp_path / "b")], timeout=120)
    assert done.returncode == 2 and "--repeats >= 1" in done.stderr
    done = run(["--latency", "1ms", "--out", str(tmp_path / "b")], timeout=120)
    assert done.returncode == 2 and "give --link RATE too" in done.stderr
    done = run(["--dim", "0", "--out", str(tmp_path / "b")], timeout=120)
    assert done.returncode == 2 and "--dim must be positive" in done.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.long  # 4 cluster runs; the summary's arithmetic is checked below without them
def test_accuracy_sweep_reports_mean_spread_and_paired_differences(tmp_path):
    out = tmp_path / "sweep"
    # One worker a run: what is checked is the sweep's bookkeeping.
    done = run(["--sweep", "--repeats", "2", "--only", "sgd-s0", "sgd-s100", "--samples", "16384",
                "--eval-samples", "4096", "--workers", "1", "--out", str(out)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert sorted(results["runs"]) == ["sgd-s0-seed0", "sgd-s0-seed1", "sgd-s100-seed0",
                                       "sgd-s100-seed1"]
    seeds = {name: r["config"]["seed"] for name, r in results["runs"].items()}
    assert seeds == {"sgd-s0-seed0": 0, "sgd-s0-seed1": 1, "sgd-s100-seed0": 0,
                     "sgd-s100-seed1": 1}
    rows = {r["setting"]: r for r in results["table"]}
    assert set(rows) == {"s0", "s100"}
    aucs = [results["runs"][f"sgd-s100-seed{i}"]["auc"] for i in range(2)]
    assert rows["s100"]["auc"]["n"] == 2 and abs(rows["s100"]["auc"]["mean"] - sum(aucs) / 2) < 1e-12
    paired = [results["runs"][f"sgd-s100-seed{i}"]["auc"] - results["runs"][f"sgd-s0-seed{i}"]["auc"]
              for i in range(2)]
    assert abs(rows["s100"]["auc_minus_s0"]["mean"] - sum(paired) / 2) < 1e-12
    assert rows["s0"]["auc_minus_s0"]["mean"] == 0
    report = (out / "report.md").read_text()
    assert "| sgd | s100 |" in report and " ± " in report


def test_accuracy_sweep_summary_counts_failures_and_skips_missing_cells():
    from het_tf.apps.bench import accuracy_sweep

    runs = {"adam-s0-seed0": {"auc": 0.70, "logloss": 0.50},
            "adam-s0-seed1": {"auc": 0.72, "logloss": 0.48},
            "adam-s100-seed0": {"auc": 0.69, "logloss": 0.52},
            "adam-s100-seed1": {"failed": True, "reason": "x"}}
    rows = {(r["optimizer"], r["setting"]): r for r in accuracy_sweep.summarize(runs, 2)}
    assert set(rows) == {("adam", "s0"), ("adam", "s100")}
    s100 = rows[("adam", "s100")]
    assert s100["failed"] == 1 and s100["auc"]["n"] == 1 and s100["auc"]["std"] is None
    assert abs(s100["auc_minus_s0"]["mean"] - (0.69 - 0.70)) < 1e-12
    s0 = rows[("adam", "s0")]
    assert abs(s0["auc"]["std"] - 0.0141421356) < 1e-9  # sample standard deviation
    assert "| adam | s100 | 0.6900 |" in accuracy_sweep.report(
        list(rows.values()), {"repeats": 2, "samples": 1000, "workers": 2})
