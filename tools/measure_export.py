"""What het_tf.export_saved_model costs for a large table, and what loading
the export costs a process without het_tf.

    python tools/measure_export.py --rows 33762577 --dim 16

Builds a model whose HetEmbedding (a fixed vocabulary of --rows ids, or
--dynamic keys) holds --rows rows, written through the shard's import op in
chunks as a restore would, exports it, then in a fresh process that never
imports het_tf loads the SavedModel and serves one prediction. Prints the
export's time, size on disk and peak resident memory above the filled table,
and the loading process's time and peak resident memory.
"""
import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from measure_memory import reset_peak, rss_bytes, write_figures  # noqa: E402

# Run in a fresh process: loads the export and serves one batch of ids.
SERVE = r"""
import json, os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
path, ids = sys.argv[1], json.loads(sys.argv[2])
started = time.perf_counter()
loaded = tf.saved_model.load(path)
loaded_seconds = time.perf_counter() - started
scores = loaded.signatures["serving_default"](ids=tf.constant(ids, tf.int64))["score"]
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
print(json.dumps({"load_seconds": loaded_seconds, "load_peak_rss_bytes": peak,
                  "het_tf_imported": "het_tf" in sys.modules,
                  "scores": scores.numpy().ravel().tolist()}))
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=33_762_577)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--dynamic", action="store_true", help="input_dim=None: int64 keys")
    p.add_argument("--chunk", type=int, default=1 << 20)
    p.add_argument("--out", default="/tmp/het_tf_export")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()

    import numpy as np
    import tf_keras

    import het_tf
    from het_tf.keras_layers import HetEmbedding

    layer = HetEmbedding(None if args.dynamic else args.rows, args.dim, cache_capacity=0,
                         name="items")
    inputs = tf_keras.Input(shape=(3,), dtype="int64", name="ids")
    x = tf_keras.layers.Flatten()(layer(inputs))
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(1, name="score")(x))
    config = layer.table.config
    slots = np.zeros((args.chunk, config.num_slots, args.dim), np.float32)
    zeros = np.zeros(args.chunk, np.int64)
    rng = np.random.default_rng(0)
    before = rss_bytes()
    for first in range(0, args.rows, args.chunk):
        n = min(args.chunk, args.rows - first)
        keys = np.arange(first, first + n, dtype=np.int64)
        if args.dynamic:
            keys = keys * 7919 + 11  # spread, as hashed ids are
        layer.table.import_rows(keys, rng.normal(size=(n, args.dim)).astype(np.float32),
                                slots[:n], zeros[:n], zeros[:n])
    filled = rss_bytes()
    probe = (np.arange(24, dtype=np.int64).reshape(8, 3) * 1_000_003) % args.rows
    if args.dynamic:
        probe = probe * 7919 + 11
    expected = model.predict(probe, verbose=0).ravel()

    reset_peak()
    started = time.perf_counter()
    het_tf.export_saved_model(model, args.out)
    result = {
        "rows": args.rows, "dim": args.dim, "dynamic": args.dynamic,
        "table_resident_bytes": filled - before,
        "export_seconds": time.perf_counter() - started,
        "export_peak_above_table_bytes": rss_bytes("VmHWM") - filled,
        "export_bytes": sum(os.path.getsize(os.path.join(d, f))
                            for d, _, files in os.walk(args.out) for f in files),
    }
    served = subprocess.run([sys.executable, "-c", SERVE, args.out, json.dumps(probe.tolist())],
                            capture_output=True, text=True, cwd="/",
                            env=dict(os.environ, PYTHONPATH=""))
    if served.returncode != 0:
        raise SystemExit(f"serving the export failed:\n{served.stderr[-3000:]}")
    loaded = json.loads(served.stdout.strip().splitlines()[-1])
    result.update(load_seconds=loaded["load_seconds"],
                  load_peak_rss_bytes=loaded["load_peak_rss_bytes"],
                  het_tf_imported_to_serve=loaded["het_tf_imported"],
                  served_max_difference=float(np.max(np.abs(np.array(loaded["scores"]) -
                                                            expected))))
    write_figures(result, args.json)


if __name__ == "__main__":
    main()
