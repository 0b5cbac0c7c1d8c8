"""Unit tests of serving.model: version discovery, request validation, micro-batching."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest
from kserve.errors import InvalidInput
from serving_helpers import b64, encode

from serving.model import (
    ImageDecodeError,
    Limits,
    MicroBatcher,
    ModelVersionNotFoundError,
    PayloadTooLarge,
    find_latest_version,
    parse_instances,
)

GREY = np.full((28, 28), 120, np.uint8)


def _version(base, name, pb=True):
    d = base / name
    d.mkdir(parents=True)
    if pb:
        (d / "saved_model.pb").write_bytes(b"x")
    return d


def test_find_latest_version_ignores_staging_and_junk(tmp_path):
    _version(tmp_path, "1")
    _version(tmp_path, "2")
    _version(tmp_path, "10")
    _version(tmp_path, ".staging-11-abcd")
    _version(tmp_path, "12abc")
    _version(tmp_path, "13", pb=False)  # half-written: no saved_model.pb
    (tmp_path / "14").write_text("a file, not a dir")
    version, path = find_latest_version(tmp_path)
    assert version == 10  # numeric, not lexicographic order
    assert path == tmp_path / "10"


def test_find_latest_version_errors(tmp_path):
    with pytest.raises(ModelVersionNotFoundError, match="not a directory"):
        find_latest_version(tmp_path / "missing")
    _version(tmp_path, ".staging-1-abcd")
    with pytest.raises(ModelVersionNotFoundError, match="no version directory"):
        find_latest_version(tmp_path)


def test_parse_instances_accepts_both_row_forms():
    img = encode(GREY, "PNG")
    out = parse_instances(
        {"instances": [{"b64": b64(img)}, {"image_bytes": {"b64": b64(img)}}]}, Limits()
    )
    assert out == [img, img]


@pytest.mark.parametrize(
    ("payload", "exc", "match"),
    [
        ([], InvalidInput, "JSON object"),
        ({}, InvalidInput, "missing 'instances'"),
        ({"instances": [], "x": 1}, InvalidInput, "unexpected key"),
        ({"instances": {}}, InvalidInput, "must be a list"),
        ({"instances": []}, InvalidInput, "empty"),
        ({"instances": [1]}, InvalidInput, r"instances\[0\] must be"),
        ({"instances": [{"b64": None}]}, InvalidInput, "must be a string"),
        ({"instances": [{"b64": "a-b_"}]}, InvalidInput, "URL-safe"),
        ({"instances": [{"b64": "abc"}]}, InvalidInput, "not valid standard base64"),
        ({"instances": [{"b64": base64.b64encode(b"hello").decode()}]}, InvalidInput, "not a"),
        ({"instances": [{"b64": "QQ=="}] * 3}, PayloadTooLarge, "3 instances exceed"),
    ],
)
def test_parse_instances_rejects(payload, exc, match):
    with pytest.raises(exc, match=match):
        parse_instances(payload, Limits(max_instances=2))


def test_parse_instances_limits_pixels_and_bytes():
    big = encode(np.zeros((100, 100), np.uint8), "PNG")
    with pytest.raises(PayloadTooLarge, match="pixels"):
        parse_instances({"instances": [{"b64": b64(big)}]}, Limits(max_image_pixels=99 * 99))
    with pytest.raises(PayloadTooLarge, match="bytes"):
        parse_instances({"instances": [{"b64": b64(big)}]}, Limits(max_image_bytes=10))


def test_parse_instances_rejects_truncated_images():
    for fmt in ("JPEG", "PNG"):
        data = encode(np.random.default_rng(0).integers(0, 255, (64, 64), np.uint8), fmt)
        with pytest.raises(InvalidInput, match="corrupt|truncated"):
            parse_instances({"instances": [{"b64": b64(data[: len(data) * 2 // 3])}]}, Limits())


def test_infer_batch_maps_tensorflow_decode_errors(loaded_model):
    with pytest.raises(ImageDecodeError, match="could not decode"):
        loaded_model.infer_batch([b"definitely not an image"])
    out = loaded_model.infer_batch([encode(GREY, "PNG")])  # still works afterwards
    assert out.shape == (1, 10)


def _fake_infer(calls):
    def infer(images):
        calls.append(len(images))
        if b"bad" in images:
            raise ImageDecodeError("bad image")
        return np.array([[float(img[0])] * 10 for img in images], np.float32)

    return infer


def test_micro_batcher_groups_concurrent_requests_and_isolates_errors():
    calls: list[int] = []
    batcher = MicroBatcher(_fake_infer(calls), max_batch_size=8, max_latency_ms=5)

    async def run():
        good = [batcher.submit([bytes([i]), bytes([i + 100])]) for i in range(3)]
        bad = batcher.submit([b"bad"])
        return await asyncio.gather(*good, bad, return_exceptions=True)

    results = asyncio.run(run())
    batcher.close()
    for i, res in enumerate(results[:3]):
        assert res.shape == (2, 10)
        assert res[0, 0] == i and res[1, 0] == i + 100  # each request gets its own rows
    assert isinstance(results[3], ImageDecodeError)
    assert calls[0] == 7  # one grouped call of 3x2 + 1 images, then isolated retries
    assert sorted(calls[1:]) == [1, 2, 2, 2]


def test_micro_batcher_respects_max_batch_size():
    calls: list[int] = []
    batcher = MicroBatcher(_fake_infer(calls), max_batch_size=4, max_latency_ms=5)

    async def run():
        return await asyncio.gather(*[batcher.submit([bytes([i])]) for i in range(10)])

    results = asyncio.run(run())
    batcher.close()
    assert [r[0, 0] for r in results] == list(range(10))
    assert max(calls) <= 4 and sum(calls) == 10
