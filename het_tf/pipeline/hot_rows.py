"""FAE's profiling pass: which rows of each HetEmbedding table are hot.

    profile = het_tf.profile_hot_rows(model, dataset, hot_rows=100_000)
    profile["embedding"].keys      # the hot ids, most accessed first
    profile["embedding"].coverage  # the share of accesses they take
    het_tf.use_hot_rows(model, profile)  # layers made with hot_rows=N train them apart

A sample of the dataset's batches (`share`, 5% by default; the same
batches for the same `seed` and data) goes through the model's inputs up to
each HetEmbedding layer, and every id each layer would look up is counted,
exactly, in C++ (HetAccessCounter: 32 to 48 bytes a distinct id). The hot
set of a table is its most accessed ids that fit the budget, in rows or in
bytes of row state (values, optimizer slots and a clock: what a replica of
the row holds). docs/fae.md.
"""
import dataclasses
import logging

import numpy as np
import tensorflow as tf

from het_tf.distribute import horovod
from het_tf.keras_layers.het_embedding import het_embedding_layers
from het_tf.pipeline.layer_inputs import batch_ids, ids_model, layer_ids, with_end_marker
from het_tf.runtime.access_counts import AccessCounts
from het_tf.runtime.config import is_whole

_log = logging.getLogger("het_tf")
_WHO = "het_tf.profile_hot_rows"
# Progress is logged after this many sampled batches.
_LOG_EVERY = 1000


class HotProfile(dict):
    """{layer name: HotRows}, with the share of the sampled samples that
    are hot: every id they look up, in every profiled table, is hot."""

    def __init__(self, tables, hot_samples, samples):
        super().__init__(tables)
        self.hot_samples = hot_samples
        self.samples = samples

    @property
    def hot_sample_share(self):
        return self.hot_samples / max(self.samples, 1)


@dataclasses.dataclass(frozen=True)
class HotRows:
    """One table's profile: its hot ids (most accessed first, ties in
    ascending id order) with their access counts in the sample, and every
    access and distinct id the sample held."""
    layer: str
    keys: np.ndarray
    counts: np.ndarray
    accesses: int
    distinct_ids: int
    sampled_batches: int

    @property
    def coverage(self):
        """The share of the sample's accesses the hot ids take."""
        return float(self.counts.sum()) / max(self.accesses, 1)


def _budgets(layers, hot_rows, hot_bytes):
    """Each layer's budget in rows, from one budget (int, or a dict by layer
    name) in rows or in bytes; checked against the layer's table."""
    if hot_rows is not None and hot_bytes is not None:
        raise ValueError(f"{_WHO}: give one budget, hot_rows or hot_bytes, not both")
    if hot_rows is None and hot_bytes is None:
        # The layers' own: what they were made to replicate.
        hot_rows = {layer.name: layer.hot_rows for layer in layers if layer.hot_rows}
        if not hot_rows:
            raise ValueError(f"{_WHO}: give a budget, hot_rows or hot_bytes; no HetEmbedding "
                             "layer of the model has hot_rows of its own")
    given, unit = (hot_rows, "hot_rows") if hot_rows is not None else (hot_bytes, "hot_bytes")
    names = {layer.name for layer in layers}
    if isinstance(given, dict):
        unknown = sorted(set(given) - names)
        if unknown:
            raise ValueError(f"{_WHO}: {unit} names {unknown}, which are not HetEmbedding layers "
                             f"of the model ({sorted(names)})")
    budgets = {}
    for layer in layers:
        budget = given.get(layer.name) if isinstance(given, dict) else given
        if budget is None:
            continue
        if not is_whole(budget, at_least=0):
            raise ValueError(f"HetEmbedding '{layer.name}': {unit} must be an int >= 0, "
                             f"got {budget!r}")
        config = layer.table.config
        rows = int(budget) if hot_rows is not None else int(budget) // config.state_bytes
        if config.fixed_vocabulary and rows > config.vocabulary_size:
            raise ValueError(
                f"HetEmbedding '{layer.name}': a budget of {budget} {unit.split('_')[1]} is "
                f"{rows} rows, more than the table's {config.vocabulary_size}")
        budgets[layer] = rows
    return budgets


