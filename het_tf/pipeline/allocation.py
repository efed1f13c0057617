"""Herald's location-aware allocation in hybrid mode (docs/herald.md): each
step, the samples the ranks read are given out again so that each trains on
the rank whose cache holds most of its rows, every rank keeping its batch
size.

- Every `every` steps each rank shares a Bloom filter of the
  `summary_rows` most used keys of each of its caches (HetKeySummary, 1.25
  bytes a key; allgather), so every rank can tell which rows each cache
  holds, up to a rare false "held" that can only place a sample worse.
- Each step each rank scores its own samples against every rank's summary
  (rows of the sample that rank holds) and the ranks share the scores and
  their batch sizes (allgather). Every rank then runs the same assignment
  (HetAssignSamples) on the same numbers, so all agree with no coordinator.
- The samples move with one alltoall: each rank's samples, packed as
  bytes, sorted by destination. A sample whose rows score the same
  everywhere stays where it was read; one moves only for a better score,
  and only if it gains more rows than the stay bonus (by default its own
  bytes' worth of rows), or because its rank filled with samples that gain
  more.

Every byte of it is counted (`stats()`): the summaries, the scores and
sizes, and the samples moved.
"""
import dataclasses

import numpy as np
import tensorflow as tf
import tf_keras

from het_tf import _op_library
from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.pipeline.layer_inputs import ids_model, layer_ids
from het_tf.runtime import combinations
from het_tf.runtime.config import is_whole, parse_stay_bonus
from het_tf.runtime.counters import counter

# A summary's words, and the sizes and counts that travel as int64.
_WORD_BYTES = 8


def _check_setting(name, value):
    if not is_whole(value, at_least=1):
        raise ValueError(f"allocation: {name} must be a positive int, got {value!r}")
    return int(value)


