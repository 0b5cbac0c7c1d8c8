"""The real tree renders and passes every check; the CLI reports and exits accordingly."""

from __future__ import annotations

import os
import subprocess
import sys

from validation.core import CHECKS
from validation.render import discover_kustomizations

from .conftest import ROOT

WORKFLOW = {"workflow", "workflow-dag", "workflow-params", "memoize-key", "memoize-cache"}
TOPICS = {
    "workflow": WORKFLOW | {"executor-security-context"},
    "rbac": {"rbac-wildcard", "rbac-refs", "namespaces", "rbac-grants", "controller-grants"},
    "training": {
        "tfjob-conditions",
        "training-retry",
        "tfjob-restart-policy",
        "pytorchjob-master",
        "training-threads",
        "training-deadline",
    },
    "serving": {
        "inferenceservice",
        "inferenceservice-autoscaling",
        "logger-url",
        "serve-consistency",
        "knative-ingress",
        "knative-domain",
    },
    "cli_paths": {"cli-flags", "paths", "model-types"},
    "pods": {
        "resources",
        "resource-limits",
        "security-context",
        "image-tag",
        "image-by-content",
        "probes",
    },
    "gitops": {"sync-waves", "wave-health", "argocd-drift", "kept-data", "write-back-image"},
    "core": {"exemption"},
}


def test_every_kustomization_rendered_and_clean(full_run):
    findings, rendered = full_run
    assert [f.format() for f in findings] == []
    kusts = set(discover_kustomizations(ROOT))
    assert {"overlays/local-k3d", "overlays/gpu-cloud", "argocd", "base/ml"} <= kusts
    assert "base/ml/environment" not in kusts  # a Component, rendered through the overlays
    assert set(rendered) == kusts


def test_checks_registered_by_topic():
    assert {n: CHECKS[n].__module__.rsplit(".", 1)[1] for n in CHECKS} == {
        n: topic for topic, names in TOPICS.items() for n in names
    }


def test_upstream_objects_carry_their_source(full_run):
    _, rendered = full_run
    to = rendered["base/platform/training-operator"]
    ours_here = {"base/platform/training-operator/pytorch-init-container.yaml"}
    assert to and all(
        o.upstream and o.source.startswith("upstream:github.com/kubeflow")
        for o in to
        if o.source not in ours_here
    )
    assert {o.source for o in to if not o.upstream} == ours_here  # the init-container template
    assert any(o.kind == "Deployment" for o in to)
    assert not any(o.kind == "CustomResourceDefinition" for o in to)  # mirrors: CRDs not rendered
    ours = rendered["overlays/local-k3d"]
    assert not any(o.upstream for o in ours)
    isvc = next(o for o in ours if o.kind == "InferenceService")
    assert isvc.source == "base/ml/serving/inferenceservice.yaml"


def test_cli_exit_code_and_report(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k in ("UPSTREAM_MIRROR_DIR", "KUBE_SCHEMA_DIR", "KUBECONFORM")
    }
    env |= {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    cmd = [
        sys.executable,
        "-m",
        "validation",
        "overlays/local-k3d",
        "overlays/gpu-cloud",
        "base/ml",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all checks passed" in proc.stdout and "total time" in proc.stdout
    assert "overlays/local-k3d: one pipeline run trains 2 of its 4 jobs at once" in proc.stdout
    assert "base/ml:" not in proc.stdout  # no environment: no footprint
    proc = subprocess.run(
        [*cmd[:3], "--root", str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("validation: ") and proc.stderr.count("\n") == 1
    assert proc.stdout == ""
