"""Parity with the cluster: the local server answers every corpus request as TF Serving does.

Reference: :mod:`tf_serving_reference` (TF Serving's JSON-to-tensor rules) feeding the
SavedModel's ``serving_default`` loaded with ``tf.saved_model.load``, as TF Serving runs it.
"""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest
import tf_serving_reference
from serving_helpers import encode, image_kinds, request_corpus
from small_model import clearly_classified

from fmnist_common import INPUT_NAME, OUTPUT_NAME, SIGNATURE_KEY
from serving.model import ImageDecodeError
from serving.request import Limits, PredictRequest


@pytest.fixture(scope="module")
def corpus(test_images):
    images, _ = test_images
    good = encode(images[0, :, :, 0], "JPEG")
    return request_corpus(good, image_kinds(images[1, :, :, 0]))


@pytest.fixture(scope="module")
def signature(model_base):
    import tensorflow as tf

    return tf.saved_model.load(str(model_base / "1")).signatures[SIGNATURE_KEY]


def test_corpus_covers_every_kind_and_format(corpus):
    names = {name for name, _, _ in corpus}
    assert {"kind-jpeg-cmyk", "kind-png-16bit", "columnar-list", "b64-mime-lf"} <= names
    assert sum(status == 200 for *_, status in corpus) >= 25
    assert sum(status == 400 for *_, status in corpus) >= 30


def test_local_server_answers_as_tf_serving(live_server, corpus, signature):
    mismatches = []
    with httpx.Client(timeout=60) as http:
        for name, body, expected in corpus:
            ref_status, ref = tf_serving_reference.predict(body, signature, INPUT_NAME, OUTPUT_NAME)
            resp = http.post(
                live_server.predict_url, content=body, headers={"content-type": "application/json"}
            )
            got = resp.json()
            if (resp.status_code // 100, ref_status // 100) != (expected // 100,) * 2:
                mismatches.append((name, expected, resp.status_code, ref_status, resp.text[:200]))
                continue
            if expected == 200:
                assert list(got) == list(ref), name  # "predictions" or "outputs"
                (key,) = ref
                np.testing.assert_allclose(
                    np.asarray(got[key], np.float64).reshape(-1, 10) if got[key] else [],
                    np.asarray(ref[key], np.float64).reshape(-1, 10) if ref[key] else [],
                    atol=1e-5,  # float32: oneDNN's sums depend on the batch the server forms
                    err_msg=name,
                )
            else:
                assert isinstance(got.get("error"), str) and len(got["error"]) > 10, name
    assert not mismatches, mismatches


def _clear_images(client, images, n: int) -> list[int]:
    """The first ``n`` indices of ``images`` (uint8 [N, 28, 28, 1]) whose grey PNG the model
    classifies clearly (:func:`small_model.clearly_classified`)."""
    grey = [image_kinds(image[:, :, 0])["png-grey"] for image in images]
    resp = client.post(
        "/v1/models/fashion-mnist:predict", json={"inputs": [{"b64": _b64(b)} for b in grey]}
    )
    return clearly_classified(resp.json()["outputs"], n)


def test_every_image_kind_is_served_like_the_grey_original(client, test_images, signature):
    """CMYK, 16-bit, palette, grey+alpha, progressive ...: 200, same class as the grey PNG
    (on images the model classifies clearly: :data:`small_model.CLEAR_MARGIN`)."""
    images, _ = test_images
    for idx in _clear_images(client, images, 3):
        kinds = image_kinds(images[idx, :, :, 0])
        resp = client.post(
            "/v1/models/fashion-mnist:predict",
            json={"inputs": [{"b64": b} for b in map(_b64, kinds.values())]},
        )
        assert resp.status_code == 200, resp.text
        probs = np.array(resp.json()["outputs"])
        reference = probs[list(kinds).index("png-grey")].argmax()
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
        for name, p in zip(kinds, probs, strict=True):
            if name != "png-1bit":  # dithered to black and white: other pixels, maybe another class
                assert p.argmax() == reference, (idx, name)


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def test_decode_failure_names_the_field_and_the_image_kind(loaded_model):
    """An image that passed the header checks but that TensorFlow cannot decode."""
    req = PredictRequest(
        images=[encode(np.zeros((28, 28), np.uint8), "PNG"), b"\x89PNG\r\n\x1a\nbroken"],
        where=["inputs[0]", "inputs[1]"],
        kinds=["8-bit greyscale PNG 28x28", "8-bit RGB PNG 28x28"],
        columnar=True,
    )
    with pytest.raises(ImageDecodeError) as err:
        asyncio.run(loaded_model.predict(req))
    msg = str(err.value)
    assert msg.startswith("inputs[1]: could not decode this 8-bit RGB PNG 28x28: "), msg
    assert "Graph execution" not in msg
    assert loaded_model.limits == Limits()
