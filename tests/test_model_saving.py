"""Keras' whole-model saving with HetEmbedding layers: the .keras file (and
.weights.h5) round-trips and resumes, HDF5 and SavedModel are refused before
any file is written, and a table too large for one file is refused. The
ParameterServerStrategy and hybrid cases run in tests/test_exactly_once.py,
whose clusters save and load beside their data oracle."""
import glob
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from het_tf.keras_layers import HetEmbedding, table_weights

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB, DIM, IDS = 200, 4, 3


def make_model(table_optimizer="sgd", dense_optimizer="sgd", input_dim=VOCAB, **layer_kwargs):
    optimizers = {"sgd": tf_keras.optimizers.SGD, "adagrad": tf_keras.optimizers.Adagrad,
                  "adam": tf_keras.optimizers.Adam}
    # The table's optimizer by name, as most users give it.
    settings = dict(optimizer=table_optimizer, cache_capacity=0, name="items") | layer_kwargs
    ids = tf_keras.Input((IDS,), dtype="int64", name="ids")
    rows = tf_keras.layers.Flatten()(HetEmbedding(input_dim, DIM, **settings)(ids))
    hidden = tf_keras.layers.Dense(8, activation="relu")(rows)
    model = tf_keras.Model(ids, tf_keras.layers.Dense(1, activation="sigmoid")(hidden))
    model.compile(optimizers[dense_optimizer](0.05), "binary_crossentropy")
    return model


def data(n=256, seed=0, high=VOCAB):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, high, size=(n, IDS)).astype(np.int64)
    return x, ((x[:, 0] + x[:, 1]) % 2).astype(np.float32)


def table_of(model):
    (layer,) = [x for x in model.layers if isinstance(x, HetEmbedding)]
    layer.flush()
    keys, values, slots, clocks, steps = (t.numpy() for t in layer.table.export_all())
    order = np.argsort(keys)
    return keys[order], values[order], slots[order], clocks[order], steps[order]


def files_in(folder):
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("table_optimizer, dense_optimizer", [("sgd", "sgd"),
                                                              ("adagrad", "adam")])
