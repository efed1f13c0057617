"""Incremental checkpoints (HetEmbedding's full_checkpoint_every): each
checkpoint between full ones writes only the rows changed and dropped since
the one before, and restoring one applies its chain.

The oracles: the data (a model whose rows follow from the ids it trained,
as tests/sum_of_rows_train.py's), and, where rows are evicted, the table's
full export at each checkpoint's cut, which reads every row and no change
record."""
import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from small_disk import run_on_small_disk

import het_tf
from het_tf.apps.launch import LocalCluster
from het_tf.keras_layers import HetEmbedding
from het_tf.runtime.checkpoint import TableCheckpoint
from het_tf.runtime.config import TableConfig
from het_tf.runtime.table import ShardedTable
from tests import incremental_train
from tests.incremental_train import BATCH, batches, data_rows, sum_of_rows_model
from tests.test_cluster import Log, assert_all_gone


def sorted_rows(table, fields=(0, 1, 3)):
    """Keys, values and clocks (or the `fields` of ROW_FIELDS) in key order."""
    exported = [t.numpy() for t in table.export_all()]
    order = np.argsort(exported[0])
    return tuple(exported[f][order] for f in fields)


def whole_rows(table):
    """Every field: keys, values, optimizer slots, clocks and step counts."""
    return sorted_rows(table, fields=range(5))


def test_a_chain_restores_each_checkpoint_to_what_the_data_made(tmp_path):
    model, layer = sum_of_rows_model(full_every=4)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), tmp_path,
                                         max_to_keep=None)
    trained, saves = [], []
    for step, ids in enumerate(batches()):
        model.train_on_batch(ids, np.zeros((BATCH, 1), np.float32))
        trained.append(ids)
        if step >= 11 and (step - 11) % 4 == 0:
            path = manager.save()
            saves.append((path, list(trained), dict(layer._table_checkpoint.last_save)))
    kinds = [s[2]["kind"] for s in saves]
    assert kinds == ["full", "incremental", "incremental", "incremental"] * 2 + [
        "full", "incremental"], kinds
    for _, steps, save in saves:
        if save["kind"] == "incremental":
            assert save["rows"] < 0.1 * len(data_rows(steps)[0]), save
    for path, steps, _ in saves:
        restored, restored_layer = sum_of_rows_model(full_every=4, name="restored")
        restored(np.zeros((1, 3), np.int64))
        tf.train.Checkpoint(model=restored).restore(path).expect_partial()
        keys, values, clocks = sorted_rows(restored_layer.table)
        want_keys, want_values, want_clocks = data_rows(steps)
        np.testing.assert_array_equal(keys, want_keys, err_msg=path)
        np.testing.assert_array_equal(values, want_values, err_msg=path)
        np.testing.assert_array_equal(clocks, want_clocks, err_msg=path)
    # An incremental checkpoint is a fraction of a full one on disk.
    sizes = {path: sum(os.path.getsize(os.path.join(tmp_path, f)) for f in os.listdir(tmp_path)
                       if f.startswith(os.path.basename(path) + ".")) for path, _, _ in saves}
    assert sizes[saves[1][0]] < sizes[saves[0][0]] / 3, sizes


def test_a_cluster_chain_restores_onto_one_shard(tmp_path):
    """Under ParameterServerStrategy (2 PS tasks, the save traced on the
    chief) the checkpoints between full ones are incremental, and each
    restores in one process onto one shard as the data says."""
    result_path, log = tmp_path / "result.json", Log()
    with LocalCluster(2, 1, out=log) as cluster:
        chief = cluster.start_chief([sys.executable, incremental_train.__file__,
                                     str(result_path), str(tmp_path / "ckpt")])
        code = chief.wait(timeout=300)
    assert_all_gone(cluster)
    assert code == 0, log.text()[-5000:]
    saves = json.loads(result_path.read_text())["saves"]
    assert [s["save"]["kind"] for s in saves] == [
        "full", "incremental", "incremental", "incremental"] * 2 + ["full", "incremental"]
    everything = list(batches())
    for save in saves:
        restored, layer = sum_of_rows_model(incremental_train.FULL_EVERY, name="restored")
        restored(np.zeros((1, 3), np.int64))
        tf.train.Checkpoint(model=restored).restore(save["path"]).expect_partial()
        for got, want in zip(sorted_rows(layer.table), data_rows(everything[:save["steps"]])):
            np.testing.assert_array_equal(got, want, err_msg=save["path"])


