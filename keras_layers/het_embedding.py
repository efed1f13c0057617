"""HetEmbedding: a drop-in for tf_keras.layers.Embedding whose table lives on
parameter-server shards behind a per-worker cache with bounded staleness.

The table is not a Keras variable: a trainable scalar anchor stands for it.
The lookup's gradient reaches the anchor as the rows' IndexedSlices, which
the compiled optimizer clips, unscales and sums as it does any embedding's;
its apply step hands them to the layer (table_gradients.py), which updates
the table through the cache with the table's own optimizer. So the layer
drops into any model and `model.fit` with no subclassing.
"""
import copy
import dataclasses
import zlib

import numpy as np
import tensorflow as tf
import tf_keras

from het_tf.keras_layers import route_choice, server_optimizer, table_gradients, table_weights
from het_tf.keras_layers.combiners import COMBINERS, embed_and_combine
from het_tf.keras_layers.layer_settings import (
    resolve_cache,
    resolve_constraint,
    resolve_hot_rows,
    resolve_initializer,
    resolve_route,
)
from het_tf.keras_layers.table_weights import TableWeights
from het_tf.runtime.checkpoint import TableCheckpoint
from het_tf.runtime.config import UNBOUNDED, TableConfig, is_whole

_KERAS3_HINT = ("HetEmbedding is a tf_keras (Keras 2) layer: Keras 3 has no "
                "ParameterServerStrategy support. Build the model with `import tf_keras` "
                "or set TF_USE_LEGACY_KERAS=1 before importing TensorFlow.")


# The whole numbers each float dtype holds exactly: 2 ** (its precision).
_EXACT_WHOLE_NUMBERS = {tf.float16: 2**11, tf.bfloat16: 2**8, tf.float32: 2**24,
                        tf.float64: 2**53}


def _is_keras3(value):
    module = type(value).__module__
    return module.startswith("keras.") or module == "keras"


