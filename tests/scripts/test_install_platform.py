"""scripts/install-platform.sh --render: what it would apply to Knative, offline (no cluster).

Knative's ``config-domain`` (base/platform/knative-config, what Argo CD syncs too) must name
KServe's ``ingressDomain``: without it Knative >= 1.8 makes every route cluster-local, and
Traefik's public entry point serves none (404); the script stops when the two differ. The
applied objects are checked by tests/e2e/test_platform.py.
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


def test_traefik_and_pod_spec_features_are_rendered_in_mirror_mode_too(rendered):
    objs = _docs(rendered / "knative-config" / "objects.yaml")
    net = objs[("ConfigMap", "config-network")]["data"]
    assert net == {"ingress-class": "traefik.ingress.networking.knative.dev"}
    features = objs[("ConfigMap", "config-features")]["data"]
    assert features["kubernetes.podspec-persistent-volume-claim"] == "enabled"  # pvc://
    assert set(features.values()) == {"enabled"}


def test_knative_serving_core_and_traefik_only_where_the_mirror_holds_serving_core(
    rendered, tmp_path
):
    """Mirror mode: ../shared holds Knative's CRDs only, and so the script installs them only (no
    serving-core, no Traefik: nothing could route). A mirror that also holds
    knative-serving-core-<version>.yaml (the e2e renders one) gets Knative's Deployments and
    then Traefik, its provider pointed at the public and private Services it installs (without
    both, Knative's Routes never get an address)."""
    assert (rendered / "knative-crds" / "crds.yaml").stat().st_size > 0
    assert not (rendered / "knative").exists() and not (rendered / "traefik").exists()
    versions = dict(
        line.split("=", 1) for line in (REPO / "versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )  # fmt: skip
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for f in Path(os.environ["UPSTREAM_MIRROR_DIR"]).iterdir():
        (mirror / f.name).symlink_to(f.resolve())
    deploy = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "controller", "namespace": "knative-serving"},
        "spec": {"selector": {"matchLabels": {"app": "c"}}, "template": {
            "metadata": {"labels": {"app": "c"}},
            "spec": {"containers": [{"name": "c", "image": "ko.local/c:v1"}]}}},
    }  # fmt: skip
    core = mirror / f"knative-serving-core-{versions['KNATIVE_SERVING_VERSION']}.yaml"
    core.write_text(yaml.safe_dump(deploy))
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "install-platform.sh"), "--render", str(out)],
        env={**os.environ, "UPSTREAM_MIRROR_DIR": str(mirror)},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert ("Deployment", "controller") in _docs(out / "knative" / "deploys.yaml")
    traefik = _docs(out / "traefik" / "all.yaml")
    (container,) = traefik[("Deployment", "traefik")]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"docker.io/library/traefik:{versions['TRAEFIK_VERSION']}"
    flags = dict(a.removeprefix("--").split("=", 1) for a in container["args"])
    assert flags["experimental.knative"] == "true"
    ports = {p["name"] for p in container["ports"]}
    for side, entry in (("public", "web"), ("private", "web-internal")):
        assert flags[f"providers.knative.{side}Entrypoints"] == entry
        name = flags[f"providers.knative.{side}Service.name"]
        svc = traefik[("Service", name)]
        assert svc["metadata"]["namespace"] == flags[f"providers.knative.{side}Service.namespace"]
        assert [p["targetPort"] for p in svc["spec"]["ports"]] == [entry] and entry in ports


KNATIVE_DOMAIN = "base/platform/knative-config/config-domain.yaml"


