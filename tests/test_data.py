"""The Criteo TSV and Parquet readers and the synthetic generator: exact
values, malformed and corrupted input counted and never misread, sharding,
and an independent Python parser as the reference for fuzzed lines."""
import math
import os

import numpy as np
import project_tools
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from het_tf import _op_library
from het_tf.apps.train.figures import roc_auc
from het_tf.data import (
    CATEGORICAL_FIELDS,
    DENSE_FIELDS,
    KAGGLE_CARDINALITIES,
    SyntheticCriteo,
    criteo_key,
    criteo_parquet_dataset,
    criteo_tsv_dataset,
    missing_key,
    parse_stats,
    split_key,
)
from het_tf.data.synthetic import HELD_OUT_STREAM

_counters = iter(range(10**9))


def fresh_counter():
    return f"test_{os.getpid()}_{next(_counters)}"


def reference_parse(line):
    """An independent reading of one Criteo line: (label, dense, keys) or None."""
    line = line[:-1] if line.endswith("\r") else line
    fields = line.split("\t")
    if len(fields) != 40 or fields[0] not in ("0", "1"):
        return None
    dense = []
    for text in fields[1:14]:
        if text == "":
            dense.append(0.0)
            continue
        body = text[1:] if text.startswith("-") else text
        if not body or not body.isascii() or not body.isdigit():
            return None
        value = int(text)
        if not -2**63 <= value < 2**63:
            return None
        dense.append(float(np.float32(math.log1p(value))) if value > 0 else 0.0)
    keys = []
    for field, text in enumerate(fields[14:]):
        if text == "":
            keys.append(int(missing_key(field)))
        elif len(text) == 8 and all(c in "0123456789abcdefABCDEF" for c in text):
            keys.append(int(criteo_key(field, int(text, 16))))
        else:
            return None
    return float(fields[0]), dense, keys


def read_all(dataset):
    dense, keys, labels = [], [], []
    for features, label in dataset:
        dense.append(features["dense"].numpy())
        keys.append(features["categorical"].numpy())
        labels.append(label.numpy())
    if not labels:
        return np.zeros((0, 13), np.float32), np.zeros((0, 26), np.int64), np.zeros(0)
    return np.concatenate(dense), np.concatenate(keys), np.concatenate(labels)


def good_line(label=1, count=3, value="68fd1e64"):
    return "\t".join([str(label)] + [str(count)] * 13 + [value] * 26)


# ----- synthetic data -----

def test_synthetic_tsv_reads_back_exactly(tmp_path):
    data = SyntheticCriteo(seed=3, scale=0.001)
    path = data.write_tsv(str(tmp_path / "train.tsv"), 5000, stream=2)
    direct = read_all(data.dataset(700, stream=2, num_samples=5000))
    counter = fresh_counter()
    parsed = read_all(criteo_tsv_dataset(path, 700, counter=counter))
    for a, b in zip(direct, parsed):
        np.testing.assert_array_equal(a, b)
    assert parse_stats(counter) == {"records": 5000, "malformed": 0}
    assert direct[2].shape == (5000,)


def test_synthetic_is_deterministic_and_streams_differ():
    a, b = SyntheticCriteo(seed=1), SyntheticCriteo(seed=1)
    rows_a = a.rows(0, 100, 50)
    rows_b = b.rows(0, 100, 50)
    np.testing.assert_array_equal(rows_a[0]["categorical"], rows_b[0]["categorical"])
    other = a.rows(1, 100, 50)[0]["categorical"].numpy()
    held_out = a.rows(HELD_OUT_STREAM, 100, 50)[0]["categorical"].numpy()
    assert not np.array_equal(other, rows_a[0]["categorical"].numpy())
    assert not np.array_equal(held_out, rows_a[0]["categorical"].numpy())
    # A batch boundary does not change the rows.
    split = read_all(a.dataset(7, num_samples=50))
    np.testing.assert_array_equal(split[1], a.rows(0, 0, 50)[0]["categorical"].numpy())


