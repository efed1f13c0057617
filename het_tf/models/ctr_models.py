"""Wide & Deep, DeepFM and DCN over Criteo-shaped inputs: 13 dense features
and 26 categorical keys, both as named inputs ("dense", "categorical"), so
any of het_tf.data's pipelines feeds them directly."""
import tensorflow as tf
import tf_keras

from het_tf.data.criteo_schema import CATEGORICAL_FIELDS, DENSE_FIELDS
from het_tf.models.embeddings import EmbeddingSpec


def _inputs():
    return {"dense": tf_keras.Input((len(DENSE_FIELDS),), dtype="float32", name="dense"),
            "categorical": tf_keras.Input((len(CATEGORICAL_FIELDS),), dtype="int64",
                                          name="categorical")}


def _mlp(x, hidden, name):
    for i, units in enumerate(hidden):
        x = tf_keras.layers.Dense(units, activation="relu", name=f"{name}_{i}")(x)
    return x


class FieldSum(tf_keras.layers.Layer):
    """[B, F, 1] per-field weights -> [B, 1]."""

    def call(self, weights):
        return tf.reduce_sum(weights, axis=1)


def _first_order(inputs, weights):
    """The linear part: a weight per key plus a linear map of the dense features."""
    sparse = FieldSum(name="linear_sparse")(weights)
    dense = tf_keras.layers.Dense(1, name="linear_dense")(inputs["dense"])
    return tf_keras.layers.Add(name="linear")([sparse, dense])


def _deep_input(inputs, vectors):
    flat = tf_keras.layers.Flatten(name="embedding_flat")(vectors)
    return tf_keras.layers.Concatenate(name="deep_input")([flat, inputs["dense"]])


def _model(inputs, logit, name):
    score = tf_keras.layers.Activation("sigmoid", name="score")(logit)
    return tf_keras.Model(inputs, score, name=name)


def wdl(embeddings=None, dim=16, hidden=(256, 128)):
    """Wide & Deep: a linear model over the keys plus an MLP over their vectors."""
    embeddings = embeddings or EmbeddingSpec()
    inputs = _inputs()
    vectors, weights = embeddings.embed_with_weights(inputs["categorical"], dim, "embedding")
    wide = _first_order(inputs, weights)
    deep = tf_keras.layers.Dense(1, name="deep_logit")(
        _mlp(_deep_input(inputs, vectors), hidden, "deep"))
    return _model(inputs, tf_keras.layers.Add(name="logit")([wide, deep]), "wdl")


class FactorizationMachine(tf_keras.layers.Layer):
    """Pairwise interactions of field vectors [B, F, D] -> [B, 1]:
    0.5 * sum_d((sum_f v)^2 - sum_f v^2)."""

    def call(self, vectors):
        square_of_sum = tf.square(tf.reduce_sum(vectors, axis=1))
        sum_of_square = tf.reduce_sum(tf.square(vectors), axis=1)
        return 0.5 * tf.reduce_sum(square_of_sum - sum_of_square, axis=1, keepdims=True)


def deepfm(embeddings=None, dim=16, hidden=(256, 128)):
    """DeepFM: first-order weights, a factorization machine and an MLP, the
    last two sharing the field vectors."""
    embeddings = embeddings or EmbeddingSpec()
    inputs = _inputs()
    vectors, weights = embeddings.embed_with_weights(inputs["categorical"], dim, "embedding")
    first = _first_order(inputs, weights)
    fm = FactorizationMachine(name="fm")(vectors)
    deep = tf_keras.layers.Dense(1, name="deep_logit")(
        _mlp(_deep_input(inputs, vectors), hidden, "deep"))
    return _model(inputs, tf_keras.layers.Add(name="logit")([first, fm, deep]), "deepfm")


class CrossLayer(tf_keras.layers.Layer):
    """One layer of DCN's cross network: x0 * (x . w) + b + x."""

    def build(self, input_shape):
        width = input_shape[0][-1]
        self.w = self.add_weight("w", shape=(width, 1), initializer="glorot_uniform")
        self.b = self.add_weight("b", shape=(width,), initializer="zeros")

    def call(self, inputs):
        x0, x = inputs
        return x0 * tf.matmul(x, self.w) + self.b + x


def dcn(embeddings=None, dim=16, hidden=(256, 128), cross_layers=3):
    """Deep & Cross Network: a cross network and an MLP side by side over the
    field vectors and dense features."""
    embeddings = embeddings or EmbeddingSpec()
    inputs = _inputs()
    vectors = embeddings.embed(inputs["categorical"], dim, "embedding")
    x0 = _deep_input(inputs, vectors)
    x = x0
    for i in range(cross_layers):
        x = CrossLayer(name=f"cross_{i}")([x0, x])
    deep = _mlp(x0, hidden, "deep")
    both = tf_keras.layers.Concatenate(name="cross_and_deep")([x, deep])
    return _model(inputs, tf_keras.layers.Dense(1, name="logit")(both), "dcn")


MODELS = {"wdl": wdl, "deepfm": deepfm, "dcn": dcn}


def build_model(name, embeddings=None, **kwargs):
    """One of MODELS by name, uncompiled."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    return MODELS[name](embeddings, **kwargs)
