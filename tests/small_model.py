"""A small real model for the serving and load-test tests (needs TensorFlow).

:func:`export_small_model` builds a ``training.models`` model, fits it briefly on a slice of the
real Fashion-MNIST training split (``$TFDS_DATA_DIR``) and exports it with
``training.export.export_saved_model`` as ``<base>/<version>/``, the layout that TF Serving /
:mod:`serving.model` read in a base path; :func:`publish_small_model` lays it out as selection
publishes it (``<models-dir>/<N>/<N>/`` and ``<models-dir>/<N>/selection.json``).
"""

from __future__ import annotations

from pathlib import Path


def export_small_model(
    base_path: str | Path,
    version: int = 1,
    model_type: str = "cnn",
    train_examples: int = 2048,
    epochs: int = 1,
    seed: int = 0,
) -> Path:
    """Train ``model_type`` briefly and export it to ``<base_path>/<version>/``.

    Args:
        base_path: serving base path (created if missing).
        version: integer version directory to write (must not exist).
        model_type: one of :data:`fmnist_common.MODEL_TYPES`.
        train_examples: first N training examples used (0: no training, random weights).
        epochs: passes over those examples (batch size 64).
        seed: weight initialisation seed.

    Returns:
        The version directory (holding ``saved_model.pb``).

    Raises:
        FileNotFoundError: the dataset is not prepared under ``$TFDS_DATA_DIR``.
    """
    import training  # noqa: F401  (selects tf-keras)
    from training.data import load_numpy
    from training.export import export_saved_model
    from training.models import build_model

    model = build_model(model_type, seed=seed)
    if train_examples:
        import tf_keras as keras

        images, labels = load_numpy("train", limit=train_examples)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        model.fit(images.astype("float32"), labels, batch_size=64, epochs=epochs, verbose=0)
    target = Path(base_path) / str(int(version))
    target.parent.mkdir(parents=True, exist_ok=True)
    export_saved_model(model, target)
    return target


def publish_small_model(models_dir: str | Path, version: int = 1, **kwargs) -> Path:
    """:func:`export_small_model` (``kwargs`` passed on) published as selection does it: the
    SavedModel at ``<models_dir>/<version>/<version>/`` with the selection record beside it.

    Returns:
        The SavedModel directory; its parent is the version's TF Serving base path (what a
        ``storageUri`` names).
    """
    import json

    from fmnist_common import SELECTION_RECORD

    base = Path(models_dir) / str(int(version))
    saved = export_small_model(base, version, **kwargs)
    record = {"version": int(version), "model": kwargs.get("model_type", "cnn"), "accuracy": None}
    (base / SELECTION_RECORD).write_text(json.dumps(record) + "\n")
    return saved


# the top class's probability lead over the second that makes an image a fair test of decoding:
# lossy kinds (JPEG, dithering) move pixels by about one grey level, which can flip a near tie
# whatever the decoder, and says nothing about decoding
CLEAR_MARGIN = 0.3


def clearly_classified(probabilities, n: int, margin: float = CLEAR_MARGIN) -> list[int]:
    """The first ``n`` row indices of ``probabilities`` (float ``[N, 10]``) whose top class
    leads the second by at least ``margin``.

    Raises:
        AssertionError: fewer than ``n`` such rows (the test cannot pick its images).
    """
    import numpy as np

    top2 = np.sort(np.asarray(probabilities), axis=1)[:, -2:]
    clear = [i for i, (second, first) in enumerate(top2) if first - second >= margin]
    assert len(clear) >= n, f"only {len(clear)} of {len(top2)} images clearly classified"
    return clear[:n]