def test_synthetic_ids_lie_in_their_fields_and_are_skewed():
    data = SyntheticCriteo(seed=0, scale=0.01)
    cards = np.array(data.cardinalities)
    assert data.vocabulary_size == cards.sum() + 26
    assert SyntheticCriteo(scale=1.0).vocabulary_size == 33_762_577 + 26
    features, labels = data.rows(0, 0, 20000)
    field, value, missing = split_key(features["categorical"].numpy())
    np.testing.assert_array_equal(field, np.broadcast_to(np.arange(26), field.shape))
    assert np.all(value[~missing] < np.broadcast_to(cards, value.shape)[~missing])
    assert 0.15 < labels.numpy().mean() < 0.4
    big = value[:, 2][~missing[:, 2]]  # C3, 101312 ids at this scale
    _, counts = np.unique(big, return_counts=True)
    assert np.sort(counts)[::-1][:len(counts) // 10].sum() > 0.5 * len(big)


def test_synthetic_labels_follow_the_hidden_model():
    data = SyntheticCriteo(seed=0, scale=0.01)
    _, labels, logits = data.rows(HELD_OUT_STREAM, 0, 30000, with_logits=True)
    best = roc_auc(labels.numpy(), logits.numpy())
    assert 0.78 < best < 0.95
    assert abs(roc_auc(labels.numpy(), -logits.numpy()) - (1 - best)) < 1e-9


@pytest.mark.parametrize("kwargs", [dict(scale=0), dict(scale=-1), dict(zipf_exponent=0),
                                    dict(zipf_exponent=float("nan")), dict(seed=1.5)])
def test_synthetic_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError, match="synthetic criteo"):
        SyntheticCriteo(**kwargs)


# ----- a drifting synthetic stream -----

# Rows of SyntheticCriteo(seed=0, scale=0.01) made before it had a drift:
# (stream, row) -> C1..C26's ids, "-" for empty.
ROWS_BEFORE_DRIFT = {
    (0, 0): "42 10 3 3 2 4 8 58 1 13 2 7006 3 3 11 8 4 7 - - 24 - 1 60 6 6",
    (0, 1): "2 2 14 5 54 6 30 1 0 10 6 68 1 7 1 569 2 0 - - 1095 - 4 287 46 -",
    (3, 1000): "1 5 133 6611 6 17 25 34 1 0 11 1665 1 13 5 15 2 53 0 0 9 - 0 379 3 7",
    (HELD_OUT_STREAM, 7): "3 4 20 2 63 7 35 4 1 43 4 588 4 0 3 105 0 38 - 0 4 15 11 7 - -",
}


def field_ids(features, field=2):
    """A field's ids (C3's by default, 101312 of them at scale 0.01) in the
    rows that hold one."""
    _, value, missing = split_key(features["categorical"].numpy())
    return value[:, field][~missing[:, field]]


def most_drawn(ids, top=100):
    values, counts = np.unique(ids, return_counts=True)
    return set(values[np.argsort(-counts, kind="stable")[:top]].tolist())


def test_a_still_stream_keeps_the_rows_of_before_drift():
    for data in (SyntheticCriteo(seed=0, scale=0.01), SyntheticCriteo(seed=0, scale=0.01, drift=0)):
        for (stream, row), ids in ROWS_BEFORE_DRIFT.items():
            expected = [int(missing_key(f)) if text == "-" else int(criteo_key(f, int(text)))
                        for f, text in enumerate(ids.split())]
            for position in (None, 10**9):  # without drift a position changes nothing
                keys = data.rows(stream, row, 1, position=position)[0]["categorical"].numpy()
                assert keys[0].tolist() == expected


def test_drift_moves_each_large_fields_ids_by_r_per_sample():
    """The definition against the still stream: the same draws, a large
    field's id (rank - floor(R t)) mod n at row t, a small field's unmoved."""
    rate, first, n = 0.25, 40_000, 500  # 0.25: the same as the op's float32
    still = SyntheticCriteo(seed=2, scale=0.01)
    drifting = SyntheticCriteo(seed=2, scale=0.01, drift=rate)
    assert drifting.drift == rate and drifting.cardinalities == still.cardinalities
    (a, _), (b, _) = still.rows(1, first, n), drifting.rows(1, first, n)
    _, a_ids, a_missing = split_key(a["categorical"].numpy())
    _, b_ids, b_missing = split_key(b["categorical"].numpy())
    shift = np.floor(rate * np.arange(first, first + n))[:, None].astype(np.int64)
    large = np.array(KAGGLE_CARDINALITIES) > 64
    expected = np.where(large, (a_ids - shift) % np.array(drifting.cardinalities), a_ids)
    np.testing.assert_array_equal(b_missing, a_missing)
    np.testing.assert_array_equal(b_ids[~b_missing], expected[~a_missing])
    np.testing.assert_array_equal(b["dense"], a["dense"])
    assert (b_ids != a_ids)[:, large].mean() > 0.9


