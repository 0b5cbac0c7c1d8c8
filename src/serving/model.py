"""The KServe custom model: load the highest SavedModel version and run its signature.

Request handling for ``POST /v1/models/<name>:predict``:

1. KServe's data plane parses the JSON body (``orjson``; a parse error is KServe's own
   ``InvalidInput`` -> 400). A body sent with a non-JSON ``Content-Type`` reaches
   :meth:`FashionMnistModel.preprocess` as raw bytes and is rejected with 415, unless the media
   type is JSON with parameters (``application/json; charset=utf-8``), which is parsed here.
2. :func:`serving.request.parse_request` validates the body (TF Serving's row and columnar
   formats) before any TensorFlow work.
3. :class:`serving.batcher.MicroBatcher` groups the images of concurrent requests into one call
   of the SavedModel's ``serving_default`` signature, the same function TF Serving runs in the
   cluster. A TensorFlow decode error is a 400 naming the image and its kind.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from kserve import Model
from kserve.errors import InvalidInput

from fmnist_common import INPUT_NAME, MODEL_NAME, NUM_CLASSES, OUTPUT_NAME, SIGNATURE_KEY
from serving.batcher import MicroBatcher
from serving.request import Limits, PredictRequest, decode_json_body, parse_request
from serving.versions import find_latest_version

log = logging.getLogger(__name__)

_ASSERTION = re.compile(r"assertion failed: \[(.*?)\]")
_TF_NOISE = re.compile(r"^(Graph execution error|Detected at node|\s*\[\[|\s*$|<stack traces)")


class ImageDecodeError(InvalidInput):  # noqa: N818  (KServe's naming)
    """TensorFlow could not decode an image that passed the Pillow checks (HTTP 400).

    Attributes:
        index: position of the first image that failed in the call's batch.
        tf_reason: TensorFlow's one-line reason.
    """

    def __init__(self, message: str, index: int = 0, tf_reason: str = ""):
        super().__init__(message)  # KServe keeps the message in ``reason``
        self.index = index
        self.tf_reason = tf_reason or message


def tf_error_reason(exc: Exception) -> str:
    """The informative line of a TensorFlow error raised by the signature (no graph noise)."""
    text = getattr(exc, "message", None) or str(exc)
    found = _ASSERTION.search(text)
    if found:
        return found.group(1)
    lines = [ln.strip() for ln in text.splitlines() if not _TF_NOISE.match(ln)]
    return (lines[0] if lines else text.strip())[:300]


def configure_tf_threads(intra_op: int = 0, inter_op: int = 0) -> None:
    """Set TensorFlow's thread pools (0 = TensorFlow's default); call before any TF op runs."""
    import tensorflow as tf

    try:
        if intra_op:
            tf.config.threading.set_intra_op_parallelism_threads(intra_op)
        if inter_op:
            tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError as exc:  # the runtime is already initialised (e.g. in tests)
        log.warning("TensorFlow thread settings not applied: %s", exc)


def tiny_png() -> bytes:
    """A black 28x28 grey PNG (used to warm the model up)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (28, 28)).save(buf, format="PNG")
    return buf.getvalue()


