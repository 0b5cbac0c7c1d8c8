"""Model variants and the serving signature (no train/serve skew)."""

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image
from small_model import clearly_classified

from training.data import encode_images
from training.export import INPUT_NAME, OUTPUT_NAME, SIGNATURE_KEY, decode_images, probabilities
from training.models import MODEL_TYPES, build_model


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_every_variant_maps_images_to_ten_logits(model_type):
    model = build_model(model_type, seed=0)
    out = model(np.zeros((3, 28, 28, 1), np.float32), training=False)
    assert out.shape == (3, 10)
    assert out.dtype == tf.float32


def test_variants_differ_as_named():
    kinds = {t: [type(layer).__name__ for layer in build_model(t).layers] for t in MODEL_TYPES}
    assert "Dropout" in kinds["dropout"] and "Dropout" not in kinds["cnn"]
    assert "BatchNormalization" in kinds["batch_norm"]
    assert "BatchNormalization" not in kinds["cnn"]


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_every_variant_starts_with_the_full_resolution_stem(model_type):
    """The 8-filter stride-1 stem, then the two stride-2 convolutions (models' docstring)."""
    from training.models import FILTERS, STEM_FILTERS

    model = build_model(model_type)
    convs = [layer for layer in model.layers if type(layer).__name__ == "Conv2D"]
    assert [c.name for c in convs] == ["stem", "conv1", "conv2"]
    assert [c.strides for c in convs] == [(1, 1), (2, 2), (2, 2)]
    assert [c.filters for c in convs] == [STEM_FILTERS, *FILTERS]
    assert model.get_layer("stem").output_shape == (None, 28, 28, STEM_FILTERS)


def test_unknown_model_type_is_rejected():
    with pytest.raises(ValueError, match="unknown model type"):
        build_model("resnet")


def test_decoding_a_28x28_png_gives_the_training_pixels(test_slice):
    images, _ = test_slice
    decoded = decode_images(tf.constant(encode_images(images[:20], "png"))).numpy()
    np.testing.assert_array_equal(decoded, images[:20].astype(np.float32))


def _signature(path):
    return tf.saved_model.load(str(path)).signatures[SIGNATURE_KEY]


def test_signature_shapes_and_names(exported_model):
    sig = _signature(exported_model)
    (spec,) = sig.structured_input_signature[1].values()
    assert spec.dtype == tf.string and spec.shape.as_list() == [None]
    assert INPUT_NAME in sig.structured_input_signature[1]
    assert sig.structured_outputs[OUTPUT_NAME].shape.as_list() == [None, 10]


# Runs in a fresh interpreter: oneDNN reads these before TensorFlow loads.
_SIGNATURE_PROBE = """
import json, sys
import numpy as np, tensorflow as tf
sig = tf.saved_model.load(sys.argv[1]).signatures[sys.argv[2]]
empty = sig(**{sys.argv[3]: tf.constant([], tf.string)})[sys.argv[4]].numpy()
one = sig(**{sys.argv[3]: tf.constant([open(sys.argv[5], "rb").read()])})[sys.argv[4]].numpy()
print(json.dumps({"empty": list(empty.shape), "one": one.tolist()}))
"""
# The instruction sets of the machines this project runs on, as oneDNN picks its kernels
# (ONEDNN_MAX_CPU_ISA caps them below what the CPU has); TF_ENABLE_ONEDNN_OPTS=0 is Eigen only.
ISA_ENVIRONMENTS = {
    "default": {},
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "no-onednn": {"TF_ENABLE_ONEDNN_OPTS": "0"},
}


