"""Real multi-process clusters on 127.0.0.1: ParameterServerStrategy
training, counters, checkpoints restored onto other PS counts, export, and
the loss of a worker or of a PS task."""
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from processes import processes_mentioning
from serving import assert_versions_serve_their_cuts, serve_without_het_tf

from het_tf.apps.launch import LocalCluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "cluster_train.py")
CHIEF_TIMEOUT = 300


class Log(io.TextIOBase):
    """Collects task output (for assertions and for failure reports)."""

    def __init__(self):
        self.lines, self._lock = [], threading.Lock()

    def write(self, text):
        with self._lock:
            self.lines.append(text)
        return len(text)

    def text(self):
        with self._lock:
            return "".join(self.lines)


def assert_all_gone(cluster):
    for name, process in cluster.tasks.items():
        assert process.poll() is not None, f"{name} still running"
        with pytest.raises(ProcessLookupError):
            os.killpg(process.pid, 0)


def run_training(tmp_path, name, ps, workers=2, extra=(), during=None, evaluator=False):
    """Runs examples/cluster_train.py as the chief of a fresh local cluster;
    `during(cluster, chief, log)` may act while it runs. Returns (exit code,
    result dict or None, log text)."""
    result_path = tmp_path / f"{name}.json"
    log = Log()
    cluster = LocalCluster(ps, workers, out=log, evaluator=evaluator)
    try:
        cluster.start()
        chief = cluster.start_chief([sys.executable, SCRIPT, "--result-json", str(result_path),
                                     *extra])
        if during is not None:
            during(cluster, chief, log)
        try:
            code = chief.wait(timeout=CHIEF_TIMEOUT)
            if evaluator:
                code = code or cluster.tasks["evaluator:0"].wait(timeout=CHIEF_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = 124
    finally:
        cluster.close()
    assert_all_gone(cluster)
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    return code, result, log.text()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    code, result, log = run_training(
        tmp, "train", ps=2, evaluator=True,
        extra=["--epochs", "3", "--checkpoint-dir", str(tmp / "ckpt"),
               "--export-dir", str(tmp / "export"), "--export-every", "50",
               "--evaluate-steps", "8"])
    assert code == 0, log[-5000:]
    return tmp, result


def test_training_shards_rows_caches_hits_and_counts_add_up(trained):
    _, result = trained
    losses = result["losses"]
    assert len(losses) == 3 and losses[-1] < losses[0] - 0.02
    assert result["num_ps"] == 2
    assert all(rows > 0 for rows in result["shard_rows"])
    stats = result["stats"]
    assert stats["cache_hits"] > 0 and stats["hit_rate"] > 0.2
    assert stats["cache_capacity"] == 2 * 400  # one cache on each worker
    # Every update a worker made reached a shard, and shows in the clocks.
    assert stats["cache_updates_pushed"] == stats["table_updates_applied"] == result["clock_sum"]
    assert stats["samples"] == 3 * 40 * 32
    assert sum(result["shard_rows"]) == stats["table_rows"] == len(result["table"][0])
    assert result["evaluation"]["auc"] > 0.55
    assert result["pushed_during_evaluation"] == 0  # evaluation never pushes


def test_the_lookahead_prefetches_on_every_worker_and_loses_no_update(tmp_path):
    """Each worker's pipeline stages its next batch in that worker's cache:
    the steps' own exchanges find the misses already fetched, and every
    update still reaches the shards."""
    code, result, log = run_training(tmp_path, "lookahead", ps=2,
                                     extra=["--epochs", "2", "--lookahead"])
    assert code == 0, log[-5000:]
    stats = result["stats"]
    assert stats["cache_prefetched"] > 0
    # Most of what the cache lacked was there before its step asked.
    assert stats["cache_prefetch_hits"] > 2 * stats["cache_misses"]
    assert stats["cache_hits"] + stats["cache_misses"] + stats["cache_prefetch_hits"] == \
        stats["cache_unique_keys"]
    assert stats["cache_updates_pushed"] == stats["table_updates_applied"] == result["clock_sum"]
    losses = result["losses"]
    assert losses[-1] < losses[0]


def test_hot_rows_stay_pinned_in_every_workers_cache(tmp_path):
    """FAE under ParameterServerStrategy: the profile's 10 rows, pinned in
    each worker's LRU cache of 30 rows (a batch's own rows fill it), are all
    still cached on both workers after training. (The 10 hottest ids are in
    7 batches of 10: each worker looks each up many times in 80 steps,
    however the steps fall; the 40th hottest was missed by a worker once.)"""
    code, result, log = run_training(
        tmp_path, "pinned", ps=1, extra=["--epochs", "1", "--steps-per-epoch", "80",
                                         "--hot-rows", "10", "--cache-policy", "lru",
                                         "--cache-capacity", "30"])
    assert code == 0, log[-5000:]
    assert len(result["hot_keys"]) == 10
    assert result["pinned_found"] == 2 * 10
    assert result["stats"]["cache_pinned_keys"] == 2 * 10


def test_a_sidecar_evaluator_task_evaluates_the_checkpoints(trained):
    tmp, _ = trained
    evaluations = json.loads((tmp / "train.json.evaluator").read_text())["evaluations"]
    assert len(evaluations) >= 1  # it may skip checkpoints the chief wrote while it was busy
    assert evaluations[-1]["auc"] > 0.55 and evaluations[-1]["loss"] > 0


def assert_served_without_het_tf(export_dir, result):
    """The export's scores of the run's probe ids, in a process that never
    imports het_tf, equal the trained model's."""
    scores = serve_without_het_tf([export_dir], result["export_inputs"])[str(export_dir)]
    np.testing.assert_allclose(scores, result["export_scores"], rtol=1e-6, atol=1e-7)


def test_versions_exported_while_the_cluster_trains_serve_their_cuts(trained):
    """A version every 50 of the 120 steps (at the end of the execution of
    4 steps that reaches it), and the last: each serves, without het_tf,
    what the model gave at its cut."""
    tmp, result = trained
    assert_versions_serve_their_cuts(tmp / "export", result, [52, 104, 120])


def test_a_masked_sequence_model_trains_and_its_export_masks(tmp_path):
    """mask_zero=True and an embeddings regularizer under
    ParameterServerStrategy: the mask reaches the pooling, the padding row is
    never pushed, and the export served without het_tf masks the same
    padding."""
    code, result, log = run_training(tmp_path, "masked", ps=2,
                                     extra=["--epochs", "3", "--sequence", "--l2", "1e-4",
                                            "--export-dir", str(tmp_path / "export")])
    assert code == 0, log[-5000:]
    losses = result["losses"]
    assert losses[-1] < losses[0] - 0.02
    keys, _, clocks = result["table"]
    assert 0 in keys and clocks[keys.index(0)] == 0  # looked up, never updated
    stats = result["stats"]
    assert stats["cache_updates_pushed"] == stats["table_updates_applied"] == \
        result["clock_sum"] > 0
    assert any(0 in row for row in result["export_inputs"]["ids"])
    assert_served_without_het_tf(tmp_path / "export", result)


# The hybrid ragged run (test_hybrid.py) checks the same MaxNorm on the
# shards and its export in `make test`; this one is in `make soak`.
@pytest.mark.long
def test_a_ragged_model_with_a_row_constraint_trains_and_exports(tmp_path):
    """Ragged ids without a combiner (ragged vectors, pooled) and a
    MaxNorm(axis=1) constraint under ParameterServerStrategy: every row an
    update reached holds the norm on the shards, no update is lost, and the
    export takes the ragged ids as values and row splits."""
    code, result, log = run_training(tmp_path, "ragged", ps=2,
                                     extra=["--epochs", "3", "--ragged",
                                            "--export-dir", str(tmp_path / "export")])
    assert code == 0, log[-5000:]
    losses = result["losses"]
    assert losses[-1] < losses[0] - 0.02
    _, values, clocks = result["table"]
    norms = np.linalg.norm(np.array(values), axis=1)[np.array(clocks) > 0]
    assert len(norms) > 50 and norms.max() <= 0.5 + 1e-6
    stats = result["stats"]
    assert stats["cache_updates_pushed"] == stats["table_updates_applied"] == \
        result["clock_sum"] > 0
    assert set(result["export_inputs"]) == {"ids_values", "ids_row_splits"}
    assert_served_without_het_tf(tmp_path / "export", result)


@pytest.mark.parametrize("ps", [1, 3])
def test_checkpoint_restores_onto_another_number_of_ps_tasks(trained, ps):
    tmp, trained_result = trained
    code, result, log = run_training(
        tmp, f"restore{ps}", ps=ps, workers=1,
        extra=["--epochs", "0", "--checkpoint-dir", str(tmp / "ckpt")])
    assert code == 0, log[-5000:]
    assert result["num_ps"] == ps and "resumed_from" in result
    assert all(rows > 0 for rows in result["shard_rows"])
    keys, values, clocks = result["table"]
    want_keys, want_values, want_clocks = trained_result["table"]
    assert keys == want_keys and clocks == want_clocks
    np.testing.assert_array_equal(np.array(values), np.array(want_values))


def wait_for(log, text, timeout=CHIEF_TIMEOUT):
    deadline = time.monotonic() + timeout
    while text not in log.text():
        if time.monotonic() > deadline:
            raise TimeoutError(f"never saw {text!r}")
        time.sleep(0.2)


def test_training_finishes_when_a_worker_dies(tmp_path):
    def kill_worker(cluster, chief, log):
        wait_for(log, "Epoch 2/")
        cluster.kill_task("worker:1")

    code, result, log = run_training(
        tmp_path, "worker_dies", ps=1, extra=["--epochs", "4", "--steps-per-epoch", "30"],
        during=kill_worker)
    assert code == 0, log[-5000:]
    assert len(result["losses"]) == 4
    assert "is unreachable" in log  # the dead worker's cache was skipped, not waited for
    # Updates that reached the shard are all in its clocks.
    assert result["stats"]["table_updates_applied"] == result["clock_sum"]


def test_a_lost_ps_task_fails_the_chief_and_a_relaunch_resumes(tmp_path):
    ckpt = tmp_path / "ckpt"

    def kill_ps(cluster, chief, log):
        wait_for(log, "Epoch 3/")  # two checkpoints written by now
        cluster.kill_task("ps:0")

    code, _, log = run_training(
        tmp_path, "ps_dies", ps=2,
        extra=["--epochs", "50", "--steps-per-epoch", "20", "--checkpoint-dir", str(ckpt)],
        during=kill_ps)
    assert code not in (0, 124), log[-3000:]
    chief = "\n".join(line for line in log.splitlines() if line.startswith("[chief:0]"))
    with open(tmp_path / "ps_dies.log", "w") as f:
        f.write(chief)
    # The chief says which task went away.
    assert "UnavailableError" in chief and "/job:ps/replica:0/task:0" in chief, chief[-3000:]

    code, result, log = run_training(
        tmp_path, "resumed", ps=2,
        extra=["--epochs", "1", "--steps-per-epoch", "10", "--checkpoint-dir", str(ckpt)])
    assert code == 0, log[-5000:]
    assert result["resumed_from"].startswith(str(ckpt))
    assert result["restored_rows"] > 0
    assert result["stats"]["table_updates_applied"] >= 0 and len(result["losses"]) == 1


HET_TF = os.path.join(os.path.dirname(sys.executable), "het-tf")


def test_launch_returns_the_chiefs_exit_code():
    run = subprocess.run([HET_TF, "launch", "--ps", "1", "--workers", "1", "--",
                          sys.executable, "-c",
                          "import json, os, sys; c = json.loads(os.environ['TF_CONFIG']); "
                          "print('task', c['task']); sys.exit(3)"],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 3, run.stdout[-2000:] + run.stderr[-2000:]
    assert "[chief:0] task {'type': 'chief', 'index': 0}" in run.stdout
    assert "[ps:0] het-tf server ps:0: serving" in run.stdout


def test_a_task_started_after_an_interrupt_is_stopped():
    # Ctrl-C handled while the launcher starts the chief (inside Popen, before
    # the chief is listed) once left the chief running and the launch hanging.
    cluster = LocalCluster(1, 1, out=io.StringIO())
    cluster.interrupt()
    started = time.monotonic()
    code = cluster.run_chief([sys.executable, "-c", "import time; time.sleep(600)"], timeout=60)
    cluster.close()
    assert code == -signal.SIGTERM
    assert time.monotonic() - started < 30


def test_launch_tears_everything_down_on_ctrl_c():
    launcher = subprocess.Popen([HET_TF, "launch", "--ps", "1", "--workers", "2", "--",
                                 sys.executable, "-c", "import time; time.sleep(600)"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in launcher.stdout:
            lines.append(line)
            if "het-tf server worker:1: serving" in line:
                break
        cluster = json.loads(next(line for line in lines if "cluster {" in line).split("cluster ", 1)[1])
        port = cluster["ps"][0].rsplit(":", 1)[1]
        deadline = time.monotonic() + 60
        # The chief starts last.
        while len(processes_mentioning(port)) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(processes_mentioning(port)) >= 4  # ps, 2 workers, chief
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=60) == 130
    finally:
        if launcher.poll() is None:
            launcher.kill()
    deadline = time.monotonic() + 30
    while processes_mentioning(port) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_mentioning(port) == []


# A chief whose TensorFlow has run an op before it asks for the strategy, its
# inter-op threads set to 3 first, with its servers in the same process.
AFTER_AN_OP = """
import json, os
import tensorflow as tf
from het_tf import cluster
from het_tf.apps.launch import free_ports
from het_tf.distribute.server import server_config

tf.config.threading.set_inter_op_parallelism_threads(3)
print("op ran:", float(tf.constant(1.0) + 1))

def cluster_of(workers):
    addresses = [f"127.0.0.1:{p}" for p in free_ports(2 + workers)]
    return {"chief": addresses[:1], "ps": addresses[1:2], "worker": addresses[2:]}

# 3 workers need 4 threads: refused, naming the fix.
os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster_of(3),
                                      "task": {"type": "chief", "index": 0}})
try:
    cluster.parameter_server_strategy()
except ValueError as e:
    print("refused:", e)
# 2 workers need 3: the strategy is made and steps run on the workers.
spec = cluster_of(2)
servers = [tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=job, task_index=i,
                                protocol="grpc", config=server_config(2), start=True)
           for job in ("ps", "worker") for i in range(len(spec[job]))]
os.environ["TF_CONFIG"] = json.dumps({"cluster": spec, "task": {"type": "chief", "index": 0}})
strategy = cluster.parameter_server_strategy()
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    total = tf.Variable(0.0)
step = tf.function(lambda: total.assign_add(1.0))
for _ in range(6):
    coordinator.schedule(step)
coordinator.join()
print("trained:", float(total.numpy()))
"""


def test_the_strategy_after_tensorflow_started_uses_or_refuses_its_threads():
    run = subprocess.run([sys.executable, "-c", AFTER_AN_OP], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert ("refused: parameter_server_strategy: the chief has 3 inter-op threads, and 3 "
            "workers need at least 4 (with fewer, fit deadlocks)") in run.stdout
    assert "before any TensorFlow op" in run.stdout
    assert "set_inter_op_parallelism_threads(5)" in run.stdout
    assert "trained: 6.0" in run.stdout
