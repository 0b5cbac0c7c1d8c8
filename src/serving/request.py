"""Request validation for ``POST /v1/models/<name>:predict``: TF Serving's REST formats.

The cluster serves the SavedModel with TensorFlow Serving (KServe's TensorFlow runtime); this
module accepts what TF Serving's REST API (``tensorflow_serving/util/json_tensor.cc``) accepts
for the one-input signature ``serving_default(image_bytes: tf.string [None])`` and answers in the
same shape, so one client works against both:

* row format: ``{"instances": [{"b64": ...}, ...]}`` or, naming the input,
  ``{"instances": [{"image_bytes": {"b64": ...}}, ...]}`` -> ``{"predictions": [[10 floats]]}``;
* columnar format: ``{"inputs": [{"b64": ...}, ...]}`` or ``{"inputs": {"image_bytes": [...]}}``
  -> ``{"outputs": [[10 floats]]}``; an empty list is a batch of 0 images -> ``{"outputs": []}``
  (TF Serving rejects only an empty ``instances``);
* optional ``"signature_name": "serving_default"``; other top-level keys are ignored, as TF
  Serving ignores them; ``instances`` and ``inputs`` together are an error;
* base64 decoded as TF Serving's ``absl::Base64Unescape``: standard alphabet, ASCII whitespace
  anywhere is skipped (MIME line wrapping, a trailing newline), padding (``=``, or absl's ``.``)
  is optional but, when present, must be complete.

Everything is checked before any TensorFlow work (request shape, instance count, base64, byte
size, and the image header and pixel data with Pillow), and each failure raises a subclass of
``kserve.errors.InvalidInput`` whose message names the field and says what is wrong: 400, or
413 (:class:`PayloadTooLarge`) / 415 (:class:`UnsupportedMediaType`) through the handlers that
:mod:`serving.server` installs. The limits (:class:`Limits`) are this server's own; TF Serving
has none per image.
"""

from __future__ import annotations

import binascii
import io
import re
from dataclasses import dataclass
from typing import Any

from kserve.errors import InvalidInput

from fmnist_common import INPUT_NAME, SIGNATURE_KEY

ALLOWED_FORMATS = ("JPEG", "PNG")
JSON_MEDIA_TYPES = ("application/json", "application/cloudevents+json", "application/ld+json")

# absl::Base64Unescape: data characters, then optional padding ('=' or '.'); ASCII whitespace
# (absl::ascii_isspace: space \t \n \v \f \r) is skipped anywhere.
_B64_WHITESPACE = str.maketrans("", "", " \t\n\v\f\r")
_B64_SHAPE = re.compile(r"([A-Za-z0-9+/]*)([=.]*)")
_B64_DATA_CHAR = re.compile(r"[A-Za-z0-9+/]")
_EXPECTED_PADDING = {0: 0, 2: 2, 3: 1}  # data characters mod 4 -> '=' TF Serving accepts

# Leading bytes of formats people send by mistake, to name them in the error.
_OTHER_FORMATS = (
    (b"GIF8", "GIF"),
    (b"BM", "BMP"),
    (b"RIFF", "WebP/RIFF"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"\x00\x00\x01\x00", "ICO"),
    (b"%PDF", "PDF"),
)
_PNG_COLOUR_TYPES = {0: "greyscale", 2: "RGB", 3: "palette", 4: "greyscale+alpha", 6: "RGBA"}
_JPEG_MODES = {"L": "greyscale", "RGB": "colour", "CMYK": "CMYK"}


class PayloadTooLarge(InvalidInput):  # noqa: N818  (KServe's naming: InvalidInput, ModelNotFound)
    """Too many instances, or an image too large in bytes or pixels (HTTP 413)."""


class UnsupportedMediaType(InvalidInput):  # noqa: N818
    """The request body is not JSON according to its ``Content-Type`` (HTTP 415)."""


