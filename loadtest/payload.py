"""Real Fashion-MNIST test images for request bodies, and the response check shared by the
Locust users, ``make_payload`` and the tests (bodies: :func:`fmnist_common.predict_body`)."""

from __future__ import annotations

import math

from fmnist_common import NUM_CLASSES

DEFAULT_IMAGE_COUNT = 300


def load_encoded_test_images(
    count: int = DEFAULT_IMAGE_COUNT, image_format: str = "jpeg", data_dir: str | None = None
) -> tuple[list[bytes], list[int]]:
    """The first ``count`` test-split images encoded like a client would send them.

    Returns:
        ``(encoded images, labels)``; ``len == count``.

    Raises:
        FileNotFoundError: the dataset is not prepared under ``data_dir``/``$TFDS_DATA_DIR``.
    """
    from training.data import encode_images, load_numpy

    images, labels = load_numpy("test", data_dir=data_dir, limit=count)
    return encode_images(images, image_format), [int(x) for x in labels]


def check_predict_response(status: int, payload, n_instances: int, tol: float = 1e-3) -> str | None:
    """Judge one predict response; ``None`` if good, else why it is a failure.

    A response is good when the status is 200 and ``payload`` (parsed JSON) is
    ``{"predictions": [[NUM_CLASSES numbers] x n_instances]}`` with every row summing to 1
    within ``tol``.
    An ``{"error": ...}`` body is a failure whatever the status.
    """
    if isinstance(payload, dict) and "error" in payload:
        return f"error body (HTTP {status}): {str(payload['error'])[:200]}"
    if status != 200:
        return f"HTTP {status}"
    preds = payload.get("predictions") if isinstance(payload, dict) else None
    if not isinstance(preds, list) or len(preds) != n_instances:
        return f"expected {n_instances} predictions, got {str(payload)[:200]}"
    for row in preds:
        if not isinstance(row, list) or len(row) != NUM_CLASSES:
            return f"prediction row of shape other than [{NUM_CLASSES}]: {str(row)[:100]}"
        try:
            total = math.fsum(row)
        except TypeError:
            return f"non-numeric prediction row {str(row)[:100]}"
        if not abs(total - 1.0) <= tol:
            return f"probabilities sum to {total:.6f}, not 1"
    return None
