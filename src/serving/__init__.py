"""Fashion-MNIST model server (KServe custom model, V1 protocol) and its client.

Modules:
  * :mod:`serving.model`: request validation, the micro-batcher and the ``kserve.Model``
    subclass that serves the highest published SavedModel version;
  * :mod:`serving.server`: command line (``python -m serving.server``) built on KServe's own
    argument parser and ``ModelServer``;
  * :mod:`serving.client`: command-line client (``python -m serving.client IMAGE...``);
  * :mod:`serving.launch`: the server as a loopback child process (local pipeline, load tests,
    benchmarks, tests).

Wire format (TF Serving "row" format = KServe V1, so the same client works against KServe's
TensorFlow runtime in the cluster)::

    POST /v1/models/fashion-mnist:predict
    {"instances": [{"b64": "<standard base64 JPEG/PNG>"}, ...]}
    -> {"predictions": [[p0, ..., p9], ...]}
"""

import os

from fmnist_common import MODEL_NAME as DEFAULT_MODEL_NAME  # noqa: F401  (stated there once)

# The SavedModel only needs core TensorFlow, but keep Keras 2 selected if anything in the same
# process imports tf.keras (tests build models with training.models).
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
