"""Keras' own saving calls, for models with HetEmbedding layers.

`model.save("m.keras")` and `model.save_weights("w.weights.h5")` ask each
layer for its state (HetEmbedding.save_own_variables) only once Keras has
opened the file, so a refusal then would leave half a file behind. Each
such call is therefore checked for every HetEmbedding layer first, and the
file is written under a temporary name and renamed when whole: a save that
fails leaves the file that was there before. Keras' HDF5 files (.h5) cannot
hold a table and are refused here, before any file is opened; a SavedModel
is refused by the layer itself, which tf.saved_model.save reaches too."""
import functools
import inspect
import os

from tf_keras.src.saving import saving_lib
from tf_keras.src.saving.legacy import save as legacy_saving
from tf_keras.src.saving.legacy import saving_utils

from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.keras_layers.table_weights import HDF5, KERAS_FILE, check_savable


def _is_hdf5(filepath, save_format):
    """Keras' rule for its legacy calls: the h5 format asked for, an .h5,
    .hdf5 or .keras path, or an open h5py file."""
    if (save_format or "").lower().strip() in ("h5", "hdf5", "keras"):
        return True
    return not isinstance(filepath, (str, os.PathLike)) or saving_utils.is_hdf5_filepath(
        os.fspath(filepath))


def _legacy_checked(save):
    """Legacy model.save / save_weights: HDF5 refused for HetEmbedding layers."""
    signature = inspect.signature(save)

    @functools.wraps(save)
    def checked_then(model, filepath, *args, **kwargs):
        save_format = signature.bind(model, filepath, *args, **kwargs).arguments.get(
            "save_format")
        if _is_hdf5(filepath, save_format):
            for layer in het_embedding_layers(model):
                check_savable(layer, HDF5)
        return save(model, filepath, *args, **kwargs)

    checked_then.het_checks_first = True
    return checked_then


def _keras_file_checked(save, suffix):
    """saving_lib's writers of .keras and .weights.h5 files: every
    HetEmbedding layer checked, then the file written whole or not at all."""
    @functools.wraps(save)
    def checked_then(model, filepath, *args, **kwargs):
        layers = het_embedding_layers(model)
        for layer in layers:
            check_savable(layer, KERAS_FILE)
        filepath = os.fspath(filepath)
        if not layers or saving_lib.is_remote_path(filepath):
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


def install():
    """Routes tf_keras' saving through the checks above (once)."""
    if getattr(saving_lib.save_model, "het_checks_first", False):
        return
    saving_lib.save_model = _keras_file_checked(saving_lib.save_model, ".keras")
    saving_lib.save_weights_only = _keras_file_checked(saving_lib.save_weights_only,
                                                       ".weights.h5")
    legacy_saving.save_model = _legacy_checked(legacy_saving.save_model)
    legacy_saving.save_weights = _legacy_checked(legacy_saving.save_weights)