def _sampled(dataset, share, seed, batches):
    if not isinstance(dataset, tf.data.Dataset):
        raise ValueError(f"{_WHO} takes a tf.data.Dataset, got {type(dataset).__name__}")
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ValueError(f"{_WHO}: share must be in (0, 1], got {share!r}")
    if batches is not None:
        if not is_whole(batches, at_least=1):
            raise ValueError(f"{_WHO}: batches must be a positive int or None, got {batches!r}")
        dataset = dataset.take(batches)
    elif int(dataset.cardinality()) == tf.data.INFINITE_CARDINALITY:
        raise ValueError(f"{_WHO}: the dataset is endless; pass batches=N to profile a "
                         "sample of its first N batches")
    seed = tf.constant(seed, tf.int64)

    def chosen(index, _):
        # Stateless: the same batches for the same seed, whatever ran before.
        return tf.random.stateless_uniform([], seed=tf.stack([seed, index])) < share

    return dataset.enumerate().filter(chosen).map(lambda _, element: element)


def profile_hot_rows(model, dataset, hot_rows=None, hot_bytes=None, share=0.05, seed=0,
                     batches=None):
    """Counts the ids of a `share` of `dataset`'s batches (of its first
    `batches`, for an endless dataset) and returns a HotProfile: {layer
    name: HotRows} for each HetEmbedding layer with a budget, and the share
    of the sample's samples that are hot (every id in every profiled table
    hot; a second pass over the sample). hot_rows / hot_bytes: the
    budget, an int for every layer or a dict by layer name; neither: each
    layer's own hot_rows. With
    mask_zero, id 0 (padding) is not counted."""
    layers = [layer for layer in het_embedding_layers(model) if layer.built]
    if not layers:
        raise ValueError(f"{_WHO}: the model has no built HetEmbedding layer; build the model "
                         "(call it once, or give its Input shapes) first")
    budgets = _budgets(layers, hot_rows, hot_bytes)
    layers = [layer for layer in layers if layer in budgets]
    sampled = _sampled(dataset, share, seed, batches)
    ids_of = ids_model(model, layers, _WHO)
    counts = [AccessCounts(layer.table.config) for layer in layers]

    @tf.function
    def count(element):
        for layer, counter, ids in zip(layers, counts, batch_ids(ids_of, layers, element)):
            ids = tf.reshape(ids, [-1])
            if layer.mask_zero:
                ids = tf.boolean_mask(ids, tf.not_equal(ids, 0))
            counter.count(ids)

    sampled_batches = 0
    for element in sampled:
        count(element)
        sampled_batches += 1
        if sampled_batches % _LOG_EVERY == 0:
            _log.info("%s: %d batches counted", _WHO, sampled_batches)
    if sampled_batches == 0:
        raise ValueError(f"{_WHO}: the sample holds no batch (share={share} of the dataset); "
                         "raise share or give more data")
    tables = {}
    for layer, counter in zip(layers, counts):
        keys, hits, accesses, distinct = counter.hottest(budgets[layer])
        tables[layer.name] = HotRows(layer.name, keys, hits, accesses, distinct, sampled_batches)
    hot_samples, samples = _count_hot_samples(sampled, ids_of, layers,
                                              [tables[layer.name] for layer in layers])
    return HotProfile(tables, hot_samples, samples)


def count_hot_samples(model, dataset, profile):
    """(hot samples, samples) of a finite `dataset` for a profile's hot
    sets: the share of any data, not only the profiled sample, that would
    train as hot."""
    layers = [layer for layer in het_embedding_layers(model) if layer.name in profile]
    ids_of = ids_model(model, layers, _WHO)
    return _count_hot_samples(dataset, ids_of, layers, [profile[layer.name] for layer in layers])


