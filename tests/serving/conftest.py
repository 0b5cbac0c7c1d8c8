"""Fixtures for the serving tests: the small model of ``tests/conftest.py``, the loaded model, a
FastAPI TestClient and a real ``python -m serving.server`` subprocess."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def test_images():
    """First 64 real test images and labels: ``uint8 [64, 28, 28, 1]``, ``int64 [64]``."""
    from training.data import load_numpy

    return load_numpy("test", limit=64)


@pytest.fixture(scope="session")
def loaded_model(model_base):
    """:class:`serving.model.FashionMnistModel` loaded from ``model_base``."""
    from serving.model import FashionMnistModel

    model = FashionMnistModel(model_base_path=model_base)
    assert model.load()
    return model


@pytest.fixture(scope="session")
def client(loaded_model):
    """FastAPI ``TestClient`` of the server app around ``loaded_model`` (no subprocess)."""
    from fastapi.testclient import TestClient

    from serving.server import build_app

    with TestClient(build_app(loaded_model)) as c:
        yield c


@pytest.fixture(scope="session")
def live_server(model_base, tmp_path_factory):
    """A real server subprocess on a free 127.0.0.1 port."""
    from serving.launch import LocalServer

    log = tmp_path_factory.mktemp("server") / "server.log"
    with LocalServer(model_base, log_path=log) as server:
        yield server
