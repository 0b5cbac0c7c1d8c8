"""training.train's options and the float32 export copy (no training run)."""

import argparse

import numpy as np
import pytest
import tensorflow as tf

from fmnist_common.cli import ConfigError
from training.models import build_model
from training.train import build_parser, float32_copy

REQUIRED = ["--model-type", "cnn", "--saved-model-dir", "m", "--checkpoint-dir", "c"]


@pytest.mark.parametrize("pair", [("5", "3"), ("0", "5"), ("5", "0"), ("-1", "2")])
def test_profile_batches_outside_1_first_last_are_usage_errors(pair, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*REQUIRED, "--profile-batches", *pair])
    assert exc.value.code == 2
    assert "--profile-batches" in capsys.readouterr().err


def test_profile_batches_defaults_to_none_and_accepts_a_range():
    assert build_parser().parse_args(REQUIRED).profile_batches == (0, 0)
    args = build_parser().parse_args([*REQUIRED, "--profile-batches", "3", "7"])
    assert args.profile_batches == (3, 7)


@pytest.mark.parametrize("value", ["", "two", "-1", "1.5"])
def test_a_bad_intra_op_threads_variable_is_a_usage_error_naming_the_option(
    value, monkeypatch, capsys
):
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", value)
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(REQUIRED)
    assert exc.value.code == 2
    assert "--intra-op-threads" in capsys.readouterr().err
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "3")
    assert build_parser().parse_args(REQUIRED).intra_op_threads == 3


@pytest.fixture
def mixed_policy():
    import tf_keras as keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def test_float32_copy_keeps_the_weights_and_computes_in_float32(mixed_policy):
    model = build_model("batch_norm", seed=3)
    assert model.layers[3].compute_dtype == "bfloat16"
    args = argparse.Namespace(model_type="batch_norm")
    copy = float32_copy(model, build_model, args, tf.distribute.get_strategy())
    assert all(layer.compute_dtype == "float32" for layer in copy.layers)
    for a, b in zip(model.get_weights(), copy.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_float32_copy_refuses_a_builder_that_pins_bfloat16(mixed_policy):
    import tf_keras as keras

    def pinned(model_type, seed=None):
        return keras.Sequential(
            [
                keras.layers.Input((28, 28, 1)),
                keras.layers.Flatten(),
                keras.layers.Dense(10, dtype="mixed_bfloat16", name="pinned"),
            ]
        )

    args = argparse.Namespace(model_type="cnn")
    with pytest.raises(ConfigError, match="pinned"):
        float32_copy(pinned(None), pinned, args, tf.distribute.get_strategy())
