"""The platform is installed by ``scripts/install-platform.sh`` itself on the real API server.

The session's platform (conftest's ``platform``: ``controllers.start_platform``) runs the
script against the e2e admin kubeconfig in offline mirror mode (``UPSTREAM_MIRROR_DIR`` =
../shared/upstream), with the e2e's layer (tests/e2e/platform-layer: KServe's imagePullPolicy,
CPU requests). cert-manager's controller, webhook and cainjector, KServe's three controller
managers, the training-operator and Argo (workflow-controller, argo-server) run as the pods of
the script's own Deployments on the real node (their namespaces placed there first; images
built here under the pinned names).

Real: kube-apiserver (RBAC, default admission), etcd, kube-controller-manager, kube-scheduler;
the script and kubectl; the pinned upstream release manifests; the controllers and the
webhooks they serve through their Services (cert-manager's own, with the CA its cainjector
injects; training-operator's TFJob validator with its own rotator's certificate; KServe's
runtime/InferenceService validators and pod mutator, its llmisvc and localmodel webhooks, on
certificates cert-manager issues and cainjector injects).

Stubbed, and why:
- without the tier ``serving``, Knative Serving is installed as CRDs only: the mirror then
  holds no serving-core. The script's mirror mode does exactly that and says so.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import controllers
import pytest
import real_node
import yaml
from e2e_kube import REPO_ROOT, Kubectl, KubectlError, one, versions_env, wait_until

from validation.argo import RETRIES, substitute

#: The parts install-platform.sh renders and applies; Knative's serving-core and Traefik only
#: with the tier ``serving`` (controllers.serverless: else the mirror has no serving-core).
PARTS = [
    "cert-manager",
    "knative-crds",
    *(["knative", "traefik"] if controllers.serverless() else []),
    "knative-config",
    "kserve",
    "kserve-runtimes",
    "training-operator",
    "argo-workflows",
]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the script applies, per part (``install-platform.sh --render``, offline)."""
    out = tmp_path_factory.mktemp("render")
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "install-platform.sh"), "--render", str(out)],
        env=controllers.install_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def docs(path: Path) -> list[dict]:
    """The objects of a rendered file ([] when the file does not exist)."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d] if path.is_file() else []


def test_install_succeeds_offline_and_says_what_is_stubbed(platform):
    log = platform.install_log
    assert "platform ready" in log, log
    v = versions_env()
    assert "cert-manager: its webhook's CA injected by cainjector, the webhook answers" in log
    if controllers.serverless():
        assert f"Knative Serving {v['KNATIVE_SERVING_VERSION']}: serving-core" in log
        assert f"Traefik {v['TRAEFIK_VERSION']}: Knative's ingress" in log
    else:
        assert f"Knative Serving {v['KNATIVE_SERVING_VERSION']}: CRDs only, no Traefik" in log
    platform.check_alive()


def test_every_object_is_accepted_by_the_api_server(platform, rendered, kubectl):
    for part in PARTS:
        objs = docs(rendered / part / "all.yaml")
        assert objs, f"{part}: nothing rendered"
        got = kubectl.json("get", "-f", str(rendered / part / "all.yaml"))
        items = got.get("items", [got])
        want = sorted((o["kind"], o["metadata"]["name"]) for o in objs)
        assert sorted((o["kind"], o["metadata"]["name"]) for o in items) == want, part


def test_applied_knative_domain_is_kserve_ingress_domain(platform, kubectl):
    """Knative's config-domain, as the script applied it, serves routes under KServe's
    ingressDomain (else Knative >= 1.8 keeps every route cluster-local: Traefik answers 404),
    next to Traefik as the ingress class and the pod-spec features, which the script applies in
    mirror mode as online."""
    kserve = kubectl.json("get", "configmap", "inferenceservice-config", "-n", "kserve")
    domain = json.loads(kserve["data"]["ingress"])["ingressDomain"]

    def data(name):
        cm = kubectl.json("get", "configmap", name, "-n", "knative-serving")
        return {k: v for k, v in cm["data"].items() if not k.startswith("_")}  # _example

    assert data("config-domain") == {domain: ""}
    assert data("config-network")["ingress-class"] == "traefik.ingress.networking.knative.dev"
    assert data("config-features")["kubernetes.podspec-persistent-volume-claim"] == "enabled"
    live = kubectl.json(
        "get", "configmap", "config-domain", "-n", "knative-serving", "--show-managed-fields"
    )
    managers = {m["manager"] for m in live["metadata"]["managedFields"]}
    # Argo CD's manager (install-platform.sh manager_of): once adopted, Argo CD is their one owner
    assert "argocd-controller" in managers and "fashion-mnist-platform" not in managers, managers


def test_crds_established_before_their_custom_resources(platform, rendered, kubectl):
    """Every custom resource was created after its CRD was Established (the kserve.yaml fault:
    ClusterStorageContainer CRD and CR in one file, kserve #2069)."""
    crds = {}
    for part in PARTS:
        for crd in docs(rendered / part / "crds.yaml"):
            crds[(crd["spec"]["group"], crd["spec"]["names"]["kind"])] = crd["metadata"]["name"]
    crs = [o for part in PARTS for o in docs(rendered / part / "crs.yaml")]
    assert {o["kind"] for o in crs} >= {"ClusterStorageContainer", "ClusterServingRuntime"}
    live_crds = {
        c["metadata"]["name"]: c for c in kubectl.json("get", "crd")["items"]
    }  # fmt: skip
    for o in crs:
        group = o["apiVersion"].split("/")[0]
        crd = live_crds[crds[(group, o["kind"])]]
        established = next(
            c["lastTransitionTime"]
            for c in crd["status"]["conditions"]
            if c["type"] == "Established" and c["status"] == "True"
        )
        ns = ["-n", o["metadata"]["namespace"]] if o["metadata"].get("namespace") else []
        kind = f"{o['kind'].lower()}.{group}"
        created = kubectl(
            "get", kind, o["metadata"]["name"], *ns, "-o", "jsonpath={.metadata.creationTimestamp}"
        )
        assert created >= established, (o["kind"], o["metadata"]["name"], created, established)


def knative_webhook(obj: dict) -> bool:
    """One of Knative Serving's webhook configurations: its webhook rewrites their ``rules`` and
    ``caBundle`` when it starts (knative.dev/pkg's webhook reconcilers own them; the release's
    rules are a broad placeholder), so a re-apply of the release sets them back until it does,
    by upstream's design: left out of the second run's diff, as the CAs injected are."""
    labels = obj["metadata"].get("labels") or {}
    return (
        obj["kind"].endswith("WebhookConfiguration")
        and labels.get("app.kubernetes.io/name") == "knative-serving"
    )


def test_second_run_changes_nothing(platform, rendered, kubectl, kubeconfig):
    """Idempotent: a second run exits 0 and the objects it applies are unchanged afterwards
    (``kubectl diff --server-side`` exits 0: the CA that cert-manager's cainjector and the
    operator's rotator inject is theirs, not the script's)."""
    before = {
        c["metadata"]["name"]: c["metadata"]["generation"]
        for c in kubectl.json("get", "crd")["items"]
    }
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "install-platform.sh")],
        env=controllers.install_env(kubeconfig),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = {
        c["metadata"]["name"]: c["metadata"]["generation"]
        for c in kubectl.json("get", "crd")["items"]
    }
    assert after == before
    for part in PARTS:
        objs = [o for o in docs(rendered / part / "all.yaml") if not knative_webhook(o)]
        # as the script applies each part: what an Argo CD Application syncs (a directory of
        # base/platform) under Argo CD's manager, Knative's release files under kubectl's (else
        # the diff's manager would drop what the other's apply set there)
        synced = (REPO_ROOT / "base" / "platform" / part / "kustomization.yaml").is_file()
        manager = "argocd-controller" if synced else "kubectl"
        diff = kubectl.run(
            "diff", "--server-side", "--force-conflicts", f"--field-manager={manager}", "-f", "-",
            input=yaml.safe_dump_all(objs), timeout=300,
        )  # fmt: skip
        assert diff.returncode == 0, f"{part} changed:\n{diff.stdout[-4000:]}{diff.stderr}"
    platform.check_alive()


