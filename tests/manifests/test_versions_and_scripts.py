"""versions.env is the one place for versions; scripts are valid bash with --help."""

from __future__ import annotations

import re
import subprocess

import pytest

from validation.render import parse_versions_env, remote_refs

from .conftest import ROOT

SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))
VERSIONS = parse_versions_env(ROOT / "versions.env")


def test_versions_env_pins_everything():
    for key in (
        "KUBERNETES_VERSION",
        "K3S_IMAGE",
        "K3D_VERSION",
        "TRAINING_OPERATOR_VERSION",
        "ARGO_WORKFLOWS_VERSION",
        "KSERVE_VERSION",
        "ARGOCD_VERSION",
        "KNATIVE_SERVING_VERSION",
        "CERT_MANAGER_VERSION",
        "PYTHON_BASE_IMAGE",
        "KUBECONFORM_VERSION",
    ):
        assert VERSIONS.get(key), key
    assert VERSIONS["TRAINING_OPERATOR_VERSION"] == "v1.9.4"
    assert VERSIONS["ARGO_WORKFLOWS_VERSION"] == "v4.1.2"
    assert VERSIONS["KSERVE_VERSION"] == "v0.20.0"
    assert VERSIONS["ARGOCD_VERSION"] == "v3.5.1"


def test_every_pinned_remote_is_used():
    text = "\n".join(p.read_text() for p in ROOT.glob("*/**/kustomization.yaml"))
    for url in remote_refs(VERSIONS):
        assert url in text, url


def test_dockerfile_base_image_matches_versions_env():
    text = (ROOT / "Dockerfile").read_text()
    assert f"ARG PYTHON_BASE_IMAGE={VERSIONS['PYTHON_BASE_IMAGE']}\n" in text
    assert re.fullmatch(r"python:3\.11\.\d+-slim", VERSIONS["PYTHON_BASE_IMAGE"])
    assert "USER 1000:1000" in text and "TF_USE_LEGACY_KERAS=1" in text


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_is_valid_bash(script):
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "set -euo pipefail" in text
    assert "lib.sh" in text or "versions.env" in text
    # no version literal: everything comes from versions.env
    assert not re.search(r"\bv\d+\.\d+\.\d+\b", text), script.name


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s.name != "lib.sh"], ids=lambda p: p.name)
def test_script_help(script):
    proc = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: scripts/")
