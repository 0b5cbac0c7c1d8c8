"""The real tree renders and passes every check."""

from __future__ import annotations

import subprocess
import sys

from validation.config import discover_kustomizations

from .conftest import ROOT


def test_every_kustomization_rendered_and_clean(full_run):
    findings, rendered = full_run
    errors = [f.format() for f in findings if f.severity == "error"]
    assert errors == []
    kusts = set(discover_kustomizations(ROOT))
    assert {"overlays/local-k3d", "overlays/gpu-cloud", "argocd", "base/ml"} <= kusts
    assert set(rendered) == kusts
    # warnings only for upstream kinds without a mirrored schema
    for f in findings:
        if f.severity == "warning":
            assert f.file.startswith("upstream:"), f.format()


def test_upstream_objects_carry_their_source(full_run):
    _, rendered = full_run
    to = rendered["base/platform/training-operator"]
    assert all(o.upstream for o in to)
    assert any(o.kind == "CustomResourceDefinition" and o.name == "tfjobs.kubeflow.org" for o in to)
    ours = rendered["overlays/local-k3d"]
    assert not any(o.upstream for o in ours)
    isvc = next(o for o in ours if o.kind == "InferenceService")
    assert isvc.source == "base/ml/serving/inferenceservice.yaml"


def test_cli_exit_code_and_report(sources, tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "VALIDATION_CACHE_DIR": str(sources["cache_dir"]),
        "KUBE_SCHEMA_DIR": sources["schema_location"],
    }
    if sources["mirror_dir"]:
        env["UPSTREAM_MIRROR_DIR"] = str(sources["mirror_dir"])
    proc = subprocess.run(
        [sys.executable, "-m", "validation", "overlays/local-k3d", "overlays/gpu-cloud"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all checks passed" in proc.stdout
    assert "total time" in proc.stdout
