"""scripts/e2e-images.sh's cache: references and keys, without building anything.

The keys decide whether the e2e's real node runs a stale image: the project image's key must
follow every file of the build context (Dockerfile, pyproject.toml, src/) and the
base it is built on, and nothing else. Checked on a copy of the files the script reads, with an
empty cache (FMNIST_IMAGES_CACHE) so that nothing counts as built.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KNATIVE = [f"knative_{n}" for n in ("controller", "webhook", "activator", "autoscaler", "queue")]
CERT_MANAGER = [f"cert_manager_{n}" for n in ("controller", "webhook", "cainjector")]
COPIED = ["scripts", "versions.env", "Dockerfile", "pyproject.toml", "README.md", "src",
          "overlays", "base", "argocd", "tests/e2e/argocd-layer", ".venv"]  # fmt: skip


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """The files e2e-images.sh reads, copied (the venv linked: kubectl renders the overlay)."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in COPIED:
        src = REPO / name
        if name == ".venv":
            (root / name).symlink_to(src)
        elif src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif not src.exists():
            raise FileNotFoundError(src)
        else:
            shutil.copy2(src, root / name)
    return root


def listing(root: Path, cache: Path) -> dict[str, tuple[str, str, str]]:
    """``--list`` as {image: (reference, archive, state)}."""
    proc = subprocess.run(
        ["bash", str(root / "scripts" / "e2e-images.sh"), "--list"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "E2E_SKIP_TIERS": "", "FMNIST_IMAGES_CACHE": str(cache)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        image, ref, archive, state = line.split()
        out[image] = (ref, archive, state)
    return out


def test_references_are_what_the_pods_ask_for(clone, tmp_path):
    images = listing(clone, tmp_path / "cache")
    assert list(images) == [
        "pause", "python", "ml", "ml_torch", "ml_next", "argoexec", "agent", "busybox",
        "event_display", "training_operator", "workflow_controller", "argocli", *CERT_MANAGER,
        "kserve_controller", "kserve_llmisvc", "kserve_localmodel", "kube_rbac_proxy", *KNATIVE,
        "traefik", "argocd", "redis",
    ]  # fmt: skip
    v = dict(
        line.split("=", 1) for line in (REPO / "versions.env").read_text().splitlines()
        if line and not line.startswith("#") and "=" in line
    )  # fmt: skip
    assert images["pause"][0] == f"registry.k8s.io/pause:{v['PAUSE_VERSION']}"
    # Knative's programs as `ko resolve --local --preserve-import-paths` names them (the e2e's
    # serving-core uses these names), Traefik as base/platform/traefik renders it
    for name in KNATIVE:
        cmd = name.removeprefix("knative_")
        want = f"ko.local/knative.dev/serving/cmd/{cmd}:{v['KNATIVE_SERVING_VERSION']}"
        assert images[name][0] == want
    assert images["traefik"][0] == f"docker.io/library/traefik:{v['TRAEFIK_VERSION']}"
    # Argo CD under the install's own name; Redis under the name the e2e's layer maps to
    argocd = (REPO / "argocd" / "install" / "kustomization.yaml").read_text()
    release = re.search(r"argo-cd/(v[0-9.]+)/manifests/install.yaml", argocd).group(1)
    assert images["argocd"][0] == f"quay.io/argoproj/argocd:{release}"
    layer = yaml.safe_load((REPO / "tests/e2e/argocd-layer/kustomization.yaml").read_text())
    (redis,) = layer["images"]
    assert images["redis"][0] == f"{redis['newName']}:{redis['newTag']}"
    # the overlay's image, normalised as containerd's CRI names it
    kust = yaml.safe_load((REPO / "overlays/local-k3d/kustomization.yaml").read_text())
    assert images["ml"][0] == f"docker.io/fashion-mnist/ml:{kust['images'][0]['newTag']}"
    # the PyTorchJob's image, as the WorkflowTemplate derives it from the pipeline's `image`
    template = (REPO / "base" / "ml" / "pipeline" / "workflowtemplate.yaml").read_text()
    assert 'image: "{{workflow.parameters.image}}-torch"' in template
    assert images["ml_torch"][0] == images["ml"][0] + "-torch"
    # the e2e's rebuilt image: a local name that the test tags with its tree's content tag
    assert images["ml_next"][0] == "localhost/fmnist-e2e/ml-next:marker"
    # the PyTorchJob Worker's init container: Debian's busybox-static under the name of
    # training-operator's --pytorch-init-container-image default (pkg/config/config.go), which
    # base/platform/training-operator leaves as it is
    assert images["busybox"][0] == "docker.io/library/alpine:3.10"
    operator = (REPO / "base" / "platform" / "training-operator").glob("**/*.yaml")
    assert not any("--pytorch-init-container-image=" in f.read_text() for f in operator)
    # the agent as KServe's inferenceservice-config names it (the upstream manifest's logger)
    argo = re.search(
        r"/releases/download/(v[\d.]+)/install.yaml",
        (REPO / "base" / "platform" / "argo-workflows" / "kustomization.yaml").read_text(),
    )[1]
    operator_version = re.search(
        r"\?ref=(v[\d.]+)",
        (REPO / "base" / "platform" / "training-operator" / "kustomization.yaml").read_text(),
    )[1]
    cert_manager = re.search(
        r"/releases/download/(v[\d.]+)/cert-manager.yaml",
        (REPO / "base" / "platform" / "cert-manager" / "kustomization.yaml").read_text(),
    )[1]
    for image in CERT_MANAGER:  # the release's names: quay.io/jetstack/cert-manager-<program>
        program = image.removeprefix("cert_manager_")
        assert images[image][0] == f"quay.io/jetstack/cert-manager-{program}:{cert_manager}"
    agent = images["agent"][0].removeprefix("docker.io/")
    mirror = Path(os.environ.get("UPSTREAM_MIRROR_DIR") or REPO.parent / "shared" / "upstream")
    kserve = f"kserve-{agent.rsplit(':', 1)[1]}.yaml"
    manifest = (mirror / kserve).read_text()
    assert f'\\"image\\" : \\"{agent}\\"' in manifest, agent
    # the platform's controllers under the names their Deployments in the pinned installs give
    for image, manifest in [
        ("training_operator", f"training-operator-{operator_version}-standalone.yaml"),
        ("workflow_controller", f"argo-workflows-{argo}-install.yaml"),
        ("argocli", f"argo-workflows-{argo}-install.yaml"),
        ("kserve_controller", kserve),
        ("kserve_llmisvc", kserve),
        ("kserve_localmodel", kserve),
        ("kube_rbac_proxy", kserve),
        *((image, f"cert-manager-{cert_manager}.yaml") for image in CERT_MANAGER),
    ]:
        ref = images[image][0]
        # the manifest's name, or its short form that containerd names with docker.io/
        name = rf"(docker\.io/)?{re.escape(ref.removeprefix('docker.io/'))}"
        assert re.search(rf'image: "?{name}"?$', (mirror / manifest).read_text(), re.M), ref
    assert images["kube_rbac_proxy"][0].endswith(f":{v['KUBE_RBAC_PROXY_VERSION']}")
    assert (
        images["kserve_controller"][0]
        == f"docker.io/kserve/kserve-controller:{agent.rsplit(':', 1)[1]}"
    )
    assert images["workflow_controller"][0].endswith(f"/workflow-controller:{argo}")
    assert images["argocli"][0].endswith(f"/argocli:{argo}")
    assert all(state == "missing" for _, _, state in images.values())
    assert all(Path(a).parent == tmp_path / "cache" for _, a, _ in images.values())


def test_a_sidecar_version_other_than_the_installs_is_refused(clone, tmp_path):
    """kube-rbac-proxy is built at KUBE_RBAC_PROXY_VERSION and imported under the name KServe's
    install gives it: when the two differ, --list stops and names both."""
    env_file = clone / "versions.env"
    text = env_file.read_text()
    want = re.search(r"^KUBE_RBAC_PROXY_VERSION=(\S+)$", text, re.M)[1]
    env_file.write_text(
        text.replace(f"KUBE_RBAC_PROXY_VERSION={want}", "KUBE_RBAC_PROXY_VERSION=v0.1.0")
    )
    proc = subprocess.run(
        ["bash", str(clone / "scripts" / "e2e-images.sh"), "--list"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "E2E_SKIP_TIERS": "", "FMNIST_IMAGES_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert proc.returncode != 0
    assert f"kube-rbac-proxy:{want}" in proc.stderr and "v0.1.0" in proc.stderr, proc.stderr


def test_archives_fails_naming_an_image_not_built(clone, tmp_path):
    proc = subprocess.run(
        ["bash", str(clone / "scripts" / "e2e-images.sh"), "--archives"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "E2E_SKIP_TIERS": "", "FMNIST_IMAGES_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert proc.returncode == 1
    assert "image pause is not built: run scripts/e2e-images.sh" in proc.stderr


@pytest.mark.parametrize("edit", ["src/training/train.py", "Dockerfile", "pyproject.toml"])
def test_the_project_images_key_follows_its_build_context(clone, tmp_path, edit):
    before = listing(clone, tmp_path / "cache")
    with (clone / edit).open("a") as f:
        f.write("\n# changed\n")
    after = listing(clone, tmp_path / "cache")
    assert after["ml"][1] != before["ml"][1]
    assert after["ml_torch"][1] != before["ml_torch"][1]
    assert after["ml_torch"][1] != after["ml"][1]
    assert after["ml_next"][1] != before["ml_next"][1]  # built on ml
    assert after["python"][1] == before["python"][1]
    assert after["pause"][1] == before["pause"][1]


def test_a_new_base_changes_the_project_images_key(clone, tmp_path, monkeypatch):
    before = listing(clone, tmp_path / "cache")
    monkeypatch.setenv("DEBIAN_MIRROR", "http://mirror.invalid/debian")  # a base's input
    after = listing(clone, tmp_path / "cache")
    assert after["python"][1] != before["python"][1]
    assert after["ml"][1] != before["ml"][1]
    assert after["ml_torch"][1] != before["ml_torch"][1]
    assert after["pause"][1] == before["pause"][1]


def test_a_file_outside_the_build_context_changes_no_key(clone, tmp_path):
    before = listing(clone, tmp_path / "cache")
    (clone / "src" / "training" / "__pycache__").mkdir(exist_ok=True)
    (clone / "src" / "training" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (clone / "base" / "ml" / "unrelated.txt").write_text("x")
    # the README is no part of it (the Dockerfile's README.md is an empty stand-in)
    with (clone / "README.md").open("a") as f:
        f.write("\n# changed\n")
    assert listing(clone, tmp_path / "cache") == before


def test_the_keyed_files_are_what_dockerignore_lets_into_the_build():
    """The content tag and the e2e's key hash IMAGE_FILES and src/ (less bytecode and
    egg-info): exactly what .dockerignore lets into `docker build`'s context, so a file added
    to one list and not the other (an image changed under the same tag) fails here."""
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = {x.strip() for x in lines if x.strip() and not x.startswith("#")}
    allowed = {x[1:] for x in patterns if x.startswith("!")}
    others = {x for x in patterns if not x.startswith("!")}
    image_files = subprocess.run(
        ["bash", "-c", 'source scripts/lib.sh && echo "${IMAGE_FILES[@]}"'],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert allowed == {f for f in image_files if f != "Dockerfile"} | {"src/"}
    assert others == {"*", "src/**/__pycache__", "src/*.egg-info"}  # image_context's exclusions


def test_a_shared_helpers_change_rebuilds_the_images_whose_recipes_call_it(clone, tmp_path):
    """The key hashes each recipe with the helpers it reaches (ko_like, kserve_manager ->
    scratch_image), so a change to the scratch-image helper rebuilds exactly the images built
    with it."""
    before = listing(clone, tmp_path / "cache")
    script = clone / "scripts" / "e2e-images.sh"
    text = script.read_text()
    marker = '  mkdir -m 1777 "$m/tmp"\n'
    assert text.count(marker) == 1  # in scratch_image alone
    script.write_text(text.replace(marker, marker + "  true\n"))
    after = listing(clone, tmp_path / "cache")
    changed = {i for i in before if after[i][1] != before[i][1]}
    assert changed == {
        "argoexec", "agent", "busybox", "event_display", "training_operator",
        "workflow_controller", "argocli", *CERT_MANAGER, "kserve_controller", "kserve_llmisvc",
        "kserve_localmodel", "kube_rbac_proxy", *KNATIVE, "traefik",
    }  # fmt: skip


@pytest.mark.parametrize("keep", ["abc", "-1", "all", "1+1", "a[$(touch pwned)]"])
def test_a_keep_count_that_is_not_a_whole_number_is_refused(clone, tmp_path, keep):
    """bash arithmetic reads such text as 0 (every older archive deleted) or runs it."""
    proc = subprocess.run(
        ["bash", str(clone / "scripts" / "e2e-images.sh"), "--list"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "E2E_SKIP_TIERS": "", "FMNIST_IMAGES_CACHE": str(tmp_path / "cache"),
             "FMNIST_IMAGES_KEEP": keep},
    )  # fmt: skip
    assert proc.returncode == 1
    assert f"FMNIST_IMAGES_KEEP must be a whole number of archives, got '{keep}'" in proc.stderr
    assert not (tmp_path / "pwned").exists()
