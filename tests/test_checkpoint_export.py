"""Checkpoints (rows, slots, clocks; resume) and SavedModel export that
loads without het_tf."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import het_tf
from het_tf.keras_layers import HetEmbedding
from het_tf.runtime.checkpoint import CHUNK_BYTES, TableCheckpoint

VOCAB, DIM = 300, 4
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_model(input_dim=VOCAB, **layer_kwargs):
    settings = dict(optimizer=tf_keras.optimizers.Adagrad(0.3), cache_capacity=150,
                    staleness=5, name="items") | layer_kwargs
    inp = tf_keras.Input(shape=(3,), dtype="int64", name="ids")
    x = tf_keras.layers.Flatten()(HetEmbedding(input_dim, DIM, **settings)(inp))
    x = tf_keras.layers.Dense(8, activation="relu")(x)
    out = tf_keras.layers.Dense(1, activation="sigmoid", name="score")(x)
    model = tf_keras.Model(inp, out)
    model.compile(tf_keras.optimizers.Adam(0.01), "binary_crossentropy")
    return model


def data(n=320, seed=0, high=VOCAB):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, high, size=(n, 3)).astype(np.int64)
    return x, ((x[:, 0] + x[:, 1]) % 2).astype(np.float32)


def table_rows(layer):
    keys, values, slots, clocks, steps = (t.numpy() for t in layer.table.export_all())
    order = np.argsort(keys)
    return keys[order], values[order], slots[order], clocks[order], steps[order]


def assert_same_rows(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_resumed_training_continues_as_the_saving_run(tmp_path):
    x, y = data()
    first = make_model()
    first.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    first.save_weights(str(tmp_path / "ckpt"))
    saved_rows = table_rows(first.layers[1])
    after_save = first.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)

    resumed = make_model()
    resumed.load_weights(str(tmp_path / "ckpt"))
    assert_same_rows(table_rows(resumed.layers[1]), saved_rows)
    after_restore = resumed.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)

    # The saving run's caches kept their copies, the resumed run's start
    # empty: rows leave them at other times, so sums round differently.
    np.testing.assert_allclose(after_restore.history["loss"], after_save.history["loss"],
                               rtol=1e-6)
    for a, b in zip(resumed.get_weights(), first.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    first.layers[1].flush()
    resumed.layers[1].flush()
    resumed_rows, first_rows = table_rows(resumed.layers[1]), table_rows(first.layers[1])
    for field in (0, 3, 4):  # keys, clocks, steps: every update, once
        np.testing.assert_array_equal(resumed_rows[field], first_rows[field])
    for field in (1, 2):  # values, slots
        np.testing.assert_allclose(resumed_rows[field], first_rows[field], rtol=1e-5, atol=1e-7)


def test_pending_updates_are_flushed_into_the_checkpoint(tmp_path):
    x, y = data(128)
    model = make_model(staleness=None, cache_capacity=VOCAB)  # nothing is pushed in training
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    stats = model.layers[1].het_stats()
    assert stats["table_updates_applied"] == 0 and stats["cache_rows"] > 0
    rows = stats["cache_rows"]
    checkpoint = tf.train.Checkpoint(model=model)
    path = checkpoint.save(str(tmp_path / "ckpt"))
    stats = model.layers[1].het_stats()
    assert stats["table_updates_applied"] == stats["cache_updates_pushed"] > 0
    assert stats["cache_rows"] == rows  # the save keeps the cache's copies

    restored = make_model(staleness=None, cache_capacity=VOCAB)
    tf.train.Checkpoint(model=restored).restore(path).assert_existing_objects_matched()
    keys, _, _, clocks, _ = table_rows(restored.layers[1])
    assert clocks.sum() == stats["table_updates_applied"] > 0


def test_restore_rolls_back_rows_created_after_the_save(tmp_path):
    x, y = data(160, high=100)
    model = make_model()
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    checkpoint = tf.train.Checkpoint(model=model)
    path = checkpoint.save(str(tmp_path / "ckpt"))
    saved = table_rows(model.layers[1])
    x2, y2 = data(160, seed=1)  # ids up to 300: new rows appear
    model.fit(x2, y2, batch_size=32, epochs=1, verbose=0)
    assert len(table_rows(model.layers[1])[0]) > len(saved[0])
    checkpoint.restore(path)
    assert_same_rows(table_rows(model.layers[1]), saved)
    assert model.layers[1].het_stats()["cache_rows"] == 0


@pytest.mark.parametrize("chunk_bytes", [None, 1000], ids=["one-chunk", "chunks-of-9-rows"])
def test_a_table_restores_onto_another_number_of_shards(tmp_path, unique_name, chunk_bytes):
    """Saved in chunks, each shard's rows in one or in many, the table
    restores exactly onto three shards; an empty shard saves too."""
    config = het_tf.TableConfig(unique_name(), 3, optimizer=het_tf.OptimizerConfig("adam"))
    source = het_tf.ShardedTable(config, [None, None, None])
    keys = tf.constant(np.arange(-50, 50) * 7919, tf.int64)
    source.push(keys, tf.ones([100, 3]), tf.fill([100], tf.constant(2, tf.int64)), 0.1)
    sizes = {} if chunk_bytes is None else {"chunk_bytes": chunk_bytes}
    saved = TableCheckpoint(source, lambda: [], lambda: [], **sizes)
    row_bytes = 24 + 4 * 3 * 3  # key, clock, step; values and Adam's two slots
    assert saved.chunk_rows == (chunk_bytes or CHUNK_BYTES) // row_bytes
    path = tf.train.Checkpoint(table=saved).save(str(tmp_path / "table"))
    empty = het_tf.ShardedTable(config, [None], instance="empty")
    tf.train.Checkpoint(table=TableCheckpoint(empty, lambda: [], lambda: [], **sizes)).save(
        str(tmp_path / "empty"))
    target = het_tf.ShardedTable(config, [None, None], instance="two")
    tf.train.Checkpoint(table=TableCheckpoint(target, lambda: [], lambda: [])).restore(path)
    want = sorted(zip(*(t.numpy().tolist() for t in source.export_all())))
    got = sorted(zip(*(t.numpy().tolist() for t in target.export_all())))
    assert got == want
    for shard in range(2):  # each row sits on the shard that owns it now
        shard_keys = target.export_shard(shard, 0, 1000)[0]
        owners = het_tf.ops.het_shard_index(shard_keys, num_shards=2).numpy()
        assert (owners == shard).all() and len(owners) > 0
    # the empty table restores as empty, over rows the target held
    tf.train.Checkpoint(table=TableCheckpoint(target, lambda: [], lambda: [])).restore(
        str(tmp_path / "empty-1")).assert_consumed()
    assert target.stats()["rows"] == 0


LOAD_WITHOUT_HET_TF = r"""
import json, sys
import numpy as np, tensorflow as tf
from tensorflow.python.framework import op_def_registry
from tensorflow.core.protobuf import saved_model_pb2
path, inputs = sys.argv[1], json.loads(sys.argv[2])
loaded = tf.saved_model.load(path)
outputs = loaded.signatures["serving_default"](
    **{name: tf.constant(value, dtype) for name, (value, dtype) in inputs.items()})
