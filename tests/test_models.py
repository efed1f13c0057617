"""WDL, DeepFM and DCN: their building blocks against their formulas, the
same model code over HetEmbedding or tf_keras.layers.Embedding, and real
learning on the synthetic data."""
import itertools
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from het_tf.apps.train.figures import roc_auc
from het_tf.data import SyntheticCriteo, criteo_key, missing_key
from het_tf.keras_layers import HetEmbedding
from het_tf.models import (
    MODELS,
    CrossLayer,
    EmbeddingSpec,
    FactorizationMachine,
    FieldIndices,
    build_model,
    trace_steps_as_written,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_factorization_machine_is_the_sum_over_field_pairs():
    v = np.random.default_rng(0).normal(size=(4, 6, 3)).astype(np.float32)
    brute = np.zeros((4, 1), np.float32)
    for i, j in itertools.combinations(range(6), 2):
        brute[:, 0] += (v[:, i] * v[:, j]).sum(-1)
    np.testing.assert_allclose(FactorizationMachine()(v).numpy(), brute, rtol=1e-5, atol=1e-5)


def test_cross_layer_formula():
    rng = np.random.default_rng(1)
    x0, x = rng.normal(size=(2, 5, 7)).astype(np.float32)
    layer = CrossLayer()
    out = layer([x0, x]).numpy()
    w, b = layer.w.numpy(), layer.b.numpy()
    np.testing.assert_allclose(out, x0 * (x @ w) + b + x, rtol=1e-5, atol=1e-6)


def test_field_indices_give_each_field_value_its_own_row():
    cards = [3, 5, 2] + [1] * 23
    layer = FieldIndices(cards)
    assert layer.vocabulary_size == sum(c + 1 for c in cards)
    keys = np.array([[criteo_key(f, v) for f in range(26)] for v in range(2)]
                    + [[missing_key(f) for f in range(26)]], np.int64)
    keys[:, 3:] = missing_key(3)  # fields past C3 are empty in this batch
    indices = layer(keys).numpy()
    np.testing.assert_array_equal(indices[:, :3], [[0, 4, 10], [1, 5, 11], [3, 9, 12]])
    assert indices.max() < layer.vocabulary_size
    # A value above the cardinality (a raw Criteo hash) wraps within its field.
    row = np.array([[missing_key(f) for f in range(26)]], np.int64)
    row[0, 1] = criteo_key(1, 7)
    assert layer(row).numpy()[0, 1] == 4 + 7 % 5


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("kind", ["het", "keras"])
def test_models_build_and_take_a_training_step(name, kind):
    data = SyntheticCriteo(seed=2, scale=0.001)
    spec = EmbeddingSpec(kind, data.cardinalities, cache_capacity=0.1, staleness=10)
    model = build_model(name, spec, dim=4, hidden=(8,))
    features, labels = data.rows(0, 0, 64)
    assert model(features).shape == (64, 1)
    model.compile(tf_keras.optimizers.Adagrad(0.05), "binary_crossentropy")
    before = [w.copy() for w in model.get_weights()]
    model.train_on_batch(features, labels)
    changed = [not np.array_equal(a, b) for a, b in zip(before, model.get_weights())]
    assert any(changed)
    het = [layer for layer in model.layers if isinstance(layer, HetEmbedding)]
    # One table per model: WDL's and DeepFM's linear weights share it with
    # the vectors (dim + 1), so each key travels once a step.
    assert len(het) == (0 if kind == "keras" else 1)
    if kind == "het":
        assert het[0].output_dim == (4 if name == "dcn" else 5)
    for layer in het:
        stats = layer.het_stats()
        assert stats["cache_unique_keys"] > 0 and stats["table_rows"] > 0


def test_steps_traced_as_written_step_as_numpy_does_and_refuse_branches_on_tensors():
    """Without AutoGraph a step still trains: one SGD step of a linear model
    on mean squared error, against NumPy; a layer branching on a tensor,
    which AutoGraph would have turned into a tf.cond, fails to trace."""
    x = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
    y = np.random.default_rng(1).normal(size=(8, 1)).astype(np.float32)
    w0 = np.array([[0.5], [-0.25], [1.0]], np.float32)
    model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(
        1, kernel_initializer=tf_keras.initializers.Constant(w0))])
    model.compile(tf_keras.optimizers.SGD(0.1), "mse")
    trace_steps_as_written(model).train_on_batch(x, y)
    error = x @ w0 - y  # the bias starts at 0
    w, b = model.get_weights()
    np.testing.assert_allclose(w, w0 - 0.1 * 2 * x.T @ error / 8, rtol=1e-5)
    np.testing.assert_allclose(b, -0.1 * 2 * error.sum(0) / 8, rtol=1e-5)
    assert model.predict(x, verbose=0).shape == (8, 1)

    class Branching(tf_keras.layers.Layer):
        def call(self, inputs):
            if tf.reduce_sum(inputs) > 0:
                return inputs
            return -inputs

    model = tf_keras.Sequential([tf_keras.Input((3,)), Branching(), tf_keras.layers.Dense(1)])
    model.compile(tf_keras.optimizers.SGD(0.1), "mse")
    with pytest.raises(TypeError, match="tf.Tensor"):
        trace_steps_as_written(model).train_on_batch(x, y)


def test_training_md_names_the_tables_each_model_builds():
    """docs/training.md's Models section against the models: with
    HetEmbedding one table, `embedding`, of dim + 1 for WDL and DeepFM (their
    first-order weights share it) and of dim for DCN; with Keras' Embedding
    WDL and DeepFM have a second, `linear_embedding`."""
    section = (ROOT / "docs" / "training.md").read_text().split("\n## Models\n")[1]
    section = " ".join(section.split("\n## ")[0].split())
    assert "With HetEmbedding each model has one table, `embedding`." in section
    assert "a row holds `--dim` + 1 values" in section and "DCN's rows hold `--dim`" in section
    assert ("there WDL and DeepFM have two tables, `embedding` and the first-order "
            "`linear_embedding`") in section
    data = SyntheticCriteo(seed=2, scale=0.001)
    for name in sorted(MODELS):
        het = build_model(name, EmbeddingSpec("het", data.cardinalities), dim=4, hidden=(8,))
        assert [(layer.name, layer.output_dim) for layer in het.layers
                if isinstance(layer, HetEmbedding)] == [("embedding", 4 if name == "dcn" else 5)]
        keras = build_model(name, EmbeddingSpec("keras", data.cardinalities), dim=4, hidden=(8,))
        assert sorted(layer.name for layer in keras.layers
                      if isinstance(layer, tf_keras.layers.Embedding)) == (
            ["embedding"] if name == "dcn" else ["embedding", "linear_embedding"])


def test_unknown_model_and_embedding_kind():
    with pytest.raises(ValueError, match="unknown model 'lr'"):
        build_model("lr")
    with pytest.raises(ValueError, match="embedding kind"):
        EmbeddingSpec("dense")


def test_deepfm_learns_the_synthetic_signal():
    data = SyntheticCriteo(seed=0, scale=0.01)
    spec = EmbeddingSpec("het", data.cardinalities, cache_capacity=0.1, staleness=10)
    model = build_model("deepfm", spec, dim=8, hidden=(64,))
    model.compile(tf_keras.optimizers.Adagrad(0.05), "binary_crossentropy",
                  steps_per_execution=8)
    model.fit(data.dataset(512), steps_per_epoch=240, epochs=1, verbose=0)
    features, labels = next(iter(data.held_out(8192, 8192)))
    scores = model.predict(features, verbose=0).ravel()
    auc = roc_auc(labels.numpy(), scores)
    assert auc > 0.68, auc
