"""The small model and skewed data the cluster and hybrid examples train:
three id fields, or with --sequence a zero-padded sequence of ids under
mask_zero, pooled (the shape of DIN- or SASRec-style features)."""
import numpy as np
import tf_keras

from het_tf.keras_layers import HetEmbedding

FIELDS = 3
SEQUENCE = 6  # --sequence: ids a sample, 0 padding the short ones


def add_arguments(parser):
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cache-capacity", type=int, default=400)
    parser.add_argument("--staleness", type=int, default=10)
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--export-dir")
    parser.add_argument("--sequence", action="store_true",
                        help="a masked sequence model (mask_zero=True, average pooling)")
    parser.add_argument("--l2", type=float, default=0.0,
                        help="an L2 embeddings_regularizer on the rows each batch looks up")


def build_model(args):
    """An uncompiled model: ids -> HetEmbedding "items" -> "hidden" -> "score"."""
    inputs = tf_keras.Input(shape=(SEQUENCE if args.sequence else FIELDS,), dtype="int64",
                            name="ids")
    layer = HetEmbedding(args.vocab, args.dim, cache_capacity=args.cache_capacity,
                         staleness=args.staleness, name="items", mask_zero=args.sequence,
                         embeddings_regularizer=tf_keras.regularizers.L2(args.l2) if args.l2
                         else None, optimizer=tf_keras.optimizers.Adagrad(0.3))
    reduce = (tf_keras.layers.GlobalAveragePooling1D() if args.sequence
              else tf_keras.layers.Flatten())
    x = tf_keras.layers.Dense(16, activation="relu", name="hidden")(reduce(layer(inputs)))
    outputs = tf_keras.layers.Dense(1, activation="sigmoid", name="score")(x)
    return tf_keras.Model(inputs, outputs), layer


def skewed_data(seed, samples, args):
    """Zipf-skewed ids, with labels the embeddings can learn; with
    --sequence, ids from 1 and each sample's tail padded with 0."""
    rng = np.random.default_rng(seed)
    if not args.sequence:
        ids = (rng.zipf(1.3, size=(samples, FIELDS)) % args.vocab).astype(np.int64)
        return ids, ((ids[:, 0] + ids[:, 1]) % 2).astype(np.float32)
    ids = 1 + (rng.zipf(1.3, size=(samples, SEQUENCE)) % (args.vocab - 1)).astype(np.int64)
    lengths = rng.integers(1, SEQUENCE + 1, size=samples)
    ids[np.arange(SEQUENCE)[np.newaxis, :] >= lengths[:, np.newaxis]] = 0
    return ids, (ids[:, 0] % 2).astype(np.float32)


def export_probe(args):
    if not args.sequence:
        return np.arange(8 * FIELDS, dtype=np.int64).reshape(8, FIELDS) % args.vocab
    probe = 1 + np.arange(8 * SEQUENCE, dtype=np.int64).reshape(8, SEQUENCE) % (args.vocab - 1)
    probe[np.arange(SEQUENCE)[np.newaxis, :] >= np.arange(1, 9)[:, np.newaxis] % SEQUENCE + 1] = 0
    return probe