def evicting_table(name, shards, full_every=None, max_rows=600):
    """A table whose rows are evicted past 600 (a restored one: 2000, for
    shards that take the rows unevenly)."""
    config = TableConfig(name, 4, seed=3, max_rows=max_rows, on_full="evict")
    table = ShardedTable(config, [None] * shards, instance=name)
    holder = tf.Module()
    holder.table = TableCheckpoint(table, lambda: [], lambda: [], full_every=full_every)
    return table, holder


def assert_restores_to(path, want, name, shards=1, max_rows=2000):
    """Restores the checkpoint at `path` onto a fresh table of `shards`
    shards and checks every field of every row against `want`."""
    restored, restored_holder = evicting_table(name, shards, max_rows=max_rows)
    tf.train.Checkpoint(holder=restored_holder).restore(path)
    for got, expected in zip(whole_rows(restored), want):
        np.testing.assert_array_equal(got, expected, err_msg=f"{path} on {shards}")
    return restored_holder


def with_a_base(name, folder, seed):
    """A filled 2-shard table whose full checkpoint `folder/a` starts a
    chain: (table, its tf.Module holder, checkpoint, rng, the base's path)."""
    table, holder = evicting_table(name, 2, full_every=10)
    checkpoint = tf.train.Checkpoint(holder=holder)
    rng = np.random.default_rng(seed)
    train_some(table, rng, 0, 1000, steps=40)
    return table, holder, checkpoint, rng, checkpoint.write(str(folder / "ckpt-1"))


def train_some(table, rng, low, high, steps=6):
    for _ in range(steps):
        keys = np.unique(rng.integers(low, high, size=40)).astype(np.int64)
        table.gather(keys)
        table.push(keys, tf.fill([len(keys), 4], 0.5), tf.ones([len(keys)], tf.int64), 0.1,
                   return_rows=False)


def test_chains_of_an_evicting_table_restore_onto_other_shard_counts(tmp_path, unique_name):
    """Rows evicted between checkpoints are dropped on restore, rows made
    again come back; a chain saved from 2 shards restores onto 1 and 3."""
    name = unique_name("evicting")
    table, holder = evicting_table(name, 2, full_every=6)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(holder=holder), tmp_path,
                                         max_to_keep=None)
    rng = np.random.default_rng(0)
    train_some(table, rng, 0, 1000, steps=40)  # fills the table
    cuts = []
    for i in range(8):
        train_some(table, rng, 500 + 40 * i, 580 + 40 * i)  # new rows evict old ones
        path = manager.save()
        cuts.append((path, whole_rows(table), dict(holder.table.last_save)))
    assert [c[2]["kind"] for c in cuts] == ["full"] + ["incremental"] * 5 + ["full"] * 1 + [
        "incremental"]
    assert all(c[2]["dropped"] > 0 for c in cuts if c[2]["kind"] == "incremental")
    # Onto 2 shards with the same limit, each as full as the saved one: a
    # checkpoint's dropped rows make room before its rows come.
    for shards, limit in ((1, 2000), (3, 2000), (2, 600)):
        for path, want, _ in cuts:
            assert_restores_to(path, want, f"{name}_r{shards}", shards, limit)


def test_a_checkpoint_deleted_before_the_next_leaves_its_changes_to_the_next(
        tmp_path, unique_name):
    """A checkpoint gone before the next save (deleted, or its save failed)
    is not built on: the next holds its changes too. Restoring one whose
    base is gone names the missing checkpoint."""
    name = unique_name("deleted")
    table, holder, checkpoint, rng, base = with_a_base(name, tmp_path, 1)
    train_some(table, rng, 300, 340, steps=3)
    lost = checkpoint.write(str(tmp_path / "ckpt-2"))
    for f in tf.io.gfile.glob(lost + ".*"):
        os.remove(f)
    train_some(table, rng, 650, 690, steps=3)
    after = checkpoint.write(str(tmp_path / "ckpt-3"))
    assert holder.table.last_save["kind"] == "incremental"
    want = whole_rows(table)
    restored_holder = assert_restores_to(after, want, f"{name}_r")
    for f in tf.io.gfile.glob(base + ".*"):
        os.remove(f)
    with pytest.raises(ValueError, match=r"builds on .*ckpt-1\b.*gone"):
        tf.train.Checkpoint(holder=restored_holder).restore(after)
    # The table is untouched by the refused restore.
    for got, expected in zip(whole_rows(restored_holder.table._table), want):
        np.testing.assert_array_equal(got, expected)
    # The next save, whose chain lost its base, is full.
    with pytest.warns(UserWarning, match=f"{name}.*is gone"):
        checkpoint.write(str(tmp_path / "ckpt-4"))
    assert holder.table.last_save["kind"] == "full"


