"""Numbered SavedModel versions of a model that goes on training, in the
folder layout TensorFlow Serving polls (`<folder>/<version>/saved_model.pb`).

Each version is a consistent cut: every step before it, whole, and nothing
of a later one. Under ParameterServerStrategy the chief waits for the steps
scheduled so far and pushes every worker's pending updates (the flush that
a checkpoint does); in hybrid mode every rank pushes its own, then rank 0
writes while the others wait. The caches keep their copies, so training
goes on with its hits. A version is written under a hidden temporary name
and renamed when whole: Serving, which only loads folders named by a
number, never sees half of one.
"""
import errno
import logging
import numbers
import os
import re
import shutil
import threading
import time
import warnings

import tensorflow as tf

from het_tf.distribute import horovod
from het_tf.keras_layers.every_steps import EveryStepsCallback
from het_tf.keras_layers.export import write_saved_model
from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.runtime.disk import out_of_space

# A version being written, or being removed, by the process of that id.
_UNFINISHED = re.compile(r"^\.(\d+)\.(partial|removed)-(\d+)$")


def versions(folder):
    """The numbered versions in `folder`, ascending (folders named by a
    number as this module writes it: "007" is not one)."""
    if not os.path.isdir(folder):
        return []
    return sorted(int(name) for name in os.listdir(folder)
                  if name.isdigit() and str(int(name)) == name
                  and os.path.isdir(os.path.join(folder, name)))


def check_folder(folder, who, what="export folder"):
    """Refuses, before anything is trained, a folder that cannot be written:
    one that is a file, lies under a file, or that this process may not
    write in or create. Creates nothing."""
    path = os.path.abspath(folder)
    existing = path
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    made = "" if existing == path else f" cannot be made: {existing}"
    if not os.path.isdir(existing):
        raise ValueError(f"{who}: the {what} {folder}{made} is a file, not a folder; give "
                         "another path")
    if not _writable(existing):
        raise ValueError(f"{who}: the {what} {folder}{made} is not writable by this "
                         "process; give another path or change its permissions")


def _writable(path):
    # access() answers for this process, root and read-only mounts included.
    return os.access(path, os.W_OK | os.X_OK)


