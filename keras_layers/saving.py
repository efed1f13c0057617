"""Keras' own saving calls, for models with HetEmbedding layers.

`model.save("m.keras")` and `model.save_weights("w.weights.h5")` ask each
layer for its state (HetEmbedding.save_own_variables) only once Keras has
opened the file and written some of the model, so each such call first
pushes every HetEmbedding layer's pending updates (under
ParameterServerStrategy that waits for the steps scheduled so far, so the
whole file is one cut) and checks the layer, before any file is opened. A
local file is written under a temporary name and renamed when whole: a save
that fails leaves the file that was there before. Keras' HDF5 files (.h5)
cannot hold a table: saving and loading them are refused here. A SavedModel
is refused by the layer itself, which tf.saved_model.save reaches too.
Loading reads a file's optimizer slots in the order it holds them
(slot_order.py), so that a file hybrid mode wrote before it applied
gradients in the model's order still puts each slot on its own variable."""
import contextlib
import functools
import inspect
import os

import numpy as np
import tensorflow as tf
import tf_keras
from tf_keras.src.saving import saving_lib
from tf_keras.src.saving.legacy import hdf5_format, saving_utils
from tf_keras.src.saving.legacy import save as legacy_saving

from het_tf.keras_layers import slot_order
from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.keras_layers.table_weights import HDF5, KERAS_FILE, check_savable


def _is_hdf5(filepath, save_format):
    """Keras' rule for its legacy calls: the h5 format asked for, an .h5,
    .hdf5 or .keras path, or an open h5py file."""
    if (save_format or "").lower().strip() in ("h5", "hdf5", "keras"):
        return True
    return not isinstance(filepath, (str, os.PathLike)) or saving_utils.is_hdf5_filepath(
        os.fspath(filepath))


def _refusing_hdf5(model):
    for layer in het_embedding_layers(model):
        check_savable(layer, HDF5)


def _legacy_checked(save):
    """Legacy model.save / save_weights: HDF5 refused for HetEmbedding layers."""
    signature = inspect.signature(save)

    @functools.wraps(save)
    def checked_then(model, filepath, *args, **kwargs):
        save_format = signature.bind(model, filepath, *args, **kwargs).arguments.get(
            "save_format")
        if _is_hdf5(filepath, save_format):
            _refusing_hdf5(model)
        return save(model, filepath, *args, **kwargs)

    checked_then.het_checks_first = True
    return checked_then


def _hdf5_load_checked(load):
    """Legacy load_weights and load_model of an HDF5 file: refused for a
    model with HetEmbedding layers, whose tables such a file cannot hold
    (one saved before these checks holds only a dynamic table's anchor)."""
    @functools.wraps(load)
    def checked_then(f, model, *args, **kwargs):
        _refusing_hdf5(model)
        return load(f, model, *args, **kwargs)

    checked_then.het_checks_first = True
    return checked_then


def _keras_file_checked(save, suffix):
    """saving_lib's writers of .keras and .weights.h5 files: every
    HetEmbedding layer flushed and checked, then the file written whole or
    not at all."""
    @functools.wraps(save)
    def checked_then(model, filepath, *args, **kwargs):
        layers = het_embedding_layers(model)
        for layer in layers:
            if layer.built:
                layer.flush()
            check_savable(layer, KERAS_FILE)
        filepath = os.fspath(filepath)
        # Keras refuses another suffix itself; a remote path it writes as it can.
        if not layers or not filepath.endswith(suffix) or saving_lib.is_remote_path(filepath):
            return save(model, filepath, *args, **kwargs)
        folder, name = os.path.split(filepath)
        if folder:  # as Keras' other formats do
            os.makedirs(folder, exist_ok=True)
        # Keras checks the suffix, so the temporary name keeps it.
        partial = os.path.join(folder, f".{name[:-len(suffix)]}.partial-{os.getpid()}{suffix}")
        try:
            result = save(model, partial, *args, **kwargs)
            os.replace(partial, filepath)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
        return result

    checked_then.het_checks_first = True
    return checked_then


def _slots_in_file_order(load_state):
    """saving_lib's reader of a model's state: the optimizer's variables
    listed in the order the file holds them while it reads the model."""
    @functools.wraps(load_state)
    def load(trackable, weights_store, *args, **kwargs):
        order = None
        whole_model = kwargs.get("inner_path", args[1] if len(args) > 1 else None) == ""
        if whole_model and weights_store and isinstance(trackable, tf_keras.Model):
            stored = weights_store.get("optimizer")
            shapes = [np.shape(stored[str(i)]) for i in range(1, len(stored))]
            order = slot_order.file_order(trackable, shapes)
        with slot_order.read_in_order(trackable, order):
            return load_state(trackable, weights_store, *args, **kwargs)

    load.het_checks_first = True
    return load


def _checkpoint_slots_in_file_order(read):
    """tf.train.Checkpoint's read (restore calls it): each Keras model it
    holds lists its optimizer's variables in the order the checkpoint
    holds them (`<name>/optimizer/_variables/N`) while it is read."""
    @functools.wraps(read)
    def read_in_order(checkpoint, save_path, *args, **kwargs):
        if not isinstance(save_path, (str, os.PathLike)):
            return read(checkpoint, save_path, *args, **kwargs)
        with contextlib.ExitStack() as stack:
            shapes = None
            for name, model in checkpoint._trackable_children().items():
                if not isinstance(model, tf_keras.Model) or not het_embedding_layers(model):
                    continue
                if shapes is None:
                    reader = tf.train.load_checkpoint(os.fspath(save_path))
                    shapes = reader.get_variable_to_shape_map()
                slots = [shapes.get(f"{name}/optimizer/_variables/{i}/.ATTRIBUTES/VARIABLE_VALUE")
                         for i in range(1, len(shapes))]
                slots = slots[:slots.index(None)] if None in slots else slots
                stack.enter_context(slot_order.read_in_order(
                    model, slot_order.file_order(model, slots)))
            return read(checkpoint, save_path, *args, **kwargs)

    read_in_order.het_checks_first = True
    return read_in_order


def install():
    """Routes tf_keras' saving through the checks above (once)."""
    if getattr(saving_lib.save_model, "het_checks_first", False):
        return
    saving_lib.save_model = _keras_file_checked(saving_lib.save_model, ".keras")
    saving_lib.save_weights_only = _keras_file_checked(saving_lib.save_weights_only,
                                                       ".weights.h5")
    saving_lib._load_state = _slots_in_file_order(saving_lib._load_state)
    tf.train.Checkpoint.read = _checkpoint_slots_in_file_order(tf.train.Checkpoint.read)
    legacy_saving.save_model = _legacy_checked(legacy_saving.save_model)
    legacy_saving.save_weights = _legacy_checked(legacy_saving.save_weights)
    for name in ("load_weights_from_hdf5_group", "load_weights_from_hdf5_group_by_name"):
        setattr(hdf5_format, name, _hdf5_load_checked(getattr(hdf5_format, name)))
