"""Helpers shared by the serving tests (a uniquely named module, importable from any test)."""

from __future__ import annotations

import base64
import io

import numpy as np


def signature_output(model_base_version_dir, images: list[bytes]) -> np.ndarray:
    """``serving_default`` called in-process (the reference for the server's answers)."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(model_base_version_dir))
    out = loaded.signatures["serving_default"](image_bytes=tf.constant(images))
    return out["probabilities"].numpy()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode(array: np.ndarray, fmt: str, **kw) -> bytes:
    """Encode one uint8 image (H, W) or (H, W, 3) with Pillow."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format=fmt, **kw)
    return buf.getvalue()


def body(images: list[bytes]) -> dict:
    return {"instances": [{"b64": b64(img)} for img in images]}
