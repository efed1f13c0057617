"""The training and held-out pipelines of `het-tf train`."""
from het_tf.data import (
    KAGGLE_CARDINALITIES,
    SyntheticCriteo,
    criteo_parquet_dataset,
    criteo_tsv_dataset,
)
from het_tf.data.synthetic import HELD_OUT_STREAM

# Without --eval-data, the last batch of lines in every this many is held out.
HOLD_OUT_EVERY = 20


class Inputs:
    """The training and held-out pipelines for every mode."""

    def __init__(self, args):
        self.args = args
        self.synthetic = None
        if args.data == "synthetic":
            self.synthetic = SyntheticCriteo(args.seed, args.scale, args.zipf)
            self.cardinalities = self.synthetic.cardinalities
        else:
            self.cardinalities = KAGGLE_CARDINALITIES

    def _files(self, pattern, num_shards, shard_index):
        read = criteo_parquet_dataset if pattern.endswith(".parquet") else criteo_tsv_dataset
        return read(pattern, self.args.batch_size, on_malformed=self.args.on_malformed,
                    num_shards=num_shards, shard_index=shard_index)

    def _split(self, num_shards, shard_index, held_out):
        """--data's batches without (or only) the held-out ones."""
        data = self._files(self.args.data, num_shards, shard_index).enumerate()
        last = HOLD_OUT_EVERY - 1
        return (data.filter(lambda i, _: (i % HOLD_OUT_EVERY == last) == held_out)
                .map(lambda _, batch: batch))

    def train(self, shard_index=0, num_shards=1):
        """Endless training batches of one worker (or rank)."""
        if self.synthetic is not None:
            return self.synthetic.dataset(self.args.batch_size, stream=shard_index)
        if self.args.eval_data:
            return self._files(self.args.data, num_shards, shard_index).repeat()
        return self._split(num_shards, shard_index, held_out=False).repeat()

    def timeline(self, shard_index=0, num_shards=1):
        """The same first --timeline-samples held-out samples, again and
        again: what is evaluated at each progress chunk."""
        steps = max(1, self.args.timeline_samples // self.args.batch_size)
        return self.held_out(shard_index, num_shards).take(steps).repeat()

    def held_out(self, shard_index=0, num_shards=1):
        if self.synthetic is not None:
            return self.synthetic.dataset(self.args.batch_size,
                                          stream=HELD_OUT_STREAM + shard_index)
        if self.args.eval_data:
            return self._files(self.args.eval_data, num_shards, shard_index).repeat()
        return self._split(num_shards, shard_index, held_out=True).repeat()
