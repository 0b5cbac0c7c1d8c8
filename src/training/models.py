"""The three model variants trained in parallel: ``cnn``, ``dropout`` and ``batch_norm``.

All three share one preprocessing stem, part of the model graph so that training, selection and
serving apply exactly the same arithmetic (no train/serve skew):

    uint8-valued float32 [N, 28, 28, 1] in 0..255
      -> RandomTranslation(+-8%)             (training only: identity when serving)
      -> Rescaling(1/255)                    -> [0, 1]
      -> Normalization(mean 0.2860, std 0.3530)  (train-split pixel statistics)

and output **logits** ``float32 [N, 10]``; the serving signature applies the softmax.
"""

from __future__ import annotations

import training  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from fmnist_common import MODEL_TYPES

PIXEL_MEAN = 0.2860  # train-split mean of pixels scaled to [0, 1]
PIXEL_STD = 0.3530
AUGMENT_SHIFT = 0.08  # fraction of the 28-px side: up to 2.24 px in each direction


def _stem(keras):
    return [
        keras.layers.Input(shape=(28, 28, 1), dtype="float32", name="pixels"),
        # Training-time augmentation only (identity when training=False, so it is not part of
        # the serving computation): shifts of up to ~2 px. Without it the variants reach 100%
        # train accuracy by epoch 10 and stall at ~92% on the test split.
        keras.layers.RandomTranslation(
            AUGMENT_SHIFT, AUGMENT_SHIFT, fill_mode="constant", name="shift"
        ),
        keras.layers.Rescaling(1.0 / 255.0, name="scale_0_1"),
        keras.layers.Normalization(mean=PIXEL_MEAN, variance=PIXEL_STD**2, name="normalize"),
    ]


def _conv(keras, filters: int, batch_norm: bool, name: str):
    # 3x3 convolutions with stride 2 instead of stride 1 + 2x2 max-pooling: the same
    # 28 -> 14 -> 7 feature maps for a quarter of the multiply-adds, which is what makes
    # 2 workers on 2 CPU cores fast (measured by bench/train_bench.py).
    layers = keras.layers
    if not batch_norm:
        return [layers.Conv2D(filters, 3, strides=2, padding="same", activation="relu", name=name)]
    return [
        layers.Conv2D(filters, 3, strides=2, padding="same", use_bias=False, name=name),
        layers.BatchNormalization(momentum=0.9, name=f"{name}_bn"),
        layers.ReLU(name=f"{name}_relu"),
    ]


def build_model(model_type: str, seed: int | None = None):
    """Build an uncompiled tf-keras model.

    Args:
        model_type: one of :data:`MODEL_TYPES`: ``cnn`` (plain CNN), ``dropout`` (the CNN with
            dropout after each block and before the classifier), ``batch_norm`` (the CNN with
            batch normalisation after every convolution).
        seed: optional seed for weight initialisation.

    Returns:
        ``tf_keras.Sequential`` mapping ``float32 [N, 28, 28, 1]`` (0..255) to logits
        ``float32 [N, 10]``.

    Raises:
        ValueError: for an unknown ``model_type``.
    """
    import tf_keras as keras

    if model_type not in MODEL_TYPES:
        raise ValueError(f"unknown model type {model_type!r}; choose one of {MODEL_TYPES}")
    if seed is not None:
        keras.utils.set_random_seed(seed)
    bn = model_type == "batch_norm"
    drop = model_type == "dropout"
    layers = keras.layers
    stack = _stem(keras)
    for block, filters in enumerate((32, 64), start=1):
        stack += _conv(keras, filters, bn, f"conv{block}")
        if drop:
            stack.append(layers.Dropout(0.25, name=f"drop{block}"))
    stack.append(layers.Flatten(name="flatten"))
    if bn:
        stack += [
            layers.Dense(128, use_bias=False, name="dense"),
            layers.BatchNormalization(momentum=0.9, name="dense_bn"),
            layers.ReLU(name="dense_relu"),
        ]
    else:
        stack.append(layers.Dense(128, activation="relu", name="dense"))
    if drop:
        stack.append(layers.Dropout(0.5, name="drop_dense"))
    stack.append(layers.Dense(10, name="logits"))
    return keras.Sequential(stack, name=model_type)
