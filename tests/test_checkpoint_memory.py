"""A table's checkpoint is written and read in chunks: saving or restoring
3,000,000 rows (456 MB raw) holds about one chunk more than the table itself,
where one tensor per field held a second copy of the table (799 MB above it,
measured with the same tool before chunking)."""
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
