"""Hybrid mode's dense allreduce in float16, with real Horovod ranks: its
averages against float32's within the rounding float16 implies, a
gradient that overflows skipping the step on every rank alike, a small
hybrid model trained both ways, and bfloat16 refused by name."""
import json
import sys

import numpy as np
import pytest

from het_tf.distribute.allreduce_dtype import check_allreduce_dtype
from tests.test_hybrid import BATCH_SIZE, ROOT, SAMPLES, run_hybrid, run_ranks

PROBE = f"{ROOT}/tests/dense_allreduce_probe.py"
STEPS = 20
# float16 keeps 11 significant bits: each rank's share of the average is
# rounded once (half a unit in the last place, 2^-11 relative) and their
# float16 sum once more, so an average is within 2^-11 of each share plus
# 2^-11 of itself from float32's; below float16's normal range (6.1e-5 once
# scaled) its spacing, 2^-24 over the scale, bounds the error instead.
ULP = 2.0 ** -11


def test_float16_averages_are_float32_within_float16_rounding(tmp_path):
    run_ranks(tmp_path, 1, 2, [sys.executable, PROBE, str(tmp_path), str(STEPS)])
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    scale = ranks[0]["scale"][0]
    assert scale == 2.0 ** 15  # no step before the last overflowed
    checked, worst = 0, 0.0
    for step in range(STEPS):
        assert ranks[0]["applied"][step] and ranks[1]["applied"][step]
        for t in range(2):
            shares = [np.abs(np.float64(r["grads"][step][t])) / 2 for r in ranks]
            exact = np.float64(ranks[0]["float32"][step][t])
            half = np.float64(ranks[0]["float16"][step][t])
            bound = ULP * (shares[0] + shares[1] + np.abs(exact)) + 2.0 ** -24 / scale
            assert (np.abs(half - exact) <= bound).all(), np.abs(half - exact).max()
            worst = max(worst, float((np.abs(half - exact) / bound).max()))
            # Every rank holds the same average, to the bit.
            assert ranks[1]["float16"][step][t] == ranks[0]["float16"][step][t]
            checked += exact.size
    assert checked == STEPS * (16 * 8 + 8)
    assert worst > 0.1  # the bound is not loose: float16's error nears it
    # The last step: rank 1 alone sent 1e6, past float16 once scaled. Both
    # ranks skip it and halve the scale; float32 never skips.
    for r in ranks:
        assert r["applied"][STEPS] is False
        assert r["skipped_steps"] == 1
        assert r["scale"][STEPS] == scale / 2
    assert np.isfinite(np.float64(ranks[0]["float32"][STEPS][0])).all()


def test_a_hybrid_model_trains_in_float16_as_in_float32_and_skips_alike(tmp_path):
    """examples/hybrid_train.py both ways (2 ranks, 1 PS task, 2 epochs of
    64 steps). In float16, rank 1's samples of step 5 (of each epoch) weigh
    a million times: its dense gradients overflow float16, and both ranks
    skip those steps (the dense weights after each equal those before),
    and only the steps they count (the scale may also find its level on a
    gradient past 65,504 / 2^14 early on). The ranks share tables, so two
    float32 runs already differ (an epoch's loss by up to 0.035 here): rank
    0's last loss within 0.1 of float32's catches a broken scale (gradients
    2^14 times too large, or flushed to zero), not float16's rounding, which
    the test above bounds."""
    epochs, steps = 2, SAMPLES // BATCH_SIZE
    common = ["--epochs", str(epochs)]
    exact = run_hybrid(tmp_path / "float32", 1, common)
    half = run_hybrid(tmp_path / "float16", 1, common + ["--allreduce-dtype", "float16",
                                                         "--overflow-at", "1", "5"])
    for r in exact:
        assert r["allreduce_skipped_steps"] == 0
    assert half[0]["step_digests"] == half[1]["step_digests"]  # every step alike on both
    digests = [half[0]["initial_digest"]] + half[0]["step_digests"]
    unchanged = [i - 1 for i in range(1, len(digests)) if digests[i] == digests[i - 1]]
    assert {5 + e * steps for e in range(epochs)} <= set(unchanged)
    for r in half:
        assert r["allreduce_skipped_steps"] == len(unchanged)
    assert half[0]["losses"][-1] < half[0]["losses"][0] - 0.2  # it learns
    assert abs(half[0]["losses"][-1] - exact[0]["losses"][-1]) < 0.1


def test_bfloat16_is_refused_by_name():
    with pytest.raises(ValueError, match="bfloat16.*Gloo allreduce cannot sum bfloat16"):
        check_allreduce_dtype("bfloat16")
    with pytest.raises(ValueError, match="--allreduce-dtype must be one of float32, float16"):
        check_allreduce_dtype("float64", "--allreduce-dtype")
    assert check_allreduce_dtype("float16") == "float16"
