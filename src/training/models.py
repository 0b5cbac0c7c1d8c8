"""The three model variants trained in parallel: ``cnn``, ``dropout`` and ``batch_norm``.

All three share one backbone and one preprocessing layer pair that is part of the model graph, so
that training, selection and serving apply exactly the same arithmetic (no train/serve skew;
the random augmentation runs in ``tf.data`` during training only, see
:func:`training.train.augment`):

    uint8-valued float32 [N, 28, 28, 1] in 0..255
      -> Rescaling(1/255)                        -> [0, 1]
      -> Normalization(mean 0.2860, std 0.3530)  (train-split pixel statistics)
      -> 3x3 conv, 8, stride 1                   28x28, full resolution ("stem")
      -> 3x3 conv, 48, stride 2                  28x28 -> 14x14
      -> 3x3 conv, 96, stride 2                  14x14 -> 7x7
      -> flatten -> dense 256 -> dense 10

and output **logits** ``float32 [N, 10]``; the serving signature applies the softmax. The
widths were chosen by measurement (docs/results.md): 32/64/128 reached about 93 %, 48/96/256
about 93.7 % in 1.5x the time; a full-resolution first stage of 48 filters reached no more in
2.7x. The narrow full-resolution stem (8 filters) was chosen by a recipe screen
(docs/results.md, 2026-12-04 evening): it costs 1.28-1.33x the time per image in one process
(less in the 2-replica trainer, where the all-reduce's share stays), and reaches in 16 epochs
what the network without it reached in 32.
"""

from __future__ import annotations

import training  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from fmnist_common import MODEL_TYPES

PIXEL_MEAN = 0.2860  # train-split mean of pixels scaled to [0, 1]
PIXEL_STD = 0.3530
STEM_FILTERS = 8  # the stride-1 convolution at full resolution
FILTERS = (48, 96)  # the two stride-2 convolution blocks
DENSE_UNITS = 256


def _preprocessing(keras):
    return [
        keras.layers.Input(shape=(28, 28, 1), dtype="float32", name="pixels"),
        keras.layers.Rescaling(1.0 / 255.0, name="scale_0_1"),
        keras.layers.Normalization(mean=PIXEL_MEAN, variance=PIXEL_STD**2, name="normalize"),
    ]


def _conv(keras, filters: int, batch_norm: bool, name: str, strides: int = 2):
    # 3x3 convolutions with stride 2 instead of stride 1 + 2x2 max-pooling: the same
    # 28 -> 14 -> 7 feature maps for a quarter of the multiply-adds, which is what makes
    # 2 workers on 2 CPU cores fast (measured by bench/train_bench.py).
    layers = keras.layers
    if not batch_norm:
        return [
            layers.Conv2D(filters, 3, strides=strides, padding="same", activation="relu", name=name)
        ]
    return [
        layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False, name=name),
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
    stack = _preprocessing(keras) + _conv(keras, STEM_FILTERS, bn, "stem", strides=1)
    for block, filters in enumerate(FILTERS, start=1):
        stack += _conv(keras, filters, bn, f"conv{block}")
        if drop:
            stack.append(layers.Dropout(0.25, name=f"drop{block}"))
    stack.append(layers.Flatten(name="flatten"))
    if bn:
        stack += [
            layers.Dense(DENSE_UNITS, use_bias=False, name="dense"),
            layers.BatchNormalization(momentum=0.9, name="dense_bn"),
            layers.ReLU(name="dense_relu"),
        ]
    else:
        stack.append(layers.Dense(DENSE_UNITS, activation="relu", name="dense"))
    if drop:
        stack.append(layers.Dropout(0.5, name="drop_dense"))
    # float32 logits whatever the policy: the loss and the softmax need the precision
    stack.append(layers.Dense(10, name="logits", dtype="float32"))
    return keras.Sequential(stack, name=model_type)
