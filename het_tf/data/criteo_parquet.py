"""Preprocessed Criteo in Parquet, read with tensorflow-io where it loads
(TensorFlow 2.16), else with pyarrow (TensorFlow 2.17 and later, where
tensorflow-io cannot load). Both make the same batches of the same records,
under the same rules; pyarrow's reads run as Python in the process that
iterates the dataset, so that reader cannot run on a ParameterServerStrategy
worker (`reads_on_remote_workers`).

Expected columns: `label` (0 or 1), `I1`..`I13` (integer counts; a negative
value means empty, as in the TSV reader) and `C1`..`C26` (integer ids in
[0, 2**32), or -1 for empty). Columns may be any integer type, and `label`
and `I*` may also be floating point. A record with a label other than 0/1, a
fractional count or an id out of range is malformed: counted and skipped, or
fatal with `on_malformed="fail"`.

Nulls are refused when the dataset is made: tensorflow-io 0.37.1 reads a
null as some other row's value, so a file with nulls cannot be read
faithfully. Write empty values as -1 instead. (pyarrow could read them; the
rule is the same for both readers, so a file reads the same everywhere.)
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


def _tensorflow_io():
    """tensorflow_io, or None where it is not installed or cannot load."""
    try:
        import tensorflow_io as tfio

        tfio.IODataset  # noqa: B018 (loading its ops fails here on a newer TensorFlow)
        return tfio
    except (ImportError, tf.errors.NotFoundError, OSError):
        return None


def reads_on_remote_workers():
    """Whether these datasets can be made by a ParameterServerStrategy
    coordinator and run on its workers (tensorflow-io's can; pyarrow's
    Python generator cannot)."""
    return _tensorflow_io() is not None


def _batches_by_tensorflow_io(tfio, path, specs, batch_size):
    columns = {name: tf.TensorSpec((), dtype) for name, dtype in specs.items()}
    return tfio.IODataset.from_parquet(path, columns=columns).batch(batch_size)


@tf.autograph.experimental.do_not_convert
def _batches_by_pyarrow(path, specs, batch_size):
    """Full batches of `batch_size` records across row groups, as
    tensorflow-io's batches are, so record numbers agree."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = list(specs)

    def columns(table):
        return {name: table.column(name).to_numpy().astype(specs[name].as_numpy_dtype)
                for name in names}

    def generate():
        pending, rows = [], 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=names):
            pending.append(batch)
            rows += batch.num_rows
            while rows >= batch_size:
                table = pa.Table.from_batches(pending)
                yield columns(table.slice(0, batch_size))
                rest = table.slice(batch_size)
                pending, rows = rest.to_batches(), rest.num_rows
        if rows:
            yield columns(pa.Table.from_batches(pending))

    signature = {name: tf.TensorSpec([None], dtype) for name, dtype in specs.items()}
    return tf.data.Dataset.from_generator(generate, output_signature=signature)


def criteo_parquet_dataset(paths, batch_size, *, on_malformed="skip", counter="criteo",
                           num_shards=1, shard_index=0):
    """Batches of `({"dense", "categorical"}, labels)` from Criteo Parquet
    files, with the same arguments as `criteo_tsv_dataset`."""
    check_reader_arguments("parquet reader", batch_size, on_malformed, num_shards, shard_index)
    tfio = _tensorflow_io()
    parts = []
    for path in _files(paths):
        specs = _column_specs(path)
        batches = (_batches_by_tensorflow_io(tfio, path, specs, batch_size) if tfio is not None
                   else _batches_by_pyarrow(path, specs, batch_size))
        # Record numbers in errors count from 0, as Parquet tools do.
        parse = _record_parser(path, on_malformed, counter)
        parts.append(batches.enumerate().shard(num_shards, shard_index)
                     .map(lambda index, batch, _parse=parse: _parse(index * batch_size, batch)))
    dataset = parts[0]
    for part in parts[1:]:
        dataset = dataset.concatenate(part)
    return dataset.prefetch(tf.data.AUTOTUNE)
