"""Fixtures for the load-test tests: a work dir holding the small model of ``tests/conftest.py``,
a payload file and one shared model server."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.fixture(scope="session")
def loadtest_work_dir(model_base):
    """A work dir laid out like the pipeline's: ``models/fashion-mnist/1/1/saved_model.pb``."""
    return model_base.parents[2]


@pytest.fixture(scope="session")
def payload_file(tmp_path_factory):
    """``python -m loadtest.make_payload --count 2`` output (real JPEG test images), run from a
    directory other than the repository root."""
    out = tmp_path_factory.mktemp("payload") / "input.json"
    proc = subprocess.run(
        [sys.executable, "-m", "loadtest.make_payload", "--out", str(out), "--count", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=out.parent,
    )
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="session")
def shared_server(model_base):
    """One model server subprocess on loopback for the direct Locust and hey runs."""
    from serving.launch import LocalServer

    with LocalServer(model_base) as server:
        yield server
