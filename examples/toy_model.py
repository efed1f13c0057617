"""The small model and skewed data the cluster and hybrid examples train:
three id fields, or with --sequence a zero-padded sequence of ids under
mask_zero, pooled (the shape of DIN- or SASRec-style features), or with
--ragged a ragged sequence of ids (no padding) whose ragged vectors are
pooled, with a row-wise MaxNorm on the embeddings."""
import numpy as np
import tensorflow as tf
import tf_keras

import het_tf
from het_tf.keras_layers import HetEmbedding
from het_tf.keras_layers.export_versions import outside_any_strategy

FIELDS = 3
SEQUENCE = 6  # --sequence: ids a sample, 0 padding the short ones; --ragged: the most
MAX_NORM = 0.5  # --ragged: the embeddings' row-wise MaxNorm
TABLE_OPTIMIZERS = {"adagrad": lambda: tf_keras.optimizers.Adagrad(0.3),
                    "adam": lambda: tf_keras.optimizers.Adam(0.01),
                    "ftrl": lambda: tf_keras.optimizers.Ftrl(0.3)}


def add_arguments(parser):
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cache-capacity", type=int, default=400)
    parser.add_argument("--cache-policy", choices=["lfu", "lru", "lfu_opt"], default="lfu")
    parser.add_argument("--staleness", type=int, default=10)
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--export-dir")
    parser.add_argument("--export-every", type=int, default=0,
                        help="with --export-dir: a numbered SavedModel version there every N "
                        "steps while training and one at its end (het_tf.ExportVersions)")
    parser.add_argument("--sequence", action="store_true",
                        help="a masked sequence model (mask_zero=True, average pooling)")
    parser.add_argument("--ragged", action="store_true",
                        help="a ragged sequence of ids (no combiner: ragged vectors, pooled) "
                        "and a MaxNorm(axis=1) embeddings constraint")
    parser.add_argument("--hot-rows", type=int, default=0,
                        help="FAE's hot rows (docs/fae.md): replicated on every rank in "
                        "hybrid mode, pinned in every worker's cache under "
                        "ParameterServerStrategy")
    parser.add_argument("--optimizer", default="adagrad", choices=["adagrad", "adam", "ftrl"],
                        help="the table's server-side optimizer")
    parser.add_argument("--l2", type=float, default=0.0,
                        help="an L2 embeddings_regularizer on the rows each batch looks up")
    parser.add_argument("--sync", default="refresh", choices=["refresh", "check"],
                        help="the protocol: how training lookups meet the shards")
    parser.add_argument("--scheduler", choices=["herald"],
                        help="Herald's plan decides when rows move: exact, it ignores "
                        "--staleness (docs/herald.md)")
    parser.add_argument("--window", type=int, default=1,
                        help="--scheduler herald: the batches its plan looks ahead over (the "
                        "input pipeline stages them with het_tf.lookahead)")


