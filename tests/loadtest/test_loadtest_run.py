"""Real load runs on loopback: Locust headless (local mode) and hey, started from a directory
other than the repository root."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fmnist_common.cli import options_argv
from loadtest.local import parse_duration, read_aggregated, split_stages
from loadtest.payload import check_predict_response
from loadtest.shape import stage_users, threshold_failures

ROOT = Path(__file__).resolve().parents[2]
HEY_SH = ROOT / "loadtest" / "hey.sh"
LOCUSTFILE = ROOT / "loadtest" / "locustfile.py"


def test_check_predict_response():
    good = {"predictions": [[0.1] * 10]}
    assert check_predict_response(200, good, 1) is None
    assert "error body" in check_predict_response(200, {"error": "boom"}, 1)
    assert check_predict_response(503, good, 1) == "HTTP 503"
    assert "expected 2" in check_predict_response(200, good, 2)
    assert "shape" in check_predict_response(200, {"predictions": [[0.1] * 9]}, 1)
    assert "sum to" in check_predict_response(200, {"predictions": [[0.2] * 10]}, 1)
    assert "non-numeric" in check_predict_response(200, {"predictions": [["a"] * 10]}, 1)


def test_stages_and_durations():
    users = [stage_users(t, 5, 10, 20, 10, 5) for t in (0, 5, 9.9, 10, 29, 30, 35, 39.9, 40, 44)]
    assert users == [1, 3, 5, 5, 5, 5, 3, 1, 0, 0]
    assert stage_users(45, 5, 10, 20, 10, 5) is None
    assert parse_duration("20s") == 20 and parse_duration("1m30s") == 90
    assert parse_duration("45") == 45
    with pytest.raises(ValueError):
        parse_duration("soon")
    assert sum(split_stages(20).values()) == pytest.approx(20)


def test_threshold_failures():
    from types import SimpleNamespace as NS

    class Total:
        num_requests, fail_ratio, total_rps = 100, 0.02, 50.0

        def get_response_time_percentile(self, q):
            return 300.0

    opts = NS(max_failure_ratio=0.01, max_p95_ms=200.0, min_rps=60.0)
    problems = threshold_failures(Total(), opts)
    assert len(problems) == 3 and "failure ratio" in problems[0]
    assert threshold_failures(Total(), NS(max_failure_ratio=0.05, max_p95_ms=500, min_rps=1)) == []
    Total.num_requests = 0
    assert threshold_failures(Total(), opts) == ["no requests were made"]


def run(cmd: list, cwd: Path, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """``cmd`` (items turned into strings) run in ``cwd``, output captured as text."""
    cmd = [str(c) for c in cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, **kw)


def test_local_mode_without_model_says_run_make_demo(tmp_path):
    proc = run([sys.executable, "-m", "loadtest.local", "--work-dir", tmp_path], cwd=tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("python -m loadtest.local: error: ") and "run make demo first" in line


def test_local_mode_bad_duration_is_a_usage_error(tmp_path):
    proc = run([sys.executable, "-m", "loadtest.local", "--duration", "soon"], cwd=tmp_path)
    assert proc.returncode == 2 and "--duration" in proc.stderr


@pytest.mark.slow
def test_local_mode_locust_run_passes_thresholds(loadtest_work_dir, tmp_path):
    options = {
        "--work-dir": loadtest_work_dir,
        "--duration": "16s",
        "--users": 5,
        "--min-rps": 5,
        "--max-p95-ms": 1000,
        "--max-failure-ratio": 0.0,
        "--image-count": 200,
        "--host-header": "fashion-mnist.fashion-mnist.example.com",
    }
    cmd = [sys.executable, "-m", "loadtest.local", *options_argv(options)]
    proc = run(cmd, cwd=tmp_path, timeout=200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "thresholds passed" in out and "load test PASSED" in out
    reports = loadtest_work_dir / "loadtest"
    row = read_aggregated(reports / "locust_stats.csv")
    assert int(row["Request Count"]) > 100
    assert int(row["Failure Count"]) == 0
    assert float(row["Requests/s"]) >= 5
    assert float(row["95%"]) <= 1000
    with open(reports / "locust_stats.csv") as f:
        assert "/v1/models/[name]:predict" in f.read()  # grouped by endpoint name
    history = (reports / "locust_stats_history.csv").read_text().splitlines()
    assert len(history) > 5
    assert (reports / "report.html").stat().st_size > 1000
    assert not (reports / "locust_failures.csv").read_text().strip().splitlines()[1:]
    # docs/load-testing.md lists every file the run leaves, and only those
    doc = (ROOT / "docs" / "load-testing.md").read_text()
    [listed] = re.findall(r"`work/loadtest/\{([^}]*)\}`", doc)
    assert sorted(listed.split(",")) == sorted(p.name for p in reports.iterdir())


@pytest.mark.slow
def test_locust_thresholds_fail_the_exit_code(shared_server, payload_file, tmp_path):
    """Locust run directly: an impossible throughput threshold makes it exit 1."""
    options = {
        "--host": shared_server.url,
        "--payload-file": payload_file,
        "--peak-users": 2,
        "--ramp-up-s": 1,
        "--hold-s": 2,
        "--ramp-down-s": 0.5,
        "--idle-s": 0.5,
        "--min-rps": 1000000,
        "--csv": tmp_path / "run",
        "--run-time": "10s",
    }
    locust = [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--headless", "--only-summary"]
    proc = run([*locust, *options_argv(options)], cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "thresholds FAILED" in out and "< 1000000" in out
    row = read_aggregated(tmp_path / "run_stats.csv")
    assert int(row["Request Count"]) > 0 and int(row["Failure Count"]) == 0


def test_hey_script_syntax_and_help():
    assert subprocess.run(["bash", "-n", str(HEY_SH)], timeout=10).returncode == 0
    proc = subprocess.run([str(HEY_SH), "--help"], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0
    assert "-host" not in proc.stderr and "--host HOST" in proc.stdout
    bad = subprocess.run([str(HEY_SH), "--nope"], capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2 and "unknown option" in bad.stderr


def test_make_payload(payload_file):
    import base64

    body = json.loads(payload_file.read_text())
    assert len(body["instances"]) == 2
    assert base64.b64decode(body["instances"][0]["b64"], validate=True)[:2] == b"\xff\xd8"  # JPEG


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("hey") is None, reason="hey is not installed")
def test_hey_real_run(shared_server, payload_file, tmp_path):
    options = {
        "--url": shared_server.predict_url,
        "-z": "2s",
        "-c": 2,
        "--host": "fashion-mnist.fashion-mnist.example.com",
        "--payload": payload_file,
    }
    cmd = [HEY_SH, *options_argv(options), "--keep"]
    proc = run(cmd, cwd=tmp_path, env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr
    assert "Requests/sec" in proc.stdout
    # hey's "Status code distribution:" section ("  [200]\t1234 responses"); the latency
    # histogram above it prints counts in brackets too ("0.004 [400]\t|■■■"): not codes
    codes = re.findall(r"^\s*\[(\d{3})\]\s+\d+ responses", proc.stdout, re.M)
    assert codes == ["200"], proc.stdout
