"""Export a trained model as a SavedModel that TensorFlow Serving / KServe load as-is.

The ``serving_default`` signature (TF Serving REST "row" format, KServe V1 protocol):

    inputs:  image_bytes    tf.string  [None]      encoded JPEG or PNG, any size and kind
                                                   (``{"b64": ...}`` in JSON requests)
    outputs: probabilities  tf.float32 [None, 10]  softmax over CLASS_NAMES (averaged over
                                                   the image and its left-right mirror for a
                                                   model trained with mirroring); an empty
                                                   batch gives [0, 10] on every CPU

Decoding follows :func:`decode_images`: decode to one grey channel, resize to 28x28 with area
averaging when the size differs, then :func:`probabilities` (the model's own preprocessing
layers, then the network). A 28x28 grey PNG of a
test image therefore reaches the network with exactly the training pixels. Every JPEG/PNG kind
that Pillow and browsers decode is accepted: grey/RGB/CMYK/YCCK, baseline or progressive JPEG;
1/2/4/8/16-bit grey, RGB, palette, grey+alpha or RGBA PNG, interlaced or not (alpha is dropped,
16-bit samples keep their high byte). Anything else (GIF, BMP, WebP, random bytes) fails with
``InvalidArgumentError`` naming the accepted formats, in TF Serving as in the local server.

The input name ends in ``_bytes``, the convention TF Serving / Cloud AI Platform use for binary
inputs sent as ``{"b64": ...}``.
"""

from __future__ import annotations

import os

import training  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from fmnist_common import IMAGE_SIZE, INPUT_NAME, NUM_CLASSES, OUTPUT_NAME, SIGNATURE_KEY

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
UNSUPPORTED_FORMAT_MESSAGE = "image is not a JPEG or PNG (the only formats accepted)"


def decode_images(image_bytes):
    """Decode a batch of encoded images to the model's input.

    Args:
        image_bytes: ``tf.string [N]`` encoded images.

    Returns:
        ``tf.float32 [N, 28, 28, 1]`` with pixel values 0..255.

    Raises:
        tf.errors.InvalidArgumentError (at run time): bytes that are not a JPEG/PNG, or a
            corrupt/truncated one.
    """
    import tensorflow as tf

    def _jpeg(data):
        # The accurate integer IDCT, as libjpeg-turbo/Pillow clients decode by default, so a
        # client that checks an image locally sees the pixels the model sees. libjpeg converts
        # 4-component (Adobe CMYK/YCCK) JPEGs to RGB only, not straight to grey.
        return tf.cond(
            tf.equal(tf.io.extract_jpeg_shape(data)[2], 4),
            lambda: tf.image.rgb_to_grayscale(
                tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE")
            ),
            lambda: tf.io.decode_jpeg(data, channels=1, dct_method="INTEGER_ACCURATE"),
        )

    def _not_supported():
        check = tf.debugging.Assert(False, [UNSUPPORTED_FORMAT_MESSAGE])
        with tf.control_dependencies([check]):
            return tf.zeros([IMAGE_SIZE, IMAGE_SIZE, 1], tf.uint8)

    def _decode(data):
        is_png = tf.equal(tf.strings.substr(data, 0, len(PNG_SIGNATURE)), PNG_SIGNATURE)
        return tf.cond(
            tf.io.is_jpeg(data),
            lambda: _jpeg(data),
            lambda: tf.cond(
                is_png,
                lambda: tf.io.decode_image(data, channels=1, expand_animations=False),
                _not_supported,
            ),
        )

    def _one(data):
        img = _decode(data)
        img = tf.ensure_shape(img, [None, None, 1])
        shape = tf.shape(img)
        same = tf.logical_and(tf.equal(shape[0], IMAGE_SIZE), tf.equal(shape[1], IMAGE_SIZE))
        return tf.cond(
            same,
            lambda: tf.cast(tf.reshape(img, [IMAGE_SIZE, IMAGE_SIZE, 1]), tf.float32),
            lambda: tf.image.resize(img, [IMAGE_SIZE, IMAGE_SIZE], method="area"),
        )

    return tf.map_fn(
        _one,
        image_bytes,
        fn_output_signature=tf.TensorSpec([IMAGE_SIZE, IMAGE_SIZE, 1], tf.float32),
    )


