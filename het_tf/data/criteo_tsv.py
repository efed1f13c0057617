"""Criteo TSV (Kaggle display-advertising and Terabyte) as a tf.data pipeline.

Parsing runs in the HetParseCriteo C++ op, strictly: a line with the wrong
number of fields, a label other than 0/1, a non-integer count or a
categorical value that is not 1 to 8 hex digits is malformed. Malformed
lines are counted and skipped, or fail the pipeline with file, line number
and reason (`on_malformed="fail"`); they are never read as a sample.
"""
import tensorflow as tf

from het_tf import _op_library
from het_tf.runtime.config import is_whole

ON_MALFORMED = ("skip", "fail")


def _files(paths):
    if isinstance(paths, (str, bytes)):
        paths = [paths]
    files = []
    for pattern in paths:
        matched = sorted(tf.io.gfile.glob(pattern))
        if not matched:
            raise ValueError(f"criteo reader: no file matches {pattern!r}")
        files += matched
    return files


def check_reader_arguments(reader, batch_size, on_malformed, num_shards, shard_index):
    """The arguments every reader shares, with a ValueError naming the reader."""
    if on_malformed not in ON_MALFORMED:
        raise ValueError(f"{reader}: on_malformed must be 'skip' or 'fail', got "
                         f"{on_malformed!r}")
    for what, value in (("batch_size", batch_size), ("num_shards", num_shards)):
        if not is_whole(value, at_least=1):
            raise ValueError(f"{reader}: {what} must be a positive int, got {value!r}")
    # A tensor index is one TensorFlow supplies per worker at run time.
    if not tf.is_tensor(shard_index) and not 0 <= shard_index < num_shards:
        raise ValueError(f"{reader}: shard_index must be in [0, {num_shards}), got "
                         f"{shard_index!r}")


def criteo_tsv_dataset(paths, batch_size, *, on_malformed="skip", has_label=True,
                       counter="criteo", num_shards=1, shard_index=0):
    """Batches of `({"dense", "categorical"}, labels)` from Criteo TSV files.

    Args:
      paths: a file, a glob pattern, or a list of them (read in sorted order).
      batch_size: lines read per batch; a batch loses its malformed lines.
      on_malformed: "skip" (count and drop) or "fail" (raise InvalidArgument
        naming the file, line and reason).
      has_label: False for Criteo's unlabeled test files (labels are 0).
      counter: name under which `parse_stats` counts lines in this process.
      num_shards, shard_index: read every num_shards-th batch of lines from
        shard_index, so that workers read disjoint parts.
    """
    check_reader_arguments("criteo reader", batch_size, on_malformed, num_shards, shard_index)
    ops = _op_library.load()
    skip = on_malformed == "skip"

    def parse(index, lines, path):
        labels, dense, keys, valid = ops.het_parse_criteo(
            lines, index * batch_size + 1, path, has_label=has_label, skip_malformed=skip,
            counter=counter)
        if skip:
            labels, dense, keys = (tf.boolean_mask(t, valid) for t in (labels, dense, keys))
        return {"dense": dense, "categorical": keys}, labels

    def read(path):
        return (tf.data.TextLineDataset(path).batch(batch_size).enumerate()
                .shard(num_shards, shard_index)
                .map(lambda index, lines: parse(index, lines, path)))

    return (tf.data.Dataset.from_tensor_slices(_files(paths)).flat_map(read)
            .prefetch(tf.data.AUTOTUNE))


def parse_stats(counter="criteo", devices=(None,)):
    """{"records": n, "malformed": m} counted under `counter` by the readers
    of this process, or summed over the processes of `devices` (for example
    a ParameterServerStrategy cluster's workers, from its chief)."""
    total = {}
    for device in devices:
        with tf.device(device):
            names, values = _op_library.load().het_parse_stats(counter=counter)
        for name, value in zip(names.numpy(), values.numpy()):
            total[name.decode()] = total.get(name.decode(), 0) + int(value)
    return total