class Allocation:
    """Re-divides each training step's samples over the Horovod ranks.

    `ranks`/`rank`: the Horovod world; `allgather(tensor)`: every rank's
    tensor concatenated in rank order; `alltoall(tensor, splits)`: the
    rows sent to each rank by `splits`, and the rows received, in rank order.
    """

    def __init__(self, model, every, summary_rows, ranks, rank, allgather, alltoall,
                 stay_bonus="auto"):
        self.stay_bonus = parse_stay_bonus(stay_bonus, "allocation")
        self.every = _check_setting("every (steps between cache summaries)", every)
        self.summary_rows = _check_setting("summary_rows (keys of each cache shared)",
                                           summary_rows)
        layers = [layer for layer in het_embedding_layers(model) if layer.built]
        cached = [layer for layer in layers if layer.cache is not None]
        if not cached:
            raise ValueError("allocation: the model has no HetEmbedding layer with a cache, so "
                             "there is no cached row to send samples to")
        for layer in cached:
            # The ranks, not the layer, say the mode here.
            combinations.check(dataclasses.replace(layer.combination, allocation=True,
                                                   mode=None, workers=int(ranks)),
                               combinations.spell_argument, f"HetEmbedding '{layer.name}': ")
        self._layers = cached
        self._ids_of = ids_model(model, cached, "allocation")
        self._ranks, self._rank = int(ranks), int(rank)
        self._allgather, self._alltoall = allgather, alltoall
        self._ops = _op_library.load()
        # The fewest bytes a row costs to fetch: a sample worth fewer rows
        # than its own bytes stays (docs/herald.md).
        self._row_bytes = min(layer.table.config.state_bytes + 4 for layer in cached)
        with tf.init_scope():
            self._summaries = [tf.Variable(np.zeros([0], np.int64),
                                           trainable=False, shape=tf.TensorShape([None]),
                                           name="het_allocation_summary") for _ in cached]
            # Where each rank's part of a summary starts, and the end.
            self._starts = [tf.Variable(np.zeros([self._ranks + 1], np.int64),
                                        trainable=False, name="het_allocation_starts")
                            for _ in cached]
            self._steps = counter("het_allocation_steps")
            self._bytes = counter("het_allocation_bytes")
            self._moved = counter("het_allocation_moved")
            self._samples = counter("het_allocation_samples")
            # The last step's assignment of the whole batch, and the samples
            # this rank trained on: what last_step() shows.
            self._assigned = tf.Variable(np.zeros([0], np.int32), trainable=False,
                                         shape=tf.TensorShape([None]),
                                         name="het_allocation_assigned")
            self._received = tf.Variable(np.zeros([0, 0], np.uint8), trainable=False,
                                         shape=tf.TensorShape([None, None]),
                                         name="het_allocation_received")
        self._layout = None

    # ----- summaries -----

    def _share_summaries(self):
        """The summary of each cache's most used keys, from every rank."""
        sent = tf.constant(0, tf.int64)
        updates = []
        for layer, summary, starts in zip(self._layers, self._summaries, self._starts):
            mine = self._ops.het_key_summary(layer.cache.most_used(self.summary_rows))
            size = tf.shape(mine, out_type=tf.int64)[0]
            sizes = self._allgather(tf.reshape(size, [1]))
            everyone = self._allgather(mine)
            updates += [summary.assign(everyone),
                        starts.assign(tf.concat([[0], tf.cumsum(sizes)], 0))]
            received = tf.reduce_sum(sizes) - size
            sent += (size * (self._ranks - 1) + received + 2 * (self._ranks - 1)) * _WORD_BYTES
        with tf.control_dependencies(updates):
            return tf.identity(sent)

    # ----- scores and assignment -----

    def _scores(self, x):
        """[samples, ranks]: rows of each sample in each rank's summary, as
        uint8 where no sample has more than 255 ids, else int32."""
        per_layer = layer_ids(self._ids_of, self._layers, x)
        total, ids_most = None, 0
        for layer_ids_, summary, starts in zip(per_layer, self._summaries, self._starts):
            if isinstance(layer_ids_, (tf.RaggedTensor, tf.SparseTensor)):
                raise ValueError("allocation: HetEmbedding inputs must be dense tensors, one "
                                 f"row a sample; got a {type(layer_ids_).__name__}")
            ids = tf.cast(layer_ids_, tf.int64)
            flat = tf.reshape(ids, [-1])
            columns = []
            for r in range(self._ranks):
                held = self._ops.het_key_summary_holds(summary[starts[r]:starts[r + 1]], flat)
                held = tf.reshape(tf.cast(held, tf.int32), [tf.shape(ids)[0], -1])
                columns.append(tf.reduce_sum(held, axis=1))
            scores = tf.stack(columns, axis=1)
            total = scores if total is None else total + scores
            per_sample = ids.shape[1:].num_elements()
            ids_most = None if ids_most is None or per_sample is None else ids_most + per_sample
        # Scores travel to every rank each step: a byte each where no sample
        # can hold more ids than a byte counts.
        return tf.cast(total, tf.uint8) if ids_most is not None and ids_most < 256 else total

    # ----- moving samples -----

    @staticmethod
    def _pack(tensors):
        """[samples, bytes] of every tensor's rows, and how to unpack them."""
        columns, layout = [], []
        for t in tensors:
            was_bool = t.dtype == tf.bool
            t = tf.cast(t, tf.uint8) if was_bool else t
            if t.dtype == tf.string:
                raise ValueError("allocation moves samples as bytes; string features cannot "
                                 "move: turn them into ids in the input pipeline")
            raw = t if t.dtype == tf.uint8 else tf.bitcast(t, tf.uint8)
            columns.append(tf.reshape(raw, [tf.shape(t)[0], -1]))
            trailing = t.shape[1:]
            if sum(d is None for d in trailing.as_list()) > 0:
                raise ValueError("allocation moves samples as bytes and needs every feature's "
                                 f"shape past the batch known; got {t.shape}")
            layout.append((t.dtype, was_bool, trailing,
                           trailing.num_elements() * (1 if t.dtype == tf.uint8 else
                                                      t.dtype.size)))
        return tf.concat(columns, axis=1), layout

    @staticmethod
    def _unpack(packed, layout):
        widths = [width for *_, width in layout]
        out = []
        for part, (dtype, was_bool, trailing, _) in zip(tf.split(packed, widths, axis=1),
                                                        layout):
            if dtype != tf.uint8:
                part = tf.bitcast(tf.reshape(part, [-1, trailing.num_elements(), dtype.size]),
                                  dtype)
            t = tf.reshape(part, [-1, *trailing.as_list()])
            out.append(tf.cast(t, tf.bool) if was_bool else t)
        return out

    def _stay_bonus(self, layout):
        if self.stay_bonus is not None:
            return self.stay_bonus
        return int(sum(width for *_, width in layout) // self._row_bytes)

    def __call__(self, data):
        """data (x, y, sample_weight as model.fit gives them) re-divided."""
        tensors = tf.nest.flatten(data)
        x, _, _ = tf_keras.utils.unpack_x_y_sample_weight(data)
        summary_bytes = tf.cond(tf.equal(self._steps % self.every, 0), self._share_summaries,
                                lambda: tf.constant(0, tf.int64))
        with tf.control_dependencies([summary_bytes]):
            scores = self._scores(x)
        n = tf.shape(scores)[0]
        sizes = self._allgather(tf.reshape(tf.cast(n, tf.int64), [1]))
        everyone = self._allgather(scores)
        packed, layout = self._pack(tensors)
        workers = self._ops.het_assign_samples(tf.cast(everyone, tf.int32), sizes,
                                               stay_bonus=self._stay_bonus(layout))
        start = tf.cast(tf.reduce_sum(sizes[:self._rank]), tf.int32)
        mine = workers[start:start + n]
        order = tf.argsort(mine, stable=True)
        splits = tf.math.bincount(mine, minlength=self._ranks, maxlength=self._ranks)
        received, _ = self._alltoall(tf.gather(packed, order), splits)
        sample_bytes = tf.cast(tf.shape(packed)[1], tf.int64)
        moved_out = tf.cast(n - splits[self._rank], tf.int64)
        moved_in = tf.cast(tf.shape(received)[0], tf.int64) - tf.cast(splits[self._rank],
                                                                      tf.int64)
        # Each rank sends its scores to every other and receives theirs; the
        # sizes are one int64 each way.
        score_bytes = (tf.cast(n * self._ranks, tf.int64) * (self._ranks - 1)
                       + tf.cast(tf.size(everyone) - n * self._ranks, tf.int64)) * \
            scores.dtype.size + 2 * _WORD_BYTES * (self._ranks - 1)
        self._layout = layout
        counted = [self._assigned.assign(workers), self._received.assign(received),
                   self._bytes.assign_add(summary_bytes + score_bytes
                                          + (moved_out + moved_in) * sample_bytes),
                   self._moved.assign_add(moved_out),
                   self._samples.assign_add(tf.cast(n, tf.int64)),
                   self._steps.assign_add(1)]
        with tf.control_dependencies(counted):
            out = [tf.identity(t) for t in self._unpack(received, layout)]
        return tf.nest.pack_sequence_as(data, out)

    def last_step(self):
        """(the worker of each sample of the last step's whole batch, in the
        order the ranks read them; the flat tensors of the samples this rank
        trained on, as numpy arrays) (eager)."""
        received = self._unpack(tf.constant(self._received.numpy()), self._layout)
        return self._assigned.numpy(), [t.numpy() for t in received]

    def stats(self):
        """Bytes this rank sent and received for the allocation, and the
        samples it read and sent away."""
        return {"allocation_bytes": int(self._bytes.numpy()),
                "allocation_moved": int(self._moved.numpy()),
                "allocation_samples": int(self._samples.numpy())}
