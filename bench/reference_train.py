"""The training benchmark's fixed reference: the ``batch_norm`` variant and the full budget as
they were on 2026-11-29 (issue 11's baseline), run by today's trainer.

    python bench/reference_train.py --model-type batch_norm <other training.train arguments>

The benchmark launches this module exactly as it launches ``training.train`` (2 replicas,
``TF_CONFIG``), adding :data:`REFERENCE_OPTIONS`. Only the model differs from the trainer's
own code path: :func:`build_reference_model` is passed as its model builder. Kept here, and
only here, so that the time-to-accuracy target ("at most twice the reference's wall time",
bench/README.md) keeps one fixed yardstick while the variants change.
"""

from __future__ import annotations

import sys

import training  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from training.models import PIXEL_MEAN, PIXEL_STD

# That day's budget and trainer settings, every training option that sets them: 18 epochs x 256
# images per replica on all training images, Adam 0.003 with one warm-up epoch then cosine
# decay, validation on 2,000 test images after each epoch, the shift augmentation inside the
# model (so none in tf.data), no label smoothing, ring all-reduce, float32 compute.
REFERENCE_OPTIONS = {
    "--epochs": 18,
    "--batch-size-per-replica": 256,
    "--learning-rate": 0.003,
    "--lr-schedule": "cosine",
    "--warmup-epochs": 1,
    "--train-examples": 0,
    "--validation-examples": 2000,
    "--augment": "none",
    "--label-smoothing": 0.0,
    "--collective": "ring",
    "--precision": "float32",
}


def build_reference_model(model_type: str = "batch_norm", seed: int | None = None):
    """That day's ``batch_norm`` model (``model_type`` is ignored; it names the output).

    ``float32 [N, 28, 28, 1]`` (0..255) -> RandomTranslation(+-8 %, training only) -> [0, 1]
    -> normalised -> two 3x3 stride-2 convolutions (32, 64 filters) with batch norm -> Dense
    128 with batch norm -> logits ``float32 [N, 10]``; 422,314 parameters.
    """
    import tf_keras as keras

    if seed is not None:
        keras.utils.set_random_seed(seed)
    layers = keras.layers
    stack = [
        layers.Input(shape=(28, 28, 1), dtype="float32", name="pixels"),
        layers.RandomTranslation(0.08, 0.08, fill_mode="constant", name="shift"),
        layers.Rescaling(1.0 / 255.0, name="scale_0_1"),
        layers.Normalization(mean=PIXEL_MEAN, variance=PIXEL_STD**2, name="normalize"),
    ]
    for filters in (32, 64):
        stack += [
            layers.Conv2D(filters, 3, strides=2, padding="same", use_bias=False),
            layers.BatchNormalization(momentum=0.9),
            layers.ReLU(),
        ]
    stack += [
        layers.Flatten(),
        layers.Dense(128, use_bias=False),
        layers.BatchNormalization(momentum=0.9),
        layers.ReLU(),
        layers.Dense(10, name="logits"),
    ]
    return keras.Sequential(stack, name="reference")


def cli(argv: list[str] | None = None) -> int:
    """``training.train``'s entry point with :func:`build_reference_model` as the model."""
    from training.train import cli as train_cli

    return train_cli(argv, model_builder=build_reference_model)


if __name__ == "__main__":
    sys.exit(cli())
