"""Tables larger than the other tests use, in bounded memory. A table's
checkpoint is written and read in chunks: saving or restoring 3,000,000 rows
(456 MB raw) holds about one chunk more than the table itself, where one
tensor per field held a second copy of the table (799 MB above it, measured
with the same tool before chunking). Its export keeps keys and rows in
variables, not in the graph (docs/scale.md)."""
import json
import os
import subprocess
import sys

from het_tf.runtime.checkpoint import CHUNK_BYTES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = 3_000_000


def test_save_and_restore_hold_one_chunk_not_the_table(tmp_path):
    out = tmp_path / "figures.json"
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "measure_memory.py"), "--rows", str(ROWS),
         "--shards", "2", "--checkpoint", str(tmp_path / "ckpt"), "--restore-shards", "3",
         "--json", str(out)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(out.read_text())
    raw = ROWS * figures["raw_bytes_per_row"]
    assert figures["restored_rows"] == ROWS
    assert figures["checkpoint_bytes"] >= raw
    for phase in ("save", "restore"):
        peak = figures[f"{phase}_peak_above_table_bytes"]
        assert peak < 2 * CHUNK_BYTES < raw / 3, (phase, peak)


def test_a_large_dynamic_table_exports_as_variables_and_serves_without_het_tf(tmp_path):
    """3,000,000 held rows: the graph stays small (keys and rows are
    variables), the export holds far less than a second table, and a
    process without het_tf serves the model's scores."""
    out = tmp_path / "figures.json"
    export = tmp_path / "export"
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "measure_export.py"), "--rows", str(ROWS),
         "--dynamic", "--out", str(export), "--json", str(out)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert not figures["het_tf_imported_to_serve"]
    assert figures["served_max_difference"] < 1e-6
    assert (export / "saved_model.pb").stat().st_size < 1 << 20
    values = ROWS * 16 * 4
    assert values < figures["export_bytes"] < values * 1.3  # values, sorted keys, rows
    # The export's own variables (about 1.25x the values) and the keys' sort,
    # not a second copy of them on the way (which peaked above the table).
    assert figures["export_peak_above_table_bytes"] < 1.5 * figures["export_bytes"]