@pytest.mark.parametrize("drift", [0.0, 0.2])
def test_expected_rows_counts_the_ids_a_drifting_stream_touches(drift):
    """tools/expected_rows.py's count (by FFT for a drifting stream) against
    the distinct ids two workers' streams draw: an upper bound (missing
    values are left out), within 2%."""
    tool = project_tools.load("expected_rows")
    rows = 100_000
    data = SyntheticCriteo(scale=0.01, drift=drift)
    drawn = len(np.unique(np.concatenate(
        [data.rows(stream, 0, rows)[0]["categorical"].numpy().ravel() for stream in (0, 1)])))
    expected, _ = tool.expected_table_rows(0.01, 1.1, 2 * rows, drift=drift, workers=2)
    # Less the empty keys of missing values, at most one a field.
    assert drawn - 26 <= expected <= 1.02 * drawn, (drawn, expected)


def test_held_out_rows_follow_the_stream_where_training_ended():
    """At 0.01 ids a sample the ranking has moved 10000 ids by row 1M: the
    held-out rows drawn at 1M share the last training rows' hot ids, and
    none with held-out rows drawn as at the stream's start."""
    trained = 1_000_000
    data = SyntheticCriteo(seed=1, scale=0.01, drift=0.01)
    recent = most_drawn(field_ids(data.rows(0, trained - 5000, 5000)[0]))
    at_end = field_ids(next(iter(data.held_out(5000, 5000, position=trained)))[0])
    from_start = field_ids(next(iter(data.held_out(5000, 5000)))[0])
    assert len(most_drawn(at_end) & recent) > 50
    assert np.isin(at_end, list(recent)).mean() > 0.3
    assert not most_drawn(from_start) & recent
    assert np.isin(from_start, list(recent)).mean() < 0.01
    # Every row of a held-out part is drawn at the same position.
    part = read_all(data.held_out(700, 1400, position=trained, part=1))
    np.testing.assert_array_equal(
        part[1], data.rows(HELD_OUT_STREAM + 1, 0, 1400, position=trained)[0]["categorical"])


@pytest.mark.parametrize("drift", [-0.1, float("nan"), float("inf"), 2e6, "0.1", True, None])
def test_synthetic_refuses_a_bad_drift(drift):
    with pytest.raises(ValueError, match=r"synthetic criteo: drift must be a rate in \[0, 1e\+06\]"):
        SyntheticCriteo(drift=drift)


def test_the_ops_refuse_a_bad_drift_or_position_too():
    ops = _op_library.load()
    with pytest.raises(tf.errors.InvalidArgumentError, match="drift must be a rate"):
        ops.het_synthetic_criteo(0, 0, 1, drift=-1.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="position must be >= 0"):
        ops.het_synthetic_criteo_lines(0, 0, 1, position=-2)
    with pytest.raises(ValueError, match="position must be an int >= 0"):
        SyntheticCriteo(drift=0.1).rows(0, 0, 1, position=-1)


def test_roc_auc_matches_pairwise_definition():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 300)
    scores = rng.integers(0, 20, 300).astype(float)  # many ties
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert roc_auc(labels, scores) == pytest.approx(pairs, abs=1e-12)


# ----- TSV reader -----

def test_tsv_counts_and_skips_malformed_lines_and_reads_the_rest_exactly(tmp_path):
    lines = [
        good_line(1, 3, "68fd1e64"),
        good_line(0, 0, ""),                            # every feature empty: fine
        good_line(1, 5, "00000abc") + "\r",                  # CRLF: fine
        "\t".join(["0"] + [""] * 13 + ["00000001"] * 26),
        "",                                             # empty line
        good_line(2),                                   # label 2
        good_line(1, 3, "123456789"),                   # nine hex digits
        good_line(1, "3.5"),                            # not an integer
        good_line(1, 99999999999999999999),             # overflows int64
        good_line(1)[:-3],                              # truncated inside the last field
        good_line(1) + "\textra",                       # one field too many
        "\t".join(["1"] + ["2"] * 12 + ["0000000a"] * 27),  # a field shifted
        good_line(0, -3, "ffffffff"),                   # negative count: 0
    ]
    path = tmp_path / "mixed.tsv"
    path.write_text("\n".join(lines) + "\n")
    counter = fresh_counter()
    dense, keys, labels = read_all(criteo_tsv_dataset(str(path), 4, counter=counter))
    expected = [reference_parse(line) for line in lines]
    good = [e for e in expected if e is not None]
    assert len(good) == 5
    assert parse_stats(counter) == {"records": len(lines), "malformed": len(lines) - 5}
    np.testing.assert_array_equal(labels, [g[0] for g in good])
    np.testing.assert_array_equal(dense, np.array([g[1] for g in good], np.float32))
    np.testing.assert_array_equal(keys, np.array([g[2] for g in good], np.int64))
    assert keys[1, 7] == missing_key(7) and keys[4, 25] == criteo_key(25, 0xFFFFFFFF)


