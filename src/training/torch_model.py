"""The ``batch_norm`` variant as a PyTorch module, for :mod:`training.torch_train`.

:func:`build_torch_model` is the same network, layer for layer and in the same arithmetic, as
``training.models.build_model("batch_norm")``, so that :func:`training.torch_export.to_keras`
can port its weights into that tf-keras model and export the usual SavedModel (selection and
serving see no difference)::

    float32 [N, 1, 28, 28] (NCHW), pixel values 0..255
      -> x / 255, then (x - PIXEL_MEAN) / PIXEL_STD      (training.models' constants)
      -> 3x3 conv 8, stride 1, padding 1 ("stem")        28x28, no bias
         -> BatchNorm2d -> ReLU
      -> pad 0 before / 1 after, 3x3 conv 48, stride 2   28x28 -> 14x14, no bias
         -> BatchNorm2d -> ReLU
      -> pad 0 before / 1 after, 3x3 conv 96, stride 2   14x14 -> 7x7, no bias
         -> BatchNorm2d -> ReLU
      -> flatten in torch's (C, H, W) order              [N, 4704]
      -> dense 256, no bias -> BatchNorm1d -> ReLU
      -> dense 10                                        logits float32 [N, 10]

Where a port usually goes wrong, this module follows Keras:

* Keras ``padding="same"`` with stride 2 on an even size pads 0 rows/columns before and 1
  after (TensorFlow puts the odd padding at the end), not 1 on each side as torch's
  ``padding=1`` does: the stride-2 convolutions take explicitly padded inputs
  (:data:`SAME_PAD`); with stride 1 "same" is 1 on each side, torch's ``padding=1`` (the stem);
* Keras ``BatchNormalization`` has ``epsilon=1e-3`` (torch: 1e-5) and ``momentum=0.9`` for the
  *old* value (torch's ``momentum`` weighs the *new* one: 0.1);
* Keras flattens NHWC, torch NCHW: the port permutes the first dense layer's input rows
  (:func:`training.torch_export.to_keras`), the module itself flattens as torch does.

Weights are initialised as Keras initialises them (Glorot-uniform kernels, zero biases, BN
gamma 1 / beta 0), from a generator seeded by ``seed``; training results still differ from
TensorFlow's (other random streams, other kernels), the arithmetic of a given set of weights
does not.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

from fmnist_common import IMAGE_SIZE, NUM_CLASSES
from training.models import DENSE_UNITS, FILTERS, PIXEL_MEAN, PIXEL_STD, STEM_FILTERS

BN_EPSILON = 1e-3  # tf-keras BatchNormalization's default epsilon
BN_MOMENTUM = 1.0 - 0.9  # training.models uses Keras momentum 0.9 (weight of the old value)
SAME_PAD = (0, 1, 0, 1)  # F.pad order (left, right, top, bottom): Keras "same", stride 2
FEATURE_SIDE = IMAGE_SIZE // 4  # 28 -> 14 -> 7 after the two stride-2 convolutions


def _avoid_llvm_clash() -> None:
    """Keep TensorFlow's and Triton's copies of LLVM from aborting the process.

    Both bundle LLVM; when ``libtriton.so`` loads *after* TensorFlow, its LLVM options register
    into TensorFlow's (exported) registry and LLVM aborts the whole process ("Option
    'bitcode-mdindex-threshold' registered more than once"). Torch loads Triton through
    ``torch._dynamo``, which every optimizer imports on construction. So: before TensorFlow,
    load Triton now (the order that works; :mod:`training.torch_train` imports this module
    before the data loading imports TensorFlow); after TensorFlow (a test session, a
    notebook), hide Triton from torch (``sys.modules["triton"] = None``: torch then runs as
    without it; nothing here uses ``torch.compile``, the only user of Triton).
    """
    if "triton" in sys.modules:
        return
    if "tensorflow" in sys.modules:
        sys.modules["triton"] = None
    else:
        import torch._dynamo  # noqa: F401  (imports triton, if installed)


_avoid_llvm_clash()


class BatchNormNet(nn.Module):
    """The ``batch_norm`` CNN (see the module docstring); submodule names follow the Keras
    layer names (``stem``, ``stem_bn``, ``conv1``, ..., ``logits``), which the port relies on.

    ``forward(x)``: ``x`` float32 ``[N, 1, 28, 28]`` (NCHW), 0..255 -> logits float32
    ``[N, 10]``. Train mode normalises with batch statistics and updates the running ones;
    eval mode (what the export ports) uses the running statistics.
    """

    def __init__(self) -> None:
        super().__init__()
        c1, c2 = FILTERS
        self.same_pad = SAME_PAD  # an attribute, so a test can put a wrong padding in
        self.stem = nn.Conv2d(1, STEM_FILTERS, 3, stride=1, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(STEM_FILTERS, eps=BN_EPSILON, momentum=BN_MOMENTUM)
        self.conv1 = nn.Conv2d(STEM_FILTERS, c1, 3, stride=2, padding=0, bias=False)
        self.conv1_bn = nn.BatchNorm2d(c1, eps=BN_EPSILON, momentum=BN_MOMENTUM)
        self.conv2 = nn.Conv2d(c1, c2, 3, stride=2, padding=0, bias=False)
        self.conv2_bn = nn.BatchNorm2d(c2, eps=BN_EPSILON, momentum=BN_MOMENTUM)
        self.dense = nn.Linear(c2 * FEATURE_SIDE**2, DENSE_UNITS, bias=False)
        self.dense_bn = nn.BatchNorm1d(DENSE_UNITS, eps=BN_EPSILON, momentum=BN_MOMENTUM)
        self.logits = nn.Linear(DENSE_UNITS, NUM_CLASSES)
        # Keras Normalization divides by sqrt(variance) in float32, with variance = std**2
        std = torch.sqrt(torch.tensor(PIXEL_STD**2, dtype=torch.float32)).item()
        self.pixel_mean, self.pixel_std = PIXEL_MEAN, std

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x * (1.0 / 255.0) - self.pixel_mean) / self.pixel_std
        x = F.relu(self.stem_bn(self.stem(x)))
        x = F.relu(self.conv1_bn(self.conv1(F.pad(x, self.same_pad))))
        x = F.relu(self.conv2_bn(self.conv2(F.pad(x, self.same_pad))))
        x = torch.flatten(x, 1)  # (C, H, W) order
        x = F.relu(self.dense_bn(self.dense(x)))
        return self.logits(x)


def _glorot_uniform_(weight: torch.Tensor, generator: torch.Generator) -> None:
    """Keras' ``glorot_uniform``: U(-l, l), l = sqrt(6 / (fan_in + fan_out)), the fans counted
    over the receptive field as Keras counts them (the same as torch's for these shapes)."""
    receptive = weight[0][0].numel() if weight.dim() > 2 else 1
    fan_in, fan_out = weight.shape[1] * receptive, weight.shape[0] * receptive
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        weight.uniform_(-limit, limit, generator=generator)


def build_torch_model(seed: int | None = None) -> BatchNormNet:
    """The ``batch_norm`` network as a float32 :class:`torch.nn.Module` on the CPU, in train mode.

    Args:
        seed: seeds the weight initialisation (a private generator: the global torch random
            state is left alone); ``None``: a random one.

    Returns:
        :class:`BatchNormNet`: float32 ``[N, 1, 28, 28]`` (0..255, NCHW) -> logits float32
        ``[N, 10]``.
    """
    model = BatchNormNet()
    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    for layer in (model.stem, model.conv1, model.conv2, model.dense, model.logits):
        _glorot_uniform_(layer.weight, generator)
    nn.init.zeros_(model.logits.bias)
    return model