def test_a_loaded_keras_file_predicts_and_trains_on_as_the_run_that_went_on(
        tmp_path, caplog, table_optimizer, dense_optimizer):
    """The oracle is the run that continued without saving: Adagrad's slots
    and Adam's moments must come back for the loaded run to match it."""
    x, y = data()
    first = make_model(table_optimizer, dense_optimizer)
    first.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    path = str(tmp_path / "model.keras")
    first.save(path)
    loaded = tf_keras.models.load_model(path)  # no custom_objects
    # Keras loads every variable it saved (the table's optimizer is no Keras
    # optimizer object of the layer's: its state is the table's slots).
    assert "Skipping variable loading" not in caplog.text
    np.testing.assert_allclose(loaded.predict(x, verbose=0), first.predict(x, verbose=0),
                               rtol=0, atol=1e-6)
    went_on = first.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    resumed = loaded.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(resumed.history["loss"], went_on.history["loss"], rtol=1e-6)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), first.predict(x, verbose=0),
                               rtol=0, atol=1e-6)
    for a, b in zip(table_of(loaded), table_of(first)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_a_model_rebuilt_from_its_config_needs_no_custom_objects():
    model = make_model()
    for rebuilt in (tf_keras.models.model_from_json(model.to_json()),
                    tf_keras.models.clone_model(model)):
        (layer,) = [x for x in rebuilt.layers if isinstance(x, HetEmbedding)]
        assert layer.get_config() == model.get_layer("items").get_config()


def test_a_keras_file_loads_in_another_process_without_custom_objects(tmp_path):
    """Importing het_tf.keras_layers registers the layer with Keras; rows
    the run never touched come from the seed there as here."""
    x, _ = data(64)
    model = make_model(embeddings_initializer="uniform", cache_capacity=50, staleness=4)
    model.fit(*data(), batch_size=32, epochs=1, verbose=0)  # pending updates in the cache
    path = str(tmp_path / "model.keras")
    model.save(path)
    np.save(tmp_path / "x.npy", x)
    script = ("import numpy as np, tf_keras\n"
              "import het_tf.keras_layers\n"
              f"model = tf_keras.models.load_model({path!r})\n"
              f"np.save({str(tmp_path / 'pred.npy')!r}, "
              f"model.predict(np.load({str(tmp_path / 'x.npy')!r}), verbose=0))\n")
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT, timeout=120,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    np.testing.assert_allclose(np.load(tmp_path / "pred.npy"), model.predict(x, verbose=0),
                               rtol=0, atol=1e-6)


def test_a_dynamic_table_round_trips_through_a_keras_file(tmp_path):
    x, y = data(high=1 << 40)
    model = make_model(table_optimizer="adagrad", input_dim=None)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = tf_keras.models.load_model(path)
    for a, b in zip(table_of(loaded), table_of(model)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=0, atol=1e-6)


def test_loading_weights_replaces_every_row_and_drops_the_cached_updates(tmp_path):
    """Rows first trained after the save are dropped, pending cached
    updates too: the model predicts as it did when it was saved."""
    x, y = data()
    model = make_model(cache_capacity=60, staleness=8)
    model.fit(x[:128], y[:128], batch_size=32, epochs=1, verbose=0)
    path = str(tmp_path / "weights.weights.h5")
    model.save_weights(path)
    saved_table = table_of(model)
    # After the save's flush: evicted rows' updates wait in the outbox, and a
    # read of their rows before then may be a bounded number behind.
    saved_predictions = model.predict(x, verbose=0)  # which makes rows too
    model.fit(x, y, batch_size=32, epochs=2, verbose=0)  # more rows, and updates left cached
    model.load_weights(path)
    for a, b in zip(table_of(model), saved_table):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(model.predict(x, verbose=0), saved_predictions, rtol=0,
                               atol=1e-6)


@pytest.mark.parametrize("save", [
    lambda model, folder: model.save(os.path.join(folder, "model.h5")),
    lambda model, folder: model.save(os.path.join(folder, "model"), save_format="h5"),
    lambda model, folder: model.save_weights(os.path.join(folder, "weights.h5")),
    lambda model, folder: tf_keras.models.save_model(model, os.path.join(folder, "m.hdf5")),
], ids=["save-h5", "save-format-h5", "save-weights-h5", "save-model-hdf5"])
def test_hdf5_is_refused_naming_the_layer_and_what_works(tmp_path, save):
    model = make_model()
    model.fit(*data(64), verbose=0)
    with pytest.raises(ValueError, match=r"HetEmbedding 'items': Keras' HDF5 format .*"
                                         r"model.save\('model.keras'\).*export_saved_model"):
        save(model, str(tmp_path))
    assert files_in(tmp_path) == []


@pytest.mark.parametrize("save", [
    lambda model, path: model.save(path),
    lambda model, path: tf.saved_model.save(model, path),
], ids=["model-save", "tf-saved-model-save"])
def test_a_savedmodel_is_refused_naming_the_layer_and_the_export(tmp_path, save):
    model = make_model()
    model.fit(*data(64), verbose=0)
    with pytest.raises(ValueError, match=r"HetEmbedding 'items': a Keras SavedModel .*"
                                         r"het_tf.export_saved_model\(model, dir\)"):
        save(model, str(tmp_path / "saved"))
    assert files_in(tmp_path) == []


def test_a_table_too_large_for_one_file_is_refused_and_the_old_file_stays(tmp_path,
                                                                          monkeypatch):
    model = make_model(input_dim=None)
    x, y = data(64, high=1 << 40)
    model.fit(x, y, batch_size=64, verbose=0)  # 64 * 3 ids: at most 192 rows
    path = tmp_path / "model.keras"
    model.save(str(path))
    before = path.read_bytes()
    rows = len(table_of(model)[0])
    monkeypatch.setattr(table_weights, "MATERIALIZE_LIMIT", rows * DIM - 1)
    for save in (lambda: model.save(str(path)),
                 lambda: model.save_weights(str(tmp_path / "w.weights.h5"))):
        with pytest.raises(ValueError, match=rf"HetEmbedding 'items': the table holds {rows} "
                                             r"rows .*model.save_weights\('dir/weights'\)"):
            save()
    assert path.read_bytes() == before
    assert files_in(tmp_path) == ["model.keras"]


def test_a_save_that_fails_half_way_leaves_the_file_before_it(tmp_path, monkeypatch):
    """The fault: the table's read fails after Keras has opened the file."""
    model = make_model()
    model.fit(*data(64), verbose=0)
    path = tmp_path / "model.keras"
    model.save(str(path))
    before = path.read_bytes()
    model.fit(*data(64, seed=1), verbose=0)
    (layer,) = [x for x in model.layers if isinstance(x, HetEmbedding)]

    def lost_shard():
        raise tf.errors.UnavailableError(None, None, "the parameter server went away")

    monkeypatch.setattr(layer.table, "export_all", lost_shard)
    with pytest.raises(tf.errors.UnavailableError):
        model.save(str(path))
    assert path.read_bytes() == before
    assert files_in(tmp_path) == ["model.keras"]


def test_a_keras_path_keeps_keras_own_rules(tmp_path):
    model = make_model()
    model.fit(*data(64), verbose=0)
    with pytest.raises(ValueError, match=r"expected a `.keras` extension"):
        model.save(str(tmp_path / "model"), save_format="keras")
    h5py.File(tmp_path / "weights.h5", "w").close()  # a file with no table in it
    with pytest.raises(ValueError, match=r"HetEmbedding 'items': Keras' HDF5 format"):
        model.load_weights(str(tmp_path / "weights.h5"))  # refused before it is read
    assert files_in(tmp_path) == ["weights.h5"]


def test_a_file_the_table_cannot_take_changes_nothing(tmp_path):
    """max_rows: one shard would take more rows than its share."""
    x, y = data()
    model = make_model()
    model.fit(x, y, batch_size=32, verbose=0)
    path = str(tmp_path / "weights.weights.h5")
    model.save_weights(path)
    rows = len(table_of(model)[0])
    small = make_model(max_rows=rows - 1)
    small.fit(x[:8], y[:8], batch_size=8, verbose=0)
    (layer,) = [x for x in small.layers if isinstance(x, HetEmbedding)]
    before, updates = table_of(small), layer.weights[1].numpy()  # the updates counter
    with pytest.raises(ValueError, match=rf"HetEmbedding 'items': the file's table has {rows} "
                                         rf"rows, .* max_rows={rows - 1}"):
        small.load_weights(path)
    for a, b in zip(table_of(small), before):
        np.testing.assert_array_equal(a, b)
    assert layer.weights[1].numpy() == updates == 1


def test_a_file_of_another_table_is_refused_naming_the_layer(tmp_path):
    path = str(tmp_path / "weights.weights.h5")
    model = make_model(table_optimizer="adagrad")
    model.fit(*data(64), verbose=0)
    model.save_weights(path)
    other = make_model(table_optimizer="sgd")  # no accumulator slot
    with pytest.raises(ValueError, match=r"HetEmbedding 'items': the file's table has slots"):
        other.load_weights(path)
    smaller = make_model(table_optimizer="adagrad", input_dim=10)
    smaller.fit(*data(64, high=10), verbose=0)
    with pytest.raises(ValueError, match=r"HetEmbedding 'items': the file's table has ids "
                                         r"from \d+ to \d+, outside this layer's \[0, 10\)"):
        smaller.load_weights(path)
    assert glob.glob(str(tmp_path / ".*partial*")) == []


def test_a_file_hybrid_mode_wrote_before_puts_each_slot_on_its_own_variable(tmp_path):
    """Hybrid mode used to apply the dense gradients first and the tables'
    anchors last, so its files hold Adam's moments in that order: its .keras
    file did not load (a shape mismatch) and its checkpoint restored zeros
    or another variable's moments. Such files are read in their order."""
    from het_tf.keras_layers.table_gradients import is_anchor
    from tests import conformance_hybrid as ch
    model, _ = ch.build(("refresh", "holds"), "written_before")
    x, y = ch.inputs(0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
    pairs = list(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    model.optimizer.apply_gradients([p for p in pairs if not is_anchor(p[1])]
                                    + [p for p in pairs if is_anchor(p[1])])
    saved = ch.slots(model)
    assert is_anchor(model.trainable_variables[0])  # so the orders differ
    model.save(tmp_path / "before.keras")
    checkpoint = tf.train.Checkpoint(model=model).write(str(tmp_path / "before"))
    loaded = tf_keras.models.load_model(tmp_path / "before.keras")
    restored, _ = ch.build(("refresh", "holds"), "restored_before")
    tf.train.Checkpoint(model=restored).read(checkpoint).assert_existing_objects_matched()
    for model in (loaded, restored):
        got = ch.slots(model)
        for kind in ("m", "v"):
            assert len(got[kind]) == len(saved[kind])
            for mine, theirs in zip(got[kind], saved[kind]):
                np.testing.assert_array_equal(mine, theirs)
    assert all(np.any(m != 0) for m in saved["m"][1:])  # the dense moments tell them apart
