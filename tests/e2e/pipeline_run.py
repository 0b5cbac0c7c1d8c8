"""A pipeline run on the real node, as test_real_node.py and test_argocd.py start one: the README's
scripts against a namespace, the small budget a user cuts a smoke run with, and the fresh volume
and memoization cache each run starts from."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import controllers
import real_node
from e2e_kube import REPO_ROOT

# A whole pipeline run on 2 cores: ingest, three 2-worker TFJobs and the 2-replica PyTorchJob,
# two at a time (local-k3d's training-parallelism), select, serve (docs/e2e.md)
PIPELINE_TIMEOUT_S = 900

# The small budget of the pipeline's real run (`-p`, as a user cuts a smoke run): one epoch of
# 2,048 training images per variant; requests small enough that every replica that local-k3d's
# training-parallelism lets run at once is scheduled beside the platform on the 2-CPU node
# (training-operator v1.9.4 has no gang scheduling: a job admitted in part waits for its peers,
# up to the trainers' --collective-timeout); min-accuracy 0 (one epoch of 2,048 images is not a
# model worth 0.85). The PyTorchJob's image is the pipeline image with PyTorch's CUDA wheels
# (ml_torch, about 8 GB), its Worker's init container the busybox image imported as the
# operator's default alpine:3.10 (scripts/e2e-images.sh).
SMOKE_RUN = {
    "epochs": "1",
    "train-examples": "2048",
    "validation-examples": "512",
    "batch-size-per-replica": "64",
    "precision": "float32",
    "min-accuracy": "0",
    "train-resources": json.dumps(
        {"requests": {"cpu": "200m", "memory": "768Mi"}, "limits": {"cpu": "2", "memory": "3Gi"}}
    ),
}


def script(
    kubectl, kubeconfig, ns: str, *argv: str, timeout: int = 360
) -> subprocess.CompletedProcess:
    """One of the README's scripts (``argv[0]`` under scripts/, its arguments after it) against
    namespace ``ns`` (lib.sh's NAMESPACE), its TIMEOUT ``timeout`` seconds."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECTL": kubectl.binary,
           "NAMESPACE": ns, "TIMEOUT": str(timeout), "POLL": "2"}  # fmt: skip
    return subprocess.run(
        [str(REPO_ROOT / "scripts" / argv[0]), *argv[1:]],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout + 60,
    )  # fmt: skip


def clear_volume(kubectl, pvc: dict, ns: str) -> None:
    """Remove what an earlier session left of ``ns``'s volume: its PersistentVolume and host
    directory (a run counts its own model versions)."""
    kubectl("delete", "pv", controllers.volume_name(pvc, ns), "--ignore-not-found")
    shutil.rmtree(real_node.volume_root(ns), ignore_errors=True)


def fresh_run(kubectl, kubeconfig, pvc: dict, ns: str) -> None:
    """What a pipeline run in ``ns`` starts from: the project's ``pvc`` bound to a host
    directory seeded with the offline tfds build, and an empty memoization cache. Argo v4.0.5
    keeps one cache per ConfigMap *name*, in the controller's namespace
    (workflow/controller/cache/cache.go, NewCacheFactory), so another namespace's runs would
    answer this one's ingest (the controller may only update that one ConfigMap by name,
    base/ml/pipeline/rbac.yaml, so it cannot be renamed here)."""
    kubectl("delete", "configmap", "fashion-mnist-ingest-cache", "-n", "argo", "--ignore-not-found")
    controllers.provide_volume(kubeconfig, pvc, ns, real_node.seeded_volume(ns))