#: cainjector's annotations: inject the CA of Certificate NAMESPACE/NAME, or of Secret
#: NAMESPACE/NAME (cert-manager's own webhook, whose CA its webhook makes itself)
INJECT_CA_FROM = "cert-manager.io/inject-ca-from"
INJECT_CA_FROM_SECRET = "cert-manager.io/inject-ca-from-secret"


def test_webhooks_are_served_as_upstream_serves_them(platform, kubectl):
    """Every webhook of cert-manager, the training-operator, KServe and Knative is upstream's: its
    Service (no URL), with a CA injected: the operator's and Knative's own; for KServe the
    ``ca.crt`` of the Secret that cert-manager issued for the Certificate its
    ``cert-manager.io/inject-ca-from`` names, in its webhook configurations and its CRDs'
    conversion webhooks; for cert-manager's own the CA of the Secret its webhook made, both
    injected by cainjector."""
    configs = [
        c
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration")
        for c in kubectl.json("get", kind)["items"]
    ]
    mine = {  # (a validating and a mutating configuration may share a name: cert-manager's)
        (c["kind"], c["metadata"]["name"]): c
        for c in configs
        if any(
            w["clientConfig"].get("service", {}).get("namespace")
            in ("cert-manager", "kubeflow", "kserve", "knative-serving")
            or "url" in w["clientConfig"]
            for w in c["webhooks"]
        )
    }
    names = {name for _, name in mine}
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        assert (kind, "cert-manager-webhook") in mine, sorted(mine)
        assert (kind, "inferenceservice.serving.kserve.io") in mine, sorted(mine)
    assert "validator.training-operator.kubeflow.org" in names, sorted(mine)
    if controllers.serverless():  # Knative's webhook: its own certificate, injected by itself
        assert "webhook.serving.knative.dev" in names, sorted(mine)
    crds = [
        c
        for c in kubectl.json("get", "crd")["items"]
        if INJECT_CA_FROM in c["metadata"].get("annotations", {})
    ]
    assert crds, "no CRD asks for cert-manager's CA"
    for c in [*mine.values(), *crds]:
        if c["kind"] == "CustomResourceDefinition":
            conversion = c["spec"].get("conversion") or {}
            hooks = [conversion["webhook"]] if conversion.get("strategy") == "Webhook" else []
        else:
            hooks = c["webhooks"]
        annotations = c["metadata"].get("annotations", {})
        want = None
        if source := annotations.get(INJECT_CA_FROM):
            ns, name = source.split("/")
            cert = kubectl.json("get", "certificate", name, "-n", ns)
            ready = {x["type"]: x for x in cert["status"]["conditions"]}["Ready"]
            assert ready["status"] == "True", cert["status"]
            secret = kubectl.json("get", "secret", cert["spec"]["secretName"], "-n", ns)
            # cert-manager's own annotations on what it issued
            assert secret["metadata"]["annotations"]["cert-manager.io/certificate-name"] == name
            want = secret["data"]["ca.crt"]
        elif source := annotations.get(INJECT_CA_FROM_SECRET):
            ns, name = source.split("/")
            want = kubectl.json("get", "secret", name, "-n", ns)["data"]["ca.crt"]
        for w in hooks:
            cc = w["clientConfig"]
            assert "url" not in cc, json.dumps(w)
            assert cc.get("caBundle"), f"{c['metadata']['name']}: no CA injected: {json.dumps(w)}"
            if want:
                assert _in_bundle(want, cc["caBundle"]), c["metadata"]["name"]