def test_a_restored_checkpoint_is_the_base_of_the_next(tmp_path, unique_name):
    name = unique_name("resumed")
    table, holder, checkpoint, rng, _ = with_a_base(name, tmp_path, 7)
    train_some(table, rng, 100, 140, steps=3)
    second = checkpoint.write(str(tmp_path / "ckpt-2"))
    resumed, resumed_holder = evicting_table(f"{name}_resumed", 1, full_every=10)
    tf.train.Checkpoint(holder=resumed_holder).restore(second)
    train_some(resumed, rng, 300, 340, steps=3)
    third = tf.train.Checkpoint(holder=resumed_holder).write(str(tmp_path / "ckpt-3"))
    assert resumed_holder.table.last_save["kind"] == "incremental"
    assert resumed_holder.table.last_save["chain"] == 3
    assert_restores_to(third, whole_rows(resumed), f"{name}_r", shards=3)


def test_a_refused_restore_changes_no_table(tmp_path, unique_name):
    """Two tables in one checkpoint: the second's chain lost a link, so
    neither table is restored (the first, whole in the checkpoint, would
    restore alone)."""
    name = unique_name("two")
    tables, holder = {}, tf.Module()
    for part, full_every in (("a", None), ("b", 10)):
        tables[part], saver = evicting_table(f"{name}{part}", 1, full_every=full_every)
        setattr(holder, part, saver.table)
    checkpoint = tf.train.Checkpoint(holder=holder)
    rng = np.random.default_rng(8)
    for table in tables.values():
        train_some(table, rng, 0, 1000, steps=40)
    base = checkpoint.write(str(tmp_path / "ckpt-1"))
    for table in tables.values():
        train_some(table, rng, 0, 40, steps=2)
    newest = checkpoint.write(str(tmp_path / "ckpt-2"))
    assert holder.b.last_save["kind"] == "incremental"
    for f in tf.io.gfile.glob(base + ".*"):
        os.remove(f)
    targets, target_holder = {}, tf.Module()
    for part in ("a", "b"):
        targets[part], saver = evicting_table(f"{name}{part}_r", 1, max_rows=2000)
        setattr(target_holder, part, saver.table)
        train_some(targets[part], rng, 0, 100, steps=2)
    before = {part: whole_rows(t) for part, t in targets.items()}
    with pytest.raises(ValueError, match="gone"):
        tf.train.Checkpoint(holder=target_holder).restore(newest)
    for part, table in targets.items():
        for got, expected in zip(whole_rows(table), before[part]):
            np.testing.assert_array_equal(got, expected)