@dataclass(frozen=True)
class Limits:
    """Per-request limits of this server, checked before any TensorFlow work.

    Attributes:
        max_instances: most images in one request (``--max_instances``).
        max_image_bytes: most bytes of one encoded image after base64 decoding
            (``--max_image_bytes``).
        max_image_pixels: most pixels (width x height) of one image (``--max_image_pixels``);
            checked from the image header, before decompression (decompression bombs).
    """

    max_instances: int = 64
    max_image_bytes: int = 1 << 20
    max_image_pixels: int = 1 << 20


@dataclass(frozen=True)
class PredictRequest:
    """A validated predict request.

    Attributes:
        images: encoded JPEG/PNG images, in request order.
        where: the JSON path of each image, e.g. ``instances[2]`` (for error messages).
        kinds: what each image is, e.g. ``"progressive CMYK JPEG 40x56"``.
        columnar: ``True`` for the ``inputs`` format (answered ``{"outputs": ...}``).
    """

    images: list[bytes]
    where: list[str]
    kinds: list[str]
    columnar: bool = False

    def response(self, probabilities: list) -> dict:
        """The response body for ``float [N, 10]`` probabilities, in TF Serving's shape."""
        return {"outputs" if self.columnar else "predictions": probabilities}


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


def decode_b64(value: str, where: str, limits: Limits) -> bytes:
    """Decode one base64 string as TF Serving does (``absl::Base64Unescape``).

    Standard alphabet (``A-Z a-z 0-9 + /``); ASCII whitespace anywhere is skipped; padding
    (``=``, or absl's ``.``) is optional, but if present must be exactly what the length needs.

    Args:
        value: the ``b64`` string.
        where: JSON path for messages, e.g. ``instances[0].b64``.
        limits: :attr:`Limits.max_image_bytes` bounds the decoded size.

    Returns:
        The decoded bytes (never empty).

    Raises:
        PayloadTooLarge: the decoded size would exceed ``limits.max_image_bytes``.
        InvalidInput: empty, a character outside the standard alphabet (with a hint for the
            URL-safe ``-``/``_``), a length that leaves stray bits, or wrong padding.
    """
    max_chars = _max_b64_len(limits.max_image_bytes)
    too_big = f"{where}: image larger than {limits.max_image_bytes} bytes (--max_image_bytes)"
    if len(value) > 2 * max_chars + 1024:  # bound the work before stripping whitespace
        raise PayloadTooLarge(too_big)
    compact = value.translate(_B64_WHITESPACE)
    shape = _B64_SHAPE.fullmatch(compact)
    if shape is None:
        if "-" in compact or "_" in compact:
            raise InvalidInput(
                f"{where} is URL-safe base64 ('-'/'_'); use the standard alphabet ('+'/'/'), "
                "as TensorFlow Serving does"
            )
        head = _B64_SHAPE.match(compact)
        bad = compact[head.end()]
        if head.group(2):
            raise InvalidInput(
                f"{where} is not valid base64: {bad!r} after the padding at character {head.end()}"
            )
        raise InvalidInput(
            f"{where} is not valid base64: character {bad!r} at position {head.end()} is not "
            "in the standard alphabet (A-Z a-z 0-9 + /)"
        )
    data_chars, padding = shape.groups()
    if not data_chars:
        raise InvalidInput(f"{where} is empty")
    if len(data_chars) > max_chars:
        raise PayloadTooLarge(too_big)
    expected = _EXPECTED_PADDING.get(len(data_chars) % 4)
    if expected is None:
        raise InvalidInput(
            f"{where} is not valid base64: {len(data_chars)} characters is one too many or "
            "too few (truncated?)"
        )
    if padding and len(padding) != expected:
        raise InvalidInput(
            f"{where} is not valid base64: {len(padding)} padding character(s) where "
            f"{expected} (or none) belong"
        )
    data = binascii.a2b_base64(data_chars + "=" * expected)
    if len(data) > limits.max_image_bytes:
        raise PayloadTooLarge(
            f"{where}: image of {len(data)} bytes exceeds {limits.max_image_bytes} bytes "
            "(--max_image_bytes)"
        )
    return data


def _png_kind(data: bytes) -> str:
    if len(data) < 29 or data[12:16] != b"IHDR":
        return "PNG"
    depth, colour, interlace = data[24], data[25], data[28]
    kind = f"{depth}-bit {_PNG_COLOUR_TYPES.get(colour, f'colour-type-{colour}')} PNG"
    return ("interlaced " if interlace else "") + kind


