"""Input pipelines: Criteo TSV and Parquet readers and a synthetic
Criteo-like generator. Every pipeline yields batches of
`({"dense": float32 [B, 13], "categorical": int64 [B, 26]}, labels float32 [B])`
with field-salted categorical keys (see `criteo_key`)."""
from het_tf.data.criteo_parquet import criteo_parquet_dataset
from het_tf.data.criteo_schema import (
                                       CATEGORICAL_FIELDS,
                                       DENSE_FIELDS,
                                       KAGGLE_CARDINALITIES,
                                       criteo_key,
                                       missing_key,
                                       split_key,
)
from het_tf.data.criteo_tsv import criteo_tsv_dataset, parse_stats
from het_tf.data.synthetic import SyntheticCriteo

__all__ = [
    "CATEGORICAL_FIELDS", "DENSE_FIELDS", "KAGGLE_CARDINALITIES", "SyntheticCriteo",
    "criteo_key", "criteo_parquet_dataset", "criteo_tsv_dataset", "missing_key", "parse_stats",
    "split_key",
]
