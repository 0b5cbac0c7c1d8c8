"""`make demo` end to end on a slice: ingest, 3 x 2-worker training, select, serve, predict."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_pipeline_end_to_end(tmp_path, data_dir):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    cmd = [
        sys.executable,
        "-m",
        "training.pipeline",
        "--work-dir",
        str(tmp_path),
        "--budget",
        "smoke",
    ]
    if data_dir:
        cmd += ["--data-dir", data_dir]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    report = json.loads((tmp_path / "reports" / "selection.json").read_text())
    assert report["published"] and report["version"] == 1
    assert {c["status"] for c in report["candidates"].values()} == {"ok"}
    assert report["chosen_model"] in ("cnn", "dropout", "batch_norm")
    assert (tmp_path / "models" / "fashion-mnist" / "1" / "saved_model.pb").is_file()
    assert (tmp_path / "reports" / "training_curves.png").stat().st_size > 10_000
    # summary table: every model, the chosen version, predictions with true labels
    for name in ("cnn", "dropout", "batch_norm"):
        assert name in proc.stdout
    assert "chosen:" in proc.stdout and "-> version 1" in proc.stdout
    assert "true label" in proc.stdout and "model server stopped" in out
