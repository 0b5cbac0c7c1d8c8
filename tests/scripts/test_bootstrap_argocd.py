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
PLACEHOLDER = "https://github.com/example/fashion-mnist-gitops.git"
#: The offline mirror of the install manifest (make sets UPSTREAM_MIRROR_DIR from MIRROR_DIR).
MIRROR = Path(os.environ.get("UPSTREAM_MIRROR_DIR") or REPO.parent / "shared" / "upstream")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """What the script reads, copied, with docs/gitops.md's step 1 done (a fork's URL)."""
    root = tmp_path / "repo"
    for name in ("scripts", "versions.env", "argocd", "overlays", "src"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, root / name)
    (root / ".venv").symlink_to(REPO / ".venv")
    settings = root / "argocd" / "apps" / "common" / "repository.yaml"
    text = settings.read_text()
    assert PLACEHOLDER in text
    settings.write_text(text.replace(PLACEHOLDER, "https://git.example.org/me/fork.git"))
    return root


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


def _run(repo: Path, tmp: Path, params: list[str], **env: str) -> subprocess.CompletedProcess:
    if not list(MIRROR.glob("argo-cd-v*-install.yaml")):
        pytest.fail(
            f"no Argo CD install manifest in {MIRROR}: set MIRROR_DIR (make) or UPSTREAM_MIRROR_DIR"
        )
    return subprocess.run(
        ["bash", str(repo / "scripts" / "bootstrap-argocd.sh"), "local-k3d"],
        env={**os.environ, "KUBECTL": str(_stub(tmp, params)), "UPSTREAM_MIRROR_DIR": str(MIRROR),
             **env},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _applied(tmp: Path) -> dict[tuple[str, str], dict]:
    docs = yaml.safe_load_all((tmp / "applied.yaml").read_text())
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d}


def test_the_install_is_applied_with_server_side_diff_then_the_bootstrap_apps(repo, tmp_path):
    proc = _run(repo, tmp_path, ["", ""])
    assert proc.returncode == 0, proc.stderr
    objs = _applied(tmp_path)
    params = objs[("ConfigMap", "argocd-cmd-params-cm")]["data"]
    assert params["controller.diff.server.side"] == "true"
    calls = (tmp_path / "calls").read_text().splitlines()
    apply = [i for i, c in enumerate(calls) if "apply" in c]
    assert "--server-side" in calls[apply[0]]
    assert "fashion-mnist.example.com/bootstrap=true" in calls[apply[-1]]
    assert not any("rollout restart" in c for c in calls)  # a first install: nothing to restart


def test_changed_params_restart_the_components(repo, tmp_path):
    proc = _run(repo, tmp_path, ['{"a":"1"}', '{"a":"2"}'])
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "-n argocd rollout restart deployment,statefulset" in calls
    same = tmp_path / "same"
    same.mkdir()
    assert _run(repo, same, ['{"a":"1"}', '{"a":"1"}']).returncode == 0
    assert not any("rollout restart" in c for c in (same / "calls").read_text().splitlines())


def test_an_install_whose_params_had_no_data_is_restarted(repo, tmp_path):
    """Upstream's argocd-cmd-params-cm has no data: an install made before argocd/install set
    server-side diff must still be restarted when it gets it (the ConfigMap exists: its uid)."""
    proc = _run(repo, tmp_path, ["uid-1 ", 'uid-1 {"controller.diff.server.side":"true"}'])
    assert proc.returncode == 0, proc.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "-n argocd rollout restart deployment,statefulset" in calls


def test_a_layer_patches_the_install(repo, tmp_path):
    layer = REPO / "tests" / "e2e" / "argocd-layer"
    proc = _run(repo, tmp_path, ["", ""], ARGOCD_LAYER_DIR=str(layer))
    assert proc.returncode == 0, proc.stderr
    objs = _applied(tmp_path)
    assert objs[("Deployment", "argocd-dex-server")]["spec"]["replicas"] == 0
    redis = objs[("Deployment", "argocd-redis")]["spec"]["template"]["spec"]["containers"][0]
    assert redis["image"] == "localhost/fmnist-e2e/redis:bookworm"
    assert redis["imagePullPolicy"] == "IfNotPresent"


def test_a_layer_that_does_not_name_the_render_is_refused(repo, tmp_path):
    layer = tmp_path / "layer"
    layer.mkdir()
    (layer / "kustomization.yaml").write_text("resources: [other.yaml]\n")
    proc = _run(repo, tmp_path, ["", ""], ARGOCD_LAYER_DIR=str(layer))
    assert proc.returncode != 0
    assert "does not name rendered.yaml" in proc.stderr
    assert not (tmp_path / "applied.yaml").exists()


def test_the_placeholder_repository_is_refused_before_any_change(repo, tmp_path):
    """docs/gitops.md's step 1 not done: Argo CD would sync from a repository that is not the
    user's. The script stops before it applies anything, naming the file to edit."""
    settings = repo / "argocd" / "apps" / "common" / "repository.yaml"
    settings.write_text(
        settings.read_text().replace("https://git.example.org/me/fork.git", PLACEHOLDER)
    )
    proc = _run(repo, tmp_path, ["", ""])
    assert proc.returncode != 0
    assert "repository.yaml still names the placeholder" in proc.stderr, proc.stderr
    calls = (tmp_path / "calls").read_text() if (tmp_path / "calls").exists() else ""
    assert "apply" not in calls
