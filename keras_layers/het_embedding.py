"""HetEmbedding: a drop-in for tf_keras.layers.Embedding whose table lives on
parameter-server shards behind a per-worker cache with bounded staleness.

The table is not a Keras variable: a trainable scalar anchor stands for it.
The lookup's gradient reaches the anchor as the rows' IndexedSlices, which
the compiled optimizer clips, unscales and sums as it does any embedding's;
its apply step hands them to the layer (table_gradients.py), which updates
the table through the cache with the table's own optimizer. So the layer
drops into any model and `model.fit` with no subclassing.
"""
import numpy as np
import tensorflow as tf
import tf_keras

from het_tf.keras_layers import (
    every_rank,
    layer_config,
    layer_settings,
    layer_state,
    route_choice,
    table_gradients,
    table_lookup,
    table_weights,
)
from het_tf.keras_layers.combiners import embed_and_combine
from het_tf.keras_layers.table_weights import TableWeights
from het_tf.runtime.checkpoint import TableCheckpoint


# Registered, so a model saved to a .keras file loads without custom_objects.
@tf_keras.saving.register_keras_serializable(package="het_tf")
class HetEmbedding(tf_keras.layers.Layer):
    """Turns int ids into dense vectors, like `tf_keras.layers.Embedding`.
    docs/keras_layer.md says each argument in full.

    Args:
      input_dim: vocabulary size (ids checked to lie in [0, input_dim)), or
        None for dynamic int64 keys where every int64 value has its own row.
      output_dim: size of each vector.
      embeddings_initializer: a name or a tf_keras initializer. Uniform,
        normal, truncated normal, zeros, ones and scalar Constant run on the
        shards, row by row from the seed; any other is evaluated once at
        build (fixed vocabularies).
      combiner: None, or "sum", "mean" or "sqrtn" to reduce multi-hot ids
        (the last axis of a dense input, the rows of a ragged or sparse one).
      optimizer: the table's own: a tf_keras SGD, Adagrad, Adam or Ftrl
        instance or name; a learning-rate schedule steps once per update.
      seed: seeds the initializer; None derives one from the layer name.
      max_rows: the most rows the table may hold (None: no limit), split
        over its shards.
      on_full: what a step that would pass max_rows does: "refuse" (fails
        naming the table, changing nothing) or "evict" (dynamic tables: the
        rows no cache holds that were used least go first).
      eviction: "lru" (least recently used first) or "lfu" (least often).
      ttl: seconds after which a row no step used (and no cache holds) is
        dropped, for dynamic tables; None: never.
      admit_after: training steps that must look an id up before it becomes
        a row (dynamic tables); until then it reads zeros, its gradients are
        dropped and no cache keeps it. None: the first.
      full_checkpoint_every: None, every checkpoint holds the whole table;
        n > 1, the checkpoints between full ones write only the rows
        changed, added, evicted or expired since the one before, and every
        n-th is full; restoring one applies its chain (a CheckpointManager
        keeps the checkpoints a kept one builds on).

    The route a step's rows take (route_choice.py chooses it; docs/architecture.md):
      cache_capacity: rows each worker caches: a fraction of input_dim, a
        count, 0 (off), or "auto" (a tenth; none in one process unless asked).
      cache_policy, pin_threshold: "lfu", "lru" or "lfu_opt" (rows touched
        pin_threshold times stay cached).
      staleness, read_staleness, write_staleness: the bounds, in updates, on
        a cached copy's reads and writes: "auto" (100, never more than a
        tenth of this worker's steps so far), a number, or None for none.
        Both 0: synchronous, the shards directly without a cache.
      sync: the protocol: "refresh" (a hit costs no bytes) or "check" (HET's
        rule: every id goes with its clock).
      scheduler: None (the bounds decide) or "herald" (Herald's plan: exact,
        Horovod ranks share the ids they read; hybrid mode or one process).
      window: scheduler="herald" only: the batches its plan looks ahead over.
      hot_rows: the most rows FAE's hot block replicates (None: none).
      route: the name of a route registered with
        het_tf.runtime.routes.register (None: the settings above choose).
      wire_dtype: "float32", "bfloat16" or "float16": what a cache's rows travel in.

    mask_zero, input_length, embeddings_regularizer, activity_regularizer,
    embeddings_constraint, sparse and weights are tf_keras.layers.Embedding's,
    with the differences docs/keras_layer.md lists (padding gets no update,
    the penalty is on the batch's rows, constraints act per row, weights= is
    an initializer).
    """

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", combiner=None,
                 optimizer="adagrad", cache_capacity="auto", cache_policy="lfu", staleness="auto",
                 read_staleness=None, write_staleness=None, seed=None, name=None,
                 pin_threshold=100, max_rows=None, sync="refresh", hot_rows=None, mask_zero=False,
                 input_length=None, embeddings_regularizer=None, activity_regularizer=None,
                 embeddings_constraint=None, sparse=False, window=1, route=None, scheduler=None,
                 on_full="refuse", eviction="lru", ttl=None, admit_after=None,
                 full_checkpoint_every=None, wire_dtype="float32", **kwargs):
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
        layer_settings.check_arguments(owner, input_dim, output_dim, combiner, seed,
                                       mask_zero, sparse)
        if weights is not None:
            embeddings_initializer = layer_settings.initializer_from_weights(
                weights, input_dim, output_dim, owner)
        self.input_dim = None if input_dim is None else int(input_dim)
        self.output_dim = int(output_dim)
        self.mask_zero, self.sparse = bool(mask_zero), bool(sparse)
        self.supports_masking = self.mask_zero
        self.combiner, self.seed, self.max_rows = combiner, seed, max_rows
        self.on_full, self.eviction, self.ttl = on_full, eviction, ttl
        self.admit_after = admit_after
        self.full_checkpoint_every = layer_settings.full_checkpoint_every(
            full_checkpoint_every, owner)
        self.input_length = input_length
        self.embeddings_regularizer = tf_keras.regularizers.get(embeddings_regularizer)
        self.embeddings_initializer = (embeddings_initializer
                                       if isinstance(embeddings_initializer, str)
                                       else tf_keras.initializers.get(embeddings_initializer))
        # Validates the name, dims, initializer and optimizer now, not at build.
        self._settings = layer_settings.table_settings(
            self.name, owner, self.input_dim, self.output_dim, embeddings_initializer,
            optimizer, embeddings_constraint, seed, max_rows, on_full, eviction, ttl,
            admit_after)
        self.embeddings_constraint = (None if embeddings_constraint is None
                                      else tf_keras.constraints.get(embeddings_constraint))
        # The arguments that choose a route, kept as given for get_config.
        self.cache_capacity, self.cache_policy, self.pin_threshold = (
            cache_capacity, cache_policy, pin_threshold)
        self.staleness, self.read_staleness, self.write_staleness = (
            staleness, read_staleness, write_staleness)
        sync, scheduler = route_choice.renamed_sync(sync, scheduler, owner)
        self.sync, self.scheduler, self.window = sync, scheduler, window
        self.hot_rows, self.route, self.wire_dtype = hot_rows, route, wire_dtype
        self._choice = route_choice.choose(
            owner, self.input_dim, cache_capacity=cache_capacity, cache_policy=cache_policy,
            staleness=staleness, read_staleness=read_staleness,
            write_staleness=write_staleness, pin_threshold=pin_threshold, sync=sync,
            scheduler=scheduler, window=window, hot_rows=hot_rows, route=route,
            on_full=on_full, ttl=ttl, admit_after=admit_after, wire_dtype=wire_dtype)
        self._table = self._cache = None
        self._route = None  # how a step's rows travel: route_choice.build
        self._strategy = None  # ParameterServerStrategy's (layer_state.flush waits for it)
        self._serving_lookup = None  # see set_serving_lookup
        self._lookahead = False  # see het_tf.lookahead

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
        table_lookup.add_skip_counter(self)
        every_rank.add_training_counter(self)
        (self._strategy, self._table, self._cache, self._route,
         self._combination) = route_choice.build(self.name, self._owner, self._settings.config,
                                                 self._choice, f"{id(self):x}")
        self._route.lookahead = self._lookahead
        self._table_checkpoint = TableCheckpoint(
            self._table, lambda: layer_state.flush(self), self.clear_cache,
            restored=self.reload_hot_rows, full_every=self.full_checkpoint_every)
        if self._settings.evaluated_initializer is not None:
            table_weights.write_initial_rows(self, self._settings.evaluated_initializer)
        # get_weights()/set_weights() see the table of a fixed vocabulary as
        # one matrix; the anchor and counters are not the user's weights.
        self._table_weights = None
        if self.input_dim is not None:
            self._table_weights = self._add_trackable(TableWeights(self), trainable=False)
        super().build(input_shape)

    # ----- Keras' weights and files (table_weights.py) -----

    def get_weights(self):
        """[the table as an [input_dim, output_dim] matrix], every pending
        cached update pushed first; a fixed vocabulary of at most 2^27
        values (docs/keras_layer.md)."""
        if not self.built:  # as Keras: no weights yet
            return super().get_weights()
        return [table_weights.matrix_of(self).get_tensors()[0].numpy()]

    def set_weights(self, weights):
        """Writes [matrix] as the table's rows; every worker's cache is emptied."""
        if not self.built:  # as Keras: [] is all an unbuilt layer takes
            return super().set_weights(weights)
        table_weights.matrix_of(self).set_weights(weights)

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

    # ----- the lookup (table_lookup.py) -----

    def __call__(self, inputs, *args, **kwargs):
        table_lookup.refuse_keras3(inputs, self._owner)
        return super().__call__(inputs, *args, **kwargs)

    # Only static Python control flow: nothing for autograph to convert.
    @tf.autograph.experimental.do_not_convert
    def call(self, inputs, training=None):
        # Keras passes a Python bool; an unknown symbolic value counts as inference.
        training = bool(tf.get_static_value(training) if tf.is_tensor(training) else training)
        layer_state.before_lookup(self, inputs, training)
        inputs = self.integer_ids(inputs)
        penalties = []
        out = embed_and_combine(
            inputs, lambda ids: table_lookup.embed(self, ids, training, penalties),
            self.combiner, self.output_dim, self.sparse)
        for penalty in penalties:
            self.add_loss(penalty)
        if self.compute_dtype != out.dtype:  # mixed precision: the table stays float32
            out = tf.cast(out, self.compute_dtype)
        return out

    def apply_gradient(self, gradient, summed=False):
        """The table's update from the rows' IndexedSlices the optimizer
        applies to the anchor (het_tf patches tf_keras' optimizers to call
        this); summed: each id's slices are already one."""
        return table_lookup.apply_gradient(self, gradient, summed)

    def integer_ids(self, inputs):
        """Ids as integers; float ids must be whole and exact in their dtype."""
        return table_lookup.integer_ids(inputs, self.input_dim, self._owner)

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return tf.not_equal(inputs, 0)

    def compute_output_shape(self, input_shape):
        shape = tf.TensorShape(input_shape)
        if self.combiner is not None:
            shape = shape[:-1]
        elif self.input_length is not None:
            shape = tf.TensorShape(layer_settings.with_input_length(
                shape.as_list(), self.input_length, self._owner))
        return shape.concatenate([self.output_dim])

    @property
    def gradient_anchor(self):
        """The scalar weight that stands for the table (after build): its
        gradient is the rows' IndexedSlices, which the optimizer's apply
        step hands to apply_gradient. It is not a dense weight: hybrid
        mode's allreduce leaves it out."""
        return self._anchor

    def set_serving_lookup(self, lookup):
        """Serve from `lookup` (a callable from int64 ids to rows made of
        stock TensorFlow state) instead of the table, or from the table
        again with None: export_saved_model traces the model this way.
        Set past Keras' attribute tracking, which would make the lookup's
        variables the layer's weights, and keep them (a copy of the table)
        after it is unset."""
        object.__setattr__(self, "_serving_lookup", lookup)

    # ----- the rows outside a step (layer_state.py) and its route's -----

    def flush(self):
        """Pushes every pending cache update to the table (eager)."""
        layer_state.flush(self)

    def clear_cache(self):
        """Drops this worker's cached rows and pending updates (flush first
        to keep them); returns the ops."""
        return layer_state.clear(self)

    def het_stats(self):
        """Counters of the cache and the table, with hit rate and traffic per id."""
        return {} if self._table is None else layer_state.stats(self)

    def set_hot_keys(self, keys):
        """Makes `keys` the hot rows (eager; het_tf.use_hot_rows calls it)."""
        layer_state.set_hot_keys(self, keys)

    def reload_hot_rows(self):
        """Takes the hot rows from the shards again, after a restore (eager)."""
        if self._route is not None:
            self._route.reload()

    @property
    def hot_keys(self):
        """The hot rows' ids, ascending (empty without hot rows)."""
        return self._route.hot_keys if self._route is not None else np.zeros([0], np.int64)

    @property
    def hot_block(self):
        """The HotBlock replicating this layer's hot rows, or None."""
        return getattr(self._route, "hot_block", None)

    def enable_lookahead(self, enabled=True):
        """Steps traced from now on fetch what het_tf.lookahead stages."""
        self._lookahead = bool(enabled)
        if self._route is not None:
            self._route.lookahead = self._lookahead

    @property
    def lookahead_active(self):
        """True once training steps fetch what het_tf.lookahead stages."""
        return self._route is not None and self._route.lookahead_active

    @property
    def combination(self):
        """The settings that chose the route (combinations.py; after build, with the mode)."""
        return self._combination if self.built else self._choice.combination

    @property
    def table(self):
        """The ShardedTable behind this layer (after build)."""
        return self._table

    @property
    def cache(self):
        """This worker's WorkerCache, or None when the cache is off."""
        return self._cache

    # ----- Keras' config (layer_config.py) -----

    def get_config(self):
        config = super().get_config()
        config.pop("autocast", None)
        config.update(layer_config.config(self))
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**layer_config.arguments(config))


def het_embedding_layers(model):
    """Every HetEmbedding layer of a model, nested models included."""
    return [layer for layer in model._flatten_layers(include_self=False, recursive=True)
            if isinstance(layer, HetEmbedding)]
