"""The small model and skewed data the cluster and hybrid examples train."""
import numpy as np
import tf_keras

from het_tf.keras_layers import HetEmbedding

FIELDS = 3


def add_arguments(parser):
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cache-capacity", type=int, default=400)
    parser.add_argument("--staleness", type=int, default=10)
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--export-dir")


def build_model(args):
    """An uncompiled model: ids -> HetEmbedding "items" -> "hidden" -> "score"."""
    inputs = tf_keras.Input(shape=(FIELDS,), dtype="int64", name="ids")
    layer = HetEmbedding(args.vocab, args.dim, cache_capacity=args.cache_capacity,
                         staleness=args.staleness, name="items",
                         optimizer=tf_keras.optimizers.Adagrad(0.3))
    x = tf_keras.layers.Dense(16, activation="relu", name="hidden")(
        tf_keras.layers.Flatten()(layer(inputs)))
    outputs = tf_keras.layers.Dense(1, activation="sigmoid", name="score")(x)
    return tf_keras.Model(inputs, outputs), layer


def skewed_data(seed, samples, vocab):
    """Zipf-skewed ids, with labels the embeddings can learn."""
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.3, size=(samples, FIELDS)) % vocab).astype(np.int64)
    return ids, ((ids[:, 0] + ids[:, 1]) % 2).astype(np.float32)


def export_probe(vocab):
    return np.arange(8 * FIELDS, dtype=np.int64).reshape(8, FIELDS) % vocab
