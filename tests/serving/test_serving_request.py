"""serving.request: TF Serving's row/columnar formats, its base64 rules, image checks."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kserve.errors import InvalidInput
from serving_helpers import b64, encode, image_kinds, mime_wrap
from tf_serving_reference import Rejected, absl_base64_unescape

from fmnist_common import INPUT_NAME
from serving.request import Limits, PayloadTooLarge, decode_b64, parse_request

GREY = np.full((28, 28), 120, np.uint8)
IMG = encode(GREY, "PNG")


def test_row_and_columnar_forms_give_the_same_images_and_answer_keys():
    one = {"b64": b64(IMG)}
    forms = {
        "row": ({"instances": [one, one]}, "predictions"),
        "row-named": ({"instances": [{"image_bytes": one}] * 2}, "predictions"),
        "columnar": ({"inputs": [one, one]}, "outputs"),
        "columnar-named": ({"inputs": {"image_bytes": [one, one]}}, "outputs"),
    }
    for name, (payload, key) in forms.items():
        req = parse_request(payload, Limits())
        assert req.images == [IMG, IMG], name
        assert list(req.response([[0.1] * 10])) == [key], name
        assert req.kinds[0] == "8-bit greyscale PNG 28x28"


@pytest.mark.parametrize(
    ("payload", "exc", "match"),
    [
        ([], InvalidInput, "JSON object"),
        ({}, InvalidInput, "missing 'instances' .* or 'inputs'"),
        ({"instances": [], "inputs": []}, InvalidInput, "not both"),
        ({"instances": {}}, InvalidInput, "must be a list"),
        ({"instances": []}, InvalidInput, "empty"),
        ({"instances": [1]}, InvalidInput, r"instances\[0\] must be"),
        ({"instances": ["abc"]}, InvalidInput, "plain string .* not base64"),
        ({"instances": [{"b64": None}]}, InvalidInput, "must be a string"),
        ({"instances": [{"b64": "QQ==", "x": 1}]}, InvalidInput, 'only "b64"'),
        (
            {"instances": [{"b64": b64(IMG)}, {"image_bytes": {"b64": b64(IMG)}}]},
            InvalidInput,
            r"instances\[1\] must be",
        ),
        ({"inputs": {"b64": b64(IMG)}}, InvalidInput, "one b64 object"),
        ({"inputs": {"pixels": []}}, InvalidInput, "image_bytes"),
        ({"instances": [{"b64": "a-b_"}]}, InvalidInput, "URL-safe"),
        ({"instances": [{"b64": "QQ!="}]}, InvalidInput, "'!' at position 2"),
        ({"instances": [{"b64": "QUJDR"}]}, InvalidInput, "5 characters"),
        ({"instances": [{"b64": "QQ="}]}, InvalidInput, "1 padding character"),
        ({"instances": [{"b64": "QQ==QQ=="}]}, InvalidInput, "after the padding"),
        ({"instances": [{"b64": " \n"}]}, InvalidInput, "empty"),
        (
            {"instances": [{"b64": base64.b64encode(b"hello").decode()}]},
            InvalidInput,
            "not a JPEG or PNG",
        ),
        (
            {"instances": [{"b64": base64.b64encode(b"GIF89a" + bytes(20)).decode()}]},
            InvalidInput,
            "is a GIF image",
        ),
        ({"instances": [{"b64": "QQ=="}] * 3}, PayloadTooLarge, "3 images exceed"),
        ({"inputs": [{"b64": "QQ=="}] * 3}, PayloadTooLarge, "--max_instances"),
        (
            {"instances": [{"b64": b64(IMG)}], "signature_name": "serve_pixels"},
            InvalidInput,
            "unknown signature_name",
        ),
    ],
)
def test_parse_request_rejects(payload, exc, match):
    with pytest.raises(exc, match=match):
        parse_request(payload, Limits(max_instances=2))


@pytest.mark.parametrize("payload", [{"inputs": []}, {"inputs": {INPUT_NAME: []}}])
def test_columnar_empty_list_is_a_batch_of_zero_images(payload):
    """TF Serving feeds ``[]`` to the signature as a ``[0]`` tensor (the signature answers
    ``[0, 10]``); only an empty ``instances`` is refused."""
    req = parse_request(payload, Limits())
    assert (req.images, req.columnar) == ([], True)
    assert req.response([]) == {"outputs": []}
    with pytest.raises(InvalidInput, match="'instances' is empty"):
        parse_request({"instances": []}, Limits())


@pytest.mark.parametrize(
    "text",
    [
        mime_wrap(b64(IMG)),
        mime_wrap(b64(IMG), "\r\n"),
        b64(IMG) + "\n",
        b64(IMG).rstrip("="),
        b64(IMG).replace("=", "."),
        "\t " + b64(IMG)[:10] + "\n  " + b64(IMG)[10:],
    ],
)
def test_base64_variants_tf_serving_accepts(text):
    assert decode_b64(text, "x", Limits()) == IMG


_B64_TEXT = st.text(alphabet="ABCDEFGHab01+/=.-_ \n\r\t!", max_size=24)


@settings(max_examples=2000, deadline=None)
@given(text=st.one_of(_B64_TEXT, st.binary(max_size=20).map(lambda b: b64(b) + "\n")))
def test_base64_decoder_agrees_with_absl(text):
    """Accept/reject and bytes exactly as the transcription of absl::Base64Unescape."""
    try:
        expected = absl_base64_unescape(text)
    except Rejected:
        expected = None
    try:
        got = decode_b64(text, "x", Limits())
    except InvalidInput as exc:
        assert expected is None or expected == b"", (text, expected, str(exc))
        return
    assert got == expected, text


def test_url_safe_base64_gets_the_hint():
    noisy = encode(np.random.default_rng(1).integers(0, 255, (28, 28), np.uint8), "PNG")
    urlsafe = base64.urlsafe_b64encode(noisy).decode()
    with pytest.raises(InvalidInput, match="URL-safe base64 .* standard alphabet"):
        decode_b64(urlsafe, "instances[0].b64", Limits())


def test_limits_cite_the_server_options():
    big = encode(np.zeros((100, 100), np.uint8), "PNG")
    with pytest.raises(PayloadTooLarge, match=r"10000 pixels exceeds 9801 \(--max_image_pixels"):
        parse_request({"instances": [{"b64": b64(big)}]}, Limits(max_image_pixels=99 * 99))
    with pytest.raises(PayloadTooLarge, match="--max_image_bytes"):
        parse_request({"instances": [{"b64": b64(big)}]}, Limits(max_image_bytes=10))


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` (a decompression bomb's header)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))


def test_decompression_bomb_cites_max_image_pixels_not_pillows_limit():
    for size in (1100, 20000):  # under and over Pillow's own DecompressionBombError threshold
        with pytest.raises(PayloadTooLarge) as err:
            parse_request({"instances": [{"b64": b64(_png_header_only(size, size))}]}, Limits())
        msg = str(err.value)
        assert f"{size * size} pixels exceeds {1 << 20} (--max_image_pixels)" in msg, msg
        assert "DOS attack" not in msg and "89478485" not in msg


def test_ycck_jpeg_is_named_as_such():
    from PIL import Image

    buf = io.BytesIO()
    Image.new("CMYK", (28, 28), (10, 20, 30, 40)).save(buf, format="JPEG")
    data = bytearray(buf.getvalue())
    data[data.find(b"Adobe") + 11] = 2  # APP14 transform 2 = YCCK (Pillow writes CMYK = 0)
    req = parse_request({"instances": [{"b64": b64(bytes(data))}]}, Limits())
    assert req.kinds == ["YCCK JPEG 28x28"]


def test_errors_name_the_image_kind():
    kinds = image_kinds(np.random.default_rng(0).integers(0, 255, (40, 30), np.uint8))
    cases = {
        "jpeg-progressive-cmyk": "progressive CMYK JPEG 30x40",
        "png-16bit": "16-bit greyscale PNG 30x40",
        "png-palette": "8-bit palette PNG 30x40",
    }
    for key, kind in cases.items():
        truncated = kinds[key][: len(kinds[key]) * 2 // 3]
        with pytest.raises(InvalidInput, match=f"corrupt or truncated {kind}"):
            parse_request({"inputs": [{"b64": b64(truncated)}]}, Limits())
