"""`make demo` end to end on a slice: ingest, 3 x 2-worker training, select, serve, predict,
run from a directory other than the repository root."""

import json
import os
import subprocess
import sys

import pytest

from fmnist_common import CANDIDATES


@pytest.mark.slow
def test_pipeline_end_to_end(tmp_path, data_dir):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    cmd = [sys.executable, "-m", "fmnist_pipeline", "--work-dir", str(tmp_path / "work")]
    cmd += ["--budget", "smoke", "--predict-images", "3"]
    cmd += ["--data-dir", data_dir] if data_dir else []
    stale = tmp_path / "work" / "reports" / "samples" / "test-0003.jpg"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"\xff\xd8\xff from an earlier run of 8 images")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    work = tmp_path / "work"
    assert proc.returncode == 0, out[-4000:]
    report = json.loads((work / "reports" / "selection.json").read_text())
    assert report["published"] and report["version"] == 1
    assert set(report["candidates"]) == set(CANDIDATES)  # the three TF variants and PyTorch
    assert {c["status"] for c in report["candidates"].values()} == {"ok"}
    assert report["chosen_model"] in CANDIDATES
    assert (work / "models" / "fashion-mnist" / "1" / "1" / "saved_model.pb").is_file()
    assert (work / "models" / "fashion-mnist" / "1" / "selection.json").is_file()
    assert (work / "reports" / "training_curves.png").stat().st_size > 10_000
    # summary table: every model, the chosen version, predictions with true labels
    for name in CANDIDATES:
        assert name in proc.stdout
    assert "chosen:" in proc.stdout and "-> version 1" in proc.stdout
    assert "true label" in proc.stdout and "model server stopped" in out
    assert (work / "reports" / "server.log").stat().st_size > 0
    # the JPEGs it classified, kept for the client by hand (docs/serving.md); an earlier
    # run's extra image is gone
    samples = sorted((work / "reports" / "samples").glob("test-*.jpg"))
    assert [p.name for p in samples] == [f"test-{i:04d}.jpg" for i in range(len(samples))]
    assert samples and all(p.read_bytes()[:3] == b"\xff\xd8\xff" for p in samples)
    assert len(samples) == 3  # --predict-images


def test_failure_is_one_line_and_exit_1(tmp_path):
    """A work dir that is a file: exit 1, one line on stderr, no traceback."""
    not_a_dir = tmp_path / "work"
    not_a_dir.write_text("")
    cmd = [sys.executable, "-m", "fmnist_pipeline", "--work-dir", str(not_a_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("python -m fmnist_pipeline: error: [Errno 17] File exists"), line


def test_usage_error_exits_2(tmp_path):
    cmd = [sys.executable, "-m", "fmnist_pipeline", "--num-workers", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    assert "--num-workers: must be at least 1, got 0" in proc.stderr
