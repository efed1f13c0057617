"""Checkpointing of a table through TensorFlow's object-based checkpoints.

A table is saved as one logical table (keys, values, slots, clocks, steps),
whatever its number of shards, so it restores onto any number of shards.
Saving pushes every cache's pending updates, then writes the rows; the
caches keep their copies, so a save costs the training no hit. Restoring
replaces every row and empties the caches, whose copies and pending updates
belong to the abandoned run.

The rows go in chunks of at most CHUNK_BYTES, each written by its own SaveV2
(and read back by its own RestoreV2) after the one before it is done, so a
save or restore holds one chunk of a table at a time however large the table
is: one tensor per field would hold a second copy of the whole table in the
saving process (docs/scale.md). TensorFlow's registered-saver hook gives the
save its file prefix, and merges the chunk files into the checkpoint with
the other objects' tensors: a checkpoint is still written under temporary
names and only then made the latest, so a save killed half way leaves the
one before it loadable.

Incremental checkpoints (`full_every` > 1): the shards track the rows
written and dropped since the last checkpoint's cut (row_changes.h); a
checkpoint writes only those, and names its chain: the checkpoints before
it back to the last full one, of its own series (folder and name before
its number), each with its save id.
Restoring applies the chain in order. A checkpoint is full every
full_every-th time, past FULL_SHARE of the rows changed, when its chain
lost or would overwrite a link or is of another series, when its path
is unknown (traced in a tf.function), in compact_checkpoint, and when the
shards' changes are not whole. Changes are dropped only once their
checkpoint is seen kept, at the next save: a save that failed, or was
deleted before the next, leaves its changes to the next. A
tf.train.CheckpointManager keeps a chain whole (checkpoint_chains.py).
"""
import dataclasses
import errno
import os
import random
import warnings

import tensorflow as tf
from tensorflow.python.ops import io_ops
from tensorflow.python.saved_model import registration

from het_tf.runtime import checkpoint_chains as chains
from het_tf.runtime import checkpoint_sketch
from het_tf.runtime.disk import out_of_space
from het_tf.runtime.progress import Progress
from het_tf.runtime.table import ROW_FIELDS

_DTYPES = (tf.int64, tf.float32, tf.float32, tf.int64, tf.int64)
# The most bytes of a table a save or restore holds at once, in one chunk.
CHUNK_BYTES = 64 << 20
# An incremental checkpoint that would write more than this share of the
# table's rows is written full: restoring it then reads less.
FULL_SHARE = 0.25


@dataclasses.dataclass
class _Save:
    prefix: str  # the checkpoint's prefix, absolute
    save_id: int
    chain: list  # [(prefix, save_id)] from the last full checkpoint to this one