def test_tsv_fail_mode_names_file_and_line(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("\n".join([good_line()] * 6 + [good_line(1, 3, "xyz")] + [good_line()]))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"bad.tsv line 7: categorical feature C1 is not 8 hex digits"):
        read_all(criteo_tsv_dataset(str(path), 4, on_malformed="fail", counter=fresh_counter()))


def test_tsv_unlabeled_files_and_sharding(tmp_path):
    data = SyntheticCriteo(seed=5, scale=0.001)
    path = data.write_tsv(str(tmp_path / "a.tsv"), 1000)
    all_rows = read_all(criteo_tsv_dataset(path, 64, counter=fresh_counter()))
    parts = [read_all(criteo_tsv_dataset(path, 64, num_shards=3, shard_index=i,
                                         counter=fresh_counter())) for i in range(3)]
    assert sum(len(p[2]) for p in parts) == 1000
    merged = np.concatenate([p[1] for p in parts])
    assert sorted(map(tuple, merged.tolist())) == sorted(map(tuple, all_rows[1].tolist()))
    unlabeled = tmp_path / "test.tsv"
    unlabeled.write_text("\n".join(line.split("\t", 1)[1] for line in
                                   open(path).read().splitlines()) + "\n")
    rows = read_all(criteo_tsv_dataset(str(unlabeled), 64, has_label=False,
                                       counter=fresh_counter()))
    np.testing.assert_array_equal(rows[1], all_rows[1])
    assert not rows[2].any()


def test_tsv_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="no file matches"):
        criteo_tsv_dataset(str(tmp_path / "nothing*.tsv"), 8)
    path = tmp_path / "x.tsv"
    path.write_text(good_line() + "\n")
    for kwargs, match in ((dict(on_malformed="ignore"), "on_malformed"),
                          (dict(num_shards=0), "num_shards"),
                          (dict(num_shards=2, shard_index=2), "shard_index")):
        with pytest.raises(ValueError, match=match):
            criteo_tsv_dataset(str(path), 8, **kwargs)
    with pytest.raises(ValueError, match="batch_size"):
        criteo_tsv_dataset(str(path), 0)


_tokens = st.sampled_from(["", "0", "1", "2", "-", "-1", "7", "12", "9223372036854775807",
                           "9223372036854775808", "-9223372036854775808", "000000ab", "ABCDEF01",
                           "1234567", "123456789", "fffffffff", "0000000g", " 1", "1.0", "x",
                           "\r"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_tokens, min_size=38, max_size=42), min_size=1, max_size=12),
       st.integers(1, 5))
def test_fuzzed_lines_match_the_reference_parser(tmp_path_factory, rows, batch_size):
    lines = ["\t".join(tokens) for tokens in rows]
    path = tmp_path_factory.mktemp("fuzz") / "f.tsv"
    path.write_text("\n".join(lines) + "\n")
    counter = fresh_counter()
    dense, keys, labels = read_all(criteo_tsv_dataset(str(path), batch_size, counter=counter))
    good = [e for e in (reference_parse(line) for line in lines) if e is not None]
    assert parse_stats(counter) == {"records": len(lines), "malformed": len(lines) - len(good)}
    assert len(labels) == len(good)
    if good:
        np.testing.assert_array_equal(dense, np.array([g[1] for g in good], np.float32))
        np.testing.assert_array_equal(keys, np.array([g[2] for g in good], np.int64))


# ----- Parquet reader -----

def parquet_table(features, labels, nulls=None):
    dense = np.round(np.expm1(features["dense"])).astype(np.int64)
    field, value, missing = split_key(features["categorical"])
    columns = {"label": pa.array(np.asarray(labels).astype(np.int64))}
    for i, name in enumerate(DENSE_FIELDS):
        columns[name] = pa.array(dense[:, i])
    for i, name in enumerate(CATEGORICAL_FIELDS):
        columns[name] = pa.array(np.where(missing[:, i], -1, value[:, i]))
    if nulls:
        columns[nulls] = pa.array([None] + columns[nulls].to_pylist()[1:], pa.int64())
    return pa.table(columns)


def synthetic_rows(n, seed=7):
    features, labels = SyntheticCriteo(seed=seed, scale=0.001).rows(0, 0, n)
    return {k: v.numpy() for k, v in features.items()}, labels.numpy()


# tensorflow-io reads Parquet on TensorFlow 2.16 (and must there); pyarrow
# reads it everywhere, and is what TensorFlow 2.17 and later use.
PARQUET_READERS = ["pyarrow"] + (["tensorflow-io"] if tf.__version__.startswith("2.16.")
                                 else [])


