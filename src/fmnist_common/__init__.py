"""Facts shared by training, serving, the local pipeline, load tests and benchmarks.

Plain Python (standard library only, no TensorFlow), so that clients, load generators and the
model server's request path can import it cheaply. Each fact is stated here once:

* the model: :data:`MODEL_NAME` (URL path and serving base-path name), :data:`MODEL_TYPES`
  (the three TensorFlow variants, TFJobs), :data:`TORCH_MODEL_TYPES` (the PyTorch variant, a
  PyTorchJob), :data:`CANDIDATES` (all four, what the pipeline trains and selection ranks),
  :data:`CLASS_NAMES` (label order of the 10 outputs), the image size;
* the SavedModel serving signature: :data:`SIGNATURE_KEY`, :data:`INPUT_NAME`,
  :data:`OUTPUT_NAME`;
* the version-directory rule of TF Serving / KServe: a published model lives in
  ``<base path>/<version>/`` where the directory name is ASCII digits only
  (:func:`parse_version`), and the highest version in a base path is served (selection
  publishes each version as a base path of its own, :mod:`serving.versions`);
* the KServe V1 (TF Serving "row" format) API: :func:`model_path`, :func:`predict_path` and
  :func:`predict_body`;
* local processes (training replicas, the model server) listen on :data:`LOOPBACK` ports
  picked by :func:`free_ports`.

The command-line convention and logging setup live in :mod:`fmnist_common.cli`.
"""

from __future__ import annotations

import base64
import re
import socket
from collections.abc import Iterable

MODEL_NAME = "fashion-mnist"
MODEL_TYPES = ("cnn", "dropout", "batch_norm")  # tf-keras, training.train (TFJob)
TORCH_MODEL_TYPES = ("pytorch",)  # PyTorch DDP, training.torch_train (PyTorchJob)
CANDIDATES = MODEL_TYPES + TORCH_MODEL_TYPES
CLASS_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
NUM_CLASSES = len(CLASS_NAMES)
IMAGE_SIZE = 28  # pixels per side of a Fashion-MNIST image

SIGNATURE_KEY = "serving_default"
INPUT_NAME = "image_bytes"  # tf.string [None]: encoded JPEG/PNG, sent as {"b64": ...}
OUTPUT_NAME = "probabilities"  # tf.float32 [None, NUM_CLASSES], softmax in CLASS_NAMES order

MAX_VERSION = 2**63 - 1  # TF Serving model versions are int64
# beside a published version <models-dir>/N/N/: what selection chose, from which run, its accuracy
SELECTION_RECORD = "selection.json"
_VERSION_NAME = re.compile(r"[0-9]+")


def parse_version(name: str) -> int | None:
    """The model version a directory name stands for, or ``None`` if it is not one.

    A version name is ASCII digits only (``"1"``, ``"0042"``); anything else, such as
    ``".staging-3-ab12"``, ``"tmp"`` or ``"٣"`` (a non-ASCII digit), is not a version.

    Args:
        name: a directory entry name (not a path).

    Returns:
        The integer version, or ``None``.
    """
    return int(name) if _VERSION_NAME.fullmatch(name) else None


def model_path(model_name: str = MODEL_NAME) -> str:
    """The V1 model path, ``/v1/models/<model_name>`` (``GET``: 200 once the model is ready)."""
    return f"/v1/models/{model_name}"


def predict_path(model_name: str = MODEL_NAME) -> str:
    """The V1 predict path, ``/v1/models/<model_name>:predict``."""
    return f"{model_path(model_name)}:predict"


def predict_body(images: Iterable[bytes]) -> dict:
    """The V1 request body for encoded images.

    Args:
        images: encoded JPEG/PNG byte strings.

    Returns:
        ``{"instances": [{"b64": "<standard base64>"}, ...]}``, one instance per image, in order.
    """
    return {"instances": [{"b64": base64.b64encode(img).decode("ascii")} for img in images]}


LOOPBACK = "127.0.0.1"


def free_ports(n: int = 1, host: str = LOOPBACK) -> list[int]:
    """``n`` distinct TCP ports free on ``host`` right now (bound together, then released: the
    small race until the caller binds them is accepted)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
