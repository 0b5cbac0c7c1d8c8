"""scripts/bootstrap-argocd.sh against a kubectl stand-in: what it applies (the pinned install,
through ARGOCD_LAYER_DIR when set), in which order, and how a change of the settings that Argo
CD's components read at start rolls them (the settings' hash on every pod template).
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


def _stub(tmp: Path) -> Path:
    """A kubectl that renders for real, saves what ``apply -f`` gets and records every call."""
    real = shutil.which("kubectl", path=str(REPO / ".venv" / "bin")) or shutil.which("kubectl")
    assert real, "no kubectl (make venv)"
    stub = tmp / "kubectl"
    stub.write_text(f"""#!/usr/bin/env bash
case "$1" in kustomize) exec {real} "$@" ;; esac
echo "$*" >> {tmp}/calls
if [[ "$*" == *"apply"*"-f "* ]]; then f="${{@: -1}}"; cp "$f" {tmp}/applied.yaml; fi
exit 0
""")
    stub.chmod(0o755)
    return stub


def _run(repo: Path, tmp: Path, **env: str) -> subprocess.CompletedProcess:
    if not list(MIRROR.glob("argo-cd-v*-install.yaml")):
        pytest.fail(
            f"no Argo CD install manifest in {MIRROR}: set MIRROR_DIR (make) or UPSTREAM_MIRROR_DIR"
        )
    tmp.mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", str(repo / "scripts" / "bootstrap-argocd.sh"), "local-k3d"],
        env={**os.environ, "KUBECTL": str(_stub(tmp)), "UPSTREAM_MIRROR_DIR": str(MIRROR), **env},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _applied(tmp: Path) -> dict[tuple[str, str], dict]:
    docs = yaml.safe_load_all((tmp / "applied.yaml").read_text())
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d}


HASH = "fashion-mnist.example.com/settings-hash"


def _hashes(tmp: Path) -> set[str]:
    """The settings hash of every Deployment's and StatefulSet's pod template applied."""
    objs = _applied(tmp).values()
    workloads = [o for o in objs if o["kind"] in ("Deployment", "StatefulSet")]
    assert len(workloads) >= 5, [o["metadata"]["name"] for o in workloads]
    return {
        (o["spec"]["template"]["metadata"].get("annotations") or {}).get(HASH) for o in workloads
    }


def test_the_install_is_applied_with_server_side_diff_then_the_bootstrap_apps(repo, tmp_path):
    proc = _run(repo, tmp_path)
    assert proc.returncode == 0, proc.stderr
    objs = _applied(tmp_path)
    params = objs[("ConfigMap", "argocd-cmd-params-cm")]["data"]
    assert params["controller.diff.server.side"] == "true"
    calls = (tmp_path / "calls").read_text().splitlines()
    apply = [i for i, c in enumerate(calls) if "apply" in c]
    assert "--server-side" in calls[apply[0]]
    assert "fashion-mnist.example.com/bootstrap=true" in calls[apply[-1]]
    assert not any("rollout restart" in c for c in calls)  # the apply rolls what changed
    (digest,) = _hashes(tmp_path)  # one hash, on every component
    assert digest and len(digest) == 16


def test_a_setting_read_at_start_changes_every_pod_template(repo, tmp_path):
    """A changed argocd-cmd-params-cm (here: server-side diff off) or argocd-cm timeout (the
    e2e's layer: 20 s) changes the hash, so the apply rolls every component; the same input
    gives the same hash (a re-run rolls nothing)."""
    assert _run(repo, tmp_path / "a").returncode == 0
    assert _run(repo, tmp_path / "b").returncode == 0
    assert _hashes(tmp_path / "a") == _hashes(tmp_path / "b")
    patch = repo / "argocd" / "install" / "patches" / "argocd-cmd-params-cm.yaml"
    text = patch.read_text()
    assert 'controller.diff.server.side: "true"' in text
    patch.write_text(
        text.replace('controller.diff.server.side: "true"', 'controller.diff.server.side: "false"')
    )
    assert _run(repo, tmp_path / "c").returncode == 0
    assert _hashes(tmp_path / "c") != _hashes(tmp_path / "a")
    patch.write_text(text)
    layer = REPO / "tests" / "e2e" / "argocd-layer"
    assert _run(repo, tmp_path / "d", ARGOCD_LAYER_DIR=str(layer)).returncode == 0
    assert _hashes(tmp_path / "d") not in (_hashes(tmp_path / "a"), _hashes(tmp_path / "c"))


def test_a_layer_patches_the_install(repo, tmp_path):
    layer = REPO / "tests" / "e2e" / "argocd-layer"
    proc = _run(repo, tmp_path, ARGOCD_LAYER_DIR=str(layer))
    assert proc.returncode == 0, proc.stderr
    objs = _applied(tmp_path)
    assert objs[("Deployment", "argocd-dex-server")]["spec"]["replicas"] == 0
    redis = objs[("Deployment", "argocd-redis")]["spec"]["template"]["spec"]["containers"][0]
    assert redis["image"] == "localhost/fmnist-e2e/redis:bookworm"
    assert redis["imagePullPolicy"] == "IfNotPresent"


def test_a_layer_that_does_not_name_the_render_is_refused(repo, tmp_path):
    layer = tmp_path / "layer"
    layer.mkdir()
    # (a comment naming it does not count)
    (layer / "kustomization.yaml").write_text("# not rendered.yaml\nresources: [other.yaml]\n")
    proc = _run(repo, tmp_path, ARGOCD_LAYER_DIR=str(layer))
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
    proc = _run(repo, tmp_path)
    assert proc.returncode != 0
    assert "repository.yaml still names the placeholder" in proc.stderr, proc.stderr
    calls = (tmp_path / "calls").read_text() if (tmp_path / "calls").exists() else ""
    assert "apply" not in calls


@pytest.mark.parametrize(
    "url",
    ["git@github.com:example/fashion-mnist-gitops.git", "http://github.com/example/f.git",
     "ssh://git@github.com/example/f.git"],
)  # fmt: skip
def test_the_placeholder_is_refused_in_any_url_form(repo, tmp_path, url):
    settings = repo / "argocd" / "apps" / "common" / "repository.yaml"
    settings.write_text(settings.read_text().replace("https://git.example.org/me/fork.git", url))
    proc = _run(repo, tmp_path)
    assert proc.returncode != 0 and "still names the placeholder" in proc.stderr, proc.stderr


def test_a_repository_setting_not_pushed_is_refused(repo, tmp_path):
    """Argo CD reads repository.yaml from git: a clone whose file differs from its upstream
    branch (committed, not pushed) would hand Argo CD the old URL."""

    def git(*args: str, cwd: Path = repo) -> None:
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)

    settings = repo / "argocd" / "apps" / "common" / "repository.yaml"
    fork = settings.read_text()
    git("init", "-q", "-b", "main")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "x", "--allow-empty")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tree")
    git("clone", "-q", "--bare", str(repo), str(tmp_path / "remote.git"), cwd=tmp_path)
    git("remote", "add", "origin", str(tmp_path / "remote.git"))
    git("fetch", "-q", "origin")
    git("branch", "-q", "-u", "origin/main")
    assert _run(repo, tmp_path / "pushed").returncode == 0
    settings.write_text(fork.replace("me/fork.git", "me/other.git"))
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "not pushed")
    proc = _run(repo, tmp_path / "unpushed")
    assert proc.returncode != 0 and "commit and push it first" in proc.stderr, proc.stderr
    assert not (tmp_path / "unpushed" / "applied.yaml").exists()
