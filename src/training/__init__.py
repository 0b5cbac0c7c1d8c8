"""Fashion-MNIST training side: ingestion, multi-worker training, export and model selection.

Every command-line module follows the convention of :mod:`fmnist_common.cli` (``build_parser()``
/ ``main(args) -> int`` / ``cli()``), as in the Kubeflow TFJob examples. Keras here is tf-keras
(Keras 2): Keras 3's ``fit()`` does not run under ``MultiWorkerMirroredStrategy`` with
TensorFlow 2.21 (see the comment in pyproject.toml).
"""

import os

# Kept importable as training.run_cli / training.configure_logging for the training modules.
from fmnist_common.cli import configure_logging, run_cli  # noqa: F401

# tensorflow-datasets and TensorFlow pick Keras 2 when this is set; must happen before
# TensorFlow is imported anywhere in the process.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
