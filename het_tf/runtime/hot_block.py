"""A table's hot rows as a block of this process's own, replicated on
every rank (FAE's hot embeddings, docs/fae.md).

The block is a TableShard made in this process, with the table's settings,
so its rows take the same optimizer steps as the shards' rows do: Adagrad,
Adam (with its step counts) and FTRL state are kept whole. Every training
step, the ranks exchange the gradients their batches gave the hot rows
(`exchange`: the concatenation over the ranks, in rank order, the same on
every rank) and each rank applies all of them in the same order: the
blocks stay the same to the bit, and no hot row goes to the PS tasks while
training. The shards keep the rows' last written state; write_back() gives
them the block's, so that checkpoints, exports and flushes see one table.
"""
import dataclasses

import numpy as np
import tensorflow as tf

from het_tf import _op_library
from het_tf.runtime.counters import counter
from het_tf.runtime.handles import FunctionHandles
from het_tf.runtime.table import WIRE, ShardedTable

# After the sorted hot keys, so that a search never runs off the end.
_SENTINEL = np.iinfo(np.int64).max
# An int64 key travels as two float32s beside its gradient: one tensor, one
# collective a step.
_KEY_FLOATS = 2


class HotBlock:
    """`exchange(tensor) -> tensor`: the rows of every rank's tensor,
    concatenated in rank order (Horovod's allgather), over `ranks` ranks;
    None for one rank."""

    def __init__(self, table: ShardedTable, instance, exchange=None, ranks=1):
        self.table = table
        self._exchange = exchange
        self._ranks = ranks
        # Bounded by the hot set, not by the table's max_rows.
        config = dataclasses.replace(table.config, max_rows=None, on_full="refuse",
                                     ttl=None, admit_after=None)
        self._attrs = config.op_attrs(1)
        self.shared_name = f"het_hot/{config.name}/{instance}"
        self._ops = _op_library.load()
        self._handles = FunctionHandles()
        with tf.init_scope():
            self._keys = tf.Variable([_SENTINEL], dtype=tf.int64, trainable=False,
                                     shape=tf.TensorShape([None]), name="het_hot_keys")
            # Bytes this rank sent to and received from the others for the
            # hot rows: every key and gradient of the exchange.
            self._exchanged = counter("het_hot_bytes")

    @property
    def dim(self):
        return self.table.dim

    def handle(self):
        return self._handles.get(None, lambda: self._ops.het_table_shard(
            shared_name=self.shared_name, **self._attrs))

    @property
    def keys(self):
        """The hot keys, ascending (eager)."""
        return self._keys.numpy()[:-1]

    def is_hot(self, keys):
        """[n] bool for int64 keys [n]."""
        hot = self._keys
        at = tf.searchsorted(hot, keys, side="left", out_type=tf.int32)
        return (at < tf.size(hot) - 1) & tf.equal(tf.gather(hot, at), keys)

    def gather(self, keys):
        """Rows of hot keys (rank 1)."""
        return self._ops.het_table_gather(self.handle(), keys, dim=self.dim, **WIRE)

    def apply_gradients(self, keys, grads, learning_rate):
        """Applies this step's gradients of every rank to the block: unique
        hot `keys` [n] and their gradient sums [n, dim] from this rank.
        A row that k ranks touched takes k optimizer steps with their mean
        gradient, as a shard does with a push of k updates."""
        counts = tf.ones_like(keys)
        if self._exchange is not None:
            packed = tf.concat([tf.reshape(tf.bitcast(keys, tf.float32), [-1, _KEY_FLOATS]),
                                grads], 1)
            everyone = self._exchange(packed)
            every_key = tf.bitcast(everyone[:, :_KEY_FLOATS], tf.int64)
            # The same inputs on every rank, summed in the same order: the
            # same bits.
            keys, at = tf.unique(every_key, out_idx=tf.int32)
            grads = tf.math.unsorted_segment_sum(everyone[:, _KEY_FLOATS:], at, tf.size(keys))
            counts = tf.math.bincount(at, minlength=tf.size(keys), dtype=tf.int64)
            row_bytes = 4 * (_KEY_FLOATS + self.dim)
            mine, ranks_rows = tf.shape(packed, tf.int64)[0], tf.shape(everyone, tf.int64)[0]
            # Logical bytes: this rank's rows to each other rank, theirs to it.
            ranks = self._ranks
            traffic = row_bytes * (mine * (ranks - 1) + ranks_rows - mine)
            self._exchanged.assign_add(traffic)
        return self._ops.het_table_push(self.handle(), keys, grads, counts,
                                        tf.cast(learning_rate, tf.float32), dim=self.dim,
                                        return_rows=False, **WIRE)

    # ----- moving rows between the block and the shards (eager) -----

    def load(self, keys):
        """Makes `keys` the hot set and takes their rows from the shards;
        the caller has written the old set back and emptied the caches."""
        keys = np.unique(np.asarray(keys, np.int64))
        if len(keys) and keys[-1] == _SENTINEL:
            raise ValueError(f"{self.table.config.label}: id {_SENTINEL} cannot be a hot row")
        self._keys.assign(np.append(keys, _SENTINEL))
        self.reload()

    def reload(self):
        """The block's rows as the shards hold them now."""
        keys = tf.constant(self.keys)
        values, slots, clocks, steps = self.table.read_rows(keys)
        handle = self.handle()
        self._ops.het_table_clear(handle)
        self._ops.het_table_import(handle, keys, values, slots, clocks, steps)

    def write_back(self):
        """The block's rows to the shards that own them; returns the ops."""
        if len(self.keys) == 0:
            return []
        keys, values, slots, clocks, steps = self._ops.het_table_export(
            self.handle(), 0, tf.int64.max, dim=self.dim, num_slots=self.table.config.num_slots)
        return self.table.import_rows(keys, values, slots, clocks, steps)

    def state(self):
        """(keys, values, slots, clocks, steps) of the block, in key order
        (eager): what tests compare across ranks."""
        keys = tf.constant(self.keys)
        return tuple(t.numpy() for t in (keys, *self._ops.het_table_read(
            self.handle(), keys, dim=self.dim, num_slots=self.table.config.num_slots, **WIRE)))

    def stats(self):
        """Hot rows and bytes exchanged with the other ranks (eager)."""
        return {"rows": len(self.keys), "bytes_exchanged": int(self._exchanged.numpy())}
