"""Export a trained model as a SavedModel that TensorFlow Serving / KServe load as-is.

The ``serving_default`` signature (TF Serving REST "row" format, KServe V1 protocol):

    inputs:  image_bytes    tf.string  [None]      encoded JPEG/PNG/GIF/BMP, grey or colour,
                                                   any size (``{"b64": ...}`` in JSON requests)
    outputs: probabilities  tf.float32 [None, 10]  softmax over CLASS_NAMES

Decoding follows :func:`decode_images`: decode to one grey channel (colour is converted with
the ITU-R 601 luma weights of ``tf.io.decode_image(channels=1)``), resize to 28x28 with area
averaging when the size differs, then the model's own preprocessing stem. A 28x28 grey PNG of a
test image therefore reaches the network with exactly the training pixels.

The input name ends in ``_bytes``, the convention TF Serving / Cloud AI Platform use for binary
inputs sent as ``{"b64": ...}``.
"""

from __future__ import annotations

import os

import training  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from training.data import IMAGE_SIZE

SIGNATURE_KEY = "serving_default"
INPUT_NAME = "image_bytes"
OUTPUT_NAME = "probabilities"


def decode_images(image_bytes):
    """Decode a batch of encoded images to the model's input.

    Args:
        image_bytes: ``tf.string [N]`` encoded images.

    Returns:
        ``tf.float32 [N, 28, 28, 1]`` with pixel values 0..255.

    Raises:
        tf.errors.InvalidArgumentError (at run time): bytes that are not a supported image.
    """
    import tensorflow as tf

    def _decode(data):
        # JPEG: the accurate integer IDCT, as libjpeg-turbo/Pillow clients decode by default,
        # so a client that checks an image locally sees the pixels the model sees.
        return tf.cond(
            tf.io.is_jpeg(data),
            lambda: tf.io.decode_jpeg(data, channels=1, dct_method="INTEGER_ACCURATE"),
            lambda: tf.io.decode_image(data, channels=1, expand_animations=False),
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


def build_serving_module(model):
    """Wrap a Keras model (logits ``[N, 10]``) in a ``tf.Module`` with the serving signature."""
    import tensorflow as tf

    class ServingModule(tf.Module):
        def __init__(self, keras_model):
            super().__init__()
            self.model = keras_model

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=INPUT_NAME)])
        def serve(self, image_bytes):
            logits = self.model(decode_images(image_bytes), training=False)
            return {OUTPUT_NAME: tf.nn.softmax(logits, axis=-1)}

        @tf.function(
            input_signature=[
                tf.TensorSpec([None, IMAGE_SIZE, IMAGE_SIZE, 1], tf.float32, name="pixels")
            ]
        )
        def serve_pixels(self, pixels):
            return {OUTPUT_NAME: tf.nn.softmax(self.model(pixels, training=False), axis=-1)}

    return ServingModule(model)


def export_saved_model(model, export_dir: str | os.PathLike) -> str:
    """Write ``model`` as a SavedModel with ``serving_default`` (bytes) and ``serve_pixels``.

    Args:
        model: a tf-keras model mapping ``float32 [N, 28, 28, 1]`` (0..255) to logits.
        export_dir: directory to create; must not exist or be empty. Callers that publish
            (selection) write to a staging dir and rename, see :mod:`training.select`.

    Returns:
        ``export_dir`` as a string.
    """
    import tensorflow as tf

    module = build_serving_module(model)
    tf.saved_model.save(
        module,
        os.fspath(export_dir),
        signatures={SIGNATURE_KEY: module.serve, "serve_pixels": module.serve_pixels},
    )
    return os.fspath(export_dir)
