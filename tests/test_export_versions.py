"""Numbered SavedModel versions exported while a model trains (het_tf.ExportVersions):
each a consistent cut that serves, without het_tf, what the model gave at
that cut; written whole or not at all; bounded in number."""
import argparse
import errno
import gc
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
import tf_keras
from serving import serve_without_het_tf
from small_disk import run_on_small_disk
from test_checkpoint_export import data, make_model

import het_tf
from het_tf.keras_layers import HetEmbedding, export_versions
from het_tf.keras_layers.export import ServingLookup
from het_tf.keras_layers.export_versions import versions

ROOT_TESTS = os.path.dirname(os.path.abspath(__file__))


class ScoresAtTheCut(tf_keras.callbacks.Callback):
    """The model's own predictions of `probe` right after each export."""

    def __init__(self, exporter, probe):
        super().__init__()
        self.exporter, self.probe, self.scores = exporter, probe, {}

    def on_train_batch_end(self, batch, logs=None):
        for export in self.exporter.exported:
            if export["version"] not in self.scores:
                self.scores[export["version"]] = self.model.predict(self.probe,
                                                                    verbose=0).ravel()

    def on_train_end(self, logs=None):
        self.on_train_batch_end(None)


@pytest.mark.parametrize("input_dim", [300, None], ids=["fixed", "dynamic"])
def test_each_version_serves_the_model_at_its_cut(tmp_path, input_dim):
    x, y = data()
    model = make_model(input_dim, cache_capacity=150)
    folder = tmp_path / "models" / "items"
    exporter = het_tf.ExportVersions(folder, every_steps=3, verbose=0)
    probe = x[:16]
    cut = ScoresAtTheCut(exporter, probe)
    # Unshuffled, the probe is trained in the first step: a dynamic table
    # holds its rows at every cut (it serves ids it does not hold as zeros).
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, shuffle=False,
              callbacks=[exporter, cut])
    # 20 steps: a version every 3 steps, named by the step, and the last step's.
    assert versions(folder) == [3, 6, 9, 12, 15, 18, 20]
    assert sorted(os.listdir(folder)) == sorted(str(v) for v in versions(folder))
    assert [e["step"] for e in exporter.exported] == versions(folder)
    served = serve_without_het_tf([folder / str(v) for v in versions(folder)],
                                  {"ids": probe.tolist()})
    for v in versions(folder):
        np.testing.assert_allclose(served[str(folder / str(v))], cut.scores[v], rtol=1e-6,
                                   atol=1e-7)
    # Training moved the model between cuts: each version is its own.
    for a, b in zip(versions(folder), versions(folder)[1:]):
        assert np.abs(cut.scores[a] - cut.scores[b]).max() > 1e-4
    np.testing.assert_allclose(cut.scores[20], model.predict(probe, verbose=0).ravel(),
                               rtol=1e-6, atol=1e-7)


def test_an_export_keeps_the_caches_copies(tmp_path):
    x, y = data()
    model = make_model(None, cache_capacity=150)
    layer = model.get_layer("items")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    held = layer.het_stats()["cache_rows"]
    pushed = layer.het_stats()["cache_updates_pushed"]
    het_tf.export_version(model, tmp_path / "v")
    stats = layer.het_stats()
    assert held > 0 and stats["cache_rows"] == held
    assert stats["cache_updates_pushed"] > pushed  # the pending updates went into the version
    assert versions(tmp_path / "v") == [10]


def test_keep_versions_bounds_the_folder_and_numbers_go_on_rising(tmp_path):
    x, y = data()
    model = make_model(None, cache_capacity=150)
    folder = tmp_path / "v"
    exporter = het_tf.ExportVersions(folder, every_steps=2, keep_versions=2, verbose=0)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[exporter])
    assert versions(folder) == [8, 10] and sorted(os.listdir(folder)) == ["10", "8"]
    # A model whose step count is behind the folder's newest (a new run
    # into the same folder) still writes a higher number, which Serving picks.
    fresh = make_model(None, cache_capacity=150)
    fresh.fit(x[:64], y[:64], batch_size=32, epochs=1, verbose=0)
    path = het_tf.export_version(fresh, folder, keep_versions=2)
    assert path == str(folder / "11") and versions(folder) == [10, 11]


STEPS_REFUSED = r"every_steps must be None \(only when training ends\) or a whole number >= 1"


@pytest.mark.parametrize("settings, message", [
    (dict(every_steps=0), STEPS_REFUSED),
    (dict(every_steps=2.5), STEPS_REFUSED),
    (dict(every_steps=2, keep_versions=0), "keep_versions must be None"),
])
def test_bad_settings_are_refused(tmp_path, settings, message):
    with pytest.raises(ValueError, match=message):
        het_tf.ExportVersions(tmp_path, **settings)


