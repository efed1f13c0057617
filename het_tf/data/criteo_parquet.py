"""Preprocessed Criteo in Parquet, read with tensorflow-io.

Expected columns: `label` (0 or 1), `I1`..`I13` (integer counts; a negative
value means empty, as in the TSV reader) and `C1`..`C26` (integer ids in
[0, 2**32), or -1 for empty). Columns may be any integer type, and `label`
and `I*` may also be floating point. A record with a label other than 0/1, a
fractional count or an id out of range is malformed: counted and skipped, or
fatal with `on_malformed="fail"`.

Nulls are refused when the dataset is made: tensorflow-io 0.37.1 reads a
null as some other row's value, so a file with nulls cannot be read
faithfully. Write empty values as -1 instead.
"""
import numpy as np
import tensorflow as tf

from het_tf import _op_library
from het_tf.data.criteo_schema import CATEGORICAL_FIELDS, DENSE_FIELDS, FIELD_SHIFT, MISSING_BIT
from het_tf.data.criteo_tsv import _files, check_reader_arguments

COLUMNS = ("label",) + DENSE_FIELDS + CATEGORICAL_FIELDS
FIELD_BITS = (np.arange(len(CATEGORICAL_FIELDS), dtype=np.int64) << FIELD_SHIFT)[np.newaxis, :]


@tf.autograph.experimental.do_not_convert
def _column_specs(path):
    """{column: tf dtype} of a file, after checking its columns and nulls."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise ValueError(f"parquet reader: {path} is not a readable Parquet file: {e}") from None
    schema = parquet.schema_arrow
    missing = [c for c in COLUMNS if c not in schema.names]
    if missing:
        raise ValueError(f"parquet reader: {path} lacks column(s) {', '.join(missing)}")
    specs = {}
    for name in COLUMNS:
        arrow_type = schema.field(name).type
        allowed_float = name == "label" or name in DENSE_FIELDS
        if not (pa.types.is_integer(arrow_type)
                or (allowed_float and pa.types.is_floating(arrow_type))):
            raise ValueError(f"parquet reader: {path} column {name} has type {arrow_type}; "
                             f"expected {'a number' if allowed_float else 'an integer'}")
        specs[name] = tf.as_dtype(pa.array([], arrow_type).to_numpy().dtype)
    for group in range(parquet.num_row_groups):
        meta = parquet.metadata.row_group(group)
        for i in range(meta.num_columns):
            column = meta.column(i)
            name = column.path_in_schema
            if name not in specs:
                continue
            stats = column.statistics
            nulls = (stats.null_count if stats is not None and stats.has_null_count
                     else parquet.read_row_group(group, columns=[name]).column(0).null_count)
            if nulls:
                raise ValueError(
                    f"parquet reader: {path} column {name} holds {nulls} null(s) in row group "
                    f"{group}; tensorflow-io would read them as other rows' values. Write "
                    "empty values as -1.")
    return specs


def _record_parser(path, on_malformed, counter):
    ops = _op_library.load()

    def parse(index, batch):
        label = tf.cast(batch["label"], tf.float64)
        counts = tf.stack([tf.cast(batch[c], tf.float64) for c in DENSE_FIELDS], axis=1)
        ids = tf.stack([tf.cast(batch[c], tf.int64) for c in CATEGORICAL_FIELDS], axis=1)
        valid = ((tf.equal(label, 0.0) | tf.equal(label, 1.0))
                 & tf.reduce_all(tf.equal(counts, tf.round(counts))
                                 & tf.math.is_finite(counts), axis=1)
                 & tf.reduce_all((ids >= -1) & (ids < (1 << 32)), axis=1))
        valid = ops.het_count_records(valid, counter=counter)
        if on_malformed == "fail":
            first = tf.cast(tf.argmin(tf.cast(valid, tf.int32)), tf.int64)
            with tf.control_dependencies([tf.debugging.Assert(
                    tf.reduce_all(valid),
                    [f"parquet reader: {path} record", index + first,
                     "is malformed (label not 0/1, fractional count, "
                     "or id outside [-1, 2**32))"])]):
                valid = tf.identity(valid)
        keys = tf.bitwise.bitwise_or(FIELD_BITS, tf.where(ids < 0, np.int64(MISSING_BIT), ids))
        dense = tf.cast(tf.math.log1p(tf.maximum(counts, 0.0)), tf.float32)
        features = {"dense": tf.boolean_mask(dense, valid),
                    "categorical": tf.boolean_mask(keys, valid)}
        return features, tf.cast(tf.boolean_mask(label, valid), tf.float32)

    return parse


def criteo_parquet_dataset(paths, batch_size, *, on_malformed="skip", counter="criteo",
                           num_shards=1, shard_index=0):
    """Batches of `({"dense", "categorical"}, labels)` from Criteo Parquet
    files, with the same arguments as `criteo_tsv_dataset`."""
    import tensorflow_io as tfio

    check_reader_arguments("parquet reader", batch_size, on_malformed, num_shards, shard_index)
    parts = []
    for path in _files(paths):
        specs = _column_specs(path)
        columns = {name: tf.TensorSpec((), dtype) for name, dtype in specs.items()}
        records = tfio.IODataset.from_parquet(path, columns=columns)
        # Record numbers in errors count from 0, as Parquet tools do.
        parse = _record_parser(path, on_malformed, counter)
        parts.append(records.batch(batch_size).enumerate().shard(num_shards, shard_index)
                     .map(lambda index, batch, _parse=parse: _parse(index * batch_size, batch)))
    dataset = parts[0]
    for part in parts[1:]:
        dataset = dataset.concatenate(part)
    return dataset.prefetch(tf.data.AUTOTUNE)
