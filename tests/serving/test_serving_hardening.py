"""Findings of the adversarial review, fixed: V2 routes, CloudEvents headers, chunked bodies."""

from __future__ import annotations

import json

import httpx
import pytest
from serving_helpers import body, encode

PREDICT = "/v1/models/fashion-mnist:predict"


@pytest.fixture()
def good(test_images):
    images, _ = test_images
    return body([encode(images[0, :, :, 0], "PNG")])


def _still_serves(client, good):
    r = client.post(PREDICT, json=good)
    assert r.status_code == 200, r.text
    assert len(r.json()["predictions"][0]) == 10


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v2/repository/models/fashion-mnist/unload"),
        ("POST", "/v2/repository/models/fashion-mnist/load"),
        ("POST", "/v2/models/fashion-mnist/infer"),
        ("GET", "/v2/models/fashion-mnist/ready"),
    ],
)
def test_no_v2_routes_so_the_model_cannot_be_unloaded(client, good, method, path):
    r = client.request(method, path, json={})
    assert r.status_code in (404, 405), r.text
    _still_serves(client, good)
    assert client.get("/v1/models/fashion-mnist").json()["ready"] is True


def test_cloudevents_binary_headers_are_a_415_not_a_500(client, good):
    headers = {"ce-specversion": "1.0", "ce-id": "1", "ce-source": "x", "ce-type": "t"}
    r = client.post(PREDICT, content=json.dumps(good), headers=headers)
    assert r.status_code == 415
    assert "CloudEvents" in r.json()["error"]
    _still_serves(client, good)


def test_a_cloudevents_id_alone_is_not_binary_mode(client, good):
    """``Ce-Id`` names the events KServe's logger sends for a request (the agent reads it);
    without the other required attributes the request is plain V1 JSON, as TF Serving sees it."""
    for headers in ({"Ce-Id": "e2e-1"}, {"ce-specversion": "1.0", "ce-id": "1", "ce-type": "t"}):
        r = client.post(PREDICT, content=json.dumps(good), headers=headers)
        assert r.status_code == 200, (headers, r.text)
        assert len(r.json()["predictions"]) == len(good["instances"])


def test_chunked_body_over_the_limit_is_413_without_content_length(live_server, good):
    def chunks():
        yield b'{"instances": ['
        for _ in range(200):  # 200 MiB in total, far over the body limit
            yield b" " * (1 << 20)
        yield b"]}"

    url = live_server.predict_url
    r = httpx.post(url, content=chunks(), headers={"Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 413
    assert "over" in r.json()["error"]
    ok = httpx.post(url, json=good, timeout=30)
    assert ok.status_code == 200


def test_small_chunked_body_is_still_served(live_server, good):
    payload = json.dumps(good).encode()
    url = live_server.predict_url
    r = httpx.post(
        url,
        content=iter([payload[:10], payload[10:]]),
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