# Registered, so a model saved to a .keras file loads without custom_objects.
@tf_keras.saving.register_keras_serializable(package="het_tf")
class HetEmbedding(tf_keras.layers.Layer):
    """Turns int ids into dense vectors, like `tf_keras.layers.Embedding`.

    Args:
      input_dim: vocabulary size (ids checked to lie in [0, input_dim)), or
        None for dynamic int64 keys where every int64 value has its own row.
      output_dim: size of each vector.
      embeddings_initializer: "uniform" (Keras' default, U(-0.05, 0.05)),
        "normal", "truncated_normal", "zeros", "ones", or a tf_keras
        initializer. RandomUniform, RandomNormal, TruncatedNormal, Zeros,
        Ones and scalar Constant run on the shards, row by row and
        deterministically from the seed; any other initializer needs a fixed
        vocabulary and is evaluated once at build.
      combiner: None, or "sum", "mean" or "sqrtn" to reduce multi-hot ids
        (the last axis of a dense input, the rows of a ragged or sparse one).
      optimizer: the table's server-side optimizer: a tf_keras SGD, Adagrad,
        Adam or Ftrl instance or name. Its learning rate may be a schedule,
        stepped once per embedding update.
      cache_capacity: rows each worker caches: a float in (0, 1) is a fraction
        of input_dim, an int a row count; 0 turns the cache off.
      cache_policy: "lfu", "lru" or "lfu_opt" (rows touched pin_threshold
        times stay cached).
      staleness: "auto" (the default): bounds of 100 updates that are never
        more than a tenth of the training steps this worker has taken so far;
        or the bound on both reads and writes, in updates, from the first
        step; None or math.inf is unbounded. read_staleness /
        write_staleness override it (under "auto" they replace the 100).
        With both bounds 0 training is synchronous and the layer reads and
        writes the shards directly, without a cache.
      sync: how training lookups meet the shards. "refresh" (the default):
        only the ids not cached and the evictions since the last step go to
        the shards, which send back those rows and the fresh states of this
        worker's copies that other workers moved past the read bound, so a
        hit costs no bytes. "check": HET's rule, every id of the batch goes
        with its clock, hit or miss (docs/consistency.md). "herald": exact,
        with no staleness (hybrid mode or one process): before each step the
        Horovod ranks share the ids they will read, and each pushes only the
        pending rows another rank reads (docs/herald.md).
      window: sync="herald" only: the batches its plan looks ahead over, the
        step's own and the window - 1 after it, which het_tf.lookahead
        stages (1: none staged). A row this rank alone reads is cached if it
        read it last step or reads it again within the window; otherwise it
        is read and written on the shards directly.
      seed: seeds the initializer; None derives one from the layer name, so
        a model rebuilt in another process gets the same rows.
      pin_threshold: touches after which lfu_opt pins a row.
      route: the name of a route of one's own, registered with
        het_tf.runtime.routes.register (None: the route the other settings
        choose).
      max_rows: the most rows the table may hold (None: no limit); a step
        that would create more fails with ResourceExhausted naming the
        table, and changes nothing.
      hot_rows: the most hot rows this layer replicates (FAE, docs/fae.md):
        het_tf.use_hot_rows installs a profile's hot set, whose rows then
        train in a block of every process's own, kept the same on every
        Horovod rank, while the other rows go through the cache (which
        must be on). None or 0: no hot rows.
      mask_zero, input_length, embeddings_regularizer, activity_regularizer,
      embeddings_constraint, sparse, weights: as in tf_keras.layers.Embedding,
        with the differences docs/keras_layer.md lists: id 0 as padding gets
        no gradient and no update; the embeddings regularizer's penalty is on
        the rows the batch looks up; the constraint (NonNeg, or MaxNorm,
        UnitNorm or MinMaxNorm with axis=1) projects each row an update
        changes, on the shards and in the caches; weights=[matrix] is an
        initializer (fixed vocabularies).
    """

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", combiner=None,
                 optimizer="adagrad", cache_capacity=0.1, cache_policy="lfu", staleness="auto",
                 read_staleness=None, write_staleness=None, seed=None, name=None,
                 pin_threshold=100, max_rows=None, sync="refresh", hot_rows=None, mask_zero=False,
                 input_length=None, embeddings_regularizer=None, activity_regularizer=None,
                 embeddings_constraint=None, sparse=False, window=1, route=None, **kwargs):
        kwargs.setdefault("autocast", False)  # ids must stay ints
        if "input_shape" not in kwargs and "batch_input_shape" not in kwargs:
            # As Keras' Embedding: a Sequential model may start with this
            # layer and no Input; Keras then feeds it float ids (integer_ids).
            kwargs["input_shape"] = (input_length,) if isinstance(input_length, int) else (None,)
        # Keras' weights= would set the anchor and counters: here it is the table.
        weights = kwargs.pop("weights", None)
        # Keras' choice of a one-hot matmul for the lookup (fast on TPUs)
        # gives the same rows; the rows here come from the shards either way.
        kwargs.pop("use_one_hot_matmul", None)
        super().__init__(name=name, activity_regularizer=activity_regularizer, **kwargs)
        owner = f"HetEmbedding '{self.name}'"
        self._owner = owner
        if input_dim is not None and not is_whole(input_dim, at_least=1):
            raise ValueError(f"{owner}: input_dim must be a positive int, or None for dynamic "
                             f"int64 keys; got {input_dim!r}")
        if not is_whole(output_dim, at_least=1):
            raise ValueError(f"{owner}: output_dim must be a positive int, got {output_dim!r}")
        if combiner is not None and combiner not in COMBINERS:
            raise ValueError(f"{owner}: combiner must be None or one of {', '.join(COMBINERS)}; "
                             f"got {combiner!r}")
        if seed is not None and not is_whole(seed):
            raise ValueError(f"{owner}: seed must be an int or None, got {seed!r}")
        if mask_zero and combiner is not None:
            raise ValueError(f"{owner}: mask_zero masks a sequence of ids, which a combiner "
                             "reduces away; give multi-hot ids as a ragged or sparse tensor "
                             "(no padding) instead")
        if sparse and mask_zero:
            raise ValueError(f"{owner}: mask_zero cannot be enabled with sparse=True (as in "
                             "tf_keras.layers.Embedding)")
        if sparse and combiner is not None:
            raise ValueError(f"{owner}: sparse=True returns one vector per id, as a "
                             "SparseTensor; a combiner returns one per row (use one or the "
                             "other)")
        if weights is not None:
            embeddings_initializer = _initializer_from_weights(weights, input_dim, output_dim,
                                                               owner)
        self.input_dim = None if input_dim is None else int(input_dim)
        self.output_dim = int(output_dim)
        self.combiner = combiner
        self.seed = seed
        self.cache_capacity = cache_capacity
        self.cache_policy = cache_policy
        self.staleness = staleness
        self.read_staleness = read_staleness
        self.write_staleness = write_staleness
        self.pin_threshold = pin_threshold
        self.max_rows = max_rows
        self.sync = sync
        self.window = window
        self.mask_zero = bool(mask_zero)
        self.input_length = input_length
        self.sparse = bool(sparse)
        self.embeddings_regularizer = tf_keras.regularizers.get(embeddings_regularizer)
        self.embeddings_initializer = (embeddings_initializer
                                       if isinstance(embeddings_initializer, str)
                                       else tf_keras.initializers.get(embeddings_initializer))
        self._initializer = resolve_initializer(embeddings_initializer, self.input_dim,
                                                self.output_dim, owner)
        (self._optimizer_config, self._learning_rate,
         self._optimizer_serialized) = server_optimizer.resolve(optimizer, owner)
        self._optimizer_config = dataclasses.replace(
            self._optimizer_config, **resolve_constraint(embeddings_constraint, owner))
        self.embeddings_constraint = (None if embeddings_constraint is None
                                      else tf_keras.constraints.get(embeddings_constraint))
        self._cache_config = resolve_cache(cache_capacity, cache_policy, staleness,
                                           read_staleness, write_staleness, pin_threshold,
                                           self.input_dim, owner, sync, window)
        self.hot_rows = hot_rows
        self._hot_rows = resolve_hot_rows(hot_rows, self.input_dim, self._cache_config, owner)
        self.route = route
        self._route_factory = resolve_route(route, self._hot_rows, self._cache_config, owner)
        # Validates name, dims and optimizer now rather than at build.
        self._table_config = self._make_table_config()
        self._table = None
        self._cache = None
        self._route = None  # how a step's rows travel: route_choice.build
        self._strategy = None  # ParameterServerStrategy's, see _wait_for_scheduled_steps
        self._serving_lookup = None  # see set_serving_lookup
        self._lookahead = False  # see het_tf.lookahead
        self.supports_masking = self.mask_zero

    # ----- settings -----

    def _make_table_config(self):
        kind = self._initializer[0]
        a, b = (0.0, 0.0) if kind == "materialize" else self._initializer[1:]
        seed = self.seed if self.seed is not None else zlib.crc32(self.name.encode())
        return TableConfig(self.name, self.output_dim,
                           UNBOUNDED if self.input_dim is None else self.input_dim,
                           "constant" if kind == "materialize" else kind, a, b, int(seed),
                           self._optimizer_config, max_rows=self.max_rows, owner=self._owner)

    # ----- building -----

    def build(self, input_shape):
        # The anchor only carries the gradient path to the embedding update.
        self._anchor = self.add_weight("het_anchor", shape=(), initializer="zeros",
                                       trainable=True)
        table_gradients.mark_anchor(self._anchor, self)
        self._updates = self.add_weight("het_updates", shape=(), dtype=tf.int64,
                                        initializer="zeros", trainable=False)
        # Samples seen in training, for per-sample traffic figures.
        self._samples = self.add_weight("het_samples", shape=(), dtype=tf.int64,
                                        initializer="zeros", trainable=False)
        self._create_table_and_cache()
        # get_weights()/set_weights() see the table of a fixed vocabulary as
        # one matrix; the anchor and counters are not the user's weights.
        self._table_weights = None
        if self.input_dim is not None:
            self._table_weights = self._add_trackable(TableWeights(self), trainable=False)
        super().build(input_shape)

    def get_weights(self):
        """[the table as an [input_dim, output_dim] matrix], every pending
        cached update pushed first; a fixed vocabulary of at most 2^27
        values (docs/keras_layer.md)."""
        if not self.built:  # as Keras: no weights yet
            return super().get_weights()
        return [self._table_weights_or_fail().get_tensors()[0].numpy()]

    def set_weights(self, weights):
        """Writes [matrix] as the table's rows; every worker's cache is emptied."""
        if not self.built:  # as Keras: [] is all an unbuilt layer takes
            return super().set_weights(weights)
        self._table_weights_or_fail().set_weights(weights)

    def save_own_variables(self, store):
        """Keras' .keras (and .weights.h5) files: the table's rows with their
        optimizer state, clocks and steps, pending updates pushed first."""
        table_weights.save_table(self, store)

    def load_own_variables(self, store):
        """Replaces the table's rows with a Keras file's; every worker's
        cache is emptied."""
        table_weights.load_table(self, store)

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # A SavedModel is refused here, where both model.save(dir) and
        # tf.saved_model.save reach the layer before anything is written.
        if save_type == "savedmodel":
            table_weights.check_savable(self, table_weights.SAVEDMODEL)
        return super()._trackable_children(save_type, **kwargs)

    def _table_weights_or_fail(self):
        if self._table_weights is None:
            raise ValueError(f"{self._owner}: a dynamic table (input_dim=None) has no matrix "
                             "to get or set; save and restore it with tf.train.Checkpoint")
        return self._table_weights

    def _create_table_and_cache(self):
        self._strategy, self._table, self._cache, self._route = route_choice.build(
            self.name, self._owner, self._table_config, self._cache_config, self._hot_rows,
            self._route_factory, f"{id(self):x}")
        self._route.lookahead = self._lookahead
        self._table_checkpoint = TableCheckpoint(self._table, self._flush_ops, self.clear_cache,
                                                 restored=self.reload_hot_rows)
        if self._initializer[0] == "materialize":
            with tf.init_scope():
                self._write_initial_rows()

    def _write_initial_rows(self):
        values = tf.cast(self._initializer[1](shape=(self.input_dim, self.output_dim),
                                              dtype=tf.float32), tf.float32)
        n = self.input_dim
        self._table.import_rows(tf.range(n, dtype=tf.int64), values,
                                self._table_config.initial_slots(n),
                                tf.zeros([n], tf.int64), tf.zeros([n], tf.int64))

    # ----- the lookup -----

    def __call__(self, inputs, *args, **kwargs):
        if _is_keras3(inputs) or any(_is_keras3(x) for x in tf.nest.flatten(inputs)):
            raise TypeError(f"{self._owner}: got a Keras 3 {type(inputs).__name__}. {_KERAS3_HINT}")
        return super().__call__(inputs, *args, **kwargs)

    def _current_learning_rate(self):
        lr = self._learning_rate
        if isinstance(lr, tf_keras.optimizers.schedules.LearningRateSchedule):
            return lr(self._updates)
        return tf.constant(lr, tf.float32)

    def _embed(self, ids, training, penalties):
        """Rows of `ids` (any shape); in training their gradient reaches the
        anchor as the table's (see apply_gradient). Appends the embeddings
        regularizer's penalty on the batch's rows to `penalties`."""
        if self._serving_lookup is not None:
            ids = self._table.check_ids(ids)
            # The saved lookup takes ids of any shape: give its rows theirs.
            return tf.ensure_shape(self._serving_lookup(ids),
                                   ids.shape.concatenate([self.output_dim]))
        table, route, dim, owner = self._table, self._route, self.output_dim, self._owner
        regularizer, mask_zero = self.embeddings_regularizer, self.mask_zero
        vocabulary = self._table_config.vocabulary_size
        dense_shape = [np.iinfo(np.int64).max if vocabulary == UNBOUNDED else vocabulary, dim]

        @tf.custom_gradient
        def lookup(anchor):
            rows, unique, inverse = route.lookup(ids, training)
            out = tf.gather(rows, inverse)
            kept = tf.not_equal(unique, 0) if mask_zero else None

            def grad(dy, d_penalized=None):
                if not training:
                    raise ValueError(f"{owner}: a gradient was asked of a lookup made with "
                                     "training=False; call the model with training=True "
                                     "inside GradientTape")
                if not self.trainable:  # frozen, as a Keras layer is
                    return None
                # As tf_keras' Embedding: one slice per id looked up, so the
                # optimizer clips, unscales and sums them as it does its.
                keys = tf.reshape(table.check_ids(ids), [-1])
                values = tf.reshape(tf.cast(dy, tf.float32), [-1, dim])
                if kept is not None:  # padding: no gradient, no update, no clock tick
                    real = keys != 0
                    keys, values = tf.boolean_mask(keys, real), tf.boolean_mask(values, real)
                if d_penalized is not None:  # the regularizer's penalty on these rows
                    penalized = unique if kept is None else tf.boolean_mask(unique, kept)
                    keys = tf.concat([keys, penalized], 0)
                    values = tf.concat([values, tf.cast(d_penalized, tf.float32)], 0)
                return tf.IndexedSlices(values, keys, tf.constant(dense_shape, tf.int64))

            if regularizer is None:
                return out, grad
            # The rows the regularizer's penalty is on: the batch's, padding
            # aside; a second output, so its gradient reaches them in grad.
            return (out, rows if kept is None else tf.boolean_mask(rows, kept)), grad

        if regularizer is None:
            return lookup(self._anchor)
        out, penalized = lookup(self._anchor)
        penalties.append(regularizer(penalized))
        return out

    def apply_gradient(self, gradient):
        """The table's update from the gradient the optimizer applies to the
        anchor (het_tf patches tf_keras' optimizers to call this): the rows'
        IndexedSlices, clipped and unscaled as the optimizer treats any
        variable's. Each row takes one update with its gradients' sum, and
        the table's optimizer and learning rate step once."""
        if not isinstance(gradient, tf.IndexedSlices):
            raise ValueError(
                f"{self._owner}: the table's gradient reached the optimizer as a dense "
                f"{type(gradient).__name__}; pass the gradient tape's IndexedSlices to "
                "apply_gradients unchanged")
        keys = self._table.check_ids(gradient.indices, "the gradient's ids")
        if self.input_dim is not None:
            # Before any part of the update: a cached part and a pushed part
            # must not be applied without the other.
            valid = tf.debugging.assert_equal(
                tf.reduce_all((keys >= 0) & (keys < self.input_dim)), True,
                message=f"{self._owner}: the gradient's ids must lie in [0, {self.input_dim}); "
                        "nothing was applied")
            with tf.control_dependencies([valid]):
                keys = tf.identity(keys)
        unique, at = tf.unique(keys, out_idx=tf.int32)
        grads = tf.math.unsorted_segment_sum(tf.cast(gradient.values, tf.float32), at,
                                             tf.size(unique))
        update = self._route.apply(unique, grads, self._current_learning_rate())
        with tf.control_dependencies(tf.nest.flatten(update)):
            return self._updates.assign_add(1)

    # Only static Python control flow: nothing for autograph to convert.
    @tf.autograph.experimental.do_not_convert
    def call(self, inputs, training=None):
        # Keras passes a Python bool; an unknown symbolic value counts as inference.
        training = bool(tf.get_static_value(training) if tf.is_tensor(training) else training)
        if training and self._serving_lookup is None:
            batch = (inputs.nrows() if isinstance(inputs, tf.RaggedTensor)
                     else tf.shape(inputs, out_type=tf.int64)[0])
            self._samples.assign_add(tf.cast(batch, tf.int64))
        inputs = self.integer_ids(inputs)
        penalties = []
        out = embed_and_combine(inputs, lambda ids: self._embed(ids, training, penalties),
                                self.combiner, self.output_dim, self.sparse)
        for penalty in penalties:
            self.add_loss(penalty)
        if self.compute_dtype != out.dtype:  # mixed precision: the table stays float32
            out = tf.cast(out, self.compute_dtype)
        return out

    def integer_ids(self, inputs):
        """Ids as integers. Float ids (a Sequential model started without an
        Input layer gets them, as Keras' Embedding does) are taken where every
        id of the vocabulary is exact in their dtype, and must be whole."""
        values = (inputs.flat_values if isinstance(inputs, tf.RaggedTensor)
                  else inputs.values if isinstance(inputs, tf.SparseTensor)
                  else tf.convert_to_tensor(inputs))
        if not values.dtype.is_floating:
            return inputs
        exact = _EXACT_WHOLE_NUMBERS[values.dtype]
        if self.input_dim is None or self.input_dim > exact:
            vocabulary = "int64 keys" if self.input_dim is None else self.input_dim
            raise ValueError(f"{self._owner}: got {values.dtype.name} ids, which cannot hold "
                             f"every id of {vocabulary} exactly (whole numbers up to {exact}); "
                             "declare the model's input with an integer dtype: "
                             "tf_keras.Input(shape, dtype='int64')")
        # Checked as floats: a cast of one outside int64 would be undefined.
        valid = tf.debugging.assert_equal(
            tf.reduce_all((tf.floor(values) == values) & (values >= 0) &
                          (values < self.input_dim)), True,
            message=f"{self._owner}: {values.dtype.name} ids must be whole numbers in "
                    f"[0, {self.input_dim})")
        with tf.control_dependencies([valid]):
            ids = tf.cast(values, tf.int64)
        if isinstance(inputs, tf.RaggedTensor):
            return inputs.with_flat_values(ids)
        if isinstance(inputs, tf.SparseTensor):
            return tf.SparseTensor(inputs.indices, ids, inputs.dense_shape)
        return ids

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return tf.not_equal(inputs, 0)

    def compute_output_shape(self, input_shape):
        shape = tf.TensorShape(input_shape)
        if self.combiner is not None:
            shape = shape[:-1]
        elif self.input_length is not None:
            shape = tf.TensorShape(_with_input_length(shape.as_list(), self.input_length,
                                                      self._owner))
        return shape.concatenate([self.output_dim])

    # ----- state -----

    def _wait_for_scheduled_steps(self):
        """Under ParameterServerStrategy, from the chief (eagerly): waits for
        the steps scheduled so far. A worker's cache serves one caller at a
        time: a flush, save or clear beside a running step could answer that
        step's push for it, or drop the updates it makes in between. Keras
        saves, validates and calls callbacks from the thread that schedules
        the steps, so none is scheduled while this one runs."""
        coordinator = getattr(self._strategy, "_cluster_coordinator", None)
        if coordinator is not None and tf.executing_eagerly():
            coordinator.join()

    def _flush_ops(self):
        self._wait_for_scheduled_steps()
        return self._route.flush(self._current_learning_rate())

    def clear_cache(self):
        """Drops this worker's cached rows and pending updates (flush first
        to keep them); returns the ops."""
        self._wait_for_scheduled_steps()
        return self._route.clear()

    def reload_hot_rows(self):
        """The hot rows come from the shards again (eager), as after a
        restore or set_weights wrote them there."""
        if self._route is not None:
            self._route.reload()

    def set_hot_keys(self, keys):
        """Makes `keys` this layer's hot rows (eager; het_tf.use_hot_rows
        calls it on every rank with the same keys), as its route keeps them
        (docs/fae.md)."""
        if not self._hot_rows:
            raise ValueError(f"{self._owner} has no hot rows: give it hot_rows=N (the most "
                             "rows it replicates)")
        if not self.built:
            raise ValueError(f"{self._owner} is not built yet: build the model first")
        keys = np.unique(np.asarray(keys, np.int64))
        if len(keys) > self._hot_rows:
            raise ValueError(f"{self._owner}: {len(keys)} hot rows given, more than its "
                             f"hot_rows={self._hot_rows}")
        with tf.init_scope():
            ids = self._table.check_ids(keys, "hot ids")
            if self._table.config.fixed_vocabulary and len(keys) and (
                    keys[0] < 0 or keys[-1] >= self.input_dim):
                raise ValueError(f"{self._owner}: hot ids must lie in [0, {self.input_dim}); "
                                 f"got ids from {keys[0]} to {keys[-1]}")
            self._route.set_hot_keys(ids, keys, lambda: (self._flush_ops(), self.clear_cache()))

    @property
    def hot_keys(self):
        """The hot rows' ids, ascending (empty without hot rows)."""
        return self._route.hot_keys if self._route is not None else np.zeros([0], np.int64)

    @property
    def hot_block(self):
        """The HotBlock replicating this layer's hot rows, or None."""
        return getattr(self._route, "hot_block", None)

    @property
    def gradient_anchor(self):
        """The scalar weight that stands for the table (after build): its
        gradient is the rows' IndexedSlices, which the optimizer's apply
        step hands to apply_gradient. It is not a dense weight: hybrid
        mode's allreduce leaves it out."""
        return self._anchor

    @property
    def lookahead_active(self):
        """True once het_tf.lookahead feeds this layer's cache the next
        batch's ids: training steps then prefetch them (sync "refresh")."""
        return self._route is not None and self._route.lookahead_active

    def enable_lookahead(self, enabled=True):
        """Training steps traced from now on prefetch the batch that
        het_tf.lookahead staged (it calls this; see docs/consistency.md)."""
        self._lookahead = bool(enabled)
        if self._route is not None:
            self._route.lookahead = self._lookahead

    def set_serving_lookup(self, lookup):
        """Serve from `lookup` (a callable from int64 ids to rows made of
        stock TensorFlow state) instead of the table, or from the table
        again with None: export_saved_model traces the model this way."""
        self._serving_lookup = lookup

    def flush(self):
        """Pushes every pending cache update to the table (eager)."""
        self._flush_ops()

    @property
    def table(self):
        """The ShardedTable behind this layer (after build)."""
        return self._table

    @property
    def cache(self):
        """This worker's WorkerCache, or None when the cache is off."""
        return self._cache

    def het_stats(self):
        """Counters of the cache and the table, with hit rate and traffic per id."""
        if self._table is None:
            return {}
        with tf.init_scope():
            stats, traffic, lookups = self._route.stats()
        stats["samples"] = int(self._samples.numpy()) if tf.executing_eagerly() else 0
        stats["embedding_bytes"] = traffic
        stats["bytes_per_id"] = traffic / max(lookups, 1)
        return stats

    def get_config(self):
        config = super().get_config()
        config.pop("autocast", None)
        initializer = self.embeddings_initializer
        config.update({
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "embeddings_initializer": (initializer if isinstance(initializer, str)
                                       else tf_keras.initializers.serialize(initializer)),
            "combiner": self.combiner,
            "optimizer": {"class_name": self._optimizer_serialized["class_name"],
                          "config": dict(self._optimizer_serialized["config"])},
            "cache_capacity": self.cache_capacity,
            "cache_policy": self.cache_policy,
            "staleness": self.staleness,
            "read_staleness": self.read_staleness,
            "write_staleness": self.write_staleness,
            "seed": self.seed,
            "pin_threshold": self.pin_threshold,
            "max_rows": self.max_rows,
            "sync": self.sync,
            "window": self.window,
            "route": self.route,
            "hot_rows": self.hot_rows,
            "mask_zero": self.mask_zero,
            "input_length": self.input_length,
            "embeddings_regularizer": tf_keras.regularizers.serialize(
                self.embeddings_regularizer) if self.embeddings_regularizer else None,
            "activity_regularizer": tf_keras.regularizers.serialize(
                self.activity_regularizer) if self.activity_regularizer else None,
            "embeddings_constraint": tf_keras.constraints.serialize(
                self.embeddings_constraint) if self.embeddings_constraint else None,
            "sparse": self.sparse,
        })
        return config

    @classmethod
    def from_config(cls, config):
        config = copy.deepcopy(dict(config))  # Keras' deserializers edit what they are given
        if isinstance(config.get("optimizer"), dict):
            config["optimizer"] = tf_keras.optimizers.get(config["optimizer"])
        if isinstance(config.get("embeddings_initializer"), dict):
            config["embeddings_initializer"] = tf_keras.initializers.deserialize(
                config["embeddings_initializer"])
        for key in ("embeddings_regularizer", "activity_regularizer"):
            if isinstance(config.get(key), dict):
                config[key] = tf_keras.regularizers.deserialize(config[key])
        if isinstance(config.get("embeddings_constraint"), dict):
            config["embeddings_constraint"] = tf_keras.constraints.deserialize(
                config["embeddings_constraint"])
        return cls(**config)


