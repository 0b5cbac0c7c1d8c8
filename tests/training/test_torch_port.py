"""The PyTorch variant computes what the tf-keras ``batch_norm`` model computes: the network
(:mod:`training.torch_model`), the weight port and the candidate export
(:mod:`training.torch_export`), and the trainer's augmentation and learning-rate schedule
(:mod:`training.torch_train`), on real Fashion-MNIST images."""

from __future__ import annotations

import argparse
import itertools

import numpy as np
import pytest
import tensorflow as tf
import torch

from fmnist_common import INPUT_NAME, OUTPUT_NAME, SIGNATURE_KEY
from training.data import encode_images

# training.torch_model must be imported before any torch optimizer exists in a process that
# has TensorFlow (its _avoid_llvm_clash); these imports do so
from training.torch_export import TORCHSCRIPT_PATH, export_pytorch_candidate, to_keras
from training.torch_model import BN_EPSILON, BN_MOMENTUM, SAME_PAD, build_torch_model

PARITY_ATOL = 1e-4  # logits (magnitude ~5): float32 kernels of TF and torch sum in other orders
PROBS_ATOL = 1e-5


def _nchw(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(images).permute(0, 3, 1, 2).float()


@pytest.fixture(scope="module")
def torch_model(data_dir):
    """The torch network after 6 Adam steps in train mode on 384 real training images, in
    eval mode: trained weights and non-trivial running batch-norm statistics."""
    from training.data import load_numpy

    x, y = load_numpy("train", data_dir, 384)
    model = build_torch_model(seed=3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)
    images, labels = _nchw(x), torch.from_numpy(y)
    for batch in torch.split(torch.arange(len(x)), 64):
        loss = torch.nn.functional.cross_entropy(model(images[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def images(test_slice) -> np.ndarray:
    """200 real test images, uint8 [200, 28, 28, 1]."""
    return test_slice[0][:200]


def _torch_logits(model, images: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(_nchw(images)).numpy()


def _keras_logits(keras_model, images: np.ndarray) -> np.ndarray:
    return keras_model(images.astype(np.float32), training=False).numpy()


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_torch_network_has_the_keras_layers_and_hyperparameters(torch_model):
    keras_model = to_keras(torch_model)
    assert sum(p.numel() for p in torch_model.parameters()) == sum(
        int(np.prod(w.shape)) for w in keras_model.trainable_weights
    )
    for name in ("stem_bn", "conv1_bn", "conv2_bn", "dense_bn"):
        keras_bn, torch_bn = keras_model.get_layer(name), getattr(torch_model, name)
        assert torch_bn.eps == pytest.approx(keras_bn.epsilon) == BN_EPSILON
        assert torch_bn.momentum == pytest.approx(1 - keras_bn.momentum) == BN_MOMENTUM
    for name, stride in (("stem", 1), ("conv1", 2), ("conv2", 2)):
        assert keras_model.get_layer(name).padding == "same"
        want = (stride, stride)
        assert keras_model.get_layer(name).strides == getattr(torch_model, name).stride == want
    # the running statistics the parity test relies on really moved off their initial values
    assert not torch.allclose(torch_model.conv1_bn.running_var, torch.ones(48), atol=1e-2)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_ported_keras_model_gives_the_torch_logits(torch_model, images, layout):
    """Also for weights in the channels_last layout the trainer uses (strided tensors)."""
    import copy

    model = copy.deepcopy(torch_model)
    if layout == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        assert not model.conv2.weight.is_contiguous()  # really strided as NHWC
    want = _torch_logits(torch_model, images)
    got = _keras_logits(to_keras(model), images)
    assert np.abs(got - want).max() <= PARITY_ATOL
    assert np.array_equal(got.argmax(1), want.argmax(1))
    assert np.abs(want).max() > 1.0  # logits of a trained model, not all near 0


@pytest.mark.parametrize("mistake", ["flatten_order", "symmetric_padding", "torch_bn_eps"])
def test_each_usual_port_mistake_breaks_parity(torch_model, images, mistake):
    """The parity tolerance is tight enough to catch each of the three classic port bugs."""
    import copy

    keras_model = to_keras(torch_model)
    wrong = copy.deepcopy(torch_model)
    if mistake == "flatten_order":  # the dense rows left in torch's (C, H, W) order
        keras_model.get_layer("dense").set_weights([wrong.dense.weight.detach().numpy().T])
    elif mistake == "symmetric_padding":  # torch's padding=1: 1 row/column on each side
        wrong.same_pad = (1, 1, 1, 1)
    else:  # torch's default epsilon
        for name in ("stem_bn", "conv1_bn", "conv2_bn", "dense_bn"):
            getattr(wrong, name).eps = 1e-5
    diff = np.abs(_keras_logits(keras_model, images) - _torch_logits(wrong, images)).max()
    assert diff > 10 * PARITY_ATOL, f"{mistake}: max difference {diff}"


def test_port_refuses_a_network_that_computes_differently(torch_model):
    import copy

    wrong = copy.deepcopy(torch_model)
    wrong.dense_bn.eps = 1e-5
    with pytest.raises(ValueError, match="epsilon"):
        to_keras(wrong)
    wrong = copy.deepcopy(torch_model)
    wrong.same_pad = (1, 1, 1, 1)
    with pytest.raises(ValueError, match="padding"):
        to_keras(wrong)
    for attribute, value in (
        ("padding", (0, 0)),
        ("padding_mode", "reflect"),
        ("dilation", (2, 2)),
    ):
        wrong = copy.deepcopy(torch_model)
        setattr(wrong.stem, attribute, value)  # "valid" (26x26 out), mirrored border, dilated
        with pytest.raises(ValueError, match="stem padding"):
            to_keras(wrong)
    assert SAME_PAD == (0, 1, 0, 1)


def test_a_checkpoint_of_another_network_is_a_one_line_error(torch_model, tmp_path):
    """A state_dict without the stem (what the network wrote before it) is refused with a
    ConfigError naming the checkpoint, on resume and on export (training.torch_train)."""
    from fmnist_common.cli import ConfigError
    from training.torch_train import load_model_state

    state = {k: v for k, v in torch_model.state_dict().items() if not k.startswith("stem")}
    with pytest.raises(ConfigError, match=r"checkpoint .*epoch-002.pt holds another network"):
        load_model_state(build_torch_model(1), {"model": state}, tmp_path / "epoch-002.pt")
    load_model_state(build_torch_model(1), {"model": torch_model.state_dict()}, tmp_path / "x")


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")
def test_exported_candidate_serves_the_torch_softmax(torch_model, images, tmp_path):
    """The SavedModel's ``serving_default`` on PNGs of the images returns the softmax of the
    torch logits (mirror averaging: the mean over image and mirror), the TorchScript artifact
    the logits; a second export replaces the first and leaves nothing else behind."""
    logits = _torch_logits(torch_model, images)
    mirrored = _torch_logits(torch_model, images[:, :, ::-1].copy())
    pngs = tf.constant(encode_images(images, "png"))
    candidate = tmp_path / "candidates" / "pytorch"
    for mirror_average in (False, True):
        assert export_pytorch_candidate(torch_model, candidate, mirror_average) == candidate
        assert (candidate / "saved_model.pb").is_file()
        sig = tf.saved_model.load(str(candidate)).signatures[SIGNATURE_KEY]
        probs = sig(**{INPUT_NAME: pngs})[OUTPUT_NAME].numpy()
        want = _softmax(logits)
        if mirror_average:
            want = (want + _softmax(mirrored)) / 2
        np.testing.assert_allclose(probs, want, atol=PROBS_ATOL, rtol=0)
        scripted = torch.jit.load(str(candidate / TORCHSCRIPT_PATH))
        with torch.no_grad():
            np.testing.assert_allclose(scripted(_nchw(images)).numpy(), logits, atol=1e-6, rtol=0)
        assert sorted(p.name for p in (tmp_path / "candidates").iterdir()) == ["pytorch"]
        assert not list(candidate.rglob(".owner.lock"))
    assert not torch_model.training  # the export did not switch the caller's module


def _shifted(image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """``image`` [28, 28] moved by (dy, dx) with zero fill (what a random crop of the padded
    image gives)."""
    out = np.zeros_like(image)
    src = image[max(0, -dy) : 28 - max(0, dy), max(0, -dx) : 28 - max(0, dx)]
    out[max(0, dy) : max(0, dy) + src.shape[0], max(0, dx) : max(0, dx) + src.shape[1]] = src
    return out


def _explain(src: np.ndarray, out: np.ndarray):
    """``(dy, dx, mirrored, erased)`` of the shift/mirror that ``out`` is of ``src`` (pixels
    1..255, so every 0 is fill or erasure), up to an erased rectangle of at most 10x10
    (``erased``: bool [28, 28], the visibly erased pixels); else None."""
    for dy, dx, mirror in itertools.product(range(-2, 3), range(-2, 3), (False, True)):
        cand = _shifted(src[:, ::-1] if mirror else src, dy, dx)
        differ = cand != out
        if not np.all(out[differ] == 0):
            continue
        rows, cols = np.nonzero(differ)
        if len(rows) == 0 or (np.ptp(rows) < 10 and np.ptp(cols) < 10):
            return dy, dx, mirror, differ
    return None


@pytest.mark.parametrize("kind", ["shift", "shift-flip", "shift-flip-erase"])
def test_torch_augment_has_the_tf_trainers_semantics(kind):
    """Every image is its source shifted by up to 2 px (zero fill), mirrored half of the time
    with flips, with at most a 10x10 square blanked half of the time with erasing; one draw
    per image, reproducible from the generator's seed."""
    from training.torch_train import augment

    rng = np.random.default_rng(0)
    src = rng.integers(1, 256, size=(400, 1, 28, 28), dtype=np.uint8)
    out = augment(torch.from_numpy(src), kind, torch.Generator().manual_seed(5))
    assert out.dtype == torch.uint8 and out.shape == (400, 1, 28, 28)
    again = augment(torch.from_numpy(src), kind, torch.Generator().manual_seed(5))
    assert torch.equal(out, again)
    found = [_explain(s[0], o[0]) for s, o in zip(src, out.numpy(), strict=True)]
    assert None not in found
    shifts = {(dy, dx) for dy, dx, _, _ in found}
    assert len(shifts) == 25  # every offset in [-2, 2]^2 occurs: one draw per image
    mirrored = np.mean([m for _, _, m, _ in found])
    masks = np.stack([e for _, _, _, e in found])
    erased = np.mean(masks.any(axis=(1, 2)))
    if "flip" in kind:
        assert 0.4 < mirrored < 0.6
    else:
        assert mirrored == 0
    if "erase" in kind:
        assert 0.4 < erased < 0.6
        assert masks.sum(axis=(1, 2)).max() == 100  # a full square where it fits
        # the square's centre is uniform over the image: it reaches every row and column
        assert masks.any(axis=(0, 2)).all() and masks.any(axis=(0, 1)).all()
    else:
        assert erased == 0


@pytest.mark.parametrize(
    ("schedule", "warmup_epochs"), [("cosine", 1.0), ("cosine", 0.0), ("constant", 1.0)]
)
def test_learning_rate_follows_the_tf_trainers_schedule(schedule, warmup_epochs):
    from training.torch_train import learning_rate
    from training.train import make_schedule

    args = argparse.Namespace(
        learning_rate=0.003, lr_schedule=schedule, warmup_epochs=warmup_epochs, epochs=3
    )
    steps = 20
    keras_schedule = make_schedule(args, steps)
    for step in range(0, 3 * steps + 1):
        want = keras_schedule(step).numpy() if callable(keras_schedule) else keras_schedule
        assert learning_rate(step, args, steps) == pytest.approx(float(want), rel=1e-5)
