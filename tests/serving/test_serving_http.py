"""The model server over HTTP: FastAPI TestClient and a real ``python -m serving.server``."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import numpy as np
import pytest
from serving_helpers import b64, body, encode, request_corpus, signature_output

PREDICT = "/v1/models/fashion-mnist:predict"


def _inputs(test_images):
    """JPEG and PNG, grey and colour, 28x28 and other sizes, from real test images."""
    from PIL import Image

    images, _ = test_images
    grey = images[:4, :, :, 0]
    colour = np.stack([grey[1], grey[1] // 2, 255 - grey[1]], axis=-1)  # a tinted RGB image
    big = np.array(Image.fromarray(grey[2]).resize((56, 40)))
    return [
        encode(grey[0], "JPEG", quality=95),
        encode(grey[0], "PNG"),
        encode(colour, "JPEG"),
        encode(colour, "PNG"),
        encode(big, "PNG"),
        encode(np.array(Image.fromarray(grey[3]).resize((17, 33))), "JPEG"),
    ]


def _check_predictions(resp, expected):
    assert resp.status_code == 200, resp.text
    preds = np.array(resp.json()["predictions"], np.float32)
    assert preds.shape == expected.shape == (len(expected), 10)
    np.testing.assert_allclose(preds.sum(axis=1), 1.0, atol=1e-4)
    np.testing.assert_allclose(preds, expected, rtol=1e-4, atol=1e-5)


def test_round_trip_testclient_matches_signature(client, model_base, test_images):
    images = _inputs(test_images)
    expected = signature_output(model_base / "1", images)
    _check_predictions(client.post(PREDICT, json=body(images)), expected)
    for i, img in enumerate(images):  # one image per request as well
        _check_predictions(client.post(PREDICT, json=body([img])), expected[i : i + 1])


def test_round_trip_real_server_matches_signature(live_server, model_base, test_images):
    images = _inputs(test_images)
    expected = signature_output(model_base / "1", images)
    with httpx.Client(timeout=30) as http:
        _check_predictions(http.post(live_server.predict_url, json=body(images)), expected)
        assert http.get(f"{live_server.url}/").json()["status"] == "alive"
        ready = http.get(f"{live_server.url}/v1/models/fashion-mnist")
        assert ready.status_code == 200 and ready.json()["ready"] is True
        assert http.get(f"{live_server.url}/v1/models/other").status_code == 404


def test_model_learned_something(client, test_images):
    images, labels = test_images
    jpegs = [encode(img[:, :, 0], "JPEG", quality=95) for img in images]
    preds = np.array(client.post(PREDICT, json=body(jpegs)).json()["predictions"])
    assert (preds.argmax(axis=1) == labels).mean() > 0.4  # 10 classes: chance is 0.1


def test_concurrent_requests_are_batched_and_answered_in_order(live_server, test_images):
    import asyncio

    images = _inputs(test_images)
    expected = signature_output(live_server.model_base_path / "1", images)

    async def run():
        async with httpx.AsyncClient(timeout=30) as http:
            reqs = [http.post(live_server.predict_url, json=body([img])) for img in images * 5]
            return await asyncio.gather(*reqs)

    for i, resp in enumerate(asyncio.run(run())):
        _check_predictions(resp, expected[i % len(images) : i % len(images) + 1])


def test_highest_version_is_served(model_base, tmp_path, test_images):
    import shutil

    from small_model import export_small_model

    from serving.model import FashionMnistModel

    base = tmp_path / "fashion-mnist"
    shutil.copytree(model_base / "1", base / "1")
    export_small_model(base, version=3, train_examples=0, seed=7)  # different weights
    shutil.copytree(model_base / "1", base / ".staging-4-abcd")  # in-flight publish: ignored
    (base / "5x").mkdir()
    model = FashionMnistModel(model_base_path=base)
    model.load()
    assert model.version == 3
    images = _inputs(test_images)[:2]
    got = model.infer_batch(images)
    np.testing.assert_allclose(got, signature_output(base / "3", images), rtol=1e-4, atol=1e-6)
    assert not np.allclose(got, signature_output(base / "1", images), atol=1e-3)


def test_server_without_versions_exits_2(tmp_path):
    (tmp_path / ".staging-1-abcd").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "serving.server", "--model_base_path", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "no version directory" in proc.stderr + proc.stdout


def _bad_requests(good_jpeg: bytes):
    """(id, body bytes, headers, expected status): the corpus' bad requests (400, the same as
    TF Serving, see test_serving_parity.py) plus this server's own limits (413) and media-type
    checks (415)."""
    corpus = request_corpus(good_jpeg, {str(n): good_jpeg + bytes(n) for n in range(3)})
    cases = [(name, data, {}, status) for name, data, status in corpus if status != 200]
    many = {"instances": [{"b64": b64(good_jpeg)}] * 65}
    huge_pixels = encode(np.zeros((1100, 1000), np.uint8), "PNG")  # 1.1 Mpx, a few KB
    return cases + [
        ("too-many-instances", json.dumps(many).encode(), {}, 413),
        ("too-many-inputs", json.dumps({"inputs": many["instances"]}).encode(), {}, 413),
        ("huge-pixels", json.dumps(body([huge_pixels])).encode(), {}, 413),
        ("huge-bytes", json.dumps(body([b"\xff" * (1 << 20) + b"x"])).encode(), {}, 413),
        ("text-plain", json.dumps(body([good_jpeg])).encode(), {"content-type": "text/plain"}, 415),
        ("form-urlencoded", b"a=1", {"content-type": "application/x-www-form-urlencoded"}, 415),
    ]


def _assert_bad_then_good(post, good_jpeg):
    cases = _bad_requests(good_jpeg)
    assert len(cases) >= 35
    for name, data, headers, status in cases:
        resp = post(PREDICT, data, {"content-type": "application/json", **headers})
        assert resp.status_code == status, (name, resp.status_code, resp.text[:300])
        error = resp.json().get("error")
        assert isinstance(error, str) and len(error) > 5, (name, resp.text[:300])
        ok = post(PREDICT, json.dumps(body([good_jpeg])).encode(), {})
        assert ok.status_code == 200, (name, ok.text[:300])
        assert len(ok.json()["predictions"][0]) == 10


def test_bad_requests_testclient(client, test_images):
    good = encode(test_images[0][0, :, :, 0], "JPEG")
    _assert_bad_then_good(lambda p, d, h: client.post(p, content=d, headers=h), good)
    wrong_method = client.get(PREDICT)  # matches /v1/models/{name}: no model 'x:predict'
    assert wrong_method.status_code in (404, 405) and wrong_method.json()
    unknown = client.post("/v1/models/nope:predict", json=body([good]))
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]


def test_bad_requests_real_server(live_server, test_images):
    good = encode(test_images[0][0, :, :, 0], "JPEG")
    with httpx.Client(base_url=live_server.url, timeout=30) as http:
        _assert_bad_then_good(lambda p, d, h: http.post(p, content=d, headers=h), good)
        assert live_server.proc.poll() is None  # still running


def test_body_limit_middleware(live_server):
    # Content-Length over the body limit is answered 413 before the body is read.
    import socket

    from serving.model import Limits
    from serving.server import max_body_bytes

    too_big = max_body_bytes(Limits()) + 1
    with socket.create_connection(("127.0.0.1", live_server.port), timeout=10) as s:
        s.sendall(
            f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {too_big}\r\nConnection: close\r\n\r\n".encode()
        )
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"request body over" in reply


def test_client_cli(live_server, tmp_path, test_images):
    images, labels = test_images
    paths = []
    for i in range(3):
        p = tmp_path / f"img{i}.{'png' if i % 2 else 'jpg'}"
        p.write_bytes(encode(images[i, :, :, 0], "PNG" if i % 2 else "JPEG"))
        paths.append(str(p))
    proc = subprocess.run(
        [sys.executable, "-m", "serving.client", "--url", live_server.url, "--model-name",
         "fashion-mnist", "--host", "fashion-mnist.fashion-mnist.example.com", *paths],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3
    from fmnist_common import CLASS_NAMES

    for path, line in zip(paths, lines, strict=True):
        assert line.startswith(path)
        assert sum(name in line for name in CLASS_NAMES) >= 3
    bad = subprocess.run(
        [sys.executable, "-m", "serving.client", "--url", live_server.url, __file__],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 1 and "HTTP 400" in bad.stderr


@pytest.mark.parametrize("argv", [["--help"]])
def test_server_help_lists_kserve_and_own_options(argv, capsys):
    from serving.server import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for opt in ("--http_port", "--workers", "--model_base_path", "--max_instances"):
        assert opt in out
    args = build_parser().parse_args(["--model_base_path", "x"])
    assert args.model_name == "fashion-mnist" and args.max_instances == 64


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max_instances", "0"),  # every request would be a 413
        ("--max_instances", "-1"),
        ("--max_image_bytes", "0"),
        ("--max_batch_size", "0"),
        ("--max_batch_latency_ms", "inf"),  # every request would wait forever
        ("--max_batch_latency_ms", "nan"),
        ("--max_batch_latency_ms", "-5"),
        ("--tf_intra_op_threads", "-1"),
    ],
)
def test_server_refuses_limits_that_would_refuse_or_hang_every_request(flag, value, capsys):
    from serving.server import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--model_base_path", "x", flag, value])
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err
