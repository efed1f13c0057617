"""How a model turns the readers' categorical keys into vectors: through
HetEmbedding, or through tf_keras.layers.Embedding for the baselines, with
the same model code around either."""
import numpy as np
import tensorflow as tf
import tf_keras

from het_tf.data.criteo_schema import KAGGLE_CARDINALITIES, MISSING_BIT, VALUE_MASK
from het_tf.runtime.config import OptimizerConfig, TableConfig, cache_rows

KINDS = ("het", "keras", "tfra")


class FieldIndices(tf_keras.layers.Layer):
    """Field-salted keys [B, F] -> indices into one fixed vocabulary of
    sum(cardinality + 1) rows: field f's value v goes to offset_f + v mod
    cardinality_f, and its empty value to offset_f + cardinality_f. For data
    whose ids lie below the cardinalities (the synthetic set) this is one to
    one; for raw Criteo hashes it is the usual hashing trick."""

    def __init__(self, cardinalities, **kwargs):
        super().__init__(**kwargs)
        self.cardinalities = tuple(int(c) for c in cardinalities)
        sizes = np.array(self.cardinalities, np.int64) + 1
        self._offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.vocabulary_size = int(sizes.sum())

    def call(self, keys):
        keys = tf.cast(keys, tf.int64)
        card = tf.constant(self.cardinalities, tf.int64)
        value = tf.bitwise.bitwise_and(keys, np.int64(VALUE_MASK))
        missing = tf.not_equal(tf.bitwise.bitwise_and(keys, np.int64(MISSING_BIT)), 0)
        return tf.constant(self._offsets) + tf.where(missing, card, value % card)

    def get_config(self):
        return {**super().get_config(), "cardinalities": self.cardinalities}


class SplitVectorsAndWeights(tf_keras.layers.Layer):
    """[B, F, dim + 1] rows -> ([B, F, dim] vectors, [B, F, 1] weights)."""

    def __init__(self, dim, **kwargs):
        super().__init__(**kwargs)
        self.dim = int(dim)

    def call(self, rows):
        # A split, not two slices: the gradient of a split is one concat,
        # while each slice's gradient (StridedSliceGrad) writes a whole
        # zero tensor of the rows' size and took 4 ms of a 32 ms ps-mode
        # step (WDL, dim 16).
        vectors, weights = tf.split(rows, [self.dim, 1], axis=-1)
        return vectors, weights

    def get_config(self):
        return {**super().get_config(), "dim": self.dim}