def image_kind(img, data: bytes) -> str:
    """Describe an opened Pillow image in a user's terms: ``"progressive CMYK JPEG 40x56"``,
    ``"16-bit greyscale PNG 28x28"``."""
    width, height = img.size
    if img.format == "PNG":
        kind = _png_kind(data)
    else:
        mode = _JPEG_MODES.get(img.mode, img.mode)
        if img.mode == "CMYK" and img.info.get("adobe_transform") == 2:
            mode = "YCCK"
        progressive = "progressive " if img.info.get("progressive") else ""
        kind = f"{progressive}{mode} JPEG"
    return f"{kind} {width}x{height}"


def check_image(data: bytes, where: str, limits: Limits) -> str:
    """Check one encoded image with Pillow: format, pixel count, and that it decodes fully.

    JPEGs are decoded in Pillow's draft mode (DCT scaling to about 28x28), so the full check of
    a large JPEG costs little more than reading it; PNGs are decompressed, after the pixel count
    in the header was checked against ``limits.max_image_pixels``.

    Returns:
        What the image is, see :func:`image_kind`.

    Raises:
        InvalidInput: not a JPEG/PNG (naming the format when it is a known other one), empty
            size, truncated or corrupt.
        PayloadTooLarge: more than ``limits.max_image_pixels`` pixels.
    """
    from PIL import Image, UnidentifiedImageError

    too_many = f"pixels exceeds {limits.max_image_pixels} (--max_image_pixels)"
    try:
        img = Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)
    except UnidentifiedImageError as exc:
        other = next((name for magic, name in _OTHER_FORMATS if data.startswith(magic)), None)
        what = f"a {other} image" if other else "not a JPEG or PNG image"
        raise InvalidInput(f"{where} is {what}; only JPEG and PNG are accepted") from exc
    except Image.DecompressionBombError as exc:  # header size over twice Pillow's own limit
        sizes = re.findall(r"\d+", str(exc))
        count = f"{sizes[0]} " if sizes else "more "
        raise PayloadTooLarge(f"{where}: {count}{too_many}") from exc
    except Exception as exc:  # Pillow raises assorted errors on corrupt headers
        raise InvalidInput(f"{where} has a corrupt JPEG/PNG header: {exc}") from exc
    width, height = img.size
    kind = image_kind(img, data)
    if width <= 0 or height <= 0:
        raise InvalidInput(f"{where} ({kind}) has no pixels")
    if width * height > limits.max_image_pixels:
        raise PayloadTooLarge(f"{where}: {kind} = {width * height} {too_many}")
    try:
        if img.format == "JPEG":
            img.draft("L", (28, 28))
        img.load()
    except Exception as exc:  # OSError "image file is truncated", SyntaxError, zlib errors
        raise InvalidInput(f"{where} is a corrupt or truncated {kind}: {exc}") from exc
    return kind


