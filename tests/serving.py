"""Loads SavedModels as TensorFlow Serving would: in a fresh process that
never imports het_tf."""
import json
import os
import subprocess
import sys

import numpy as np

SERVE = r"""
import json, sys
import tensorflow as tf
request = json.loads(sys.argv[1])
answers = {}
for path in request["paths"]:
    loaded = tf.saved_model.load(path)
    if "rows_of" in request:  # the first table's exported lookup
        answers[path] = loaded.lookups[0](tf.constant(request["rows_of"], tf.int64)).numpy()
    else:
        inputs = {k: tf.constant(v, tf.int64) for k, v in request["inputs"].items()}
        answers[path] = loaded.signatures["serving_default"](**inputs)[request["output"]]
        answers[path] = answers[path].numpy().ravel()
    answers[path] = answers[path].tolist()
print(json.dumps({"answers": answers, "het_tf": "het_tf" in sys.modules}))
"""


def _load_without_het_tf(request):
    request["paths"] = [str(p) for p in request["paths"]]
    run = subprocess.run(
        [sys.executable, "-c", SERVE, json.dumps(request)],
        capture_output=True, text=True, timeout=300, cwd="/",
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=""))
    assert run.returncode == 0, run.stderr[-3000:]
    loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert not loaded["het_tf"]
    return loaded["answers"]


def serve_without_het_tf(paths, inputs, output="score"):
    """{path: the flat `output` of its serving_default signature on
    `inputs` ({input name: int64 values})}; fails if het_tf was imported."""
    return _load_without_het_tf({"paths": paths, "inputs": inputs, "output": output})


def rows_without_het_tf(paths, ids):
    """{path: the rows of `ids` its first table's exported lookup gives}."""
    return {path: np.array(rows) for path, rows in
            _load_without_het_tf({"paths": paths, "rows_of": list(ids)}).items()}


def assert_versions_serve_their_cuts(folder, result, steps):
    """The numbered versions in `folder` are the steps `steps` and each
    serves, without het_tf, the scores the model itself gave at its cut
    (result["version_scores"], recorded by examples/toy_model.py), which
    differ from cut to cut."""
    held = sorted(int(name) for name in os.listdir(folder) if name.isdigit())
    assert held == steps and sorted(os.listdir(folder)) == sorted(map(str, steps)), os.listdir(folder)
    at_cut = {int(v): s for v, s in result["version_scores"].items()}
    assert sorted(at_cut) == steps
    served = serve_without_het_tf([os.path.join(folder, str(v)) for v in held],
                                  result["export_inputs"])
    for v in held:
        np.testing.assert_allclose(served[os.path.join(folder, str(v))], at_cut[v], rtol=1e-6,
                                   atol=1e-7)
    for a, b in zip(held, held[1:]):
        assert np.abs(np.subtract(at_cut[a], at_cut[b])).max() > 1e-5, (a, b)