@pytest.fixture(params=PARQUET_READERS)
def parquet_reader(request, monkeypatch):
    from het_tf.data import criteo_parquet

    if request.param == "pyarrow":
        monkeypatch.setattr(criteo_parquet, "_tensorflow_io", lambda: None)
    else:
        assert criteo_parquet._tensorflow_io() is not None, "tensorflow-io does not load"
    return request.param


def test_parquet_reads_what_the_tsv_reader_reads(tmp_path, parquet_reader):
    features, labels = synthetic_rows(3000)
    pq.write_table(parquet_table(features, labels), tmp_path / "a.parquet", row_group_size=1000)
    counter = fresh_counter()
    dense, keys, got_labels = read_all(criteo_parquet_dataset(str(tmp_path / "a.parquet"), 512,
                                                              counter=counter))
    np.testing.assert_array_equal(keys, features["categorical"])
    np.testing.assert_allclose(dense, features["dense"], rtol=1e-6)
    np.testing.assert_array_equal(got_labels, labels)
    assert parse_stats(counter) == {"records": 3000, "malformed": 0}
    # Full batches across the row groups of 1000, as the TSV reader's.
    sizes = [int(labels.shape[0]) for _, labels in criteo_parquet_dataset(
        str(tmp_path / "a.parquet"), 512, counter=fresh_counter())]
    assert sizes == [512] * 5 + [440]


def test_parquet_counts_and_skips_malformed_records(tmp_path, parquet_reader):
    features, labels = synthetic_rows(100)
    table = parquet_table(features, labels)
    bad_label = table.column("label").to_pylist()
    bad_label[3] = 2
    c5 = table.column("C5").to_pylist()
    c5[10] = 1 << 32
    c6 = table.column("C6").to_pylist()
    c6[11] = -2
    table = (table.set_column(0, "label", pa.array(bad_label))
             .set_column(table.schema.get_field_index("C5"), "C5", pa.array(c5))
             .set_column(table.schema.get_field_index("C6"), "C6", pa.array(c6)))
    i4 = table.schema.get_field_index("I4")
    counts = np.array(table.column("I4").to_pylist(), np.float64)
    counts[20] = 2.5
    table = table.set_column(i4, "I4", pa.array(counts))
    pq.write_table(table, tmp_path / "m.parquet")
    counter = fresh_counter()
    _, keys, _ = read_all(criteo_parquet_dataset(str(tmp_path / "m.parquet"), 16,
                                                 counter=counter))
    keep = np.setdiff1d(np.arange(100), [3, 10, 11, 20])
    np.testing.assert_array_equal(keys, features["categorical"][keep])
    assert parse_stats(counter) == {"records": 100, "malformed": 4}
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"m.parquet record.*\n?.*3"):
        read_all(criteo_parquet_dataset(str(tmp_path / "m.parquet"), 16, on_malformed="fail",
                                        counter=fresh_counter()))


def test_parquet_refuses_nulls_missing_columns_and_damaged_files(tmp_path, parquet_reader):
    features, labels = synthetic_rows(50)
    pq.write_table(parquet_table(features, labels, nulls="C9"), tmp_path / "n.parquet")
    with pytest.raises(ValueError, match="column C9 holds 1 null"):
        criteo_parquet_dataset(str(tmp_path / "n.parquet"), 8)
    pq.write_table(parquet_table(features, labels).drop(["I13"]), tmp_path / "c.parquet")
    with pytest.raises(ValueError, match="lacks column"):
        criteo_parquet_dataset(str(tmp_path / "c.parquet"), 8)
    pq.write_table(parquet_table(features, labels), tmp_path / "ok.parquet")
    data = (tmp_path / "ok.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        criteo_parquet_dataset(str(tmp_path / "cut.parquet"), 8)
    strings = parquet_table(features, labels).set_column(
        15, "C2", pa.array(["x"] * 50))
    pq.write_table(strings, tmp_path / "s.parquet")
    with pytest.raises(ValueError, match="column C2 has type string"):
        criteo_parquet_dataset(str(tmp_path / "s.parquet"), 8)


def test_parser_op_refuses_misshapen_inputs():
    from het_tf import _op_library

    ops = _op_library.load()
    with pytest.raises(tf.errors.InvalidArgumentError, match="first_line and source scalars"):
        ops.het_parse_criteo([good_line()], [1, 2], "x.tsv")
    with pytest.raises(tf.errors.InvalidArgumentError, match="lines must be a vector"):
        ops.het_parse_criteo([[good_line()]], 1, "x.tsv")