@pytest.mark.parametrize("where, message", [
    ("file", "the export folder {file} is a file, not a folder"),
    ("file/models", "the export folder {file}/models cannot be made: {file} is a file"),
    ("read-only/models", "the export folder {tmp}/read-only/models cannot be made: "
                         "{tmp}/read-only is not writable by this process"),
])
def test_a_folder_that_cannot_be_written_stops_fit_before_its_first_step(
        tmp_path, monkeypatch, where, message):
    """Found as training begins, not at the first export steps later."""
    (tmp_path / "file").write_text("")
    (tmp_path / "read-only").mkdir()
    # As root, chmod would not stop this process: the check asks access().
    monkeypatch.setattr(export_versions, "_writable",
                        lambda path: not path.endswith("read-only"))
    x, y = data()
    model = make_model(None, cache_capacity=150)
    exporter = het_tf.ExportVersions(tmp_path / where, every_steps=3, verbose=0)
    expected = message.format(file=tmp_path / "file", tmp=tmp_path)
    with pytest.raises(ValueError, match=f"^ExportVersions: {re.escape(expected)}"):
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[exporter])
    assert int(model.optimizer.iterations.numpy()) == 0
    with pytest.raises(ValueError, match=f"^export_version: {re.escape(expected)}"):
        het_tf.export_version(model, tmp_path / where)


def big_table_model():
    """A model whose dynamic table holds 400,000 rows of 32 floats (51 MB)."""
    inp = tf_keras.Input(shape=(1,), dtype="int64", name="ids")
    out = tf_keras.layers.Dense(1, name="score")(tf_keras.layers.Flatten()(
        HetEmbedding(None, 32, cache_capacity=0, name="big")(inp)))
    model = tf_keras.Model(inp, out)
    model.compile("sgd", "mse")
    model.predict(np.arange(400_000, dtype=np.int64)[:, None], batch_size=100_000, verbose=0)
    return model


EXPORT_IN_A_LOOP = r"""
import os, sys, time
os.environ["TF_USE_LEGACY_KERAS"] = "1"
sys.path.insert(0, sys.argv[2])
import het_tf
from test_export_versions import big_table_model
model = big_table_model()
while True:
    start = time.perf_counter()
    het_tf.export_version(model, sys.argv[1])
    print(time.perf_counter() - start, flush=True)
"""


def _writing(folder, pid):
    """Whether `folder` holds the hidden folder of a version that process
    `pid` is writing."""
    try:
        return any(name.startswith(".") and name.endswith(f"-{pid}")
                   for name in os.listdir(folder))
    except FileNotFoundError:
        return False


def _until(folder, process, writing, seconds=300):
    """The moment `process` is (or is no longer) writing a version in
    `folder`, polled while it runs."""
    deadline = time.monotonic() + seconds
    while _writing(folder, process.pid) != writing:
        assert process.poll() is None, "the exporting process ended on its own"
        assert time.monotonic() < deadline, "the export did not get there in time"
        time.sleep(0.001)
    return time.monotonic()


def test_a_killed_export_leaves_only_whole_versions(tmp_path):
    """Kill -9 an exporting process at moments spread over an export: once
    timed from an export's start, and twice while a version is being
    written, at shares of how long the process's first version took to
    write (its hidden folder seen appear and go, so a slow machine moves
    the moments too). Every numbered folder it left loads; the half-written
    one is hidden, and the next export removes it."""
    folder = tmp_path / "v"
    killed_mid_write = 0
    for moment, share in (("export", 0.3), ("write", 0.15), ("write", 0.5)):
        process = subprocess.Popen([sys.executable, "-c", EXPORT_IN_A_LOOP, str(folder),
                                    ROOT_TESTS],
                                   stdout=subprocess.PIPE, text=True,
                                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        try:
            if moment == "export":
                seconds = float(process.stdout.readline())  # one whole export, the next begun
                time.sleep(share * seconds)
            else:
                began = _until(folder, process, writing=True)
                ended = _until(folder, process, writing=False)
                _until(folder, process, writing=True)  # the next version
                time.sleep(share * (ended - began))
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
        killed_mid_write += _writing(folder, process.pid)
    assert killed_mid_write >= 1, "no kill landed while a version was being written"
    held = versions(folder)
    assert held, "no version was written"
    served = serve_without_het_tf([folder / str(v) for v in held], {"ids": [[1], [7]]})
    assert len(served) == len(held)
    x, y = data()
    model = make_model(None, cache_capacity=150)
    model.fit(x[:64], y[:64], batch_size=32, epochs=1, verbose=0)
    het_tf.export_version(model, folder)
    assert all(not name.startswith(".") for name in os.listdir(folder))


def rss_bytes():
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1]) << 10


def test_repeated_exports_do_not_grow_the_process():
    """Each export's copy of the table sat in reference cycles that Python's
    collector did not reach for many exports: 400,000 rows of 32 floats
    (51 MB) grew the process by about that much per export."""
    model = big_table_model()
    folder = tempfile.mkdtemp()
    try:
        for _ in range(2):  # the allocator keeps what the second one's peak took
            het_tf.export_version(model, folder, keep_versions=1)
        settled = rss_bytes()
        for _ in range(4):
            het_tf.export_version(model, folder, keep_versions=1)
        assert rss_bytes() - settled < 30 << 20, (rss_bytes() - settled) >> 20
    finally:
        shutil.rmtree(folder)


