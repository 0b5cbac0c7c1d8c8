"""Fashion-MNIST model server (KServe custom model, TF Serving's REST API) and its client.

Modules:
  * :mod:`serving.request`: request validation (TF Serving's row and columnar formats, its
    base64 rules, image checks with Pillow, limits);
  * :mod:`serving.versions`: the highest published SavedModel version under a base path;
  * :mod:`serving.batcher`: micro-batching of concurrent requests on one inference thread;
  * :mod:`serving.model`: the ``kserve.Model`` that runs the SavedModel's signature;
  * :mod:`serving.server`: command line (``python -m serving.server``) built on KServe's own
    argument parser and ``ModelServer``; KServe internals only through
    :mod:`serving.kserve_compat`;
  * :mod:`serving.client`: command-line client (``python -m serving.client IMAGE...``);
  * :mod:`serving.launch`: the server as a loopback child process (local pipeline, load tests,
    benchmarks, tests).

Wire format: TF Serving's REST API, as KServe's TensorFlow runtime serves it in the cluster, so
the same client works against both (see docs/serving.md)::

    POST /v1/models/fashion-mnist:predict
    {"instances": [{"b64": "<base64 JPEG/PNG>"}, ...]}  -> {"predictions": [[p0, ..., p9], ...]}
    {"inputs": [{"b64": "<base64 JPEG/PNG>"}, ...]}     -> {"outputs": [[p0, ..., p9], ...]}
"""

import os

from fmnist_common import MODEL_NAME as DEFAULT_MODEL_NAME  # noqa: F401  (stated there once)

# The SavedModel only needs core TensorFlow, but keep Keras 2 selected if anything in the same
# process imports tf.keras (tests build models with training.models).
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