class TableCheckpoint(tf.__internal__.tracking.Trackable):
    def __init__(self, table, flush, clear_caches, chunk_bytes=CHUNK_BYTES, restored=None,
                 full_every=None):
        """`flush()` and `clear_caches()` return the ops that push pending
        cache updates (and write hot blocks back) and that empty the caches;
        `restored()`, if given, runs once every row is restored (a hot block
        takes its rows again). `full_every`: None or 1, every checkpoint is
        full; n > 1, incremental ones between full ones, every n-th full
        (its validity is the layer's to check)."""
        self._table = table
        self._flush = flush
        self._clear_caches = clear_caches
        self._restored = restored
        self.chunk_rows = table.chunk_rows(chunk_bytes)
        self.chunk_keys = max(1, chunk_bytes // 8)  # dropped keys a chunk holds
        self.full_every = full_every
        # False: a restore empties this process's caches and leaves the
        # table to another process's restore (hybrid mode's rank 0).
        self.reads_rows = True
        self._chain = None  # [(prefix, save_id)] the next incremental checkpoint adds to
        self._pending = None  # the last save, until it is seen kept
        # What the last save wrote: {"kind": "full" or "incremental", "rows",
        # "dropped", "chain"}, for tests, reports and measurements.
        self.last_save = None

    @property
    def incremental(self):
        return bool(self.full_every) and self.full_every > 1

    # ----- saving -----

    def write_chunks(self, file_prefix, name, after, final_prefix=None):
        """Writes the table as chunks under `file_prefix` (a string tensor),
        the first after the ops `after`; `final_prefix` is the checkpoint's
        own prefix when it is known (None: a full checkpoint, outside any
        chain). Returns (the chunks' prefixes, the last write)."""
        with tf.init_scope():
            # Now, whether or not TensorFlow traces the save: each worker's
            # pending updates reach the shards before any row is read.
            tf.nest.flatten(self._flush())
            changes = self._plan(final_prefix, name)
            if changes is None and self.incremental:
                # No chain until this full one is written: if forgetting
                # fails on a shard, the next checkpoint is full too.
                self._chain = self._pending = None
                self._table.forget_changes()
        save_id = random.getrandbits(62)
        chain = ([] if final_prefix is None else [(final_prefix, save_id)]) if changes is None \
            else self._chain + [(final_prefix, save_id)]
        if self.incremental:
            # Before any write: if this save fails, the next finds it not
            # kept and writes its changes again.
            self._pending = None if final_prefix is None else _Save(final_prefix, save_id, chain)
            if final_prefix is None:
                self._chain = None
        if changes is None:
            prefixes, after, count = self._write_full(file_prefix, name, after)
        else:
            prefixes, after, count = self._write_changes(file_prefix, name, after, changes)
        links = chain[:-1]
        with tf.device("/cpu:0"), tf.control_dependencies(after):
            prefix = tf.strings.join([file_prefix, "_chunks"])
            after = [io_ops.save_v2(
                prefix, [f"{name}/chunks", f"{name}/save_id", f"{name}/links",
                         f"{name}/link_ids"], [""] * 4,
                [tf.constant(count, tf.int64), tf.constant(save_id, tf.int64),
                 tf.constant([os.path.basename(p) for p, _ in links], tf.string,
                             shape=[len(links)]),
                 tf.constant([i for _, i in links], tf.int64, shape=[len(links)])])]
        sketch, after = checkpoint_sketch.write(self._table, file_prefix, name, after)
        return prefixes + [prefix] + sketch, after

    def _plan(self, final_prefix, name):
        """The changes an incremental checkpoint writes, per shard, or None
        when this one is full."""
        if not self.incremental:
            return None
        # The last save stays pending until this one replaces it (in
        # write_chunks, or below once changes are taken): a save that fails
        # before then leaves the next to judge the same one.
        pending = self._pending
        kept = pending is None or chains.holds(pending.prefix, name, pending.save_id)
        if pending is not None:
            # Not kept: the chain it built on (none, if it was full).
            self._chain = pending.chain if kept else (pending.chain[:-1] or None)
        chain = self._chain
        if (final_prefix is None or chain is None or len(chain) >= self.full_every
                or chains.ALL_FULL):
            return None
        if any(p == final_prefix for p, _ in chain):
            return None  # this save overwrites a checkpoint of its own chain
        if any(chains.series(p) != chains.series(final_prefix) for p, _ in chain):
            # A chain is one series (a folder and a name before a number,
            # as a CheckpointManager writes), which its manager keeps whole: a
            # save of another (a second saver, a restored run's folder)
            # starts its own.
            return None
        lost = [p for p, i in chain if not chains.holds(p, name, i)]
        if lost:
            warnings.warn(
                f"{self._table.config.label}: checkpoint {lost[0]}, which the next "
                f"incremental checkpoint would build on, is gone (deleted, or overwritten by "
                f"another save); writing a full checkpoint", stacklevel=2)
            return None
        # Until this save sets its own: a save that fails once changes are
        # taken is never found kept, so the next takes them again.
        self._pending = _Save(None, None, chain + [(None, None)])
        takes = [self._table.take_changes(s, kept) for s in range(self._table.num_shards)]
        if not all(bool(t[0]) for t in takes):
            return None  # a shard was made or cleared since the chain's last cut
        changed = sum(int(t[1].shape[0]) + int(t[2].shape[0]) for t in takes)
        rows = sum(self._table.shard_rows(s) for s in range(self._table.num_shards))
        if changed > FULL_SHARE * max(rows, 1):
            return None
        return [(t[1].numpy(), t[2].numpy()) for t in takes]

    def _write_full(self, file_prefix, name, after):
        with tf.init_scope():
            rows = [self._table.shard_rows(s) for s in range(self._table.num_shards)]
        progress = self._progress("checkpoint", sum(rows))
        prefixes, chunk = [], 0
        for shard, count in enumerate(rows):
            offsets = list(range(0, count, self.chunk_rows)) or [0]
            for i, offset in enumerate(offsets):
                # The last chunk of a shard takes whatever is left.
                limit = self.chunk_rows if i + 1 < len(offsets) else tf.int64.max
                with tf.control_dependencies(after):
                    fields = self._table.export_shard(shard, offset, limit)
                after = self._write_chunk(file_prefix, name, chunk, ROW_FIELDS, fields)
                prefixes.append(tf.strings.join([file_prefix, f"_{chunk}"]))
                progress.advance(min(self.chunk_rows, count - offset))
                chunk += 1
        progress.finish()
        self.last_save = {"kind": "full", "rows": sum(rows), "dropped": 0, "chain": 1}
        return prefixes, after, chunk

    def _write_changes(self, file_prefix, name, after, changes):
        """Each chunk: rows read by key (those still held) and the keys of
        rows dropped, among them the keys read and not held."""
        drops_per_chunk = self.chunk_keys
        total = sum(len(changed) for changed, _ in changes)
        progress = self._progress("incremental checkpoint", total)
        prefixes, chunk = [], 0
        for shard, (changed, dropped) in enumerate(changes):
            pieces = max(-(-len(changed) // self.chunk_rows), -(-len(dropped) // drops_per_chunk),
                         1)
            for i in range(pieces):
                keys = changed[i * self.chunk_rows:(i + 1) * self.chunk_rows]
                with tf.control_dependencies(after):
                    held, absent, *states = self._table.read_held(shard, keys)
                gone = tf.concat(
                    [absent, dropped[i * drops_per_chunk:(i + 1) * drops_per_chunk]], 0)
                after = self._write_chunk(file_prefix, name, chunk, ROW_FIELDS + ("dropped",),
                                          [held, *states, gone])
                prefixes.append(tf.strings.join([file_prefix, f"_{chunk}"]))
                progress.advance(len(keys))
                chunk += 1
        progress.finish()
        self.last_save = {"kind": "incremental", "rows": total,
                          "dropped": sum(len(d) for _, d in changes),
                          "chain": len(self._chain) + 1}
        return prefixes, after, chunk

    def _write_chunk(self, file_prefix, name, chunk, fields, tensors):
        with tf.device("/cpu:0"):
            prefix = tf.strings.join([file_prefix, f"_{chunk}"])
            return [io_ops.save_v2(prefix, [_chunk_name(name, chunk, f) for f in fields],
                                   [""] * len(fields), tensors)]

    def _progress(self, what, total):
        # Counted as the chunks are written: only an eager save writes them
        # then (a traced one, a cluster's, writes them all when it runs).
        return Progress(f"{self._table.config.label}: {what}", total,
                        verbose=tf.executing_eagerly())

    # ----- restoring -----

    def read_chunks(self, name, path, links, save_id):
        """Replaces the table's rows with the checkpoint at `path` saved
        under `name` and the chain of checkpoints it builds on (`links`, as
        check_chain found them), applied in order: the first is full, the
        others incremental. Without `reads_rows`, only empties the caches."""
        with tf.init_scope():
            after = tf.nest.flatten(self._clear_caches())
            if self.reads_rows:
                after = self._read_rows(name, links + [(path, save_id)], after)
            # The restored checkpoint is the cut the next incremental one
            # builds on (a checkpoint from before chains were written: none).
            self._pending = None
            self._chain = None if save_id is None else links + [(path, save_id)]

    def _read_rows(self, name, chain, after):
        after = after + self._table.clear()
        progress = Progress(f"{self._table.config.label}: restore", len(chain),
                            unit="checkpoints")
        for i, (link, _) in enumerate(chain):
            after = self._apply(link, name, after, incremental=i > 0)
            progress.advance(1)
        progress.finish()
        after = checkpoint_sketch.read(self._table, chain[-1][0], name, after)
        if self._restored is not None:
            with tf.control_dependencies(after):
                self._restored()
        if self.incremental:
            with tf.control_dependencies(after):
                self._table.forget_changes()
        return after

    def check_chain(self, merged_prefix, name):
        """(the checkpoint's path, its links, its save id), once every link
        is found holding its save; else a ValueError naming the missing one."""
        path = chains.absolute(merged_prefix.numpy().decode())
        links, save_id = chains.chain_of(path, name)
        for link, link_id in links:
            if not chains.holds(link, name, link_id):
                raise ValueError(
                    f"{self._table.config.label}: checkpoint {path} is incremental and builds "
                    f"on {link}, which is gone or was overwritten by another save; restore a "
                    f"newer checkpoint, or keep the checkpoints back to the last full one "
                    f"(a tf.train.CheckpointManager keeps them by itself)")
        return path, links, save_id

    def _apply(self, prefix, name, after, incremental):
        """Writes one checkpoint's chunks over the table: an incremental
        one's dropped rows erased first, so that a table at its row limit
        has room for the rows that replaced them, then its rows."""
        with tf.device("/cpu:0"):
            (count,) = io_ops.restore_v2(prefix, [f"{name}/chunks"], [""], [tf.int64])
        if incremental:
            for chunk in range(int(count)):
                with tf.device("/cpu:0"), tf.control_dependencies(after):
                    (dropped,) = io_ops.restore_v2(prefix, [_chunk_name(name, chunk, "dropped")],
                                                   [""], [tf.int64])
                after = [tf.group(self._table.erase_rows(dropped))]
        for chunk in range(int(count)):
            with tf.device("/cpu:0"), tf.control_dependencies(after):
                fields = io_ops.restore_v2(prefix,
                                           [_chunk_name(name, chunk, f) for f in ROW_FIELDS],
                                           [""] * len(ROW_FIELDS), _DTYPES)
            after = [self.restore_rows(*fields)]
        return after

    def restore_rows(self, keys, values, slots, clocks, steps):
        """Adds rows to the table, on the shards that own them now."""
        return tf.group(self._table.import_rows(keys, values, slots, clocks, steps))


def _chunk_name(name, chunk, field):
    return f"{name}/chunk_{chunk}/{field}"


def _save_tables(trackables, file_prefix):
    prefixes, after = [], []
    final = chains.final_prefix(file_prefix)
    try:
        for i, (name, table) in enumerate(sorted(trackables.items())):
            written, after = table.write_chunks(tf.strings.join([file_prefix, f"_{i}"]), name,
                                                after, final)
            prefixes += written
    except tf.errors.OpError as e:  # an eager save's write failed: TensorFlow merges nothing
        _remove_written(file_prefix)
        if out_of_space(e):
            raise OSError(errno.ENOSPC, f"no space left on the device of "
                          f"{os.path.dirname(final or '.')} for checkpoint {final}: nothing of "
                          f"it is kept, the checkpoints before it are as they were, and the "
                          f"next one writes its tables' changes") from e
        raise
    # When TensorFlow traces the save (a cluster's), its merge of the files
    # must wait for the writes: it depends on the prefixes returned here.
    with tf.control_dependencies(after):
        return [tf.identity(prefix) for prefix in prefixes]


def _remove_written(file_prefix):
    """Removes the chunk files a failed eager save wrote, which TensorFlow
    would have merged into the checkpoint."""
    for path in tf.io.gfile.glob(f"{file_prefix.numpy().decode()}_*"):
        tf.io.gfile.remove(path)


def _restore_tables(trackables, merged_prefix):
    # Every table's chain is checked before any table changes.
    checked = {name: table.check_chain(merged_prefix, name)
               for name, table in sorted(trackables.items())}
    for name, table in sorted(trackables.items()):
        table.read_chunks(name, *checked[name])


registration.register_checkpoint_saver(
    package="het_tf", name="TableCheckpoint",
    predicate=lambda x: isinstance(x, TableCheckpoint),
    save_fn=_save_tables, restore_fn=_restore_tables)
