"""scripts/install-platform.sh --render: what it would apply to Knative, offline (no cluster).

Knative's ``config-domain`` is derived from KServe's ``ingressDomain`` (the one place the domain
is set): without it Knative >= 1.8 makes every route cluster-local, and Kourier's external
listener serves none (404). The applied objects are checked by tests/e2e/test_platform.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KSERVE_INGRESS = "base/platform/kserve/patches/inferenceservice-config-ingress.yaml"


def _render(repo: Path, out: Path) -> subprocess.CompletedProcess:
    mirror = os.environ.get("UPSTREAM_MIRROR_DIR")
    if not mirror:
        pytest.fail("offline: run with MIRROR_DIR=../shared (make test sets UPSTREAM_MIRROR_DIR)")
    return subprocess.run(
        ["bash", str(repo / "scripts" / "install-platform.sh"), "--render", str(out)],
        env={**os.environ, "UPSTREAM_MIRROR_DIR": mirror},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def _docs(path: Path) -> dict[tuple[str, str], dict]:
    return {
        (d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(path.read_text()) if d
    }


def _ingress_domain(kserve_all: Path) -> str:
    config = _docs(kserve_all)[("ConfigMap", "inferenceservice-config")]
    return json.loads(config["data"]["ingress"])["ingressDomain"]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("render")
    proc = _render(REPO, out)
    assert proc.returncode == 0, proc.stderr
    return out


def test_knative_domain_is_kserve_ingress_domain(rendered):
    domain = _ingress_domain(rendered / "kserve" / "all.yaml")
    objs = _docs(rendered / "knative-config" / "objects.yaml")
    data = objs[("ConfigMap", "config-domain")]["data"]
    assert data == {domain: ""}, data
    assert objs[("ConfigMap", "config-domain")]["metadata"]["namespace"] == "knative-serving"


def test_kourier_and_pod_spec_features_are_rendered_in_mirror_mode_too(rendered):
    objs = _docs(rendered / "knative-config" / "objects.yaml")
    net = objs[("ConfigMap", "config-network")]["data"]
    assert net == {"ingress-class": "kourier.ingress.networking.knative.dev"}
    features = objs[("ConfigMap", "config-features")]["data"]
    assert features["kubernetes.podspec-persistent-volume-claim"] == "enabled"  # pvc://
    assert set(features.values()) == {"enabled"}


def test_knative_domain_follows_a_changed_ingress_domain(tmp_path):
    """Derived, not repeated: change KServe's ingressDomain in a copy of the repository and
    Knative's domain changes with it; an ingress config without one stops the script."""
    repo = tmp_path / "repo"
    for name in ("base", "scripts"):
        shutil.copytree(REPO / name, repo / name)
    shutil.copy(REPO / "versions.env", repo / "versions.env")
    if (REPO / ".venv").exists():
        (repo / ".venv").symlink_to(REPO / ".venv")
    patch = repo / KSERVE_INGRESS
    text = patch.read_text()
    assert '"ingressDomain"  : "example.com"' in text
    patch.write_text(text.replace('"example.com"', '"ml.example.org"'))
    proc = _render(repo, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    data = _docs(tmp_path / "out" / "knative-config" / "objects.yaml")[
        ("ConfigMap", "config-domain")
    ]["data"]
    assert data == {"ml.example.org": ""}
    patch.write_text("\n".join(ln for ln in text.splitlines() if "ingressDomain" not in ln))
    proc = _render(repo, tmp_path / "out2")
    assert proc.returncode != 0
    assert "no ingressDomain in KServe's inferenceservice-config" in proc.stderr
