"""`het-tf train` end to end in real processes: local, ParameterServerStrategy
and hybrid mode (a cluster it starts itself), TSV input with malformed lines, the run
folder's figures, and the export served by a process without het_tf."""
import json
import os
import subprocess
import sys
from unittest import mock

import project_tools
import pytest
import tensorflow as tf
from criteo_sample import write_sample
from processes import processes_mentioning
from test_cli import TF_LOG_LINE
from test_cli import run as run_as_a_user

from het_tf.data import SyntheticCriteo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


expected_rows = project_tools.load("expected_rows")
HET_TF = [sys.executable, "-m", "het_tf.apps.cli"]
TIMEOUT = 420


def run(args, timeout=TIMEOUT):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)


def train(run_dir, *extra):
    result = run(HET_TF + ["train", "--run-dir", str(run_dir), *extra])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    with open(os.path.join(run_dir, "metrics.json")) as f:
        return json.load(f), result.stdout


def check_run_folder(run_dir, metrics):
    assert 0.6 < metrics["auc"] < metrics["best_auc"] < 0.95
    assert 0 < metrics["logloss"] < 0.69
    assert metrics["samples_per_second"] > 0
    assert 0 < metrics["cache_hit_rate"] <= 1
    assert metrics["embedding_bytes_per_sample"] > 0
    assert metrics["versions"]["tensorflow"] == tf.__version__
    assert os.path.exists(os.path.join(run_dir, "checkpoint", "checkpoint"))
    served = run([sys.executable, os.path.join(ROOT, "examples", "serve_export.py"),
                  str(run_dir)], timeout=120)
    assert served.returncode == 0, served.stdout + served.stderr
    assert "largest difference" in served.stdout


def test_train_local_writes_a_run_that_serves_without_het_tf(tmp_path):
    run_dir = tmp_path / "local"
    metrics, out = train(run_dir, "--model", "dcn", "--samples", "120000", "--batch-size", "512",
                         "--eval-samples", "16384")
    assert "het-tf train: AUC" in out and "samples/s" in out
    assert metrics["workers"] == 1 and metrics["train_samples"] == 230 * 512  # whole chunks
    assert metrics["table_rows_per_task"] == {"local": metrics["table_rows"]}
    check_run_folder(run_dir, metrics)