proto = saved_model_pb2.SavedModel()
proto.ParseFromString(open(path + "/saved_model.pb", "rb").read())
graph = proto.meta_graphs[0].graph_def
ops = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
functions = {f.signature.name for f in graph.library.function}
unknown = sorted(op for op in ops if op not in functions and op_def_registry.get(op) is None)
print(json.dumps({"het_tf_imported": "het_tf" in sys.modules, "unknown_ops": unknown,
                  "het_ops": sorted(op for op in ops if op.startswith("Het")),
                  "score": outputs["score"].numpy().ravel().tolist()}))
"""


def load_elsewhere(path, inputs):
    """Serves `inputs` (ids for the input 'ids', or {signature input name:
    array}) in a process without het_tf."""
    if not isinstance(inputs, dict):
        inputs = {"ids": inputs}
    named = {name: (np.asarray(v).tolist(), np.asarray(v).dtype.name)
             for name, v in inputs.items()}
    result = subprocess.run(
        [sys.executable, "-c", LOAD_WITHOUT_HET_TF, str(path), json.dumps(named)],
        capture_output=True, text=True, timeout=180, cwd="/",
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=""))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("input_dim", [VOCAB, None], ids=["fixed", "dynamic"])
def test_export_serves_the_same_predictions_without_het_tf(tmp_path, input_dim):
    x, y = data()
    model = make_model(input_dim, cache_capacity=150)
    model.fit(x, y, batch_size=32, epochs=2, verbose=0)
    path = het_tf.export_saved_model(model, str(tmp_path / "export"))
    probe = x[:16]
    loaded = load_elsewhere(path, probe)
    assert not loaded["het_tf_imported"]
    assert loaded["unknown_ops"] == [] and loaded["het_ops"] == []
    np.testing.assert_allclose(loaded["score"], model.predict(probe, verbose=0).ravel(),
                               rtol=1e-6, atol=1e-7)
    cli = subprocess.run([os.path.join(os.path.dirname(sys.executable), "saved_model_cli"),
                          "show", "--dir", path, "--all"], capture_output=True, text=True,
                         timeout=180, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert "signature_def['serving_default']" in cli.stdout
    assert "inputs['ids']" in cli.stdout and "outputs['score']" in cli.stdout


def test_dynamic_export_serves_zeros_for_unknown_keys(tmp_path):
    model = make_model(None, cache_capacity=128)
    x, y = data(64)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    path = het_tf.export_saved_model(model, str(tmp_path / "export"))
    loaded = tf.saved_model.load(path)
    lookup = loaded.lookups[0]
    seen = int(x[0, 0])
    rows = lookup(tf.constant([seen, 10**12, -5], tf.int64)).numpy()
    np.testing.assert_array_equal(rows[1:], np.zeros((2, DIM)))
    np.testing.assert_allclose(rows[0], model.layers[1].table.gather(
        tf.constant([seen], tf.int64)).numpy()[0])


def test_the_exported_lookup_finds_every_held_key_across_chunks():
    """The export's sorted keys and rows, written in chunks of 7 rows: every
    held key gives its row; keys below, between and above the
    held ones, and every key of an empty table, give zeros."""
    from het_tf.keras_layers.export import ServingLookup

    layer = HetEmbedding(None, DIM, cache_capacity=0, name="chunked")
    layer.build((None,))
    seven_rows = 7 * (24 + 4 * DIM * (1 + layer.table.config.num_slots))
    assert layer.table.chunk_rows(seven_rows) == 7
    empty = ServingLookup(layer, chunk_bytes=seven_rows)
    np.testing.assert_array_equal(empty(tf.constant([[3, -9]], tf.int64)).numpy(),
                                  np.zeros((1, 2, DIM)))
    held = np.random.default_rng(3).choice(np.arange(-10**6, 10**6), 100, replace=False) * 97
    rows = layer.table.gather(tf.constant(held, tf.int64)).numpy()
    lookup = ServingLookup(layer, chunk_bytes=seven_rows)
    np.testing.assert_array_equal(lookup(tf.constant(held.reshape(10, 10))).numpy(),
                                  rows.reshape(10, 10, DIM))
    unknown = [held.min() - 1, held.max() + 1, np.sort(held)[50] + 1, -2**63, 2**63 - 1]
    np.testing.assert_array_equal(lookup(tf.constant(unknown, tf.int64)).numpy(),
                                  np.zeros((5, DIM)))


def test_ragged_and_sparse_inputs_export_as_their_components(tmp_path):
    """A model with a dense, a ragged and a sparse input exports; the
    signature takes each composite input as its component tensors, and a
    process without het_tf serves the same scores."""
    dense = tf_keras.Input(shape=(2,), dtype="int64", name="ids")
    tags = tf_keras.Input(shape=(None,), dtype="int64", ragged=True, name="tags")
    cats = tf_keras.Input(shape=(4,), dtype="int64", sparse=True, name="cats")
    settings = dict(optimizer=tf_keras.optimizers.Adagrad(0.3), cache_capacity=150, staleness=5)
    x = tf_keras.layers.Concatenate()([
        tf_keras.layers.Flatten()(HetEmbedding(VOCAB, DIM, name="dense_ids", **settings)(dense)),
        HetEmbedding(None, DIM, combiner="mean", name="tag_ids", **settings)(tags),
        HetEmbedding(VOCAB, DIM, combiner="sum", name="cat_ids", **settings)(cats)])
    out = tf_keras.layers.Dense(1, activation="sigmoid", name="score")(x)
    model = tf_keras.Model([dense, tags, cats], out)
    model.compile(tf_keras.optimizers.Adam(0.01), "binary_crossentropy")

    rng = np.random.default_rng(1)
    n = 64
    lengths = rng.integers(0, 4, size=n)
    tag_ids = tf.RaggedTensor.from_row_lengths(rng.integers(0, 10**9, size=lengths.sum()),
                                               lengths)
    cat_ids = tf.sparse.from_dense(rng.integers(0, VOCAB, size=(n, 4)) *
                                   (rng.random((n, 4)) < 0.5))
    inputs = dict(ids=rng.integers(0, VOCAB, size=(n, 2)), tags=tag_ids, cats=cat_ids)
    labels = (inputs["ids"][:, 0] % 2).astype(np.float32)
    dataset = tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(16)
    model.fit(dataset, epochs=2, verbose=0)
    path = het_tf.export_saved_model(model, str(tmp_path / "export"))

    probe = {k: inputs[k][:8] for k in ("ids", "tags")}
    sparse = tf.sparse.slice(cat_ids, [0, 0], [8, 4])
    loaded = load_elsewhere(path, {
        "ids": probe["ids"], "tags_values": probe["tags"].values.numpy(),
        "tags_row_splits": probe["tags"].row_splits.numpy(),
        "cats_indices": sparse.indices.numpy(), "cats_values": sparse.values.numpy(),
        "cats_dense_shape": sparse.dense_shape.numpy()})
    assert not loaded["het_tf_imported"] and loaded["het_ops"] == []
    expected = model({"ids": probe["ids"], "tags": probe["tags"], "cats": sparse},
                     training=False).numpy().ravel()
    np.testing.assert_allclose(loaded["score"], expected, rtol=1e-6, atol=1e-7)


def test_export_refuses_models_without_known_inputs(tmp_path):
    class Subclassed(tf_keras.Model):
        def __init__(self):
            super().__init__()
            self.embedding = HetEmbedding(VOCAB, DIM)

        def call(self, ids):
            return self.embedding(ids)

    with pytest.raises(ValueError, match="needs a model with known inputs"):
        het_tf.export_saved_model(Subclassed(), str(tmp_path / "unbuilt"))