def _initializer_from_weights(weights, input_dim, output_dim, owner):
    """weights=[matrix]: the table's initial rows, for a fixed vocabulary."""
    if not isinstance(weights, (list, tuple)) or len(weights) != 1:
        raise ValueError(f"{owner}: weights must be a list of one [input_dim, output_dim] "
                         f"matrix (the table), got {type(weights).__name__} of "
                         f"{len(weights) if isinstance(weights, (list, tuple)) else '?'}")
    matrix = np.asarray(weights[0], np.float32)
    if input_dim is None or matrix.shape != (input_dim, output_dim):
        raise ValueError(f"{owner}: weights[0] has shape {matrix.shape}; the table is "
                         f"[{input_dim}, {output_dim}] (weights= needs a fixed input_dim)")
    return tf_keras.initializers.Constant(matrix)


def _with_input_length(shape, input_length, owner):
    """The input shape with input_length filling its unknown sequence axes,
    as tf_keras.layers.Embedding infers it."""
    lengths = list(input_length) if isinstance(input_length, (list, tuple)) else [input_length]
    if len(lengths) != len(shape) - 1:
        raise ValueError(f"{owner}: input_length is {input_length}, but the input has "
                         f"shape {shape}")
    for i, (given, seen) in enumerate(zip(lengths, shape[1:])):
        if given is not None and seen is not None and given != seen:
            raise ValueError(f"{owner}: input_length is {input_length}, but the input has "
                             f"shape {shape}")
        if given is None:
            lengths[i] = seen
    return [shape[0], *lengths]


def het_embedding_layers(model):
    """Every HetEmbedding layer of a model, nested models included."""
    return [layer for layer in model._flatten_layers(include_self=False, recursive=True)
            if isinstance(layer, HetEmbedding)]