def _hot_set(layer, hot):
    """ids -> bool: is each id in a profile's hot set."""
    keys = tf.constant(hot.keys, tf.int64)
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(keys, tf.ones_like(keys, tf.int32)), 0) \
        if len(hot.keys) else None
    return _with_padding(layer, lambda ids: tf.equal(table.lookup(ids), 1) if table is not None
                         else tf.zeros_like(ids, tf.bool))


def _hot_block_set(layer):
    """ids -> bool: is each id in the layer's hot block now."""
    def found(ids):
        return tf.reshape(layer.hot_block.is_hot(tf.reshape(ids, [-1])), tf.shape(ids))

    return _with_padding(layer, found)


def _with_padding(layer, found):
    """Padding counts as hot: it looks nothing up."""
    if not layer.mask_zero:
        return found
    return lambda ids: found(ids) | tf.equal(ids, 0)


def samples_all_hot(ids, is_hot):
    """[batch] bool: every id of each sample (a row of dense, ragged or
    sparse ids) is hot; a sample with no ids is."""
    if isinstance(ids, tf.SparseTensor):
        rows = ids.indices[:, 0]
        cold = tf.math.unsorted_segment_max(tf.cast(~is_hot(ids.values), tf.int32), rows,
                                            ids.dense_shape[0])
        return cold <= 0
    if isinstance(ids, tf.RaggedTensor):
        hot = ids.with_flat_values(is_hot(ids.flat_values))
    else:
        hot = is_hot(ids)
    return tf.reduce_all(hot, axis=list(range(1, hot.shape.rank))) if hot.shape.rank > 1 else hot


def _classifier(ids_of, layers, hot_sets):
    """A batch -> [batch] bool: every id of each sample hot, in every layer."""
    def classify(element):
        verdicts = [samples_all_hot(ids, is_hot)
                    for ids, is_hot in zip(layer_ids(ids_of, layers, element), hot_sets)]
        return tf.reduce_all(tf.stack(verdicts), axis=0)

    return classify


def hot_and_cold_batches(dataset, model, batch_size):
    """FAE's batches: a batched `dataset`'s samples regrouped into batches
    of `batch_size` that are hot (every id each layer with hot rows looks
    up is hot, by its hot set when the sample is read) or cold. The
    schedule: samples are taken in the dataset's order, and each batch goes
    out as soon as it is full, so hot and cold batches interleave in the
    ratio of hot to cold samples in the data, each kind in its own order;
    at the end of a finite dataset the unfilled ones follow. A hot batch
    trains without meeting the PS tasks. docs/fae.md."""
    who = "het_tf.hot_and_cold_batches"
    if not isinstance(dataset, tf.data.Dataset):
        raise ValueError(f"{who} takes a tf.data.Dataset, got {type(dataset).__name__}")
    if not is_whole(batch_size, at_least=1):
        raise ValueError(f"{who}: batch_size must be a positive int, got {batch_size!r}")
    layers = [layer for layer in het_embedding_layers(model) if layer.hot_block is not None]
    if not layers:
        raise ValueError(f"{who}: the model has no HetEmbedding layer with hot rows (made with "
                         "hot_rows=N, built in hybrid mode or one process)")
    classify = _classifier(ids_model(model, layers, who), layers,
                           [_hot_block_set(layer) for layer in layers])
    # Whole batches in, whole batches out: each batch's samples are split by
    # kind with one mask and added to that kind's buffer, and a buffer that
    # reaches batch_size gives a batch (per-sample tf.data functions ran at
    # 18,000 samples/s; these run once a batch).
    tagged, marker, single = with_end_marker(dataset, who)
    size = tf.constant(batch_size, tf.int64)

    def append(buffer, element, mask):
        return tf.nest.map_structure(lambda b, e: tf.concat([b, tf.boolean_mask(e, mask)], 0),
                                     buffer, element)

    def split(buffer, count):
        return (tf.nest.map_structure(lambda b: b[:count], buffer),
                tf.nest.map_structure(lambda b: b[count:], buffer))

    def regroup(buffers, current):
        is_element, element = current
        hot = classify(element)
        out = []
        # (place in this batch of the sample that fills the buffer, or past
        # its end; the batch; whether it goes out) of each kind.
        for buffer, mine in zip(buffers, (hot, ~hot)):
            held = tf.shape(tf.nest.flatten(buffer)[0], tf.int64)[0]
            buffer = append(buffer, element, mine)
            places = tf.where(mine)[:, 0]
            filled = held + tf.size(places, tf.int64) >= size
            # At the end marker, what is left goes out.
            count = tf.where(filled | is_element, size, held)
            goes = filled | (~is_element & (held > 0))
            # Past the places, a last one: no sample fills the buffer.
            places = tf.concat([places, [tf.int64.max]], 0)
            fill_at = tf.gather(places, tf.minimum(size - held - 1, tf.size(places, tf.int64) - 1))
            batch, rest = split(buffer, tf.where(goes, count, 0))
            out.append((fill_at, batch, goes, rest))
        (hot_at, hot_batch, hot_goes, hot_rest), (cold_at, cold_batch, cold_goes, cold_rest) = out
        ordered = tf.cond(hot_at <= cold_at,
                          lambda: (hot_goes, hot_batch, cold_goes, cold_batch),
                          lambda: (cold_goes, cold_batch, hot_goes, hot_batch))
        return (hot_rest, cold_rest), ordered

    empty = tf.nest.map_structure(lambda m: m[:0], marker)

    def unpack(first_goes, first, second_goes, second):
        def one(goes, batch):
            batch = batch if single else tuple(batch)
            return tf.data.Dataset.from_tensors(batch).take(tf.cast(goes, tf.int64))

        return one(first_goes, first).concatenate(one(second_goes, second))

    return tagged.scan((empty, empty), regroup).flat_map(unpack)


