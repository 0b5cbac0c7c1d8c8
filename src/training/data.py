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
import os
import struct
from pathlib import Path

import google_crc32c
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


def masked_crc32c(data) -> int:
    """TFRecord's checksum of ``data`` (bytes-like): CRC-32C (Castagnoli), rotated right by 15
    bits plus ``0xa282ead8`` (``tensorflow/core/lib/hash/crc32c.h``: ``Mask``), as a uint32."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _count_records(path: Path) -> tuple[int, int]:
    """Walk a TFRecord file and check every record: ``(complete records, data bytes)``.

    Each record is ``uint64 length, uint32 masked CRC-32C of the length, data, uint32 masked
    CRC-32C of the data`` (little-endian, TensorFlow's ``record_writer.cc``); both checksums are
    verified, so a byte altered anywhere in a record is found here rather than inside a
    training run (about 0.1 s for the 38 MB of Fashion-MNIST, bench in docs/training.md).

    Raises:
        DatasetError: the last record is cut off (truncated file), or a checksum does not match
            (the message names the file, the record and its byte offset).
    """
    buf = path.read_bytes()  # Fashion-MNIST's shards: 5.6 MB (test) and 34 MB (train)
    size, records, data_bytes, pos = len(buf), 0, 0, 0
    while pos + 12 <= size:
        length, length_crc = struct.unpack_from("<QI", buf, pos)
        end = pos + _RECORD_OVERHEAD + length
        if length_crc != masked_crc32c(buf[pos : pos + 8]):
            what = "length"
        elif end > size:
            break
        elif struct.unpack_from("<I", buf, end - 4)[0] != masked_crc32c(buf[pos + 12 : end - 4]):
            what = "data"
        else:
            records, data_bytes, pos = records + 1, data_bytes + length, end
            continue
        raise DatasetError(
            f"{path} is corrupt: record {records + 1} (at byte {pos}) fails its {what} "
            "checksum (CRC-32C)"
        )
    if pos != size:
        raise DatasetError(
            f"{path} is truncated: it ends inside record {records + 1} "
            f"({records} complete records, {size} bytes)"
        )
    return records, data_bytes


def verify_prepared(data_dir: str | os.PathLike | None = None) -> dict[str, int]:
    """Check the prepared dataset against its own ``dataset_info.json``, without TensorFlow.

    For every split of :data:`SPLIT_SIZES`: every record of every shard file passes its two
    CRC-32C checksums (length and data), the record count of each shard equals
    ``shardLengths``, the data bytes add up to ``numBytes``, and the total is the expected split
    size. One pass over the 70,000 records (38 MB), fast enough for every start (measured in
    docs/training.md).

    Args:
        data_dir: tfds data dir (see :func:`dataset_dir`).

    Returns:
        split name -> number of examples, e.g. ``{"train": 60000, "test": 10000}``.

    Raises:
        DatasetError: not prepared (no ``dataset_info.json``), or a shard is missing,
            truncated, corrupt (a checksum fails) or disagrees with ``dataset_info.json``; the
            one-line message names the file and what to do.
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
        try:
            lengths = [int(n) for n in splits[split].get("shardLengths") or []]
            int(splits[split].get("numBytes", 0))
        except (ValueError, TypeError) as exc:
            raise DatasetError(
                f"{info_path} has bad {split!r} shard sizes ({exc}): {redo}"
            ) from exc
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