def _whole(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check(every_steps, keep_versions):
    if every_steps is not None and (not _whole(every_steps) or every_steps < 1):
        raise ValueError(f"ExportVersions: every_steps must be None (only when training "
                         f"ends) or a whole number >= 1, got {every_steps!r}")
    if keep_versions is not None and (not _whole(keep_versions) or keep_versions < 1):
        raise ValueError(f"export: keep_versions must be None (keep all) or a whole number "
                         f">= 1, got {keep_versions!r}")


def _step(model):
    """The steps the model has taken: its optimizer's iterations, which a
    checkpoint restores, so a resumed run numbers on from where it was."""
    optimizer = getattr(model, "optimizer", None)
    iterations = getattr(optimizer, "iterations", None)
    return 0 if iterations is None else int(iterations.numpy())


def _remove_leftovers(folder):
    """Removes the hidden folders of exports whose process is gone (killed
    while it wrote or removed a version), and this process's own (a process
    restarted in a fresh container may have the id of the one killed; this
    one writes one version at a time). One process writes a folder: the
    chief, or rank 0."""
    for name in os.listdir(folder):
        match = _UNFINISHED.match(name)
        if match:
            pid = int(match.group(3))
            if pid == os.getpid() or not _running(pid):
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _prune(folder, keep_versions):
    """Removes all but the newest `keep_versions` versions, each renamed
    away first, so Serving sees a version whole or not at all."""
    for version in versions(folder)[:-keep_versions]:
        gone = os.path.join(folder, f".{version}.removed-{os.getpid()}")
        os.replace(os.path.join(folder, str(version)), gone)
        shutil.rmtree(gone, ignore_errors=True)


class _NoRetracingWarning(logging.Filter):
    """Each export makes new variables and traces its own functions again,
    on purpose; TensorFlow would warn of retracing from the fifth one on."""

    def filter(self, record):
        return "triggered tf.function retracing" not in record.getMessage()


def outside_any_strategy(action):
    """Runs `action()` outside the distribution strategy's scope (Keras runs
    callbacks inside it, where a new tf.Variable would be made on a PS
    task): in a thread of its own, whose scope is the default one."""
    if not tf.distribute.has_strategy():
        return action()
    outcome = {}

    def run():
        try:
            outcome["result"] = action()
        except BaseException as e:  # raised again in the caller's thread
            outcome["error"] = e

    thread = threading.Thread(target=run, name="het_tf-export")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _cut(model):
    """Every step scheduled so far done (ParameterServerStrategy's), and
    every pending update of this process's caches pushed; the caches keep
    their copies. Returns the seconds spent waiting for the steps, which
    train on meanwhile: not the export's own time."""
    started = time.perf_counter()
    coordinator = getattr(model, "_cluster_coordinator", None)
    if coordinator is not None and tf.executing_eagerly():
        coordinator.join()
    waited = time.perf_counter() - started
    for layer in het_embedding_layers(model):
        if layer.built:
            layer.flush()
    return waited


def _write_version(model, folder, keep_versions, verbose=True):
    """Rank 0's (or the only process's) half, after the cut: the next
    version, whole or not at all; returns {"version", "path", "step",
    "bytes"}."""
    check_folder(folder, "export_version")
    os.makedirs(folder, exist_ok=True)
    _remove_leftovers(folder)
    step = _step(model)
    version = max([step] + [v + 1 for v in versions(folder)[-1:]])
    path = os.path.join(folder, str(version))
    partial = os.path.join(folder, f".{version}.partial-{os.getpid()}")
    quiet = _NoRetracingWarning()
    tf.get_logger().addFilter(quiet)
    try:
        outside_any_strategy(lambda: write_saved_model(
            model, partial, f"version {version} in {folder}", flushed=True, verbose=verbose))
        os.replace(partial, path)
    except BaseException as e:
        shutil.rmtree(partial, ignore_errors=True)
        if out_of_space(e):
            raise OSError(errno.ENOSPC, f"no space left on the device of {folder} for version "
                          f"{version}; the versions there are kept as they were "
                          f"({_kept(folder)})") from e
        raise
    finally:
        tf.get_logger().removeFilter(quiet)
    size = sum(os.path.getsize(os.path.join(parent, name))
               for parent, _, names in os.walk(path) for name in names)
    if keep_versions is not None:
        try:
            _prune(folder, keep_versions)
        except OSError as e:  # the version is written: say so, and go on training
            warnings.warn(f"export: version {version} is written, but removing older versions "
                          f"from {folder} failed: {e}", stacklevel=2)
    return {"version": version, "path": path, "step": step, "bytes": size}


def _kept(folder):
    held = versions(folder)
    return f"versions {held[0]} to {held[-1]}" if held else "none yet"


def export_version(model, folder, keep_versions=None):
    """Writes `model` as the next numbered SavedModel version in `folder`
    (for TensorFlow Serving: the folder is the model's base path), as
    export_saved_model does, at a consistent cut of the training; keeps only
    the newest `keep_versions` versions if given. The version number is the
    optimizer's step count, or one past the highest version already there
    if that is higher. In hybrid mode call it on every rank at the same
    step. Returns the version's path (None on ranks other than 0)."""
    _check(None, keep_versions)
    written = _export_version(model, os.fspath(folder), keep_versions)
    return None if written is None else written["path"]


def _export_version(model, folder, keep_versions, verbose=True):
    def write(waited):
        return dict(_write_version(model, folder, keep_versions, verbose), wait_seconds=waited)

    if horovod.num_ps() is None:
        return write(_cut(model))
    # Hybrid mode: every rank pushes its own pending updates (all raise if
    # one fails), then rank 0 reads the tables while no rank trains on.
    def cut():
        started = time.perf_counter()
        _cut(model)
        return time.perf_counter() - started

    started = time.perf_counter()
    own = horovod.on_every_rank(cut, "export_version's flush")
    waited = time.perf_counter() - started - own  # for the other ranks' flushes: idle
    return horovod.on_rank_zero(lambda: write(waited), "export_version")


class ExportVersions(EveryStepsCallback):
    """Exports the model being fit as a numbered SavedModel version in
    `folder` every `every_steps` training steps (with steps_per_execution,
    at the end of the execution that reaches them; None: none while it
    trains), and with `at_end` once more when training ends, unless its
    last step was just exported. Keeps the newest `keep_versions` (all if
    None). Works in one process, under ParameterServerStrategy (on the
    chief) and in hybrid mode (on every rank). `exported` lists what it
    wrote (on rank 0): {"version", "step", "bytes", "seconds", "wait_seconds"
    (of them, the wait for the steps already scheduled, which train
    meanwhile, or in hybrid mode for the other ranks' flushes)}; `cuts`
    counts the exports this process took part in.

        model.fit(data, callbacks=[het_tf.ExportVersions("models/ctr", every_steps=1000,
                                                         keep_versions=5)])
    """

    def __init__(self, folder, every_steps, keep_versions=None, at_end=True, verbose=1):
        _check(every_steps, keep_versions)
        super().__init__(every_steps)
        self.folder = os.fspath(folder)
        self.keep_versions = None if keep_versions is None else int(keep_versions)
        self.at_end, self.verbose = at_end, verbose
        self.exported, self.cuts = [], 0

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        # A folder that cannot be written fails here, not at the first export.
        def check():
            check_folder(self.folder, "ExportVersions")

        if horovod.num_ps() is None:
            check()
        else:  # only rank 0 writes; every rank stops if it cannot
            horovod.on_rank_zero(check, "ExportVersions' check of its folder")

    def act(self):
        self.export()

    def on_train_end(self, logs=None):
        if self.at_end and not self.up_to_date:
            self.export()

    def export(self):
        """Exports a version now (on every rank in hybrid mode)."""
        started = time.perf_counter()
        written = _export_version(self.model, self.folder, self.keep_versions,
                                  bool(self.verbose))
        self.acted()
        self.cuts += 1
        if written is None:
            return
        record = {"version": written["version"], "step": written["step"],
                  "bytes": written["bytes"], "seconds": time.perf_counter() - started,
                  "wait_seconds": written["wait_seconds"]}
        self.exported.append(record)
        if self.verbose:
            waited = record["wait_seconds"]
            print(f"het_tf: exported version {record['version']} (step {record['step']}, "
                  f"{record['bytes'] / 1e6:.1f} MB) to {self.folder} in "
                  f"{record['seconds'] - waited:.1f} s"
                  + (f", after waiting {waited:.1f} s for the steps scheduled before it (or "
                     "the other ranks)" if waited >= 0.05 else ""), flush=True)
