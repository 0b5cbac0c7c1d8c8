"""scripts/bootstrap-argocd.sh against a kubectl stand-in: what it applies (the pinned install,
through ARGOCD_LAYER_DIR when set), in which order, and when it restarts Argo CD's components.
The stand-in renders with the real kubectl and records every other call; the e2e runs the
script against a real cluster (tests/e2e/test_argocd.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MIRROR = REPO.parent / "shared" / "upstream"


def _stub(tmp: Path, params: list[str]) -> Path:
    """A kubectl that renders for real, saves what ``apply -f`` gets, and answers ``get
    configmap argocd-cmd-params-cm`` with ``params`` in turn (``""``: not found)."""
    real = shutil.which("kubectl", path=str(REPO / ".venv" / "bin")) or shutil.which("kubectl")
    assert real, "no kubectl (make venv)"
    for i, p in enumerate(params):
        (tmp / f"params{i}").write_text(p)
    stub = tmp / "kubectl"
    stub.write_text(f"""#!/usr/bin/env bash
case "$1" in kustomize) exec {real} "$@" ;; esac
echo "$*" >> {tmp}/calls
if [[ "$*" == *"get configmap argocd-cmd-params-cm"* ]]; then
  n=$(ls {tmp} | grep -c '^asked' || true); touch {tmp}/asked$n
  [[ -s {tmp}/params$n ]] || exit 1; cat {tmp}/params$n; exit 0
fi
if [[ "$*" == *"apply"*"-f "* ]]; then f="${{@: -1}}"; cp "$f" {tmp}/applied.yaml; fi
if [[ "$*" == *"get application root"* ]]; then echo https://example.com/r.git; fi
exit 0
""")
    stub.chmod(0o755)
    return stub


def _run(tmp: Path, params: list[str], **env: str) -> subprocess.CompletedProcess:
    if not (MIRROR / "argo-cd-v3.5.1-install.yaml").is_file():
        pytest.fail(f"no Argo CD install manifest in {MIRROR}: set MIRROR_DIR=../shared")
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "bootstrap-argocd.sh"), "local-k3d"],
        env={**os.environ, "KUBECTL": str(_stub(tmp, params)), "UPSTREAM_MIRROR_DIR": str(MIRROR),
             **env},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _applied(tmp: Path) -> dict[tuple[str, str], dict]:
    docs = yaml.safe_load_all((tmp / "applied.yaml").read_text())
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d}


def test_the_install_is_applied_with_server_side_diff_then_the_bootstrap_apps(tmp_path):
    proc = _run(tmp_path, ["", ""])
    assert proc.returncode == 0, proc.stderr
    objs = _applied(tmp_path)
    params = objs[("ConfigMap", "argocd-cmd-params-cm")]["data"]
    assert params["controller.diff.server.side"] == "true"
    calls = (tmp_path / "calls").read_text().splitlines()
    apply = [i for i, c in enumerate(calls) if "apply" in c]
    assert "--server-side" in calls[apply[0]]
    assert "fashion-mnist.example.com/bootstrap=true" in calls[apply[-1]]
    assert not any("rollout restart" in c for c in calls)  # a first install: nothing to restart


def test_changed_params_restart_the_components(tmp_path):
    proc = _run(tmp_path, ['{"a":"1"}', '{"a":"2"}'])
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "-n argocd rollout restart deployment,statefulset" in calls
    same = tmp_path / "same"
    same.mkdir()
    assert _run(same, ['{"a":"1"}', '{"a":"1"}']).returncode == 0
    assert not any("rollout restart" in c for c in (same / "calls").read_text().splitlines())


def test_a_layer_patches_the_install(tmp_path):
    layer = REPO / "tests" / "e2e" / "argocd-layer"
    proc = _run(tmp_path, ["", ""], ARGOCD_LAYER_DIR=str(layer))
    assert proc.returncode == 0, proc.stderr
    objs = _applied(tmp_path)
    assert objs[("Deployment", "argocd-dex-server")]["spec"]["replicas"] == 0
    redis = objs[("Deployment", "argocd-redis")]["spec"]["template"]["spec"]["containers"][0]
    assert redis["image"] == "localhost/fmnist-e2e/redis:bookworm"
    assert redis["imagePullPolicy"] == "IfNotPresent"


def test_a_layer_that_does_not_name_the_render_is_refused(tmp_path):
    layer = tmp_path / "layer"
    layer.mkdir()
    (layer / "kustomization.yaml").write_text("resources: [other.yaml]\n")
    proc = _run(tmp_path, ["", ""], ARGOCD_LAYER_DIR=str(layer))
    assert proc.returncode != 0
    assert "does not name rendered.yaml" in proc.stderr
    assert not (tmp_path / "applied.yaml").exists()
