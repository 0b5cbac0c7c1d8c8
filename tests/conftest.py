"""Fixtures shared by every test directory.

Test-helper convention: fixtures live in ``conftest.py`` (this one for what several
directories use, ``tests/<area>/conftest.py`` for one area); plain helper functions live in
uniquely named modules (``tests/small_model.py``, ``tests/serving/serving_helpers.py``,
``tests/manifests/manifest_refs.py``) that tests import by name: pytest puts ``tests/`` (this
file's folder) and each test's own folder on ``sys.path``. Production packages hold no test code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fmnist_common import MODEL_NAME


@pytest.fixture(scope="session")
def data_dir() -> str | None:
    """The tfds data dir (``$TFDS_DATA_DIR``; the Makefile sets it from MIRROR_DIR); fails the
    test when Fashion-MNIST is not prepared there."""
    from training.data import load_numpy

    try:
        load_numpy("test", None, 1)
    except FileNotFoundError as exc:
        pytest.fail(
            f"Fashion-MNIST not prepared: {exc}. Run `make test MIRROR_DIR=../shared` (which "
            "sets TFDS_DATA_DIR), or pytest with TFDS_DATA_DIR=../shared/tfds, or ingest."
        )
    return os.environ.get("TFDS_DATA_DIR")


@pytest.fixture(scope="session")
def model_base(tmp_path_factory) -> Path:
    """``<work>/models/fashion-mnist/1``, the TF Serving base path of version 1 (``1/``, a
    ``cnn`` fitted briefly on 2,048 real training images, well above chance), laid out as
    ``make demo`` publishes it."""
    from small_model import publish_small_model

    models = tmp_path_factory.mktemp("work") / "models" / MODEL_NAME
    return publish_small_model(models, version=1, train_examples=2048).parent