@pytest.mark.parametrize(
    ("export", "mirror"), [("exported_model", False), ("mirrored_export", True)]
)
def test_signature_answers_zero_images_with_zero_rows_on_every_instruction_set(
    request, tmp_path, test_slice, export, mirror
):
    """An empty batch is ``[0, 10]``, never an error, whichever kernels oneDNN picks (it once
    crashed on AVX-512 and answered on AVX2), and one image gets the same answer everywhere."""
    import json
    import os
    import subprocess
    import sys

    image = tmp_path / "one.png"
    image.write_bytes(encode_images(test_slice[0][:1], "png")[0])
    path = str(request.getfixturevalue(export))
    answers = {}
    for name, extra in ISA_ENVIRONMENTS.items():
        proc = subprocess.run(
            [sys.executable, "-c", _SIGNATURE_PROBE, path, SIGNATURE_KEY, INPUT_NAME, OUTPUT_NAME,
             str(image)],
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **extra},
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, (name, proc.stderr[-3000:])
        answers[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, got in answers.items():
        assert got["empty"] == [0, 10], (name, mirror)
        np.testing.assert_allclose(got["one"], answers["default"]["one"], atol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    ("export", "mirror_average"), [("exported_model", False), ("mirrored_export", True)]
)
def test_signature_accuracy_equals_in_process_accuracy(
    request, trained_model, test_slice, export, mirror_average
):
    images, labels = test_slice
    in_process = probabilities(trained_model, images.astype(np.float32), mirror_average).numpy()
    exported = request.getfixturevalue(export)
    served = _signature(exported)(**{INPUT_NAME: tf.constant(encode_images(images, "png"))})
    served = served[OUTPUT_NAME].numpy()
    acc_in = np.mean(in_process.argmax(1) == labels)
    acc_served = np.mean(served.argmax(1) == labels)
    assert acc_in > 0.5, "fixture model should be well above chance (0.1)"
    assert acc_served == acc_in
    np.testing.assert_allclose(served, in_process, atol=1e-5)
    np.testing.assert_allclose(served.sum(axis=1), 1.0, atol=1e-5)


def test_mirror_averaged_export_answers_an_image_and_its_mirror_alike(
    mirrored_export, exported_model, trained_model, test_slice
):
    images = test_slice[0][:50]
    mirrored = images[:, :, ::-1]

    def serve(path, x):
        sig = _signature(path)
        return sig(**{INPUT_NAME: tf.constant(encode_images(x, "png"))})[OUTPUT_NAME].numpy()

    served = serve(mirrored_export, images)
    np.testing.assert_allclose(served, serve(mirrored_export, mirrored), atol=1e-5)
    views = [
        tf.nn.softmax(trained_model(x.astype(np.float32), training=False))
        for x in (images, mirrored)
    ]
    np.testing.assert_allclose(served, (views[0] + views[1]).numpy() / 2, atol=1e-5)
    # the plain export (a model trained without flips) answers each view on its own
    assert np.abs(serve(exported_model, images) - serve(exported_model, mirrored)).max() > 1e-3
    assert np.abs((views[0] - views[1]).numpy()).max() > 1e-3, "the two views should differ"


def test_jpeg_accuracy_matches_in_process_on_the_same_decoded_pixels(
    exported_model, trained_model, test_slice
):
    images, labels = test_slice
    jpegs = encode_images(images, "jpeg")
    pixels = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("L")) for b in jpegs])[
        ..., None
    ]
    in_process = probabilities(trained_model, pixels.astype(np.float32), False).numpy().argmax(1)
    served = _signature(exported_model)(**{INPUT_NAME: tf.constant(jpegs)})[OUTPUT_NAME].numpy()
    # TF's and Pillow's libjpeg builds may round a pixel differently: allow 1 image in 500.
    assert abs(np.mean(served.argmax(1) == labels) - np.mean(in_process == labels)) <= 1 / 500