class EmbeddingSpec:
    """Settings shared by every embedding table of a model.

    Args:
      kind: "het" (HetEmbedding on the keys themselves, tables grow with the
        keys seen), "keras" (tf_keras.layers.Embedding over FieldIndices) or
        "tfra" (TensorFlow Recommenders-Addons' dynamic_embedding Keras layer
        on the keys; compile with `wrap_optimizer`).
      cardinalities: ids per field; sizes the Keras vocabulary and turns a
        fractional cache_capacity into rows.
      cache_capacity, cache_policy, staleness, sync, scheduler, window:
        HetEmbedding's; a
        fraction cache_capacity is of sum(cardinalities + 1) rows.
      optimizer: the tables' optimizer name ("adagrad", "adam", "sgd", "ftrl").
      learning_rate: its learning rate.
      hot_rows, hot_bytes: HetEmbedding's hot_rows, given in rows or in
        bytes of row state (FAE, docs/fae.md); 0 for none.
      max_rows, on_full, eviction, ttl, admit_after, full_checkpoint_every,
        wire_dtype: HetEmbedding's, for each table.
    """

    def __init__(self, kind="het", cardinalities=KAGGLE_CARDINALITIES, cache_capacity=0.1,
                 cache_policy="lfu", staleness="auto", optimizer="adagrad", learning_rate=0.05,
                 seed=0, sync="refresh", hot_rows=0, hot_bytes=0, window=1, scheduler=None,
                 max_rows=None, on_full="refuse", eviction="lru", ttl=None, admit_after=None,
                 full_checkpoint_every=None, wire_dtype="float32"):
        if kind not in KINDS:
            raise ValueError(f"embedding kind must be one of {', '.join(KINDS)}, got {kind!r}")
        self.kind = kind
        self.cardinalities = tuple(int(c) for c in cardinalities)
        self.cache_capacity = cache_capacity
        self.cache_policy = cache_policy
        self.staleness = staleness
        self.sync = sync
        self.scheduler = scheduler
        self.window = window
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.seed = seed
        self.hot_rows = hot_rows
        self.hot_bytes = hot_bytes
        self.max_rows, self.on_full, self.eviction, self.ttl = max_rows, on_full, eviction, ttl
        self.admit_after = admit_after
        self.full_checkpoint_every = full_checkpoint_every
        self.wire_dtype = wire_dtype

    @property
    def vocabulary_size(self):
        return sum(self.cardinalities) + len(self.cardinalities)

    def cache_rows(self):
        return cache_rows(self.cache_capacity, self.vocabulary_size, "the embedding spec")

    def table_optimizer(self):
        return tf_keras.optimizers.get({"class_name": self.optimizer,
                                        "config": {"learning_rate": self.learning_rate}})

    def wrap_optimizer(self, optimizer):
        """The model's optimizer as this kind of embedding needs it."""
        if self.kind != "tfra":
            return optimizer
        from tensorflow_recommenders_addons import dynamic_embedding as de

        return de.DynamicEmbeddingOptimizer(optimizer)

    def embed_with_weights(self, keys, dim, name):
        """[B, F] keys -> ([B, F, dim] vectors, [B, F, 1] linear weights).
        HetEmbedding keeps both in one table of dim + 1, so each key, with
        its clock and update count, travels once a step instead of twice;
        the same optimizer steps each coordinate alone, so one table trains
        as the two would. The baselines keep two tables as usual."""
        if self.kind != "het":
            return self.embed(keys, dim, name), self.embed(keys, 1, f"linear_{name}")
        return SplitVectorsAndWeights(dim, name=f"{name}_split")(
            self.embed(keys, dim + 1, name))

    def embed(self, keys, dim, name):
        """[B, F] keys -> [B, F, dim] vectors from the table `name`."""
        if self.kind == "tfra":
            from tensorflow_recommenders_addons import dynamic_embedding as de

            return de.keras.layers.Embedding(
                dim, key_dtype=tf.int64, name=name,
                initializer=tf_keras.initializers.RandomUniform(-0.05, 0.05, seed=self.seed))(
                    keys)
        if self.kind == "keras":
            indices = FieldIndices(self.cardinalities, name=f"{name}_indices")(keys)
            return tf_keras.layers.Embedding(self.vocabulary_size, dim, name=name)(indices)
        from het_tf.keras_layers import HetEmbedding

        return HetEmbedding(None, dim, optimizer=self.table_optimizer(),
                            cache_capacity=self.cache_rows(), cache_policy=self.cache_policy,
                            staleness=self.staleness, sync=self.sync,
                            scheduler=self.scheduler, window=self.window,
                            seed=self.seed, max_rows=self.max_rows, on_full=self.on_full,
                            eviction=self.eviction, ttl=self.ttl,
                            admit_after=self.admit_after,
                            full_checkpoint_every=self.full_checkpoint_every,
                            wire_dtype=self.wire_dtype, hot_rows=self.hot_rows_of(dim),
                            name=name)(keys)

    def hot_rows_of(self, dim):
        """The hot rows of a table of `dim`: hot_rows, or as many rows as
        hot_bytes holds."""
        if not self.hot_bytes:
            return self.hot_rows
        state = TableConfig("hot", dim, optimizer=OptimizerConfig(self.optimizer)).state_bytes
        return self.hot_bytes // state
