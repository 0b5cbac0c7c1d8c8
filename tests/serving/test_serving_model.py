"""Unit tests of serving.versions, serving.batcher and serving.model (decode errors)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from serving_helpers import encode

from serving.batcher import MicroBatcher
from serving.model import ImageDecodeError, tf_error_reason
from serving.versions import ModelVersionNotFoundError, find_latest_version

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


def test_infer_batch_maps_tensorflow_decode_errors(loaded_model):
    with pytest.raises(ImageDecodeError, match="not a JPEG or PNG") as err:
        loaded_model.infer_batch([encode(GREY, "PNG"), b"definitely not an image"])
    assert err.value.index == 1  # the culprit is found, not just "the batch failed"
    assert "Graph execution" not in str(err.value)
    out = loaded_model.infer_batch([encode(GREY, "PNG")])  # still works afterwards
    assert out.shape == (1, 10)


def test_tf_error_reason_skips_graph_noise():
    class Err(Exception):
        message = (
            "Graph execution error:\n\nDetected at node x\n<stack traces unavailable>\n"
            "jpeg::Uncompress failed.\n[[{{node y}}]]"
        )

    assert tf_error_reason(Err()) == "jpeg::Uncompress failed."


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
