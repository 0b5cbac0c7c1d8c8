"""Export a trained :mod:`training.torch_model` network as the project's usual candidate.

The candidate directory a PyTorch run publishes at ``--saved-model-dir`` holds:

* the SavedModel with the ``serving_default`` signature of :mod:`training.export`
  (``image_bytes`` tf.string ``[None]``, encoded JPEG/PNG -> ``probabilities`` tf.float32
  ``[None, 10]``): the torch weights ported into ``training.models.build_model("batch_norm")``
  (:func:`to_keras`), so selection scores it and KServe / TF Serving serve it like any other
  candidate;
* ``torchscript/model.pt``: the same network as TorchScript (:data:`TORCHSCRIPT_PATH`), for a
  PyTorch runtime: input float32 ``[N, 1, 28, 28]`` (NCHW) with pixel values 0..255 (the
  preprocessing is inside), output logits float32 ``[N, 10]`` (no softmax, no mirror
  averaging: a server applies those itself);
* ``training_history.json``, written afterwards by the trainer.
"""

from __future__ import annotations

import copy
import os
import warnings
from pathlib import Path

import numpy as np
import torch

import training  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from fmnist_common import IMAGE_SIZE
from training.torch_model import SAME_PAD, BatchNormNet

TORCHSCRIPT_PATH = Path("torchscript") / "model.pt"
_BN_LAYERS = ("stem_bn", "conv1_bn", "conv2_bn", "dense_bn")
_CONV_LAYERS = ("stem", "conv1", "conv2")


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy()


def to_keras(torch_model: BatchNormNet):
    """The tf-keras ``build_model("batch_norm")`` holding ``torch_model``'s weights.

    Layouts ported (torch -> Keras):

    * convolutions: kernel ``[out, in, kh, kw]`` (OIHW) -> ``[kh, kw, in, out]`` (HWIO);
    * dense layers: ``[out, in]`` -> ``[in, out]``; the first dense layer's input rows are
      also reordered from torch's flatten order ``(C, H, W)`` of the NCHW feature map to
      Keras's ``(H, W, C)`` of the NHWC one;
    * batch norm: ``weight, bias, running_mean, running_var`` -> ``gamma, beta,
      moving_mean, moving_variance`` (float32 ``[channels]``).

    Args:
        torch_model: a :class:`training.torch_model.BatchNormNet` (the unwrapped module, not
            its ``DistributedDataParallel`` wrapper), on any device.

    Returns:
        A float32 ``tf_keras.Sequential`` mapping float32 ``[N, 28, 28, 1]`` (NHWC, 0..255) to
        the same logits float32 ``[N, 10]`` as ``torch_model.eval()`` on the NCHW image.

    Raises:
        ValueError: ``torch_model`` would not compute what Keras does (a batch-norm epsilon
            other than the Keras layer's, a padding other than Keras' "same").
    """
    from training.models import build_model
    from training.precision import built_in_float32

    model = built_in_float32(build_model, "batch_norm")  # the export computes in float32
    if tuple(torch_model.same_pad) != SAME_PAD:
        raise ValueError(f"padding {torch_model.same_pad} is not Keras' 'same' {SAME_PAD}")
    stem = torch_model.stem
    geometry = (stem.padding, stem.stride, stem.dilation, stem.padding_mode)
    if geometry not in (((1, 1), (1, 1), (1, 1), "zeros"), ("same", (1, 1), (1, 1), "zeros")):
        raise ValueError(
            f"stem padding {stem.padding} ({stem.padding_mode}), stride {stem.stride}, dilation "
            f"{stem.dilation} is not Keras' 'same' with stride 1: zeros, 1 on each side"
        )
    for name in _BN_LAYERS:
        keras_eps, torch_eps = model.get_layer(name).epsilon, getattr(torch_model, name).eps
        if not np.isclose(keras_eps, torch_eps, rtol=1e-6, atol=0):
            raise ValueError(f"{name}: batch-norm epsilon {torch_eps} is not Keras' {keras_eps}")

    m = torch_model
    for name in _CONV_LAYERS:
        model.get_layer(name).set_weights([_numpy(getattr(m, name).weight).transpose(2, 3, 1, 0)])
    channels = m.conv2.out_channels
    side = int(round((m.dense.in_features / channels) ** 0.5))
    dense = _numpy(m.dense.weight).reshape(-1, channels, side, side)  # [out, C, H, W]
    dense = dense.transpose(2, 3, 1, 0).reshape(side * side * channels, -1)  # [(H, W, C), out]
    model.get_layer("dense").set_weights([dense])
    model.get_layer("logits").set_weights([_numpy(m.logits.weight).T, _numpy(m.logits.bias)])
    for name in _BN_LAYERS:
        bn = getattr(m, name)
        stats = (bn.weight, bn.bias, bn.running_mean, bn.running_var)
        model.get_layer(name).set_weights([_numpy(t) for t in stats])
    return model


def save_torchscript(torch_model: BatchNormNet, path: str | os.PathLike) -> Path:
    """Trace a float32 CPU eval-mode copy of ``torch_model`` on float32 ``[1, 1, 28, 28]`` and
    save it as TorchScript at ``path`` (``torch.jit.load`` reads it; the traced graph takes
    any batch size ``N``: float32 ``[N, 1, 28, 28]`` 0..255 -> logits float32 ``[N, 10]``)."""
    module = copy.deepcopy(torch_model).to("cpu", torch.float32).eval()
    example = torch.zeros(1, 1, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.float32)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        # torch 2.15 deprecates tracing for torch.export; TorchScript is still what libtorch,
        # TorchServe and Triton's PyTorch backend load, so the warning would only be noise
        warnings.filterwarnings("ignore", "`torch.jit.trace", FutureWarning)
        traced = torch.jit.trace(module, example)
    traced.save(os.fspath(path))
    return path


def export_pytorch_candidate(
    torch_model: BatchNormNet,
    saved_model_dir: str | os.PathLike,
    mirror_average: bool,
    history: dict | None = None,
) -> Path:
    """Publish ``torch_model`` as a candidate at ``saved_model_dir`` (see the module docstring).

    Everything is written into a ``.staging-<name>-*`` directory beside ``saved_model_dir`` and
    renamed into place (the previous candidate, if any, is moved aside first and deleted
    after), so ``saved_model_dir`` is never half-written; a staging directory left by a killed
    run is removed on the next export (:mod:`training.leftovers`), as
    :func:`training.train.export_candidate` does for the TF trainer.

    Args:
        torch_model: the trained, unwrapped :class:`training.torch_model.BatchNormNet`; it is
            not modified (the export works on eval-mode copies).
        saved_model_dir: the candidate directory to publish.
        mirror_average: the serving signature averages the image and its left-right mirror
            (:func:`training.export.probabilities`); the trainer sets it for runs trained with
            random flips. The TorchScript artifact always returns plain logits.
        history: written as ``training_history.json`` into the staging directory (the
            candidate appears with its history or not at all); ``None``: none.

    Returns:
        ``saved_model_dir`` as a :class:`~pathlib.Path`.
    """
    from training.export import export_saved_model
    from training.train import HISTORY_FILE, publish_dir, write_history

    eval_copy = copy.deepcopy(torch_model).to("cpu", torch.float32).eval()

    def write(staging: Path) -> None:
        export_saved_model(to_keras(eval_copy), staging, mirror_average=mirror_average)
        save_torchscript(eval_copy, staging / TORCHSCRIPT_PATH)
        if history is not None:
            write_history(staging / HISTORY_FILE, history)

    return publish_dir(Path(saved_model_dir), write)