def test_a_save_that_fails_leaves_its_changes_to_the_next(tmp_path, unique_name, monkeypatch):
    """A save that raises once the changes are taken (a write fails) is not
    kept: the next checkpoint writes its changes with its own."""
    name = unique_name("failed")
    table, holder, checkpoint, rng, _ = with_a_base(name, tmp_path, 6)
    train_some(table, rng, 100, 140, steps=3)

    def failing_write(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "no space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(TableCheckpoint, "_write_chunk", failing_write)
        with pytest.raises(tf.errors.ResourceExhaustedError):
            checkpoint.write(str(tmp_path / "ckpt-2"))
    train_some(table, rng, 700, 740, steps=3)
    after = checkpoint.write(str(tmp_path / "ckpt-3"))
    assert holder.table.last_save["kind"] == "incremental"
    want = whole_rows(table)
    assert_restores_to(after, want, f"{name}_r")


@pytest.mark.parametrize("keep", [2, 4])
def test_a_manager_keeps_the_checkpoints_a_kept_chain_needs(tmp_path, unique_name, keep):
    """CheckpointManager(max_to_keep) below a chain's length holds back the
    bases its kept checkpoints need, and deletes them once none does: every
    kept checkpoint restores, and the folder holds no more than the kept
    checkpoints' chains."""
    name = unique_name("manager")
    table, holder = evicting_table(name, 1, full_every=4)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(holder=holder), tmp_path,
                                         max_to_keep=keep)
    rng = np.random.default_rng(2)
    train_some(table, rng, 0, 1000, steps=40)
    kinds, cuts = [], {}
    for i in range(11):
        train_some(table, rng, 30 * i, 30 * i + 40, steps=2)
        cuts[manager.save()] = whole_rows(table)
        kinds.append(holder.table.last_save["kind"])
        on_disk = sorted(f[:-len(".index")] for f in os.listdir(tmp_path) if f.endswith(".index"))
        chains = {os.path.basename(p) for p in manager.checkpoints}
        chains |= {f"ckpt-{n}" for p in manager.checkpoints
                   for n in range(4 * ((int(p.rsplit("-", 1)[1]) - 1) // 4) + 1,
                                  int(p.rsplit("-", 1)[1]))}
        assert set(on_disk) == chains, (on_disk, manager.checkpoints)
    assert kinds == ["full", "incremental", "incremental", "incremental"] * 2 + [
        "full", "incremental", "incremental"], kinds
    assert len(manager.checkpoints) == keep
    for path in manager.checkpoints:
        assert_restores_to(path, cuts[path], f"{name}_r{path[-1]}", shards=2)


def test_a_second_saver_in_the_folder_starts_its_own_series(tmp_path, unique_name):
    """A checkpoint of another series (a `best` beside a manager's
    `ckpt-<n>`) never builds on the manager's, which it could delete: it and
    the manager's next are full."""
    table, holder, checkpoint, rng, _ = with_a_base(unique_name("series"), tmp_path, 9)
    kinds = []
    for path in ("ckpt-2", "best", "ckpt-3", "ckpt-4"):
        train_some(table, rng, 0, 40, steps=2)
        checkpoint.write(str(tmp_path / path))
        kinds.append(holder.table.last_save["kind"])
    assert kinds == ["incremental", "full", "full", "incremental"], kinds


def test_compaction_folds_a_chain_into_one_full_checkpoint(tmp_path, unique_name):
    name = unique_name("compact")
    table, holder = evicting_table(name, 2, full_every=8)
    checkpoint = tf.train.Checkpoint(holder=holder)
    rng = np.random.default_rng(5)
    for i in range(4):
        train_some(table, rng, 100 * i, 100 * i + 300)
        newest = checkpoint.write(str(tmp_path / f"ckpt-{i}"))
    want = whole_rows(table)
    folded, folded_holder = evicting_table(f"{name}_f", 1, full_every=8)
    out = het_tf.compact_checkpoint(tf.train.Checkpoint(holder=folded_holder), newest,
                                    str(tmp_path / "folded"))
    assert folded_holder.table.last_save["kind"] == "full"
    for f in tf.io.gfile.glob(str(tmp_path / "ckpt-*")):
        os.remove(f)  # the chain is gone: the folded checkpoint stands alone
    assert_restores_to(out, want, f"{name}_r", shards=3)


# The start of a script run in a process of its own: a table of dim 16 on 2
# shards, checkpointed incrementally by a manager into the folder of its
# first argument, and write(), which sets n rows from `first` to `value`.
SAVING_TABLE = r"""
import hashlib, json, os, subprocess, sys
import numpy as np, tensorflow as tf
from het_tf.runtime.checkpoint import TableCheckpoint
from het_tf.runtime.config import TableConfig
from het_tf.runtime.table import ShardedTable

folder = sys.argv[1]
table = ShardedTable(TableConfig("saved", 16), [None, None], instance="saved")
holder = tf.Module()
holder.table = TableCheckpoint(table, lambda: [], lambda: [], full_every=1000)
manager = tf.train.CheckpointManager(tf.train.Checkpoint(holder=holder), folder,
                                     max_to_keep=None)

def write(first, n, value):
    keys = tf.range(first, first + n, dtype=tf.int64)
    table.import_rows(keys, tf.fill([n, 16], float(value)), tf.fill([n, 1, 16], float(value)),
                      tf.fill([n], tf.constant(value + 1, tf.int64)), tf.zeros([n], tf.int64))
"""

FULL_DISK = SAVING_TABLE + r"""
rows = 30000

def digest(t):
    keys, *fields = (x.numpy() for x in t.export_all())
    order = np.argsort(keys)
    return [keys[order].tolist()] + [f[order].sum().item() for f in fields]

write(0, rows, 0)
manager.save()  # about 4.6 MB of the 5 MB
write(0, rows // 5, 1)
error = None
try:
    manager.save()  # the changes, about 0.9 MB more: the disk is full
except OSError as e:
    error = {"errno": e.errno, "message": str(e)}
listing = sorted(os.listdir(folder))
subprocess.run(["mount", "-o", "remount,size=16m", folder], check=True)
write(rows - 100, 1000, 2)
path = manager.save()
kind = holder.table.last_save["kind"]
restored = ShardedTable(TableConfig("saved", 16), [None], instance="restored")
target = tf.Module()
target.table = TableCheckpoint(restored, lambda: [], lambda: [])
tf.train.Checkpoint(holder=target).restore(path)
print(json.dumps({"error": error, "listing": listing, "kind": kind,
                  "restored": digest(restored) == digest(table)}))
"""


def test_a_full_disk_is_a_clear_error_that_keeps_the_chain(tmp_path):
    """On a 5 MB file system of its own (a tmpfs in a mount namespace) the
    full checkpoint fits and the incremental one after it does not: an
    OSError naming ENOSPC and the checkpoint, nothing of it left on disk;
    once there is room the next checkpoint, incremental, holds the failed
    one's changes too."""
    outcome = run_on_small_disk(tmp_path, FULL_DISK, "5m")
    assert outcome["error"] is not None and outcome["error"]["errno"] == errno.ENOSPC, outcome
    assert "no space left on the device of" in outcome["error"]["message"]
    assert "ckpt-2" in outcome["error"]["message"]
    assert all(name == "checkpoint" or name.startswith("ckpt-1.")
               for name in outcome["listing"]), outcome["listing"]
    assert outcome["kind"] == "incremental" and outcome["restored"], outcome


def test_bad_full_checkpoint_every_is_refused_naming_the_layer():
    for bad in (0, -2, 1.5, "4", True):
        with pytest.raises(ValueError, match="HetEmbedding 'emb'.*full_checkpoint_every"):
            HetEmbedding(10, 2, full_checkpoint_every=bad, name="emb")
    layer = HetEmbedding(10, 2, full_checkpoint_every=3, name="emb")
    assert HetEmbedding.from_config(layer.get_config()).full_checkpoint_every == 3


WRITER = SAVING_TABLE + r"""
rows = int(sys.argv[2])
for first in range(0, rows, 1 << 18):
    write(first, min(1 << 18, rows - first), 0)
rng = np.random.default_rng(0)
for n in range(1, 10000):  # until killed: a tenth of the rows changed, then saved
    write(int(rng.integers(0, rows - rows // 10)), rows // 10, n)
    keys, values, _, _, _ = (t.numpy() for t in table.export_all())
    order = np.argsort(keys)
    print("CUT", n, hashlib.sha256(values[order].tobytes()).hexdigest(), flush=True)
    manager.save()
    print("SAVED", n, holder.table.last_save["kind"], flush=True)
"""


def test_a_save_killed_midway_leaves_the_last_good_chain(tmp_path):
    """kill -9 while incremental checkpoints are written: the newest one
    left restores (with its chain) to exactly the rows of its cut."""
    rows = 600_000
    for attempt in range(3):
        folder = tmp_path / str(attempt)
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(folder), str(rows)],
                                  stdout=subprocess.PIPE, text=True, start_new_session=True)
        lines = []
        try:
            deadline = time.monotonic() + 240
            for line in writer.stdout:
                lines.append(line.split())
                if lines[-1][0] == "CUT" and int(lines[-1][1]) == 4 + attempt:
                    time.sleep(0.02 * attempt)  # inside the save that follows
                    break
                assert time.monotonic() < deadline
            os.killpg(writer.pid, signal.SIGKILL)
            writer.wait(timeout=30)
            lines += [line.split() for line in writer.stdout.read().splitlines()]
        finally:
            if writer.poll() is None:
                os.killpg(writer.pid, signal.SIGKILL)
                writer.wait()
            writer.stdout.close()
        cuts = {int(x[1]): x[2] for x in lines if x[0] == "CUT"}
        saved = {int(x[1]): x[2] for x in lines if x[0] == "SAVED"}
        assert saved[1] == "full" and all(saved[n] == "incremental" for n in saved if n > 1)
        latest = tf.train.latest_checkpoint(str(folder))
        newest = int(latest.rsplit("-", 1)[1])
        # The newest saved, or the next if the kill fell after its save
        # and before it was reported.
        assert newest in (max(saved), max(saved) + 1), (newest, saved)
        table = ShardedTable(TableConfig("saved", 16), [None], instance=f"reader{attempt}")
        holder = tf.Module()
        holder.table = TableCheckpoint(table, lambda: [], lambda: [])
        tf.train.Checkpoint(holder=holder).restore(latest).assert_consumed()
        keys, values, _ = sorted_rows(table)
        assert len(keys) == rows
        assert hashlib.sha256(values.tobytes()).hexdigest() == cuts[newest]
        if max(cuts) > newest:  # killed inside the save of the next cut
            return
    pytest.fail("no kill landed inside a save in 3 attempts")
