"""Helpers shared by the serving tests (a uniquely named module, importable from any test)."""

from __future__ import annotations

import base64
import io

import numpy as np

from fmnist_common import INPUT_NAME
from fmnist_common import predict_body as body  # noqa: F401  (the V1 body, for the tests)


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


def image_kinds(grey: np.ndarray) -> dict[str, bytes]:
    """Every JPEG/PNG kind Pillow writes, built from one uint8 ``[H, W]`` grey image.

    Keys name the kind (``"cmyk-jpeg"``, ``"png-16bit"``, ...); values are encoded bytes.
    """
    from PIL import Image

    colour = np.stack([grey, grey // 2, 255 - grey], axis=-1)
    rgb = Image.fromarray(colour)
    grey_img = Image.fromarray(grey)

    def save(img, fmt, **kw) -> bytes:
        buf = io.BytesIO()
        img.save(buf, format=fmt, **kw)
        return buf.getvalue()

    return {
        "jpeg-grey": save(grey_img, "JPEG", quality=95),
        "jpeg-rgb": save(rgb, "JPEG"),
        "jpeg-cmyk": save(rgb.convert("CMYK"), "JPEG"),
        "jpeg-progressive-grey": save(grey_img, "JPEG", progressive=True),
        "jpeg-progressive-cmyk": save(rgb.convert("CMYK"), "JPEG", progressive=True),
        "jpeg-optimized-subsampled": save(rgb, "JPEG", optimize=True, subsampling=2),
        "png-grey": save(grey_img, "PNG"),
        "png-1bit": save(grey_img.convert("1"), "PNG"),
        "png-16bit": save(Image.fromarray(grey.astype(np.uint16) * 257), "PNG"),
        "png-rgb": save(rgb, "PNG"),
        "png-palette": save(rgb.convert("P"), "PNG"),
        "png-palette-transparency": save(rgb.convert("P"), "PNG", transparency=0),
        "png-grey-alpha": save(grey_img.convert("LA"), "PNG"),
        "png-rgba": save(rgb.convert("RGBA"), "PNG"),
    }


def mime_wrap(text: str, sep: str = "\n", width: int = 76) -> str:
    """``text`` broken into lines of ``width`` characters (MIME base64), with a final ``sep``."""
    return sep.join(text[i : i + width] for i in range(0, len(text), width)) + sep


def request_corpus(good: bytes, kinds: dict[str, bytes]) -> list[tuple[str, bytes, int]]:
    """(name, JSON body bytes, expected status) of the serving test corpus.

    Every request the parity test replays (no Content-Type tricks, no server-only limits):
    accepted formats and base64 variants (200) and malformed requests (400).
    """
    import base64
    import json

    from PIL import Image

    def js(obj) -> bytes:
        return json.dumps(obj).encode()

    g = b64(good)
    noisy = encode(np.random.default_rng(1).integers(0, 255, (28, 28), np.uint8), "PNG")
    urlsafe = base64.urlsafe_b64encode(noisy).decode()
    assert urlsafe != b64(noisy)
    png = encode(np.random.default_rng(2).integers(0, 255, (28, 28), np.uint8), "PNG")
    gif, bmp = io.BytesIO(), io.BytesIO()
    Image.new("L", (28, 28)).save(gif, format="GIF")
    Image.new("L", (28, 28)).save(bmp, format="BMP")
    one_pad = next(k for k in kinds.values() if len(k) % 3 == 2)  # base64 ends in one '='
    two_pad = next(k for k in kinds.values() if len(k) % 3 == 1)  # ... in '=='
    ok = [
        ("row-b64", js(body([good])), 200),
        ("row-named", js({"instances": [{"image_bytes": {"b64": g}}] * 2}), 200),
        ("row-signature-name", js({**body([good]), "signature_name": "serving_default"}), 200),
        ("row-extra-key-ignored", js({**body([good]), "extra": 1}), 200),
        ("columnar-list", js({"inputs": [{"b64": g}, {"b64": b64(png)}]}), 200),
        ("columnar-named", js({"inputs": {"image_bytes": [{"b64": g}]}}), 200),
        ("b64-mime-lf", js({"instances": [{"b64": mime_wrap(g)}]}), 200),
        ("b64-mime-crlf", js({"instances": [{"b64": mime_wrap(g, "\r\n")}]}), 200),
        ("b64-trailing-newline", js({"instances": [{"b64": g + "\n"}]}), 200),
        ("b64-spaces", js({"instances": [{"b64": " " + g[:8] + " \t" + g[8:] + " "}]}), 200),
        ("b64-no-padding-1", js({"instances": [{"b64": b64(one_pad).rstrip("=")}]}), 200),
        ("b64-no-padding-2", js({"instances": [{"b64": b64(two_pad).rstrip("=")}]}), 200),
        ("b64-dot-padding", js({"instances": [{"b64": b64(two_pad).replace("=", ".")}]}), 200),
        ("all-kinds-one-request", js(body(list(kinds.values()))), 200),
    ]
    ok += [(f"kind-{name}", js(body([data])), 200) for name, data in kinds.items()]
    bad = [
        ("bad-json", b"{not json", 400),
        ("empty-body", b"", 400),
        ("json-array", b"[1, 2]", 400),
        ("json-string", b'"hello"', 400),
        ("json-null", b"null", 400),
        ("missing-instances", b"{}", 400),
        ("wrong-key", js({"instance": [{"b64": g}]}), 400),
        ("both-formats", js({"instances": [{"b64": g}], "inputs": [{"b64": g}]}), 400),
        ("instances-object", js({"instances": {"b64": g}}), 400),
        ("instances-string", js({"instances": g}), 400),
        ("empty-instances", js({"instances": []}), 400),
        ("instance-bare-string", js({"instances": [g]}), 400),
        ("instance-list", js({"instances": [[1, 2, 3]]}), 400),
        ("instance-nested-b64", js({"instances": [[{"b64": g}]]}), 400),
        ("mixed-row-forms", js({"instances": [{"b64": g}, {"image_bytes": {"b64": g}}]}), 400),
        ("b64-not-string", js({"instances": [{"b64": 123}]}), 400),
        ("b64-extra-key", js({"instances": [{"b64": g, "x": 1}]}), 400),
        ("wrong-instance-key", js({"instances": [{"data": g}]}), 400),
        ("columnar-scalar", js({"inputs": {"b64": g}}), 400),
        ("columnar-wrong-name", js({"inputs": {"pixels": [{"b64": g}]}}), 400),
        ("columnar-nested", js({"inputs": [[{"b64": g}]]}), 400),
        ("columnar-empty", js({"inputs": []}), 200),  # a [0] tensor: the signature gives [0, 10]
        ("columnar-named-empty", js({"inputs": {INPUT_NAME: []}}), 200),
        ("empty-b64", js({"instances": [{"b64": ""}]}), 400),
        ("whitespace-b64", js({"instances": [{"b64": " \n "}]}), 400),
        ("bad-base64-chars", js({"instances": [{"b64": "!!!!" + g}]}), 400),
        ("bad-base64-padding", js({"instances": [{"b64": b64(two_pad)[:-1]}]}), 400),
        (
            "base64-one-stray-char",
            js({"instances": [{"b64": g.rstrip("=") + "A" * (5 - len(g.rstrip("=")) % 4)}]}),
            400,
        ),
        ("base64-text-after-padding", js({"instances": [{"b64": b64(two_pad) + "AA"}]}), 400),
        ("urlsafe-base64", js({"instances": [{"b64": urlsafe}]}), 400),
        ("not-an-image", js({"instances": [{"b64": b64(b"hello world, not an image")}]}), 400),
        ("truncated-jpeg", js({"instances": [{"b64": b64(good[:200])}]}), 400),
        ("truncated-png", js({"instances": [{"b64": b64(png[: len(png) // 2])}]}), 400),
        ("gif-unsupported", js({"instances": [{"b64": b64(gif.getvalue())}]}), 400),
        ("bmp-unsupported", js({"instances": [{"b64": b64(bmp.getvalue())}]}), 400),
        ("invalid-utf8", b'{"instances": "\xff\xfe"}', 400),
        ("deep-nesting", b"[" * 5000 + b"]" * 5000, 400),
        ("bad-signature-name", js({**body([good]), "signature_name": "x"}), 400),
        ("signature-name-not-string", js({**body([good]), "signature_name": 1}), 400),
        ("one-bad-among-good", js({"instances": [{"b64": g}, {"b64": "@@"}]}), 400),
    ]
    return ok + bad
