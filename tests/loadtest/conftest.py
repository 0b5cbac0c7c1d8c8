"""Fixtures for the load-test tests: a briefly-trained cnn exported as ``<base>/1/``."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def loadtest_work_dir(tmp_path_factory):
    """A work dir laid out like the pipeline's: ``models/fashion-mnist/1/saved_model.pb``."""
    from serving.fixtures import export_small_model

    work = tmp_path_factory.mktemp("work")
    export_small_model(work / "models" / "fashion-mnist", version=1, train_examples=256)
    return work


@pytest.fixture(scope="session")
def payload_file(tmp_path_factory):
    """``python -m loadtest.make_payload --count 2`` output (real JPEG test images)."""
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path_factory.mktemp("payload") / "input.json"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "loadtest.make_payload", "--out", str(out), "--count", "2"],
        capture_output=True, text=True, timeout=120, cwd=root,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="session")
def shared_server(loadtest_work_dir):
    """One model server subprocess on loopback for the direct Locust and hey runs."""
    from serving.launch import LocalServer

    with LocalServer(loadtest_work_dir / "models" / "fashion-mnist") as server:
        yield server
