"""The chains of incremental checkpoints (het_tf.runtime.checkpoint): what
a checkpoint on disk holds and builds on, and tf.train.CheckpointManager's
sweep made to keep the checkpoints a kept chain needs; compaction.

A checkpoint names its links by their names in its own folder, where its
chain lives; a file system URL (gs://, s3://) is kept as it is.
"""
import contextlib
import os
import re

import numpy as np
import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management

# Set while compact_checkpoint writes: every table's checkpoint full.
ALL_FULL = []
# What TensorFlow appends to a checkpoint's prefix for the table saver's files.
_SAVER_SUFFIX = re.compile(r"-het_tf\.TableCheckpoint$")


def open_reader(prefix):
    """A reader of the checkpoint at `prefix`, or None if there is none."""
    try:
        return tf.train.load_checkpoint(prefix) if tf.io.gfile.exists(
            prefix + ".index") else None
    except (tf.errors.OpError, ValueError):
        return None


def holds(prefix, name, save_id):
    """Whether the checkpoint at `prefix` is there and holds the save
    `save_id` of the table saved as `name`."""
    reader = None if prefix is None else open_reader(prefix)
    return (reader is not None and reader.has_tensor(f"{name}/save_id")
            and int(reader.get_tensor(f"{name}/save_id")) == save_id)


def chain_of(prefix, name):
    """([(prefix, save_id)] of the checkpoints the one at `prefix` builds on,
    its own save id): ([], None) for a checkpoint written before chains."""
    reader = open_reader(prefix)
    if reader is None or not reader.has_tensor(f"{name}/save_id"):
        return [], None
    links = [linked(prefix, p) for p in np.atleast_1d(reader.get_tensor(f"{name}/links"))]
    ids = [int(i) for i in np.atleast_1d(reader.get_tensor(f"{name}/link_ids"))]
    return list(zip(links, ids)), int(reader.get_tensor(f"{name}/save_id"))


def absolute(path):
    """A local path made absolute; a file system URL (gs://, s3://) as it is."""
    return path if "://" in path else os.path.abspath(path)


def series(prefix):
    """A checkpoint's series: its folder and its name before the number."""
    return os.path.join(os.path.dirname(prefix),
                        re.sub(r"[-_.]?\d+$", "", os.path.basename(prefix)))


def final_prefix(file_prefix):
    """The checkpoint's own prefix, from the one TensorFlow gives this saver,
    when it is a value (an eager save, or a cluster's traced one); else None."""
    try:
        path = file_prefix.numpy().decode()
    except (AttributeError, TypeError, ValueError):
        return None
    if not _SAVER_SUFFIX.search(path):
        return None
    return absolute(_SAVER_SUFFIX.sub("", path))


def linked(prefix, link):
    """The prefix of a link (a name in the folder of the checkpoint at
    `prefix`, as links are written)."""
    return f"{os.path.dirname(prefix)}/{link.decode() if isinstance(link, bytes) else link}"


def links_of(prefix):
    """The prefixes of every checkpoint the one at `prefix` builds on, for
    any of its tables."""
    reader = open_reader(prefix)
    if reader is None:
        return set()
    return {linked(absolute(prefix), p) for name in reader.get_variable_to_shape_map()
            if name.endswith("/links") for p in np.atleast_1d(reader.get_tensor(name))}


_manager_sweep = checkpoint_management.CheckpointManager._sweep


def sweep_keeping_chains(manager):
    """CheckpointManager's sweep, except that a checkpoint it drops is kept
    on disk while a checkpoint it keeps (or preserves, with
    keep_checkpoint_every_n_hours) builds on it, and deleted at the first
    sweep after none does."""
    if not manager._max_to_keep:  # it deletes nothing: nothing to hold back
        return _manager_sweep(manager)
    before = list(manager._maybe_delete)
    dropped, delete = [], checkpoint_management._delete_file_if_exists
    checkpoint_management._delete_file_if_exists = dropped.append
    try:
        _manager_sweep(manager)
    finally:
        checkpoint_management._delete_file_if_exists = delete
    gone = {spec[:-len(".index")] for spec in dropped if spec.endswith(".index")}
    preserved = getattr(manager, "_het_tf_preserved", [])
    preserved += [p for p in before if p not in manager._maybe_delete and p not in gone]
    manager._het_tf_preserved = preserved
    # A held checkpoint the manager keeps again (its path saved anew) is its.
    held = [p for p in getattr(manager, "_het_tf_held", []) + sorted(gone)
            if p not in manager._maybe_delete]
    needed = set().union(*(links_of(p) for p in list(manager._maybe_delete) + preserved))
    manager._het_tf_held = [p for p in held if absolute(p) in needed]
    for prefix in held:
        if absolute(prefix) not in needed:
            delete(prefix + ".index")
            delete(prefix + ".data-?????-of-?????")


checkpoint_management.CheckpointManager._sweep = sweep_keeping_chains


def compact_checkpoint(checkpoint, path, out):
    """Folds a chain of incremental checkpoints into one full checkpoint:
    restores the checkpoint at `path`, and the chain it builds on, into the
    objects of `checkpoint` (a tf.train.Checkpoint, of a model built for the
    purpose or one whose state may be replaced), then writes them to `out`
    with every table full. Returns the written checkpoint's path, which
    restores without the chain."""
    checkpoint.restore(path).expect_partial()
    with all_full():
        return checkpoint.write(out)


@contextlib.contextmanager
def all_full():
    ALL_FULL.append(True)
    try:
        yield
    finally:
        ALL_FULL.pop()
