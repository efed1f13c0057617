"""The conformance matrix's cells under ParameterServerStrategy, run as the
chief of `het-tf launch --ps 1 --workers 1`: each cell's model trains on
the cluster and every read is taken from the chief, as a user takes it;
the reads (or a refused cell's error) and the exports' paths go to --out for
tests/test_conformance.py, which compares them with Keras' Embedding."""
import argparse
import json
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from het_tf import cluster  # noqa: E402
from tests import conformance as c  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cells", required=True, help="a JSON list of cells")
    p.add_argument("--folder", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    strategy = cluster.parameter_server_strategy()
    results, exports = {}, {}
    for n, cell in enumerate(map(tuple, json.loads(args.cells))):
        name = c.cell_id(cell)
        folder = os.path.join(args.folder, name)
        os.makedirs(folder, exist_ok=True)
        try:
            model, layer, history = c.train(cell, "het", strategy, f"items{n}")
        except ValueError as e:
            results[name] = {"refused": str(e)}
            continue
        got, checkpoint, exports[name] = c.reads(model, layer, history, "het", folder, strategy)
        got["restored rows"] = c.restored_rows(cell, checkpoint, strategy, f"restored{n}")
        results[name] = got
        print(f"{name}: read", flush=True)
    np.savez(args.out, reads=np.array(results, dtype=object),
             exports=np.array(exports, dtype=object))


if __name__ == "__main__":
    main()
