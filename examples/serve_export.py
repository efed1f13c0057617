"""Load the newest SavedModel version of a `het-tf train` run (the highest
numbered folder in RUN_DIR/export, as TF Serving picks it) with stock
TensorFlow alone (no het_tf, no custom ops) and score the held-out rows the
run recorded, next to the scores the trained model gave them.

    python examples/serve_export.py RUN_DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main(run_dir):
    with open(os.path.join(run_dir, "examples.json")) as f:
        examples = json.load(f)
    export = os.path.join(run_dir, "export")
    newest = max(int(name) for name in os.listdir(export) if name.isdigit())
    serve = tf.saved_model.load(os.path.join(export, str(newest))).signatures["serving_default"]
    assert "het_tf" not in sys.modules, "this check must run without het_tf"
    outputs = serve(dense=tf.constant(examples["features"]["dense"], tf.float32),
                    categorical=tf.constant(examples["features"]["categorical"], tf.int64))
    served = next(iter(outputs.values())).numpy().ravel()
    trained = np.array(examples["scores"])
    print("row  label  served score  trained model's score")
    for i, (label, a, b) in enumerate(zip(examples["labels"], served, trained)):
        print(f"{i:>3}  {int(label):>5}  {a:>12.6f}  {b:>21.6f}")
    worst = float(np.max(np.abs(served - trained)))
    print(f"largest difference {worst:.2e}")
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