def version_exports(args, model, scores, settle=None, rank=0):
    """het_tf.ExportVersions for --export-every, and after it a callback
    that records, right after each version, the model's own scores of the
    probe at the same cut: scores[version] (rank 0's). In hybrid mode
    `settle` is het_tf.hybrid.flush_and_clear, called on every rank first."""
    exporter = het_tf.ExportVersions(args.export_dir, every_steps=args.export_every)

    class ScoresAtTheCut(tf_keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True  # ParameterServerStrategy's remote logs: not read
            self.cuts = 0

        def on_train_batch_end(self, batch, logs=None):
            if exporter.cuts == self.cuts:
                return
            self.cuts = exporter.cuts
            if settle is not None:  # collective: every rank's updates pushed first
                settle(self.model)
            if rank == 0:
                version = exporter.exported[-1]["version"]
                # Keras calls callbacks inside ParameterServerStrategy's scope,
                # where predict cannot run (and would unset fit's coordinator):
                # the model is called as predict calls it, outside the scope.
                # (predict here would also replace the History fit returns.)
                probe = export_probe(args)
                scores[version] = outside_any_strategy(
                    lambda: self.model(probe, training=False).numpy().ravel().tolist())

        def on_train_end(self, logs=None):
            self.on_train_batch_end(None)

    return [exporter, ScoresAtTheCut()]


def build_model(args):
    """An uncompiled model: ids -> HetEmbedding "items" -> "hidden" -> "score"."""
    shape = (None,) if args.ragged else (SEQUENCE if args.sequence else FIELDS,)
    inputs = tf_keras.Input(shape=shape, dtype="int64", name="ids", ragged=args.ragged)
    layer = HetEmbedding(args.vocab, args.dim, cache_capacity=args.cache_capacity,
                         cache_policy=args.cache_policy,
                         staleness="auto" if args.scheduler else args.staleness,
                         sync=args.sync, scheduler=args.scheduler, window=args.window,
                         name="items",
                         mask_zero=args.sequence,
                         embeddings_regularizer=tf_keras.regularizers.L2(args.l2) if args.l2
                         else None, hot_rows=args.hot_rows,
                         optimizer=TABLE_OPTIMIZERS[args.optimizer](),
                         embeddings_constraint=tf_keras.constraints.MaxNorm(MAX_NORM, axis=1)
                         if args.ragged else None)
    if args.ragged:
        reduce = tf_keras.layers.Lambda(lambda vectors: tf.reduce_mean(vectors, axis=1),
                                        name="pool")
    elif args.sequence:
        reduce = tf_keras.layers.GlobalAveragePooling1D()
    else:
        reduce = tf_keras.layers.Flatten()
    x = tf_keras.layers.Dense(16, activation="relu", name="hidden")(reduce(layer(inputs)))
    outputs = tf_keras.layers.Dense(1, activation="sigmoid", name="score")(x)
    return tf_keras.Model(inputs, outputs), layer


def skewed_data(seed, samples, args):
    """Zipf-skewed ids, with labels the embeddings can learn; with
    --sequence, ids from 1 and each sample's tail padded with 0."""
    rng = np.random.default_rng(seed)
    if args.ragged:
        lengths = rng.integers(1, SEQUENCE + 1, size=samples)
        values = (rng.zipf(1.3, size=lengths.sum()) % args.vocab).astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        return (tf.RaggedTensor.from_row_lengths(values, lengths),
                (values[starts] % 2).astype(np.float32))
    if not args.sequence:
        ids = (rng.zipf(1.3, size=(samples, FIELDS)) % args.vocab).astype(np.int64)
        return ids, ((ids[:, 0] + ids[:, 1]) % 2).astype(np.float32)
    ids = 1 + (rng.zipf(1.3, size=(samples, SEQUENCE)) % (args.vocab - 1)).astype(np.int64)
    lengths = rng.integers(1, SEQUENCE + 1, size=samples)
    ids[np.arange(SEQUENCE)[np.newaxis, :] >= lengths[:, np.newaxis]] = 0
    return ids, (ids[:, 0] % 2).astype(np.float32)


def export_probe(args):
    if args.ragged:
        return tf.RaggedTensor.from_row_lengths(
            np.arange(20, dtype=np.int64) % args.vocab, [1, 2, 3, 4, 5, 1, 2, 2])
    if not args.sequence:
        return np.arange(8 * FIELDS, dtype=np.int64).reshape(8, FIELDS) % args.vocab
    probe = 1 + np.arange(8 * SEQUENCE, dtype=np.int64).reshape(8, SEQUENCE) % (args.vocab - 1)
    probe[np.arange(SEQUENCE)[np.newaxis, :] >= np.arange(1, 9)[:, np.newaxis] % SEQUENCE + 1] = 0
    return probe


def serving_inputs(probe):
    """The probe as the export's signature takes it, by input name: a
    ragged input as its values and row splits."""
    if isinstance(probe, tf.RaggedTensor):
        return {"ids_values": probe.values.numpy().tolist(),
                "ids_row_splits": probe.row_splits.numpy().tolist()}
    return {"ids": probe.tolist()}
