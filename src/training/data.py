"""Fashion-MNIST data: loading with tensorflow-datasets, image decoding and encoding.

Conventions:
  * images are ``uint8`` arrays/tensors of shape ``[N, 28, 28, 1]`` (NHWC, one grey channel,
    0 = black, 255 = white) exactly as tfds ``fashion_mnist`` 3.0.1 stores them;
  * labels are ``int64`` class ids ``0..9`` in the order of
    :data:`fmnist_common.CLASS_NAMES` (Zalando's labelling, as in tfds);
  * pixel scaling and normalisation are *not* done here: they are the first layers of every
    model (see :mod:`training.models`), so training and serving share one preprocessing graph.
"""

from __future__ import annotations

import io
import os

import numpy as np

DATASET_NAME = "fashion_mnist"
DATASET_VERSION = "3.0.1"
SPLIT_SIZES = {"train": 60_000, "test": 10_000}


def resolve_data_dir(data_dir: str | os.PathLike | None) -> str | None:
    """The tfds data dir to use: ``data_dir``, else ``$TFDS_DATA_DIR``, else tfds' default."""
    if data_dir:
        return os.fspath(data_dir)
    return os.environ.get("TFDS_DATA_DIR") or None


def load_numpy(
    split: str, data_dir: str | os.PathLike | None = None, limit: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Load a prepared split into memory (no download).

    Args:
        split: ``"train"`` or ``"test"``.
        data_dir: tfds data dir holding ``fashion_mnist/3.0.1`` (default: ``$TFDS_DATA_DIR``).
        limit: keep only the first ``limit`` examples (a slice of the real data); ``None``/0
            keeps all.

    Returns:
        ``(images, labels)``: ``uint8 [N, 28, 28, 1]`` and ``int64 [N]``.

    Raises:
        FileNotFoundError: the split is not prepared in ``data_dir`` (run ingestion first).
    """
    import tensorflow_datasets as tfds

    tfds_split = f"{split}[:{int(limit)}]" if limit else split
    try:
        images, labels = tfds.as_numpy(
            tfds.load(
                f"{DATASET_NAME}:{DATASET_VERSION}",
                split=tfds_split,
                data_dir=resolve_data_dir(data_dir),
                download=False,
                as_supervised=True,
                batch_size=-1,
            )
        )
    except (AssertionError, FileNotFoundError) as exc:  # tfds raises AssertionError if missing
        where = resolve_data_dir(data_dir) or "tfds' default ~/tensorflow_datasets"
        raise FileNotFoundError(
            f"{DATASET_NAME} {split!r} is not prepared under {where}: set TFDS_DATA_DIR "
            "(offline: MIRROR_DIR=../shared with make) or run `python -m training.ingest`"
        ) from exc
    return images.astype(np.uint8), labels.astype(np.int64)


def encode_images(images: np.ndarray, image_format: str = "jpeg", quality: int = 95) -> list[bytes]:
    """Encode images the way a client sends them (Pillow, as in ``serving.client``).

    Args:
        images: ``uint8 [N, H, W, 1]`` or ``[N, H, W]`` grey, or ``[N, H, W, 3]`` colour.
        image_format: ``"jpeg"`` or ``"png"``.
        quality: JPEG quality 1-95 (ignored for PNG).

    Returns:
        One encoded byte string per image.

    Raises:
        ValueError: on an unknown format or a non-uint8 array.
    """
    from PIL import Image

    fmt = image_format.lower()
    if fmt not in ("jpeg", "jpg", "png"):
        raise ValueError(f"unknown image format {image_format!r}; use 'jpeg' or 'png'")
    if images.dtype != np.uint8:
        raise ValueError(f"images must be uint8, got {images.dtype}")
    out = []
    for img in images:
        if img.ndim == 3 and img.shape[-1] == 1:
            img = img[..., 0]
        buf = io.BytesIO()
        pil = Image.fromarray(img)
        if fmt == "png":
            pil.save(buf, format="PNG")
        else:
            pil.save(buf, format="JPEG", quality=quality)
        out.append(buf.getvalue())
    return out