def test_a_knative_domain_other_than_kserve_ingress_domain_stops_the_script(tmp_path):
    """Changed in one place only, the domain stops the render naming both files and both
    domains; changed in both, it renders; an ingress config without one stops it too."""
    repo = tmp_path / "repo"
    for name in ("base", "scripts"):
        shutil.copytree(REPO / name, repo / name)
    shutil.copy(REPO / "versions.env", repo / "versions.env")
    if (REPO / ".venv").exists():
        (repo / ".venv").symlink_to(REPO / ".venv")
    patch, knative = repo / KSERVE_INGRESS, repo / KNATIVE_DOMAIN
    text, knative_text = patch.read_text(), knative.read_text()
    assert '"ingressDomain"  : "example.com"' in text and 'example.com: ""' in knative_text
    patch.write_text(text.replace('"example.com"', '"ml.example.org"'))
    proc = _render(repo, tmp_path / "out")
    assert proc.returncode != 0
    for named in (KNATIVE_DOMAIN, KSERVE_INGRESS, "'example.com'", "'ml.example.org'"):
        assert named in proc.stderr, proc.stderr
    # upstream's _example and a selector domain (cluster-local) are no default domain
    selector = (
        '  _example: "# an example"\n  svc.cluster.local: |\n    selector:\n'
        "      networking.knative.dev/visibility: cluster-local\n"
    )
    knative.write_text(knative_text.replace('example.com: ""', 'ml.example.org: ""') + selector)
    proc = _render(repo, tmp_path / "out1")
    assert proc.returncode == 0, proc.stderr
    data = _docs(tmp_path / "out1" / "knative-config" / "objects.yaml")[
        ("ConfigMap", "config-domain")
    ]["data"]
    assert data["ml.example.org"] == "" and "svc.cluster.local" in data
    knative.write_text(knative_text + '  ml.example.org: ""\n')  # two default domains
    proc = _render(repo, tmp_path / "out3")
    assert proc.returncode != 0 and "'example.com ml.example.org'" in proc.stderr, proc.stderr
    patch.write_text("\n".join(ln for ln in text.splitlines() if "ingressDomain" not in ln))
    proc = _render(repo, tmp_path / "out2")
    assert proc.returncode != 0
    assert "no ingressDomain in KServe's inferenceservice-config" in proc.stderr


def test_certificates_are_applied_before_the_wait_for_the_deployments_that_mount_them(rendered):
    """KServe's Deployments mount the Secrets of its Certificates: the Certificates (and their
    Issuer) go with the objects of step (2), before the wait for those Deployments, not with
    the custom resources of step (3), which would wait forever for pods that cannot start."""
    objects = _docs(rendered / "kserve" / "objects.yaml")
    crs = _docs(rendered / "kserve" / "crs.yaml")
    certs = {name for kind, name in objects if kind == "Certificate"}
    assert certs >= {"serving-cert", "llmisvc-serving-cert", "localmodel-serving-cert"}, certs
    assert ("Issuer", "selfsigned-issuer") in objects
    assert not [k for k in crs if k[0] in ("Certificate", "Issuer")], sorted(crs)
    deploys = _docs(rendered / "kserve" / "deploys.yaml")
    secrets = {
        v["secret"]["secretName"]
        for d in deploys.values()
        for v in d["spec"]["template"]["spec"].get("volumes", [])
        if "secret" in v
    }
    issued = {c["spec"]["secretName"] for (k, _), c in objects.items() if k == "Certificate"}
    assert secrets and secrets <= issued, (secrets, issued)
    assert ("ClusterStorageContainer", "default") in crs  # custom resources still wait


def test_cert_manager_is_the_release_in_full_electing_its_leader_in_its_own_namespace(rendered):
    """cert-manager is installed in full in mirror mode as online (its three Deployments, its
    webhooks, its CRDs), with base/platform/cert-manager's one change: leader election in its
    own namespace (the flag of the controller and cainjector, their Roles and RoleBindings), so
    nothing of it lands in kube-system (the platform's AppProject has no destination there)."""
    docs = _docs(rendered / "cert-manager" / "all.yaml")
    deploys = {name: d for (kind, name), d in docs.items() if kind == "Deployment"}
    assert set(deploys) == {"cert-manager", "cert-manager-webhook", "cert-manager-cainjector"}
    assert ("ValidatingWebhookConfiguration", "cert-manager-webhook") in docs
    assert sum(kind == "CustomResourceDefinition" for kind, _ in docs) == 6
    assert not [k for k, d in docs.items() if d["metadata"].get("namespace") == "kube-system"]
    for name in ("cert-manager", "cert-manager-cainjector"):
        (c,) = deploys[name]["spec"]["template"]["spec"]["containers"]
        assert "--leader-election-namespace=$(POD_NAMESPACE)" in c["args"], c["args"]
        env = {e["name"]: e for e in c["env"]}
        assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    for kind in ("Role", "RoleBinding"):
        for name in ("cert-manager:leaderelection", "cert-manager-cainjector:leaderelection"):
            assert docs[(kind, name)]["metadata"]["namespace"] == "cert-manager"