class FashionMnistModel(Model):
    """KServe custom model serving the highest SavedModel version under ``model_base_path``.

    Answers as TF Serving does: ``{"instances": [...]}`` -> ``{"predictions": [[10 floats]]}``
    and ``{"inputs": [...]}`` -> ``{"outputs": [[10 floats]]}``, the probabilities of
    :data:`fmnist_common.CLASS_NAMES` in order.

    Args:
        name: model name in the URL (``/v1/models/<name>:predict``).
        model_base_path: directory holding ``<integer version>/saved_model.pb``.
        limits: request limits (:class:`serving.request.Limits`).
        max_batch_size: most images per signature call (micro-batching).
        max_batch_latency_ms: extra wait to fill a batch (0 = none, batch what is queued).
    """

    def __init__(
        self,
        name: str = MODEL_NAME,
        model_base_path: str | Path = "",
        limits: Limits | None = None,
        max_batch_size: int = 32,
        max_batch_latency_ms: float = 0.0,
    ):
        super().__init__(name)
        self.model_base_path = Path(model_base_path)
        self.limits = limits or Limits()
        self.version: int | None = None
        self.version_path: Path | None = None
        self._saved_model = None
        self._signature = None
        self.batcher = MicroBatcher(self.infer_batch, max_batch_size, max_batch_latency_ms)

    def load(self) -> bool:
        """Load the highest version and warm it up with one image; sets ``self.ready``.

        Raises:
            serving.versions.ModelVersionNotFoundError: no version under ``model_base_path``.
            KeyError: the SavedModel has no ``serving_default`` signature.
        """
        import tensorflow as tf

        self.version, self.version_path = find_latest_version(self.model_base_path)
        log.info("loading %s version %d from %s", self.name, self.version, self.version_path)
        self._saved_model = tf.saved_model.load(str(self.version_path))
        signatures = self._saved_model.signatures
        if SIGNATURE_KEY not in signatures:
            raise KeyError(
                f"{self.version_path} has no {SIGNATURE_KEY!r} signature (has {list(signatures)})"
            )
        self._signature = signatures[SIGNATURE_KEY]
        warm = self.infer_batch([tiny_png()])
        if warm.shape != (1, NUM_CLASSES):
            raise ValueError(f"{self.version_path}: output shape {warm.shape}, expected (1, 10)")
        self.ready = True
        return self.ready

    def _run(self, images: Sequence[bytes]) -> np.ndarray:
        import tensorflow as tf

        out = self._signature(**{INPUT_NAME: tf.constant(list(images), dtype=tf.string)})
        return out[OUTPUT_NAME].numpy()

    def infer_batch(self, images: Sequence[bytes]) -> np.ndarray:
        """Run ``serving_default`` on encoded images (blocking; called on the batcher thread).

        Args:
            images: N encoded JPEG/PNG images.

        Returns:
            ``float32 [N, 10]`` probabilities.

        Raises:
            ImageDecodeError: TensorFlow could not decode an image; ``index`` is the first
                such image (found by decoding them one by one, on this error path only).
        """
        import tensorflow as tf

        decode_errors = (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError)
        try:
            return self._run(images)
        except decode_errors as exc:
            index, reason = 0, tf_error_reason(exc)
            if len(images) > 1:
                for i, image in enumerate(images):
                    try:
                        self._run([image])
                    except decode_errors as one:
                        index, reason = i, tf_error_reason(one)
                        break
            raise ImageDecodeError(
                f"could not decode image {index}: {reason}", index, reason
            ) from exc

    async def preprocess(
        self, payload: Any, headers: dict[str, str] | None = None
    ) -> PredictRequest:
        """Validate the request (see :func:`serving.request.parse_request`)."""
        return parse_request(decode_json_body(payload, headers), self.limits)

    async def predict(self, payload: PredictRequest, headers: dict[str, str] | None = None) -> dict:
        """Micro-batched inference, answered in the request's format (see the class doc).

        Raises:
            ImageDecodeError: an image TensorFlow could not decode, named by its JSON path
                and kind.
        """
        if not payload.images:  # {"inputs": []}: the signature's answer to 0 images
            return payload.response([])
        try:
            probs = await self.batcher.submit(payload.images)
        except ImageDecodeError as exc:
            i = exc.index
            raise ImageDecodeError(
                f"{payload.where[i]}: could not decode this {payload.kinds[i]}: {exc.tf_reason}",
                i,
                exc.tf_reason,
            ) from exc
        return payload.response(probs.tolist())

    def stop(self) -> None:
        """Release the inference thread (KServe calls this when unloading)."""
        self.batcher.close()
        super().stop()