def test_train_ps_mode_starts_and_stops_its_own_cluster(tmp_path):
    run_dir = tmp_path / "ps"
    metrics, out = train(run_dir, "--mode", "ps", "--ps", "2", "--workers", "2", "--model",
                         "deepfm", "--samples", "160000", "--batch-size", "512",
                         "--eval-samples", "16384", "--staleness", "10",
                         "--export-every", "100", "--keep-versions", "2",
                         "--checkpoint-every", "120", "--full-every", "3")
    assert "[ps:1]" in out and "[worker:1]" in out
    assert metrics["workers"] == 2
    assert metrics["config"]["lookahead"] is True  # the default with a refresh cache
    assert metrics["prefetch_hit_rate"] > 0.05
    # every process's peak memory: a TensorFlow process holds at least 100 MB
    peaks = metrics["peak_rss_bytes"]
    assert sorted(peaks) == ["chief:0", "ps:0", "ps:1", "worker:0", "worker:1"]
    assert all(100 << 20 < peak < 8 << 30 for peak in peaks.values()), peaks
    # the rows each PS task holds, every table's together: both hold some
    rows = metrics["table_rows_per_task"]
    assert sorted(rows) == ["ps:0", "ps:1"] and min(rows.values()) > 0, rows
    assert sum(rows.values()) == metrics["table_rows"]
    # Each worker trains on its own stream: the rows its samples create are
    # as many as the data's distribution gives for all the samples (about
    # 108,000 here; about 72,000 when both workers read the same stream).
    expected, _ = expected_rows.expected_table_rows(0.01, 1.1, metrics["train_samples"])
    assert 0.9 * expected < metrics["table_rows"] < expected, (metrics["table_rows"], expected)
    assert metrics["checkpoint_seconds"] > 0 and metrics["export_seconds"] > 0
    # A version at the end of the first execution of 8 steps that reaches
    # each 100 steps, and the last step's; the newest 2 kept.
    steps = 10 * (160000 // 512 // 10)
    exports = metrics["exports"]
    assert [e["version"] for e in exports] == [e["step"] for e in exports]
    assert [e["step"] for e in exports][-1] == steps and len(exports) == 4
    assert all(e["bytes"] > 0 and e["seconds"] > 0 for e in exports)
    assert sorted(os.listdir(run_dir / "export")) == sorted(str(e["version"])
                                                            for e in exports[-2:])
    # A checkpoint at the end of the first execution of steps (8, or an
    # epoch's last) 120 steps or more after the one before, then the last
    # step's; every table's first is full.
    checkpoints = [c["step"] for c in metrics["checkpoints"]]
    assert len(checkpoints) == 3 and checkpoints[-1] == steps, checkpoints
    assert all(120 <= b - a < 128 for a, b in zip([0] + checkpoints, checkpoints[:2]))
    checkpoints = metrics["checkpoints"]
    assert checkpoints[-1]["path"] == metrics["checkpoint"]
    tables = checkpoints[0]["tables"]
    assert list(tables) == ["embedding"] and tables["embedding"]["kind"] == "full", tables
    check_run_folder(run_dir, metrics)
    assert processes_mentioning(str(run_dir), "cmdline") == []


def test_train_hybrid_mode_starts_and_stops_its_own_cluster(tmp_path):
    run_dir = tmp_path / "hybrid"
    metrics, out = train(run_dir, "--mode", "hybrid", "--ps", "2", "--workers", "2",
                         "--model", "wdl", "--samples", "160000", "--batch-size", "512",
                         "--eval-samples", "16384", "--export-every", "60")
    assert "[ps:1]" in out and "[rank:0]" in out and "[rank:1]" in out
    # Every rank takes part in each version: 150 steps of both ranks, a
    # version every 60, and the last.
    assert [e["step"] for e in metrics["exports"]] == [60, 120, 150]
    assert sorted(os.listdir(run_dir / "export")) == ["120", "150", "60"]
    assert metrics["workers"] == 2
    # Both ranks' batches count: steps of 512 on each of the 2 ranks.
    assert metrics["train_samples"] % (2 * 512) == 0 and metrics["train_samples"] > 100000
    assert metrics["prefetch_hit_rate"] > 0.05
    # A sample looks up at most its 26 ids, and a share of them miss.
    assert 0 < metrics["cache_misses_per_sample"] <= 26 * (1 - metrics["cache_hit_rate"])
    assert sorted(metrics["peak_rss_bytes"]) == ["ps:0", "ps:1", "rank:0"]
    assert sorted(metrics["table_rows_per_task"]) == ["ps:0", "ps:1"]
    assert sum(metrics["table_rows_per_task"].values()) == metrics["table_rows"]
    check_run_folder(run_dir, metrics)
    assert processes_mentioning(str(run_dir), "cmdline") == []


@pytest.mark.long  # test_hybrid.py's hot block and test_hot_rows.py's profile cover it
def test_train_hybrid_mode_with_hot_rows(tmp_path):
    """FAE from the command line: the profile, the hot block exchanged
    between the ranks, and a checkpoint and export of one table."""
    run_dir = tmp_path / "fae"
    metrics, out = train(run_dir, "--mode", "hybrid", "--ps", "1", "--workers", "2",
                         "--model", "wdl", "--samples", "100000", "--batch-size", "512",
                         "--eval-samples", "8192", "--hot-rows", "20000", "--hot-share", "0.2")
    assert "hot rows of 'embedding' take" in out
    profile = metrics["hot_profile"]
    assert 0 < profile["tables"]["embedding"]["hot_rows"] <= 20000
    assert profile["sampled_batches"] > 0 and profile["seconds"] > 0
    assert metrics["hot_bytes_per_sample"] > 0
    assert metrics["config"]["lookahead"] is False  # a layer with hot rows does not prefetch
    check_run_folder(run_dir, metrics)


# The flush pushes each optimizer's pending updates by one path: Adam's and
# FTRL's slots repeat Adagrad's run (`make soak` runs them).
@pytest.mark.parametrize("optimizer", ["adagrad", pytest.param("adam", marks=pytest.mark.long),
                                       pytest.param("ftrl", marks=pytest.mark.long)])
def test_one_workers_flush_moves_nothing_its_cache_had_not_made(tmp_path, optimizer):
    """One worker, unbounded staleness: the cache's local steps follow the
    table's optimizer, so pushing them all at the end leaves the model as
    the worker saw it, up to float rounding. With plain SGD local steps the
    flush moved held-out AUC by 0.03 here (docs/consistency.md)."""
    metrics, _ = train(tmp_path / optimizer, "--mode", "local", "--model", "wdl", "--samples",
                       "120000", "--batch-size", "512", "--eval-samples", "16384",
                       "--optimizer", optimizer, "--staleness", "inf", "--eval-before-flush",
                       "--no-save")
    before = metrics["before_flush"]
    assert metrics["cache_hit_rate"] > 0.5
    assert abs(metrics["auc"] - before["auc"]) < 1e-4
    assert abs(metrics["logloss"] - before["logloss"]) < 1e-4


@pytest.mark.long  # 2 runs of 600,000 samples; `het-tf bench --sweep` measures it with repeats
def test_adagrad_cache_at_staleness_100_costs_no_held_out_accuracy(tmp_path):
    """Two workers, Adagrad, the 10% LFU cache at s=100 against s=0 (the
    direct path), same seed, 600,000 samples (about 290 steps a worker).
    With plain SGD local steps s=100 lost 0.011 to 0.034 AUC and 0.008 to
    0.028 logloss here (3 runs, docs/consistency.md); identical asynchronous
    runs differ by a few thousandths (up to 0.0062 in logloss, seen once),
    so the AUC bound is the one that catches the old fault in every run."""
    common = ["--mode", "ps", "--ps", "1", "--workers", "2", "--model", "wdl", "--samples",
              "600000", "--eval-samples", "20480", "--optimizer", "adagrad", "--seed", "0",
              "--no-save"]
    reference, _ = train(tmp_path / "s0", *common, "--staleness", "0")
    cached, _ = train(tmp_path / "s100", *common, "--staleness", "100", "--eval-before-flush")
    assert cached["cache_hit_rate"] > 0.5 and "cache_hit_rate" not in reference
    assert abs(cached["auc"] - reference["auc"]) < 0.006
    assert abs(cached["logloss"] - reference["logloss"]) < 0.008
    # The flush before evaluation moves the model by little.
    assert abs(cached["logloss"] - cached["before_flush"]["logloss"]) < 0.006


@pytest.mark.long  # 2 runs of 600,000 samples; `het-tf bench --sweep` measures it with repeats
def test_adam_cache_with_two_workers_keeps_held_out_accuracy(tmp_path):
    """Two workers, Adam, s=100 against s=0, same seed, 600,000 samples.
    Before the merge kept only an Adam delta's share of concurrent movement
    (docs/consistency.md, "Adam with several workers"), s=100 lost 0.125 AUC
    here and the flush alone took 0.1 of it; with it the runs are within
    about 0.01 of s=0, and Adam at learning rate 0.05 is noisy, so the
    bounds are loose."""
    common = ["--mode", "ps", "--ps", "1", "--workers", "2", "--model", "wdl", "--samples",
              "600000", "--eval-samples", "20480", "--optimizer", "adam", "--seed", "0",
              "--no-save"]
    reference, _ = train(tmp_path / "s0", *common, "--staleness", "0")
    cached, _ = train(tmp_path / "s100", *common, "--staleness", "100", "--eval-before-flush")
    assert cached["auc"] > reference["auc"] - 0.03
    assert cached["before_flush"]["auc"] - cached["auc"] < 0.03


def test_train_reads_tsv_and_counts_malformed_lines(tmp_path):
    data = SyntheticCriteo(seed=4, scale=0.01)
    rows = data.write_tsv(str(tmp_path / "rows.tsv"), 40000)
    path = str(tmp_path / "day_0.tsv")
    with open(path, "w") as f:  # the damaged lines come first, so training reads them
        f.write("1\tnot\ta line\n" * 7 + open(rows).read())
    run_dir = tmp_path / "tsv"
    metrics, _ = train(run_dir, "--data", path, "--samples", "30000", "--batch-size", "500",
                       "--eval-samples", "1000", "--cache-policy", "lru")
    assert metrics["malformed_records"] == 7
    # 1 batch of lines in 20 is held out. The reader stops near the last
    # batch trained, in the file's first pass: it does not read ahead by
    # the lookahead's staged batches into a second pass.
    assert 30000 <= metrics["records_read"] < 40000
    assert 0.5 < metrics["auc"] <= 1 and metrics["cache_hit_rate"] > 0


def test_train_keeps_every_table_within_max_rows_by_eviction(tmp_path):
    """A stream with far more distinct ids than --max-rows (each of WDL's
    tables, here one) trains; the table stays within its limit at every
    tenth of training (metrics.json's progress), and metrics.json counts
    the rows evicted."""
    metrics, _ = train(tmp_path / "evict", "--samples", "30000", "--batch-size", "500",
                       "--eval-samples", "1000", "--cache-capacity", "2000",
                       "--max-rows", "30000", "--on-full", "evict")
    assert 0 < metrics["table_rows"] <= 30000
    assert metrics["rows_evicted"] > 0 and metrics["rows_expired"] == 0
    progress = metrics["progress"]
    assert len(progress) == 10 and all(0 < p["table_rows"] <= 30000 for p in progress)
    evicted = [p["rows_evicted"] for p in progress]
    assert evicted == sorted(evicted) and evicted[-1] == metrics["rows_evicted"]
    seconds = [p["seconds"] for p in progress]
    assert seconds == sorted(seconds) and seconds[0] > 0
    # Each sample names this process by the task name peak_rss_bytes uses.
    assert all(set(m["rss_bytes"]) == set(metrics["peak_rss_bytes"])
               for m in metrics["memory_timeline"])
    assert all(0 < m["rss_bytes"]["local"] <= metrics["peak_rss_bytes"]["local"]
               for m in metrics["memory_timeline"])


def test_a_first_run_on_a_small_criteo_file_just_works_and_is_quiet(tmp_path):
    """Defaults but for the length: a file of 300 lines, fewer than one batch,
    holds out its last 15 lines and evaluates them once."""
    path = write_sample(tmp_path / "sample.tsv", 300)
    run_dir = tmp_path / "first"
    result = run_as_a_user(HET_TF + ["train", "--data", path, "--samples", "50000",
                                     "--run-dir", str(run_dir)])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    metrics = json.load(open(run_dir / "metrics.json"))
    assert metrics["eval_samples"] == 15
    assert 0 <= metrics["auc"] <= 1 and metrics["logloss"] > 0
    assert metrics["malformed_records"] == 0 and metrics["records_read"] >= 285
    assert "het-tf train: AUC" in result.stdout
    assert not TF_LOG_LINE.search(result.stdout + result.stderr), result.stderr[-4000:]


@pytest.mark.parametrize("args, message", [
    (["--data", "/nonexistent/day_*.tsv"], "no such file"),
    (["--samples", "100"], "less than one batch"),
    (["--cache-capacity", "2.5"], "fraction in (0, 1)"),
    (["--staleness", "-1"], "--staleness: staleness must be 'auto', an int >= 0, or None"),
    (["--staleness", "soon"], "--staleness: staleness must be 'auto', an int >= 0, or None"),
    (["--model", "lr"], "invalid choice"),
    (["--lookahead", "--sync", "check"], "--lookahead: the lookahead stages ids for HetEmbedding caches"),
    (["--hot-rows", "10", "--hot-bytes", "100"], "give one budget, --hot-rows or --hot-bytes"),
    (["--hot-rows", "10", "--lookahead"], "not for a hot block's rows"),
    (["--hot-rows", "10", "--embedding", "keras"], "--embedding keras with --hot-rows / --hot-bytes: hot rows replicate"),
    (["--hot-rows", "-1"], "must be >= 0"),
    (["--hot-rows", "10", "--hot-share", "0"], "--hot-share must be in (0, 1]"),
    (["--scheduler", "herald", "--mode", "ps"], "--scheduler herald with --mode ps: ParameterServerStrategy's workers"),
    (["--scheduler", "herald", "--staleness", "10"], "--scheduler herald with --staleness: Herald's plan is exact and takes no"),
    (["--scheduler", "herald", "--window", "0"], "--window: window must be a number of batches"),
    (["--window", "2"], "--window 2 with no --scheduler: the window is the lookahead of Herald's plan"),
    (["--scheduler", "herald", "--window", "2", "--no-lookahead"], "--no-lookahead with --scheduler herald and --window 2"),
    (["--allocate-every", "-1"], "--allocate-every must be >= 0"),
    (["--allocate-every", "4"], "--allocate-every with --mode local: the allocation moves samples"),
    (["--allocate-every", "4", "--mode", "hybrid", "--workers", "1"], "--allocate-every with --workers 1"),
    (["--allocate-every", "4", "--mode", "hybrid", "--summary-rows", "0"],
     "--summary-rows must be a positive"),
    (["--allocate-every", "4", "--mode", "hybrid", "--stay-bonus", "-2"],
     "--stay-bonus: stay_bonus must be 'auto' or a number of rows >= 0, got '-2'"),
    (["--stay-bonus", "0"], "--stay-bonus is the allocation's: it needs --allocate-every"),
    (["--on-full", "evict"], "--on-full evict needs --max-rows"),
    (["--max-rows", "100", "--embedding", "keras"], "--max-rows with --embedding keras"),
    (["--ttl", "60", "--sync", "check"], "--on-full evict (or --ttl) with --sync check"),
    (["--on-full", "evict", "--max-rows", "100", "--embedding", "tfra"],
     "--embedding tfra with --on-full evict (or --ttl)"),
    (["--admit-after", "2", "--lookahead"], "--lookahead with --admit-after: a step counts once"),
    (["--admit-after", "2", "--embedding", "keras"], "--admit-after with --embedding keras"),
    (["--admit-after", "0"], "--admit-after"),
    (["--drift", "-0.5"], "--drift must be a rate in [0, 1e+06] ids per sample, got -0.5"),
    (["--drift", "nan"], "--drift must be a rate in [0, 1e+06] ids per sample, got nan"),
    (["--drift", "0.1", "--data", __file__], "--drift with --data"),
    (["--full-every", "3", "--no-save"], "--checkpoint-every and --full-every write checkpoints"),
    (["--full-every", "3", "--embedding", "keras"], "--full-every writes HetEmbedding tables"),
    (["--checkpoint-every", "0"], "--checkpoint-every"),
])
def test_train_rejects_bad_arguments(tmp_path, capsys, args, message):
    """In this process, as `het-tf train` parses and checks (the environment
    it sets for its children restored after): each refusal comes before
    anything is started or written."""
    from het_tf.apps import cli

    with mock.patch.dict(os.environ):
        try:
            code = cli.main(["train", "--run-dir", str(tmp_path / "r"), *args])
        except SystemExit as e:  # argparse's own refusals
            code = e.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_the_command_exits_2_with_the_reason(tmp_path):
    result = run(HET_TF + ["train", "--run-dir", str(tmp_path / "r"), "--scheduler", "herald",
                           "--mode", "ps"], timeout=120)
    assert result.returncode == 2
    assert "--scheduler herald with --mode ps: ParameterServerStrategy's workers" in result.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("where", ["export", "run"])
def test_a_run_folder_that_cannot_take_the_export_is_refused_before_training(tmp_path, capsys,
                                                                             where):
    """RUN_DIR/export a file, or RUN_DIR under a file: refused before anything
    starts, not by the first export after training."""
    from het_tf.apps import cli

    (tmp_path / "file").write_text("")
    run_dir = tmp_path / "r" if where == "export" else tmp_path / "file" / "r"
    if where == "export":
        run_dir.mkdir()
        (run_dir / "export").write_text("")
    with mock.patch.dict(os.environ):
        code = cli.main(["train", "--run-dir", str(run_dir), "--samples", "2048",
                         "--batch-size", "256"])
    assert code == 2
    expected = (f"het-tf train: the export folder {run_dir}/export is a file, not a folder"
                if where == "export" else
                f"het-tf train: the run folder {run_dir} cannot be made: {tmp_path}/file is a "
                "file, not a folder")
    assert expected in capsys.readouterr().err
    # Nothing written: no checkpoint, no metrics.json.
    assert sorted(os.listdir(tmp_path)) == (["file", "r"] if where == "export" else ["file"])
    assert where != "export" or os.listdir(run_dir) == ["export"]


def test_a_failed_export_keeps_the_checkpoint_and_metrics_json(tmp_path, capsys):
    """Every export fails (a disk gone full, say): training goes on, the
    checkpoint and metrics.json are written, the failures are in it, and the
    command exits 1 saying so."""
    from het_tf.apps import cli
    from het_tf.keras_layers import export_versions

    run_dir = tmp_path / "r"
    full = OSError(28, "No space left on device")
    with mock.patch.dict(os.environ), mock.patch.object(export_versions, "write_saved_model",
                                                        side_effect=full):
        code = cli.main(["train", "--run-dir", str(run_dir), "--samples", "2048",
                         "--batch-size", "256", "--eval-samples", "256", "--dim", "4",
                         "--export-every", "4"])
    assert code == 1
    metrics = json.load(open(run_dir / "metrics.json"))
    assert [f["step"] for f in metrics["export_failures"]] == [4, 8]
    assert all("no space left" in f["error"] for f in metrics["export_failures"])
    assert metrics["exports"] == [] and 0 <= metrics["auc"] <= 1
    assert os.path.exists(os.path.join(metrics["checkpoint"] + ".index"))
    err = capsys.readouterr().err
    assert "het-tf train: the export at step 4 to" in err and "training goes on" in err
    assert "het-tf train: 2 export(s) to" in err