def _render_with_layer(out: Path, layer: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "install-platform.sh"), "--render", str(out)],
        env={
            **os.environ,
            "UPSTREAM_MIRROR_DIR": os.environ["UPSTREAM_MIRROR_DIR"],
            "PLATFORM_LAYER_DIR": str(layer),
        },
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_a_layer_patches_its_part_and_nothing_else(rendered, tmp_path):
    """PLATFORM_LAYER_DIR/<part>/kustomization.yaml is applied over that part's render (the
    e2e's layer: KServe's imagePullPolicy and CPU requests); the other parts render as without
    it, and a layer directory that does not exist is refused."""
    proc = _render_with_layer(tmp_path / "x", tmp_path / "no-such-layer")
    assert proc.returncode != 0 and "PLATFORM_LAYER_DIR" in proc.stderr, proc.stderr
    # a misspelt part, and a layer that leaves the part out, are refused (not silently ignored
    # or installed as nothing)
    for part, kustomization, error in [
        ("kservee", "resources: [rendered.yaml]\n", "kservee/ is no part"),
        ("kserve", "resources: []\n", "does not name rendered.yaml"),
    ]:
        bad = tmp_path / f"bad-{part}-{len(kustomization)}"
        (bad / part).mkdir(parents=True)
        (bad / part / "kustomization.yaml").write_text(kustomization)
        proc = _render_with_layer(tmp_path / "y", bad)
        assert proc.returncode != 0 and error in proc.stderr, proc.stderr
    out = tmp_path / "layered"
    proc = _render_with_layer(out, REPO / "tests" / "e2e" / "platform-layer")
    assert proc.returncode == 0, proc.stderr
    before, after = _docs(rendered / "kserve" / "all.yaml"), _docs(out / "kserve" / "all.yaml")
    assert before.keys() == after.keys()
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {k for k in before if k[0] == "Deployment"}, changed
    for key in changed:
        was = before[key]["spec"]["template"]["spec"]["containers"][0]
        now = after[key]["spec"]["template"]["spec"]["containers"][0]
        assert (was["imagePullPolicy"], now["imagePullPolicy"]) == ("Always", "IfNotPresent")
        # requests.cpu lowered to fit the 2-core node (the layer says why); limits upstream's
        assert now["resources"]["requests"]["cpu"] == "10m", key
        assert now["resources"]["limits"] == was["resources"]["limits"], key
        same = {"imagePullPolicy": None, "resources": None}
        assert {**was, **same} == {**now, **same}, key
    for part in ("training-operator", "argo-workflows", "cert-manager"):
        assert (rendered / part / "all.yaml").read_text() == (out / part / "all.yaml").read_text()


def test_a_cluster_with_kourier_is_refused_before_any_change(tmp_path):
    """A cluster an earlier version set up runs Kourier (namespace kourier-system): the script
    stops before it applies anything, naming Kourier and what to do (docs/gitops.md). Against a
    kubectl stand-in that renders with the real kubectl and records every other call."""
    real = shutil.which("kubectl", path=str(REPO / ".venv" / "bin")) or shutil.which("kubectl")
    assert real, "no kubectl (make venv)"
    calls = tmp_path / "calls"
    stub = tmp_path / "kubectl"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        f'case "$1" in kustomize|config) exec {real} "$@" ;; version) exit 1 ;; esac\n'
        f'echo "$*" >> {calls}\n'
        '[[ "$*" == "get namespace kourier-system" ]]\n'
    )
    stub.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "install-platform.sh")],
        env={**os.environ, "KUBECTL": str(stub)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "this cluster runs Kourier (namespace kourier-system)" in proc.stderr, proc.stderr
    assert "docs/gitops.md" in proc.stderr
    assert calls.read_text().splitlines() == ["get namespace kourier-system"]


def test_k3d_maps_the_host_port_to_traefiks_load_balancer_service():
    """scripts/k3d-up.sh maps host 8080 to the node's port 80 through k3s's load balancer, which
    serves a Service of type LoadBalancer on that port: Traefik's public one (the docs' curl to
    localhost:8080), with k3s's bundled Traefik off."""
    script = (REPO / "scripts" / "k3d-up.sh").read_text()
    assert '--port "8080:80@loadbalancer"' in script
    assert '--k3s-arg "--disable=traefik@server:0"' in script
    svc = _docs(REPO / "base" / "platform" / "traefik" / "services.yaml")[("Service", "traefik")]
    assert svc["spec"]["type"] == "LoadBalancer"
    assert [p["port"] for p in svc["spec"]["ports"]] == [80]
