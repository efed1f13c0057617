"""`het-tf train`'s data on real-format files: the hold-out never leaves the
evaluation empty, no pipeline trains on a held-out row, and the evaluation
reads each held-out row once, at most --eval-samples of them."""
import argparse

import numpy as np
import pytest
from criteo_sample import write_sample

from het_tf.apps.train import figures
from het_tf.apps.train.arguments import add_arguments
from het_tf.apps.train.inputs import HOLD_OUT_EVERY, Inputs
from het_tf.data import SyntheticCriteo
from het_tf.data.synthetic import HELD_OUT_STREAM


def inputs(*argv, pipelines=1, trained_per_worker=0):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return Inputs(parser.parse_args(list(argv)), pipelines=pipelines,
                  trained_per_worker=trained_per_worker)


def rows_of(batches):
    """Each row as a hashable tuple of its ids, dense values and label."""
    out = []
    for features, labels in batches:
        for keys, dense, label in zip(features["categorical"].numpy(),
                                      features["dense"].numpy(), labels.numpy()):
            out.append((tuple(keys), tuple(np.round(dense, 5)), float(label)))
    return out


def training_rows(source, pipelines, rows):
    """What every pipeline trains on in at least one pass over `rows` rows."""
    batches = -(-rows // source.args.batch_size) + 1
    return [row for k in range(pipelines)
            for row in rows_of(source.train(k, pipelines).take(batches))]


@pytest.mark.parametrize("pipelines", [1, 2])
def test_a_file_smaller_than_the_split_holds_out_its_last_rows(tmp_path, pipelines):
    path = write_sample(tmp_path / "sample.tsv", 300)
    source = inputs("--data", path, pipelines=pipelines)  # batches of 1024: one batch in all
    every = rows_of(source._files(path))
    assert len(every) == 300
    held_out = rows_of(source.evaluation())
    assert held_out == every[-300 // HOLD_OUT_EVERY:]  # 15 rows, in file order, once
    trained = set(training_rows(source, pipelines, 300))
    assert trained == set(every[:-15]) and not trained & set(held_out)
    # Training batches are full though the file holds fewer rows than one.
    first = next(iter(source.train(0, pipelines)))
    assert first[1].shape[0] == 1024


def test_the_batch_split_evaluates_exactly_what_no_pipeline_trained_on(tmp_path):
    path = write_sample(tmp_path / "big.tsv", 45 * 16 + 5, seed=3)
    source = inputs("--data", path, "--batch-size", "16", pipelines=2)
    assert source.small_rows is None  # 46 batches: 23 a pipeline, one held out of each 20
    every = rows_of(source._files(path))
    held_out = rows_of(source.evaluation())
    assert len(held_out) == 2 * 16 and len(set(held_out)) == len(held_out)
    trained = []
    for k in range(2):
        trained += rows_of(source._split(2, k, held_out=False))
    assert sorted(trained + held_out) == sorted(every)
    assert not set(trained) & set(held_out)


def test_eval_data_is_read_once_and_capped(tmp_path):
    path = write_sample(tmp_path / "train.tsv", 400)
    eval_path = write_sample(tmp_path / "eval.tsv", 200, seed=1)
    source = inputs("--data", path, "--eval-data", eval_path, "--batch-size", "64")
    assert len(rows_of(source.evaluation())) == 200  # not repeated up to --eval-samples
    assert set(training_rows(source, 1, 400)) == set(rows_of(source._files(path)))
    capped = inputs("--data", path, "--eval-data", eval_path, "--batch-size", "64",
                    "--eval-samples", "150")
    assert rows_of(capped.evaluation()) == rows_of(source.evaluation())[:150]


def test_too_little_data_is_refused_before_training_naming_eval_data(tmp_path):
    path = write_sample(tmp_path / "one.tsv", 2)
    with pytest.raises(ValueError, match=r"has 2 readable row\(s\).*--eval-data"):
        inputs("--data", path, pipelines=2)


@pytest.mark.parametrize("remote", [True, False])
def test_ps_mode_takes_parquet_only_where_workers_can_read_it(tmp_path, monkeypatch, remote):
    """On TensorFlow 2.21 Parquet is read by pyarrow in the reading process,
    which a ParameterServerStrategy worker cannot run: refused up front."""
    from het_tf.apps.train import arguments
    from het_tf.data import criteo_parquet

    path = tmp_path / "day.parquet"
    path.write_bytes(b"")
    monkeypatch.setattr(criteo_parquet, "reads_on_remote_workers", lambda: remote)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for mode in ("local", "hybrid", "ps"):
        args = parser.parse_args(["--data", str(path), "--mode", mode])
        if mode == "ps" and not remote:
            with pytest.raises(ValueError, match="in ps mode the workers read Parquet with "
                                                 "tensorflow-io"):
                arguments.check(args)
        else:
            arguments.check(args)


def test_drifting_synthetic_data_is_evaluated_where_training_ends():
    """Every held-out input of a run (the final evaluation, the workers'
    held-out parts, the best reachable AUC) is drawn as the streams stand
    after the samples each worker trains."""
    trained = 300_000
    source = inputs("--drift", "0.02", "--seed", "3", "--batch-size", "256",
                    "--eval-samples", "600", pipelines=2, trained_per_worker=trained)
    data = SyntheticCriteo(3, source.args.scale, source.args.zipf, 0.02)
    assert rows_of(source.evaluation()) == rows_of(data.held_out(256, 600, position=trained))
    assert rows_of(source.held_out(1, 2).take(2)) == rows_of(
        data.held_out(256, 512, position=trained, part=1))
    assert rows_of(source.evaluation()) != rows_of(data.held_out(256, 600))
    _, labels, logits = data.rows(HELD_OUT_STREAM, 0, 2000, with_logits=True, position=trained)
    assert figures.best_auc(source, 2000) == figures.roc_auc(labels.numpy(), logits.numpy())