def test_tfjob_webhook_rejects_an_invalid_tfjob(platform, kubectl, namespace):
    """The operator's validating webhook is served (through its Service) and consulted by the
    API server: a TFJob without a container named ``tensorflow`` is denied by it."""
    bad = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "e2e-invalid", "namespace": namespace},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "not-tensorflow", "image": "registry.invalid/x:1"}]
        }}}}},
    }  # fmt: skip
    proc = kubectl.run("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(bad))
    assert proc.returncode != 0
    assert "validator.tfjob.training-operator.kubeflow.org" in proc.stderr, proc.stderr
    assert "denied the request" in proc.stderr, proc.stderr  # answered, not unreachable
    assert "must have at least one container with name tensorflow" in proc.stderr


def test_controllers_run_as_pods_of_the_install_on_the_real_node(platform, kubectl):
    """KServe's, the training-operator's and Argo's pods are the install's Deployments,
    Running and Ready on the real node with the images imported there under the pinned names,
    and no process of this machine runs one of their binaries from scripts/tools.sh' cache
    (the host processes they replaced)."""
    assert controllers.unready_platform_pods(platform.admin) == []
    images = real_node.imported_images()
    for ns, deployments in controllers.pod_namespaces().items():
        for name in deployments:
            d = kubectl.json("get", "deployment", name, "-n", ns)
            for c in d["spec"]["template"]["spec"]["containers"]:
                ref = real_node.canonical(c["image"])
                assert ref in images, (ns, name, ref, sorted(images))
    # a controller binary run from scripts/tools.sh' cache; in the pods they are /manager and
    # /bin/<name> (upstream's image layout), paths no host process of the run has
    names = {
        "training-operator", "workflow-controller", "argo", "kserve-manager", "kserve-llmisvc",
        "kserve-localmodel", "kube-rbac-proxy",
    }  # fmt: skip
    in_pods = {
        "/manager", "/bin/workflow-controller", "/bin/argo", "/usr/local/bin/kube-rbac-proxy",
    }  # fmt: skip
    host = []
    for exe in Path("/proc").glob("[0-9]*/exe"):
        try:
            target = os.readlink(exe)
        except OSError:
            continue
        if Path(target).name in names and target not in in_pods:
            host.append(f"{exe.parent.name}: {target}")
    assert host == [], host


def test_a_controller_image_that_was_not_imported_fails_the_install_naming_it(
    platform, kubeconfig, tmp_path
):
    """The install waits on what users wait on and says what is not ready: with cert-manager's
    webhook image renamed to a tag the node never imported (a layer over the e2e's own), the
    script stops after PLATFORM_TIMEOUT at its first part and names the Deployment and the
    pod's ErrImagePull / ImagePullBackOff (the old pod keeps serving: the rollout surges). A run
    with the e2e's layer then puts it back."""
    layer = tmp_path / "layer"
    shutil.copytree(controllers.PLATFORM_LAYER, layer)
    (layer / "cert-manager").mkdir()
    (layer / "cert-manager" / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["rendered.yaml"],
                "images": [
                    {"name": "quay.io/jetstack/cert-manager-webhook", "newTag": "not-imported"}
                ],
            }
        )
    )
    env = {**controllers.install_env(kubeconfig), "PLATFORM_LAYER_DIR": str(layer)}
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "install-platform.sh")],
        env={**env, "PLATFORM_TIMEOUT": "60"},
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    try:
        assert proc.returncode != 0, out
        assert "not rolled out within 60s" in out, out
        # the install's report: the pods of the namespace, the new webhook pod with its reason
        report = out.split("pods in cert-manager:", 1)[-1]
        assert re.search(
            r"^cert-manager-webhook-\S+ .*(ErrImagePull|ImagePullBackOff)", report, re.M
        ), out
        assert "KServe" not in out, out  # stopped at its first part
    finally:
        again = subprocess.run(
            ["bash", str(REPO_ROOT / "scripts" / "install-platform.sh")],
            env=controllers.install_env(kubeconfig),
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    platform.check_alive()


#: KServe's webhook certificate (its install's Certificate ``serving-cert``) and the webhook
#: configuration cainjector injects its CA into
KSERVE_CERT, KSERVE_SECRET = "serving-cert", "kserve-webhook-server-cert"
KSERVE_MUTATING = "inferenceservice.serving.kserve.io"


def _isvc_dry_run(kubectl: Kubectl, overlay: list[dict], namespace: str):
    """A server-side dry run of the overlay's InferenceService in ``namespace``: it goes through
    KServe's defaulting and validating webhooks (and writes nothing)."""
    isvc = json.loads(json.dumps(one(overlay, "InferenceService")))
    isvc["metadata"]["namespace"] = namespace
    return kubectl.run("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(isvc))


def _isvc_accepted(
    kubectl: Kubectl, overlay: list[dict], namespace: str, timeout: float, what: str
):
    """Wait until :func:`_isvc_dry_run` passes KServe's webhooks (AssertionError naming
    ``what`` and the last refusal otherwise)."""

    def accepted():
        proc = _isvc_dry_run(kubectl, overlay, namespace)
        if proc.returncode != 0:
            raise KubectlError(["create", "--dry-run=server"], proc.returncode, "", proc.stderr)
        return True

    return wait_until(accepted, timeout=timeout, what=what)


def _in_bundle(ca: str, bundle: str | None) -> bool:
    """Whether the PEM certificate(s) of ``ca`` (base64, a Secret's ``ca.crt``) are in the CA
    bundle ``bundle`` (base64, a webhook's ``caBundle``): cainjector merges a new CA in and keeps
    the ones that have not expired (cert-manager v1.19's CAInjectorMerging, on by default)."""
    if not bundle:
        return False
    return base64.b64decode(ca).decode().strip() in base64.b64decode(bundle).decode()


def _kserve_ca(kubectl: Kubectl) -> str | None:
    """The caBundle of the first webhook of KServe's mutating configuration (None: removed)."""
    cfg = kubectl.json("get", "mutatingwebhookconfiguration", KSERVE_MUTATING)
    return cfg["webhooks"][0]["clientConfig"].get("caBundle")


def test_a_deleted_certificate_secret_is_issued_again_and_the_webhook_serves_again(
    platform, kubectl, overlay, namespace
):
    """cert-manager, not the test run, keeps KServe's webhook certificate: its Secret deleted, the
    controller issues a new one for the Certificate (cert-manager's annotations, another
    certificate), cainjector adds its CA to KServe's webhook configurations (v1.19's
    CAInjectorMerging, on by default: the bundle keeps the previous CA until it expires), and once
    the kubelet has given the pod the new files (KServe's manager reloads them) the webhook
    serves an InferenceService again."""
    _isvc_accepted(kubectl, overlay, namespace, 30, "the InferenceService accepted")
    old = kubectl.json("get", "secret", KSERVE_SECRET, "-n", "kserve")["data"]
    kubectl("delete", "secret", KSERVE_SECRET, "-n", "kserve")

    def issued():
        got = kubectl.run("get", "secret", KSERVE_SECRET, "-n", "kserve", "-o", "json")
        return json.loads(got.stdout) if got.returncode == 0 else None

    new = wait_until(issued, timeout=90, what=f"cert-manager issuing {KSERVE_SECRET} again")
    assert new["metadata"]["annotations"]["cert-manager.io/certificate-name"] == KSERVE_CERT
    assert new["data"]["tls.crt"] != old["tls.crt"]
    wait_until(
        lambda: _in_bundle(new["data"]["ca.crt"], _kserve_ca(kubectl)),
        timeout=90,
        what="cainjector adding the new CA to KServe's webhooks",
    )
    _isvc_accepted(kubectl, overlay, namespace, 240, "KServe's webhook serving the new certificate")
    platform.check_alive()


def test_a_ca_removed_while_cainjector_is_down_refuses_then_cainjector_restores_it(
    platform, kubectl, overlay, namespace
):
    """cainjector stopped and the CA removed from KServe's defaulting webhook: the API server
    cannot trust the webhook, so an InferenceService is refused, naming the webhook and the
    certificate; cainjector started again puts the CA back and the same InferenceService is
    accepted."""
    selector = "app.kubernetes.io/component=cainjector"
    kubectl("scale", "deployment", "cert-manager-cainjector", "-n", "cert-manager", "--replicas=0")
    try:
        wait_until(
            lambda: not kubectl.json("get", "pods", "-l", selector, "-n", "cert-manager")["items"],
            timeout=120,
            what="cainjector's pod gone",
        )
        kubectl("patch", "mutatingwebhookconfiguration", KSERVE_MUTATING, "--type=json", "-p",
                '[{"op": "remove", "path": "/webhooks/0/clientConfig/caBundle"}]')  # fmt: skip
        assert _kserve_ca(kubectl) is None
        refused = wait_until(
            lambda: (p := _isvc_dry_run(kubectl, overlay, namespace)).returncode != 0 and p,
            timeout=60,
            what="the InferenceService refused",
        )
        assert "inferenceservice.kserve-webhook-server.defaulter" in refused.stderr, refused.stderr
        assert "x509" in refused.stderr or "certificate" in refused.stderr, refused.stderr
    finally:
        kubectl("scale", "deployment", "cert-manager-cainjector", "-n", "cert-manager",
                "--replicas=1")  # fmt: skip
    kubectl("rollout", "status", "deployment/cert-manager-cainjector", "-n", "cert-manager",
            "--timeout=180s", timeout=200)  # fmt: skip
    wait_until(lambda: _kserve_ca(kubectl), timeout=120, what="cainjector restoring the CA")
    _isvc_accepted(kubectl, overlay, namespace, 60, "the InferenceService accepted again")
    platform.check_alive()


# --- the install's RBAC, broken as a bad upgrade or a hand edit would break it -----------------


def render_job(overlay: list[dict], name: str, model_type: str) -> dict:
    """The TFJob of the WorkflowTemplate's ``train`` template, its first attempt, with Argo's
    substitutions; AssertionError naming any placeholder left (the template changed)."""
    wt = one(overlay, "WorkflowTemplate")
    params = {p["name"]: str(p["value"]) for p in wt["spec"]["arguments"]["parameters"]}
    values = {f"workflow.parameters.{k}": v for k, v in params.items()}
    values |= {"workflow.name": name, "inputs.parameters.model-type": model_type}
    values[RETRIES] = "0"  # the step's first attempt (its retryStrategy)
    train = next(t for t in wt["spec"]["templates"] if t["name"] == "train")
    text = substitute(train["resource"]["manifest"], values)
    assert "{{" not in text, f"unsubstituted placeholder in the train manifest: {text}"
    return yaml.safe_load(text)


def _clusterrole_without(kubectl: Kubectl, name: str, resource: str, verb: str = "") -> dict:
    """Replace ClusterRole ``name`` by a copy that no longer grants ``verb`` (every verb when
    empty) on ``resource``; returns the original, for :func:`_put_back`."""
    original = kubectl.json("get", "clusterrole", name)
    broken = json.loads(json.dumps(original))
    rules = []
    for rule in broken["rules"]:
        if resource not in rule.get("resources", []):
            rules.append(rule)
            continue
        others = [r for r in rule["resources"] if r != resource]
        if others:
            rules.append({**rule, "resources": others})
        if verb and (verbs := [v for v in rule["verbs"] if v != verb]):
            rules.append({**rule, "resources": [resource], "verbs": verbs})
    broken["rules"] = rules
    assert broken["rules"] != original["rules"], f"{name} grants nothing on {resource}"
    _replace(kubectl, broken)
    return original


def _replace(kubectl: Kubectl, obj: dict) -> None:
    meta = obj["metadata"]
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
        meta.pop(key, None)
    proc = kubectl.run("replace", "-f", "-", input=json.dumps(obj))
    assert proc.returncode == 0, proc.stderr


def _restart(kubectl: Kubectl, namespace: str, app: str, ready: bool) -> None:
    """Delete the pods of Deployment ``app`` (its ReplicaSet starts new ones, which read the
    RBAC afresh: a running informer keeps its watch); wait until the new pod runs, or (``ready``)
    until the Deployment is rolled out."""
    old = {p["metadata"]["name"] for p in kubectl.json("get", "pods", "-n", namespace, "-l",
                                                        f"app={app}")["items"]}  # fmt: skip
    kubectl("delete", "pods", "-n", namespace, "-l", f"app={app}", "--wait=true")
    if ready:
        kubectl("rollout", "status", f"deployment/{app}", "-n", namespace, "--timeout=180s")
        return

    def running() -> list:
        pods = kubectl.json("get", "pods", "-n", namespace, "-l", f"app={app}")["items"]
        return [
            p for p in pods
            if p["metadata"]["name"] not in old and p["status"].get("phase") == "Running"
        ]  # fmt: skip

    wait_until(running, timeout=180, what=f"a new {app} pod running")


def test_a_training_operator_without_pods_create_says_so_and_starts_no_replica(
    platform, kubectl, kubeconfig, overlay, namespace
):
    """The training-operator's ClusterRole without ``create`` on pods (what its real
    ServiceAccount may do is what the pinned install grants): the pipeline's TFJob gets no
    pod, and the operator says why on the job's events (the API server's "cannot create
    resource \"pods\"", naming its ServiceAccount). The ClusterRole is put back."""
    controllers.provide_volume(kubeconfig, one(overlay, "PersistentVolumeClaim"), namespace)
    job = render_job(overlay, f"e2e-{namespace[-6:]}", "cnn")
    job["metadata"]["namespace"] = namespace
    name = job["metadata"]["name"]
    original = _clusterrole_without(kubectl, "training-operator", "pods", "create")
    try:
        kubectl.apply(job)

        def refused() -> list[str]:
            events = kubectl.json("get", "events", "-n", namespace)["items"]
            return [
                e["message"] for e in events
                if 'cannot create resource "pods"' in e.get("message", "")
            ]  # fmt: skip

        said = wait_until(refused, timeout=120, what="an event saying the pods are forbidden")
        assert "system:serviceaccount:kubeflow:training-operator" in said[0], said
        pods = kubectl.json(
            "get", "pods", "-n", namespace, "-l", f"training.kubeflow.org/job-name={name}"
        )["items"]
        assert pods == [], [p["metadata"]["name"] for p in pods]
    finally:
        _replace(kubectl, original)
    platform.check_alive()


def test_a_workflow_controller_without_workflowtaskresults_runs_nothing_and_says_why(
    platform, kubectl, namespace
):
    """Argo's ClusterRole without ``workflowtaskresults`` (the executor's reports, which the
    controller lists and watches): the restarted workflow-controller's informer is refused,
    its log says so, and it processes no Workflow (a suspend-only one never gets a phase).
    With the ClusterRole put back and the controller restarted, that Workflow runs."""
    probe = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "rbac-probe", "namespace": namespace},
        "spec": {"entrypoint": "hold", "templates": [{"name": "hold", "suspend": {}}]},
    }

    def phase() -> str:
        wf = kubectl.json("get", "workflow", "rbac-probe", "-n", namespace)
        return (wf.get("status") or {}).get("phase") or ""

    original = _clusterrole_without(kubectl, "argo-cluster-role", "workflowtaskresults")
    try:
        _restart(kubectl, "argo", "workflow-controller", ready=False)
        kubectl.apply(probe)

        def refused() -> bool:
            log = kubectl.run("logs", "-n", "argo", "deployment/workflow-controller").stdout
            return "workflowtaskresults" in log and "forbidden" in log

        wait_until(
            refused, timeout=120, what="the controller saying workflowtaskresults is forbidden"
        )
        time.sleep(15)  # long enough for a working controller to start the Workflow
        assert phase() == "", phase()
    finally:
        _replace(kubectl, original)
        _restart(kubectl, "argo", "workflow-controller", ready=True)
    wait_until(lambda: phase() == "Running", timeout=120, what="the Workflow running again")
    platform.check_alive()
