"""The training and held-out pipelines of `het-tf train`.

Without --eval-data, files are split: each training pipeline (one per
worker or rank) holds out the last batch of lines in every HOLD_OUT_EVERY
of its own, and the final evaluation reads exactly those batches, of every
pipeline. Data too small for that (fewer than HOLD_OUT_EVERY batches per
pipeline) is small: kept in memory, shared out by rows in full batches, and
(without --eval-data) its last rows, one in HOLD_OUT_EVERY and at least one,
are held out as a smaller final batch.
"""
import math

import tensorflow as tf

from het_tf.data import (
    KAGGLE_CARDINALITIES,
    SyntheticCriteo,
    criteo_parquet_dataset,
    criteo_tsv_dataset,
)

HOLD_OUT_EVERY = 20
# The readers' counter for the rows counted before training, kept apart from
# the rows training reads (metrics.json records_read).
_SIZING_COUNTER = "criteo_sizing"


class Inputs:
    """The training and held-out pipelines for every mode; `pipelines` is
    how many training pipelines read --data (workers or ranks), and
    `trained_per_worker` how many samples each trains on."""

    def __init__(self, args, pipelines=1, trained_per_worker=0):
        self.args = args
        self.synthetic = None
        self.pipelines = pipelines
        # Synthetic held-out rows are drawn as every worker's stream stands
        # where its training ends: under --drift, the recent distribution.
        self.held_out_position = trained_per_worker
        self.small_rows = None  # rows of --data when it is small (split by rows)
        self.small_held_out = 0
        if args.data == "synthetic":
            self.synthetic = SyntheticCriteo(args.seed, args.scale, args.zipf, args.drift)
            self.cardinalities = self.synthetic.cardinalities
            return
        self.cardinalities = KAGGLE_CARDINALITIES
        self._size_the_data()

    def _files(self, pattern, num_shards=1, shard_index=0, counter="criteo"):
        read = criteo_parquet_dataset if pattern.endswith(".parquet") else criteo_tsv_dataset
        return read(pattern, self.args.batch_size, on_malformed=self.args.on_malformed,
                    num_shards=num_shards, shard_index=shard_index, counter=counter)

    def _size_the_data(self):
        """Counts --data's first batches, no more than the batch split needs:
        data with fewer is small, kept in memory and split by rows. Refuses
        data that leaves a pipeline nothing to train on."""
        enough = HOLD_OUT_EVERY * self.pipelines
        batches = rows = 0
        for _, labels in self._files(self.args.data, counter=_SIZING_COUNTER).take(enough):
            batches += 1
            rows += int(labels.shape[0])
        if batches >= enough:
            return
        held_out = 0 if self.args.eval_data else max(1, math.ceil(rows / HOLD_OUT_EVERY))
        if rows - held_out < self.pipelines:
            raise ValueError(
                f"--data {self.args.data!r} has {rows} readable row(s): too few to "
                + (f"hold out {held_out} for evaluation and " if held_out else "")
                + f"train {self.pipelines} worker(s)"
                + ("" if self.args.eval_data else " on the rest. Pass held-out rows with "
                   "--eval-data FILE, or more data"))
        self.small_rows = rows
        self.small_held_out = held_out

    def _split(self, num_shards, shard_index, held_out):
        """--data's batches of one pipeline without (or only) the held-out ones."""
        if self.small_rows is not None:
            return self._rows(num_shards, shard_index, held_out).batch(self.args.batch_size)
        data = self._files(self.args.data, num_shards, shard_index).enumerate()
        last = HOLD_OUT_EVERY - 1
        return (data.filter(lambda i, _: (i % HOLD_OUT_EVERY == last) == held_out)
                .map(lambda _, batch: batch))

    def _rows(self, num_shards, shard_index, held_out):
        """Small data, row by row: the last rows held out (one set, whichever
        pipeline asks: it is evaluated once; none with --eval-data), the
        others shared out."""
        cut = self.small_rows - self.small_held_out
        rows = self._files(self.args.data).unbatch().enumerate()
        rows = rows.skip(cut) if held_out else rows.take(cut).shard(num_shards, shard_index)
        return rows.map(lambda _, row: row)

    def train(self, shard_index=0, num_shards=1):
        """Endless training batches of one worker (or rank)."""
        if self.synthetic is not None:
            return self.synthetic.dataset(self.args.batch_size, stream=shard_index)
        if self.small_rows is not None:  # kept in memory; full batches across the passes
            return self._rows(num_shards, shard_index, held_out=False).cache().repeat().batch(
                self.args.batch_size)
        if self.args.eval_data:
            return self._files(self.args.data, num_shards, shard_index).repeat()
        return self._split(num_shards, shard_index, held_out=False).repeat()

    def timeline(self, shard_index=0, num_shards=1):
        """The same first --timeline-samples held-out samples, again and
        again: what is evaluated at each progress chunk."""
        steps = max(1, self.args.timeline_samples // self.args.batch_size)
        return self.held_out(shard_index, num_shards).take(steps).repeat()

    def held_out(self, shard_index=0, num_shards=1):
        """Endless held-out batches of one worker, for evaluations that run
        a number of steps on the workers (the timeline, --eval-before-flush)."""
        if self.synthetic is not None:
            return self.synthetic.held_out(self.args.batch_size, part=shard_index,
                                           position=self.held_out_position)
        return self._held_out_once(num_shards, shard_index).repeat()

    def _held_out_once(self, num_shards, shard_index):
        if self.args.eval_data:
            return self._files(self.args.eval_data, num_shards, shard_index)
        return self._split(num_shards, shard_index, held_out=True)

    def evaluation(self):
        """The held-out rows, each once, at most --eval-samples of them: for
        synthetic data its held-out stream; for --eval-data its files; else
        every pipeline's held-out batches, which no pipeline trained on."""
        if self.synthetic is not None:
            data = self.synthetic.held_out(self.args.batch_size, position=self.held_out_position)
        elif self.args.eval_data or self.small_rows is not None:
            data = self._held_out_once(1, 0)
        else:
            data = self._held_out_once(self.pipelines, 0)
            for k in range(1, self.pipelines):
                data = data.concatenate(self._held_out_once(self.pipelines, k))
        return _first_rows(data, self.args.eval_samples)


def _first_rows(batches, limit):
    """The batches cut to their first `limit` rows in all (the last one
    shortened), reading no further."""
    def cut(seen, batch):
        features, labels = batch
        keep = tf.minimum(tf.shape(labels, out_type=tf.int64)[0], limit - seen)
        trimmed = (tf.nest.map_structure(lambda t: t[:keep], features), labels[:keep])
        return seen + keep, (seen, trimmed)

    return (batches.scan(tf.constant(0, tf.int64), cut)
            .take_while(lambda seen, _: seen < limit)
            .map(lambda _, batch: batch)
            .filter(lambda _, labels: tf.shape(labels)[0] > 0))
