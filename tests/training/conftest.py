"""Fixtures for the training tests: a slice of real Fashion-MNIST and a briefly trained model
(``data_dir`` comes from ``tests/conftest.py``)."""

from __future__ import annotations

import numpy as np
import pytest

import training  # noqa: F401


@pytest.fixture(scope="session")
def test_slice(data_dir) -> tuple[np.ndarray, np.ndarray]:
    """First 500 test images (uint8 [500,28,28,1]) and labels (int64 [500])."""
    from training.data import load_numpy

    return load_numpy("test", data_dir, 500)


@pytest.fixture(scope="session")
def trained_model(data_dir):
    """A ``cnn`` trained for one short epoch on 3,000 real training images (well above chance)."""
    import tf_keras as keras

    from training.data import load_numpy
    from training.models import build_model

    x, y = load_numpy("train", data_dir, 3000)
    model = build_model("cnn", seed=1)
    model.compile(
        optimizer=keras.optimizers.Adam(0.003),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(x.astype("float32"), y, batch_size=64, epochs=1, verbose=0)
    return model


@pytest.fixture(scope="session")
def exported_model(trained_model, tmp_path_factory):
    """``trained_model`` exported with :func:`training.export.export_saved_model`."""
    from training.export import export_saved_model

    path = tmp_path_factory.mktemp("export") / "cnn"
    export_saved_model(trained_model, path)
    return path


@pytest.fixture(scope="session")
def mirrored_export(trained_model, tmp_path_factory):
    """``trained_model`` exported with ``mirror_average=True`` (what the trainer does for a
    model trained with random flips)."""
    from training.export import export_saved_model

    path = tmp_path_factory.mktemp("export-mirror") / "cnn"
    export_saved_model(trained_model, path, mirror_average=True)
    return path
