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
import json
import mmap
import os
import struct
from pathlib import Path

import numpy as np

DATASET_NAME = "fashion_mnist"
DATASET_VERSION = "3.0.1"
SPLIT_SIZES = {"train": 60_000, "test": 10_000}
TFDS_DEFAULT_DIR = "~/tensorflow_datasets"
WHERE_TO_GET_IT = "set TFDS_DATA_DIR to a prepared copy (make: MIRROR_DIR=../shared)"
# TFRecord framing: uint64 length, uint32 CRC of the length, data, uint32 CRC of the data.
_RECORD_OVERHEAD = 16


class DatasetError(FileNotFoundError):
    """The dataset is not prepared, or a prepared file is missing, truncated or inconsistent
    (a ``FileNotFoundError``: the usable file is not there)."""


def resolve_data_dir(data_dir: str | os.PathLike | None) -> str | None:
    """The tfds data dir to use: ``data_dir``, else ``$TFDS_DATA_DIR``, else tfds' default."""
    if data_dir:
        return os.fspath(data_dir)
    return os.environ.get("TFDS_DATA_DIR") or None


def dataset_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """``<data dir>/fashion_mnist/3.0.1`` (data dir as :func:`resolve_data_dir`, else tfds'
    default ``~/tensorflow_datasets``)."""
    root = resolve_data_dir(data_dir) or os.path.expanduser(TFDS_DEFAULT_DIR)
    return Path(root) / DATASET_NAME / DATASET_VERSION


def _count_records(path: Path) -> tuple[int, int]:
    """Walk a TFRecord file's framing: ``(complete records, data bytes)``.

    Raises:
        DatasetError: the last record is cut off (truncated file).
    """
    size = path.stat().st_size
    if size == 0:
        return 0, 0
    records = data_bytes = pos = 0
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        while pos < size:
            if pos + 8 > size:
                break
            (length,) = struct.unpack_from("<Q", buf, pos)
            end = pos + _RECORD_OVERHEAD + length
            if end > size:
                break
            records, data_bytes, pos = records + 1, data_bytes + length, end
    if pos != size:
        raise DatasetError(
            f"{path} is truncated: it ends inside record {records + 1} "
            f"({records} complete records, {size} bytes)"
        )
    return records, data_bytes


def verify_prepared(data_dir: str | os.PathLike | None = None) -> dict[str, int]:
    """Check the prepared dataset against its own ``dataset_info.json``, without TensorFlow.

    For every split of :data:`SPLIT_SIZES`: the record count of each shard file equals
    ``shardLengths`` (walking the TFRecord framing of every record), the data bytes add up to
    ``numBytes``, and the total is the expected split size. About 0.1 s for the 70,000 records
    (38 MB), so every start can afford it. Record contents (CRCs) are checked by TensorFlow as
    it reads them.

    Args:
        data_dir: tfds data dir (see :func:`dataset_dir`).

    Returns:
        split name -> number of examples, e.g. ``{"train": 60000, "test": 10000}``.

    Raises:
        DatasetError: not prepared (no ``dataset_info.json``), or a shard is missing,
            truncated or disagrees with ``dataset_info.json``; the message names the file and
            what to do.
    """
    root = dataset_dir(data_dir)
    info_path = root / "dataset_info.json"
    if not info_path.is_file():
        raise DatasetError(
            f"{DATASET_NAME} {DATASET_VERSION} is not prepared in {root.parents[1]}: "
            f"{WHERE_TO_GET_IT}, or run `python -m training.ingest` online"
        )
    redo = f"delete {root} and run `python -m training.ingest` again (offline: {WHERE_TO_GET_IT})"
    try:
        info = json.loads(info_path.read_text())
        splits = {s["name"]: s for s in info["splits"]}
        file_format = info.get("fileFormat", "tfrecord")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"{info_path} is unreadable ({exc}): {redo}") from exc
    sizes = {}
    for split, expected in SPLIT_SIZES.items():
        if split not in splits:
            raise DatasetError(f"{info_path} has no {split!r} split: {redo}")
        lengths = [int(n) for n in splits[split].get("shardLengths", [])]
        total_bytes = 0
        for i, want in enumerate(lengths):
            shard = root / f"{DATASET_NAME}-{split}.{file_format}-{i:05d}-of-{len(lengths):05d}"
            if not shard.is_file():
                raise DatasetError(f"{shard} is missing: {redo}")
            try:
                records, data_bytes = _count_records(shard)
            except DatasetError as exc:
                raise DatasetError(f"{exc}: {redo}") from exc
            if records != want:
                raise DatasetError(
                    f"{shard} holds {records} records, dataset_info.json says {want}: {redo}"
                )
            total_bytes += data_bytes
        if total_bytes != int(splits[split].get("numBytes", total_bytes)):
            raise DatasetError(
                f"{split!r} shards hold {total_bytes} bytes of records, dataset_info.json says "
                f"{splits[split]['numBytes']}: {redo}"
            )
        sizes[split] = sum(lengths)
        if sizes[split] != expected:
            raise DatasetError(
                f"{DATASET_NAME} split {split!r} has {sizes[split]} examples, expected "
                f"{expected}: {redo}"
            )
    return sizes


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
        DatasetError: the dataset is not prepared in ``data_dir``, or a file is missing or
            truncated (see :func:`verify_prepared`, run first).
    """
    import tensorflow_datasets as tfds

    verify_prepared(data_dir)
    tfds_split = f"{split}[:{int(limit)}]" if limit else split
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
