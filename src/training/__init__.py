"""Fashion-MNIST training side: ingestion, multi-worker training, export and model selection.

Every module is importable and has a ``build_parser()`` / ``main(args)`` / ``cli()`` triple where
it is a command-line program, following the Kubeflow TFJob examples. Keras here is tf-keras
(Keras 2): Keras 3's ``fit()`` does not run under ``MultiWorkerMirroredStrategy`` with
TensorFlow 2.21 (see README, "Why tf-keras").
"""

import os

# tensorflow-datasets and TensorFlow pick Keras 2 when this is set; must happen before
# TensorFlow is imported anywhere in the process.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def configure_logging() -> None:
    """INFO for this project's loggers; WARNING for TensorFlow/absl (per-step INFO chatter)."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("training").setLevel(logging.INFO)