def _is_b64_object(value: Any) -> bool:
    """TF Serving's ``IsValBase64Object``: an object whose only key is ``b64``, a string."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"an object with keys {sorted(map(str, value))[:5]}"
    if isinstance(value, str):
        return 'a plain string (raw bytes for TF Serving, not base64; wrap it in {"b64": ...})'
    return type(value).__name__


def _image(value: Any, where: str, limits: Limits) -> tuple[bytes, str]:
    if not _is_b64_object(value):
        if isinstance(value, dict) and "b64" in value:
            if len(value) > 1:
                raise InvalidInput(f'{where} must hold only "b64", got {_describe(value)}')
            raise InvalidInput(f"{where}.b64 must be a string, got {type(value['b64']).__name__}")
        raise InvalidInput(
            f'{where} must be {{"b64": "<base64 JPEG/PNG>"}}, got {_describe(value)}'
        )
    data = decode_b64(value["b64"], f"{where}.b64", limits)
    return data, check_image(data, where, limits)


def _check_count(count: int, limits: Limits) -> None:
    if count > limits.max_instances:
        raise PayloadTooLarge(
            f"{count} images exceed the limit of {limits.max_instances} per request "
            "(--max_instances)"
        )


def _rows(instances: Any, limits: Limits) -> list[tuple[Any, str]]:
    if not isinstance(instances, list):
        raise InvalidInput(f"'instances' must be a list, got {type(instances).__name__}")
    if not instances:
        raise InvalidInput("'instances' is empty")
    _check_count(len(instances), limits)
    # As TF Serving: the first element decides between plain values and named-input objects.
    named = isinstance(instances[0], dict) and "b64" not in instances[0]
    if named and not (set(instances[0]) == {INPUT_NAME}):
        raise InvalidInput(
            f'instances[0] must be {{"b64": ...}} or {{"{INPUT_NAME}": {{"b64": ...}}}}, '
            f"got {_describe(instances[0])}"
        )
    values = []
    for i, inst in enumerate(instances):
        if named:
            if not (isinstance(inst, dict) and set(inst) == {INPUT_NAME}):
                raise InvalidInput(
                    f'instances[{i}] must be {{"{INPUT_NAME}": {{"b64": ...}}}} like '
                    f"instances[0], got {_describe(inst)}"
                )
            values.append((inst[INPUT_NAME], f"instances[{i}].{INPUT_NAME}"))
        else:
            values.append((inst, f"instances[{i}]"))
    return values


def _columns(inputs: Any, limits: Limits) -> list[tuple[Any, str]]:
    prefix = "inputs"
    if isinstance(inputs, dict) and "b64" not in inputs:
        if INPUT_NAME not in inputs:
            raise InvalidInput(
                f'\'inputs\' must be a list of {{"b64": ...}} or {{"{INPUT_NAME}": [...]}}, '
                f"got {_describe(inputs)}"
            )
        inputs, prefix = inputs[INPUT_NAME], f"inputs.{INPUT_NAME}"
    if not isinstance(inputs, list):
        raise InvalidInput(
            f"'{prefix}' must be a list of {{\"b64\": ...}} (input {INPUT_NAME} has shape "
            f"[None]), got {'one b64 object' if _is_b64_object(inputs) else _describe(inputs)}"
        )
    # An empty list is a tensor of shape [0], which TF Serving passes to the signature; the
    # exported signature answers it with [0, 10] on every CPU (training.export), so the answer
    # is {"outputs": []}, here as there.
    _check_count(len(inputs), limits)
    return [(value, f"{prefix}[{i}]") for i, value in enumerate(inputs)]


def parse_request(payload: Any, limits: Limits) -> PredictRequest:
    """Validate a predict body (row or columnar format, see the module docstring).

    Args:
        payload: the parsed JSON body.
        limits: request limits.

    Returns:
        The images, their JSON paths and kinds, and the response format.

    Raises:
        InvalidInput: anything TF Serving would refuse, with a message naming the field.
        PayloadTooLarge: too many images, or one over the byte/pixel limits.
    """
    if not isinstance(payload, dict):
        raise InvalidInput(
            "request body must be a JSON object with 'instances' (row format) or 'inputs' "
            f"(columnar format), got {type(payload).__name__}"
        )
    signature = payload.get("signature_name", SIGNATURE_KEY)
    if signature != SIGNATURE_KEY:
        raise InvalidInput(f"unknown signature_name {signature!r}; only {SIGNATURE_KEY!r}")
    if "instances" in payload and "inputs" in payload:
        raise InvalidInput("send either 'instances' (row format) or 'inputs' (columnar), not both")
    if "instances" in payload:
        values, columnar = _rows(payload["instances"], limits), False
    elif "inputs" in payload:
        values, columnar = _columns(payload["inputs"], limits), True
    else:
        raise InvalidInput(
            "missing 'instances' (row format) or 'inputs' (columnar format): "
            '{"instances": [{"b64": "<base64 JPEG/PNG>"}]}'
        )
    images, kinds = [], []
    for value, where in values:
        data, kind = _image(value, where, limits)
        images.append(data)
        kinds.append(kind)
    return PredictRequest(images, [where for _, where in values], kinds, columnar)