def _count_hot_samples(data, ids_of, layers, hot_rows):
    """(hot samples, samples) of the batches of `data`, by each layer's hot
    rows: one pass over it."""
    classify_batch = _classifier(ids_of, layers,
                                 [_hot_set(layer, hot) for layer, hot in zip(layers, hot_rows)])

    @tf.function
    def classify(element):
        hot = classify_batch(element)
        return tf.reduce_sum(tf.cast(hot, tf.int64)), tf.size(hot, tf.int64)

    hot_samples = samples = 0
    for element in data:
        hot, size = classify(element)
        hot_samples += int(hot)
        samples += int(size)
    return hot_samples, samples


def use_hot_rows(model, profile):
    """Makes each profiled table's hot ids the hot rows of its layer (made
    with hot_rows=N): they train in a block every process keeps, exchanged
    between Horovod ranks every step, and the rest through the cache.
    Pending updates and the old hot rows go to the shards first, and the
    caches are emptied. In hybrid mode every rank calls it, and all take
    rank 0's profile. Call it again, between epochs, to follow a
    distribution that drifts (docs/fae.md)."""
    if not isinstance(profile, dict) or not all(isinstance(h, HotRows)
                                                for h in profile.values()):
        raise ValueError("het_tf.use_hot_rows takes the HotProfile of het_tf.profile_hot_rows, "
                         f"got {type(profile).__name__}")
    layers = {layer.name: layer for layer in het_embedding_layers(model)}
    unknown = sorted(set(profile) - set(layers))
    if unknown:
        raise ValueError(f"het_tf.use_hot_rows: the profile names {unknown}, which are not "
                         f"HetEmbedding layers of the model ({sorted(layers)})")
    keys = {name: np.asarray(hot.keys, np.int64) for name, hot in profile.items()}
    if horovod.num_ps() is not None:
        # One hot set on every rank, or their blocks would differ; and
        # every rank's pending updates reach the shards before any rank
        # reads its new hot rows from them.
        keys = horovod.broadcast_object(keys)
        for name in keys:
            layers[name].flush()
        horovod.barrier()
    for name, hot_keys in keys.items():
        layers[name].set_hot_keys(hot_keys)
    if horovod.num_ps() is not None:
        horovod.barrier()
