"""The KServe custom model: version discovery, request validation, micro-batching, inference.

Request handling for ``POST /v1/models/<name>:predict``:

1. KServe's data plane parses the JSON body (``orjson``; a parse error is KServe's own
   ``InvalidInput`` -> 400). A body sent with a non-JSON ``Content-Type`` reaches
   :meth:`FashionMnistModel.preprocess` as raw bytes and is rejected with 415, unless the media
   type is JSON with parameters (``application/json; charset=utf-8``), which is parsed here.
2. :func:`parse_instances` validates the V1 body cheaply, before any TensorFlow work: shape of
   the JSON, number of instances, strict standard base64, byte size, and the image header and
   pixel data with Pillow (format JPEG/PNG, pixel count, truncation). Every failure raises a
   subclass of ``kserve.errors.InvalidInput`` whose message says what is wrong (400, or 413 /
   415 through the handlers that :mod:`serving.server` installs).
3. :class:`MicroBatcher` groups the images of concurrent requests into one call of the
   SavedModel's ``serving_default`` signature, run on one dedicated thread off the event loop.
   A TensorFlow decode error is mapped to 400; when a batch holding several requests fails,
   every request is retried alone so that one bad image cannot fail its neighbours.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import concurrent.futures
import io
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kserve import Model
from kserve.errors import InvalidInput

from serving import DEFAULT_MODEL_NAME
from training.export import INPUT_NAME, OUTPUT_NAME, SIGNATURE_KEY  # constants only

log = logging.getLogger(__name__)

NUM_CLASSES = 10
ALLOWED_FORMATS = ("JPEG", "PNG")
JSON_MEDIA_TYPES = ("application/json", "application/cloudevents+json", "application/ld+json")
_VERSION_RE = re.compile(r"[0-9]+")


class ModelVersionNotFoundError(FileNotFoundError):
    """The model base path holds no ``<integer>/saved_model.pb`` version directory."""


class PayloadTooLarge(InvalidInput):  # noqa: N818  (KServe's naming: InvalidInput, ModelNotFound)
    """Too many instances, or an image too large in bytes or pixels (HTTP 413)."""


class UnsupportedMediaType(InvalidInput):  # noqa: N818
    """The request body is not JSON according to its ``Content-Type`` (HTTP 415)."""


class ImageDecodeError(InvalidInput):  # noqa: N818
    """TensorFlow could not decode an image that passed the Pillow checks (HTTP 400)."""


@dataclass(frozen=True)
class Limits:
    """Per-request limits, checked before any TensorFlow work.

    Attributes:
        max_instances: most instances (images) in one request.
        max_image_bytes: most bytes of one encoded image (after base64 decoding).
        max_image_pixels: most pixels (width x height) of one image.
    """

    max_instances: int = 64
    max_image_bytes: int = 1 << 20
    max_image_pixels: int = 1 << 20


def find_latest_version(base_path: str | Path) -> tuple[int, Path]:
    """The highest integer version directory under ``base_path`` (TF Serving's layout).

    Only directories named by digits only and holding ``saved_model.pb`` count; anything else
    (dot-prefixed staging dirs such as ``.staging-3-abcd``, ``tmp``, files) is ignored.

    Args:
        base_path: e.g. ``work/models/fashion-mnist`` holding ``1/``, ``2/``, ...

    Returns:
        ``(version, path)`` of the highest version.

    Raises:
        ModelVersionNotFoundError: ``base_path`` is missing or holds no valid version.
    """
    base = Path(base_path)
    if not base.is_dir():
        raise ModelVersionNotFoundError(f"model base path {str(base)!r} is not a directory")
    versions = []
    for entry in base.iterdir():
        if not _VERSION_RE.fullmatch(entry.name) or not entry.is_dir():
            continue
        if not (entry / "saved_model.pb").is_file():
            log.warning("ignoring %s: no saved_model.pb", entry)
            continue
        versions.append((int(entry.name), entry))
    if not versions:
        raise ModelVersionNotFoundError(
            f"no version directory <integer>/saved_model.pb under {str(base)!r}; "
            "publish a model first (make demo / training.select)"
        )
    return max(versions)


def media_type(content_type: str | None) -> str:
    """The lower-case media type of a ``Content-Type`` value, without parameters ('' if None)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def decode_json_body(body: Any, headers: dict[str, str] | None) -> Any:
    """Turn what KServe's data plane hands to ``preprocess`` into parsed JSON.

    KServe parses the body itself when there is no ``Content-Type`` or it is exactly one of its
    JSON types; otherwise it passes the raw bytes on.

    Raises:
        UnsupportedMediaType: raw bytes whose media type is not JSON.
        InvalidInput: JSON media type with parameters, but the body is not valid JSON.
    """
    if not isinstance(body, bytes | bytearray):
        return body
    ctype = (headers or {}).get("content-type")
    if media_type(ctype) not in JSON_MEDIA_TYPES:
        raise UnsupportedMediaType(
            f"unsupported Content-Type {ctype!r}: send application/json "
            '({"instances": [{"b64": "..."}]})'
        )
    import orjson

    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from exc


def _max_b64_len(max_bytes: int) -> int:
    return 4 * ((max_bytes + 2) // 3)


def decode_b64(value: str, index: int, limits: Limits) -> bytes:
    """Strictly decode one standard-base64 string (RFC 4648 section 4, with padding).

    Raises:
        PayloadTooLarge: the decoded size would exceed ``limits.max_image_bytes``.
        InvalidInput: empty string, characters outside the standard alphabet (including the
            URL-safe ``-``/``_`` and whitespace), or bad padding.
    """
    where = f"instances[{index}].b64"
    if not value:
        raise InvalidInput(f"{where} is empty")
    if len(value) > _max_b64_len(limits.max_image_bytes):
        raise PayloadTooLarge(
            f"{where}: image larger than {limits.max_image_bytes} bytes (--max_image_bytes)"
        )
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        if "-" in value or "_" in value:
            raise InvalidInput(
                f"{where} is URL-safe base64 ('-'/'_'); use standard base64 ('+'/'/', with "
                "padding) as TensorFlow Serving does"
            ) from exc
        raise InvalidInput(f"{where} is not valid standard base64: {exc}") from exc
    if not data:
        raise InvalidInput(f"{where} decodes to no bytes")
    if len(data) > limits.max_image_bytes:
        raise PayloadTooLarge(
            f"{where}: image of {len(data)} bytes exceeds {limits.max_image_bytes} bytes "
            "(--max_image_bytes)"
        )
    return data


def check_image(data: bytes, index: int, limits: Limits) -> tuple[str, int, int]:
    """Check one encoded image with Pillow: format, pixel count, and that it decodes fully.

    JPEGs are decoded in Pillow's draft mode (DCT scaling to about 28x28), so the full check of
    a large JPEG costs little more than reading it; PNGs are decompressed (bounded by
    ``limits.max_image_pixels``).

    Returns:
        ``(format, width, height)``, e.g. ``("JPEG", 28, 28)``.

    Raises:
        InvalidInput: not a JPEG/PNG, zero-sized, truncated or corrupt.
        PayloadTooLarge: more than ``limits.max_image_pixels`` pixels.
    """
    from PIL import Image, UnidentifiedImageError

    where = f"instances[{index}]"
    try:
        img = Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)
    except UnidentifiedImageError as exc:
        raise InvalidInput(f"{where} is not a JPEG or PNG image") from exc
    except Image.DecompressionBombError as exc:
        raise PayloadTooLarge(f"{where}: {exc}") from exc
    except Exception as exc:  # Pillow raises assorted errors on corrupt headers
        raise InvalidInput(f"{where} has a corrupt image header: {exc}") from exc
    width, height = img.size
    if width <= 0 or height <= 0:
        raise InvalidInput(f"{where} has an empty size {width}x{height}")
    if width * height > limits.max_image_pixels:
        raise PayloadTooLarge(
            f"{where}: {width}x{height} = {width * height} pixels exceeds "
            f"{limits.max_image_pixels} (--max_image_pixels)"
        )
    try:
        if img.format == "JPEG":
            img.draft("L", (28, 28))
        img.load()
    except Exception as exc:  # OSError "image file is truncated", SyntaxError, zlib errors
        raise InvalidInput(f"{where} is a corrupt or truncated {img.format}: {exc}") from exc
    return img.format, width, height


def parse_instances(payload: Any, limits: Limits) -> list[bytes]:
    """Validate a V1 predict body and return the encoded images.

    Accepted shape (TF Serving row format)::

        {"instances": [{"b64": "<standard base64>"}, ...]}
        {"instances": [{"image_bytes": {"b64": "..."}}, ...]}   (named input, same meaning)

    plus an optional ``"signature_name": "serving_default"``.

    Args:
        payload: the parsed JSON body.
        limits: request limits.

    Returns:
        One ``bytes`` (JPEG or PNG, checked by :func:`check_image`) per instance, in order.

    Raises:
        InvalidInput: anything else, with a message naming the offending field.
        PayloadTooLarge: too many instances or an image over the byte/pixel limits.
    """
    if not isinstance(payload, dict):
        raise InvalidInput(
            f'request body must be a JSON object {{"instances": [...]}}, '
            f"got {type(payload).__name__}"
        )
    unknown = sorted(set(payload) - {"instances", "signature_name"})
    if unknown:
        raise InvalidInput(f"unexpected key(s) {unknown}; expected 'instances'")
    signature = payload.get("signature_name", SIGNATURE_KEY)
    if signature != SIGNATURE_KEY:
        raise InvalidInput(f"unknown signature_name {signature!r}; only {SIGNATURE_KEY!r}")
    if "instances" not in payload:
        raise InvalidInput("missing 'instances' (a list of {\"b64\": ...} objects)")
    instances = payload["instances"]
    if not isinstance(instances, list):
        raise InvalidInput(f"'instances' must be a list, got {type(instances).__name__}")
    if not instances:
        raise InvalidInput("'instances' is empty")
    if len(instances) > limits.max_instances:
        raise PayloadTooLarge(
            f"{len(instances)} instances exceed the limit of {limits.max_instances} per request "
            "(--max_instances)"
        )
    images = []
    for i, inst in enumerate(instances):
        if isinstance(inst, dict) and set(inst) == {INPUT_NAME}:
            inst = inst[INPUT_NAME]
        if not (isinstance(inst, dict) and set(inst) == {"b64"}):
            raise InvalidInput(
                f'instances[{i}] must be {{"b64": "<base64 JPEG/PNG>"}}, got {_describe(inst)}'
            )
        value = inst["b64"]
        if not isinstance(value, str):
            raise InvalidInput(f"instances[{i}].b64 must be a string, got {type(value).__name__}")
        data = decode_b64(value, i, limits)
        check_image(data, i, limits)
        images.append(data)
    return images


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"an object with keys {sorted(map(str, value))[:5]}"
    return type(value).__name__


@dataclass
class _Pending:
    images: list[bytes]
    future: asyncio.Future


class MicroBatcher:
    """Group the images of concurrent requests into one model call.

    One worker task per event loop takes every request queued while the previous call ran (up to
    ``max_batch_size`` images), optionally waits ``max_latency_ms`` for more, and runs
    ``infer_fn`` on a single dedicated thread (TensorFlow releases the GIL, so the event loop
    keeps accepting requests meanwhile). At low load a request runs alone without waiting; under
    load batches grow by themselves.

    Args:
        infer_fn: ``list[bytes] (N) -> float32 ndarray [N, 10]``; raises ``InvalidInput`` for
            bad images.
        max_batch_size: most images per call (a single larger request still runs, alone).
        max_latency_ms: extra time to wait for more requests before a call (0: none).
    """

    def __init__(
        self,
        infer_fn: Callable[[list[bytes]], np.ndarray],
        max_batch_size: int = 32,
        max_latency_ms: float = 0.0,
    ):
        self.infer_fn = infer_fn
        self.max_batch_size = max(1, int(max_batch_size))
        self.max_latency_s = max(0.0, float(max_latency_ms)) / 1000.0
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="infer")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: collections.deque[_Pending] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self.batch_sizes: collections.Counter[int] = collections.Counter()

    async def submit(self, images: list[bytes]) -> np.ndarray:
        """Queue one request's images; returns their ``float32 [len(images), 10]`` output.

        Raises:
            InvalidInput: one of the images could not be decoded.
        """
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._worker is None or self._worker.done():
            # First call, or a new event loop (e.g. a test client per request).
            self._loop = loop
            self._pending = collections.deque()
            self._wakeup = asyncio.Event()
            self._worker = loop.create_task(self._run_forever(), name="micro-batcher")
        fut = loop.create_future()
        self._pending.append(_Pending(images, fut))
        self._wakeup.set()
        return await fut

    async def _run_forever(self) -> None:
        while True:
            while not self._pending:
                self._wakeup.clear()
                await self._wakeup.wait()
            if self.max_latency_s and self._queued() < self.max_batch_size:
                await asyncio.sleep(self.max_latency_s)
            batch: list[_Pending] = []
            size = 0
            while self._pending and (
                not batch or size + len(self._pending[0].images) <= self.max_batch_size
            ):
                item = self._pending.popleft()
                if item.future.done():  # client went away
                    continue
                batch.append(item)
                size += len(item.images)
            if batch:
                await self._run_batch(batch)

    def _queued(self) -> int:
        return sum(len(p.images) for p in self._pending)

    async def _call(self, images: list[bytes]) -> np.ndarray:
        return await self._loop.run_in_executor(self._executor, self.infer_fn, images)

    async def _run_batch(self, batch: list[_Pending]) -> None:
        images = [img for p in batch for img in p.images]
        self.batch_sizes[len(images)] += 1
        try:
            probs = await self._call(images)
        except InvalidInput as exc:
            if len(batch) == 1:
                _set(batch[0].future, exc=exc)
                return
            for p in batch:  # isolate the request(s) holding the bad image
                try:
                    _set(p.future, result=await self._call(p.images))
                except Exception as one_exc:  # noqa: BLE001  (handed to the request)
                    _set(p.future, exc=one_exc)
            return
        except Exception as exc:  # noqa: BLE001  (handed to every request of the batch)
            for p in batch:
                _set(p.future, exc=exc)
            return
        start = 0
        for p in batch:
            _set(p.future, result=probs[start : start + len(p.images)])
            start += len(p.images)

    def close(self) -> None:
        """Stop the worker task (if its loop still runs) and the inference thread."""
        if self._worker is not None and not self._worker.done() and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._worker.cancel)
        self._executor.shutdown(wait=False, cancel_futures=True)