def test_colour_and_resized_inputs_are_accepted(exported_model, test_slice):
    """On an image the model classifies clearly (a lead of 0.3 over the second class): the
    JPEG below moves pixels by about one grey level, which can flip a near tie."""
    images, _ = test_slice
    signature = _signature(exported_model)
    grey_pngs = encode_images(images[:50], "png")
    (clear,) = clearly_classified(signature(**{INPUT_NAME: tf.constant(grey_pngs)})[OUTPUT_NAME], 1)
    grey = images[clear, :, :, 0]
    big_rgb = np.stack([np.kron(grey, np.ones((3, 3), np.uint8))] * 3, axis=-1)
    bufs = []
    for arr, fmt in ((big_rgb, "PNG"), (big_rgb, "JPEG"), (grey, "PNG")):
        b = io.BytesIO()
        Image.fromarray(arr).save(b, format=fmt)
        bufs.append(b.getvalue())
    probs = signature(**{INPUT_NAME: tf.constant(bufs)})[OUTPUT_NAME].numpy()
    assert probs.shape == (3, 10)
    assert len(set(probs.argmax(1))) == 1, "same garment in colour/large/grey -> same class"


def test_non_image_bytes_fail_with_invalid_argument(exported_model):
    with pytest.raises(tf.errors.InvalidArgumentError):
        _signature(exported_model)(**{INPUT_NAME: tf.constant([b"definitely not an image"])})


def _save(img, fmt, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def _ycck(cmyk_jpeg: bytes) -> bytes:
    """The same JPEG flagged YCCK (Adobe APP14 transform 2; Pillow writes only CMYK = 0)."""
    data = bytearray(cmyk_jpeg)
    at = data.find(b"Adobe") + 11  # "Adobe", version, flags0, flags1, then the transform byte
    assert data[at] == 0
    data[at] = 2
    return bytes(data)


def test_signature_decoder_reads_every_jpeg_and_png_kind(test_slice):
    """What TF Serving runs: CMYK/progressive JPEG, 16-bit/palette/grey+alpha PNG decode to
    the grey pixels Pillow (or a browser) shows, within JPEG/palette rounding."""
    grey = test_slice[0][0, :, :, 0]
    rgb = Image.fromarray(np.stack([grey, grey // 2, 255 - grey], axis=-1))
    g = Image.fromarray(grey)
    expected_rgb = np.asarray(rgb.convert("L"), np.float32)
    cases = {  # name: (bytes, expected grey pixels, tolerance)
        "cmyk-jpeg": (_save(rgb.convert("CMYK"), "JPEG", quality=100), expected_rgb, 8),
        "progressive-cmyk-jpeg": (
            _save(rgb.convert("CMYK"), "JPEG", quality=100, progressive=True),
            expected_rgb,
            8,
        ),
        "progressive-grey-jpeg": (_save(g, "JPEG", quality=100, progressive=True), grey, 2),
        "png-16bit": (_save(Image.fromarray(grey.astype(np.uint16) * 257), "PNG"), grey, 0),
        "png-grey-alpha": (_save(g.convert("LA"), "PNG"), grey, 0),
        "png-palette": (_save(rgb.convert("P"), "PNG"), None, 0),
        "png-1bit": (_save(g.convert("1"), "PNG"), np.asarray(g.convert("1"), np.float32) * 255, 0),
        "ycck-jpeg": (_ycck(_save(rgb.convert("CMYK"), "JPEG", quality=100)), None, 0),
    }
    decoded = decode_images(tf.constant([b for b, _, _ in cases.values()])).numpy()[..., 0]
    for (name, (data, want, tol)), got in zip(cases.items(), decoded, strict=True):
        if want is None:  # palette, YCCK: what Pillow shows for these very bytes
            want = np.asarray(Image.open(io.BytesIO(data)).convert("RGB").convert("L"), np.float32)
            tol = 1
        assert np.abs(got - np.asarray(want, np.float32)).max() <= tol, name


@pytest.mark.parametrize("fmt", ["GIF", "BMP", "WEBP", "TIFF"])
def test_signature_refuses_other_formats_naming_the_accepted_ones(exported_model, fmt):
    data = _save(Image.new("L", (28, 28)), fmt)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a JPEG or PNG"):
        _signature(exported_model)(**{INPUT_NAME: tf.constant([data])})