def test_exports_leave_the_models_weights_and_hold_no_table_copy(tmp_path):
    """An export used to leave its serving lookup's variables among the
    layer's weights (get_weights grew by a table copy each time, and kept it)."""
    x, y = data()
    model = make_model(None, cache_capacity=150)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    names = [w.name for w in model.weights]
    for _ in range(3):
        het_tf.export_version(model, tmp_path / "v")
    assert [w.name for w in model.weights] == names
    assert len(model.get_weights()) == len(names)
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, ServingLookup)]


@pytest.mark.parametrize("argv", [["--export-every", "100"], ["--keep-versions", "3"]])
def test_het_tf_train_refuses_versions_with_no_save(argv):
    from het_tf.apps.train import arguments

    parser = argparse.ArgumentParser()
    arguments.add_arguments(parser)
    with pytest.raises(ValueError, match="--no-save writes none"):
        arguments.check(parser.parse_args(["--no-save", *argv]))
    arguments.check(parser.parse_args(argv))


FULL_DISK = r"""
import json, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
sys.path.insert(0, sys.argv[2])
import het_tf
from het_tf.keras_layers.export_versions import versions

ROOT_TESTS = os.path.dirname(os.path.abspath(__file__))
from test_checkpoint_export import data, make_model
folder = os.path.join(sys.argv[1], "models")
x, y = data()
model = make_model(None, cache_capacity=150)
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
het_tf.export_version(model, folder)
def files(root):
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
            for d, _, names in os.walk(root) for f in names}
kept = files(folder)
# Fill the file system but for a few kilobytes.
with open(os.path.join(sys.argv[1], "filler"), "wb", buffering=0) as f:
    try:
        while True:
            f.write(b"\0" * 4096)
    except OSError:
        pass
os.truncate(os.path.join(sys.argv[1], "filler"), os.path.getsize(
    os.path.join(sys.argv[1], "filler")) - 16384)
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
try:
    het_tf.export_version(model, folder)
    error = None
except OSError as e:
    error = {"errno": e.errno, "message": str(e)}
print(json.dumps({"error": error, "listing": sorted(os.listdir(folder)),
                  "versions": versions(folder), "kept_unchanged": files(folder) == kept}))
"""


def test_a_full_disk_is_a_clear_error_that_keeps_the_last_version(tmp_path):
    """On a 4 MB file system of its own (a tmpfs in a mount namespace) the
    first version fits; the second meets a full disk: an OSError naming
    ENOSPC, the folder and the version kept, which is untouched, and no
    half version left behind."""
    outcome = run_on_small_disk(tmp_path, FULL_DISK, "4m", ROOT_TESTS)
    assert outcome["error"] is not None, outcome
    assert outcome["error"]["errno"] == errno.ENOSPC
    assert "no space left on the device of" in outcome["error"]["message"]
    assert "versions 10 to 10" in outcome["error"]["message"]
    assert outcome["listing"] == ["10"] and outcome["versions"] == [10]
    assert outcome["kept_unchanged"]


def test_a_long_export_says_how_far_it_is(tmp_path, monkeypatch, capsys):
    from het_tf.runtime import progress

    monkeypatch.setattr(progress, "QUIET_SECONDS", 0.0)
    x, y = data()
    model = make_model(None, cache_capacity=150)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    het_tf.export_version(model, tmp_path / "v")
    lines = [line for line in capsys.readouterr().out.splitlines()
             if line.startswith("het_tf: version 10 in ")]
    held = model.get_layer("items").het_stats()["table_rows"]
    # One chunk holds every row: no tenth before the end is said.
    assert [line.rsplit(", ", 1)[0].split(": ", 2)[2] for line in lines] == [
        "rows read, writing the SavedModel", f"done: {held:,} rows"]


def test_the_next_export_removes_what_dead_exports_left(tmp_path):
    """Hidden folders of a process that is gone, and of one with this
    process's id (a restart in a fresh container reuses ids), are removed;
    those of a live process are kept."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    folder = tmp_path / "v"
    left = [f".4.partial-{gone}", f".3.removed-{gone}", f".5.partial-{os.getpid()}",
            f".6.partial-{live.pid}"]
    try:
        for name in left:
            (folder / name / "variables").mkdir(parents=True)
        x, y = data()
        model = make_model(None, cache_capacity=150)
        model.fit(x[:64], y[:64], batch_size=32, epochs=1, verbose=0)
        het_tf.export_version(model, folder)
        assert sorted(os.listdir(folder)) == sorted(["2", f".6.partial-{live.pid}"])
    finally:
        live.kill()
        live.wait()
