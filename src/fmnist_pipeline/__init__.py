"""The whole Fashion-MNIST pipeline on one machine (``make demo``), above training and serving.

ingest -> train ``cnn``, ``dropout``, ``batch_norm`` (each as 2 worker processes with
``TF_CONFIG`` over loopback, one after the other: this machine has 2 cores) -> select ->
serve (:class:`serving.launch.LocalServer` on a free loopback port) -> predict real test images
(:func:`serving.client.predict`) -> summary table -> stop the server.

    python -m fmnist_pipeline --work-dir work --budget quick

The work dir mirrors the PVC layout the cluster uses (``/mnt/shared``)::

    work/checkpoints/<model-type>/<run-id>/   work/tensorboard/<model-type>/<run-id>/
    work/candidates/<model-type>/             work/models/fashion-mnist/<version>/
    work/reports/selection.json               work/reports/training_curves.png
    work/reports/server.log

Modules: :mod:`fmnist_pipeline.run` (the stages, budgets and command line) and
:mod:`fmnist_pipeline.plots` (training curves).
"""