def probabilities(model, pixels, mirror_average: bool):
    """Class probabilities: the softmax of the model's logits or, with ``mirror_average``
    (left-right test-time augmentation), the mean of the softmax for each image and for its
    mirror image.

    Mirror averaging is right for a model trained with random left-right flips
    (``--augment`` with ``flip``, :func:`training.train.augment`): every Fashion-MNIST class is
    left-right symmetric as a class (a mirrored shoe is a shoe), so the two views are equally
    likely inputs, and averaging them raised test accuracy by 0.1-0.3 points on the full
    budget (docs/results.md). For a model trained without flips the mirror is an unseen input:
    the 2026-11-29 reference lost 1.7 points with it. Both views go through the model as one
    batch of ``2N`` in inference mode, so no example influences another.

    Args:
        model: a tf-keras model mapping ``float32 [N, 28, 28, 1]`` (0..255) to logits
            ``float32 [N, 10]``.
        pixels: ``float32 [N, 28, 28, 1]``, pixel values 0..255.
        mirror_average: average over the image and its mirror.

    Returns:
        ``float32 [N, 10]``; each row sums to 1. This is what the serving signature returns,
        what selection scores and what the server serves.
    """
    import tensorflow as tf

    pixels = tf.convert_to_tensor(pixels, tf.float32)
    if not mirror_average:
        return tf.nn.softmax(model(pixels, training=False), axis=-1)
    both = tf.concat([pixels, tf.reverse(pixels, axis=[2])], axis=0)
    views = tf.reshape(tf.nn.softmax(model(both, training=False), axis=-1), [2, -1, 10])
    return tf.reduce_mean(views, axis=0)


def build_serving_module(model, mirror_average: bool):
    """Wrap a Keras model (logits ``[N, 10]``) in a ``tf.Module`` with the serving signature
    (``mirror_average``: see :func:`probabilities`)."""
    import tensorflow as tf

    class ServingModule(tf.Module):
        def __init__(self, keras_model):
            super().__init__()
            self.model = keras_model

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=INPUT_NAME)])
        def serve(self, image_bytes):
            # An empty batch never reaches the network: oneDNN's kernels answer N = 0 with
            # [0, 10] on some CPUs (AVX2) and crash on others (AVX-512), so the graph answers
            # it itself, the same on every CPU and on TF Serving.
            probs = tf.cond(
                tf.size(image_bytes) > 0,
                lambda: probabilities(self.model, decode_images(image_bytes), mirror_average),
                lambda: tf.zeros([0, NUM_CLASSES], tf.float32),
            )
            return {OUTPUT_NAME: probs}

    return ServingModule(model)


def export_saved_model(
    model, export_dir: str | os.PathLike, *, mirror_average: bool = False
) -> str:
    """Write ``model`` as a SavedModel whose only signature is ``serving_default``.

    Args:
        model: a tf-keras model mapping ``float32 [N, 28, 28, 1]`` (0..255) to logits.
        export_dir: directory to create; must not exist or be empty. Callers that publish
            (selection) write to a staging dir and rename, see :mod:`training.select`.
        mirror_average: serve the mean over the image and its mirror (:func:`probabilities`);
            the trainer sets it for models trained with random flips.

    Returns:
        ``export_dir`` as a string.
    """
    import tensorflow as tf

    module = build_serving_module(model, mirror_average)
    tf.saved_model.save(
        module,
        os.fspath(export_dir),
        signatures={SIGNATURE_KEY: module.serve},
    )
    return os.fspath(export_dir)