def _set(fut: asyncio.Future, result: Any = None, exc: BaseException | None = None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


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

    V1 protocol: ``{"instances": [{"b64": ...}]}`` -> ``{"predictions": [[10 floats]]}``, the
    probabilities of :data:`training.data.CLASS_NAMES` in order.

    Args:
        name: model name in the URL (``/v1/models/<name>:predict``).
        model_base_path: directory holding ``<integer version>/saved_model.pb``.
        limits: request limits (:class:`Limits`).
        max_batch_size: most images per signature call (micro-batching).
        max_batch_latency_ms: extra wait to fill a batch (0 = none, batch what is queued).
    """

    def __init__(
        self,
        name: str = DEFAULT_MODEL_NAME,
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
            ModelVersionNotFoundError: no version under ``model_base_path``.
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

    def infer_batch(self, images: Sequence[bytes]) -> np.ndarray:
        """Run ``serving_default`` on encoded images (blocking; called on the batcher thread).

        Args:
            images: N encoded JPEG/PNG images.

        Returns:
            ``float32 [N, 10]`` probabilities.

        Raises:
            ImageDecodeError: TensorFlow could not decode one of the images.
        """
        import tensorflow as tf

        try:
            out = self._signature(**{INPUT_NAME: tf.constant(list(images), dtype=tf.string)})
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as exc:
            msg = getattr(exc, "message", str(exc)).strip().splitlines()[0][:300]
            raise ImageDecodeError(f"could not decode image: {msg}") from exc
        return out[OUTPUT_NAME].numpy()

    async def preprocess(self, payload: Any, headers: dict[str, str] | None = None) -> list[bytes]:
        """Validate the request (see :func:`parse_instances`); returns the encoded images."""
        return parse_instances(decode_json_body(payload, headers), self.limits)

    async def predict(self, payload: list[bytes], headers: dict[str, str] | None = None) -> dict:
        """Micro-batched inference: ``{"predictions": [[10 floats] per instance]}``."""
        probs = await self.batcher.submit(payload)
        return {"predictions": probs.tolist()}

    def stop(self) -> None:
        """Release the inference thread (KServe calls this when unloading)."""
        self.batcher.close()
        super().stop()
