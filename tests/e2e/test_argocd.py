"""Argo CD for real (tier ``gitops``): docs/gitops.md's flow, from a git server of the run.

Real: Argo CD v3.5.1 (hack/tools/argocd.sh; its gitops-engine is the one version the module proxy
serves, docs/e2e-controllers.md) runs as the pods of ``argocd/install`` on the real node, installed
by the README's ``scripts/bootstrap-argocd.sh local-k3d`` run from a clone of the served
repository (tests/e2e/gitops.py: the tree under test, offline, plus the user's commit that sets
the repository URL); its application controller, repo-server (with git and kustomize v5.8.1),
server (the webhook) and Redis sync every Application from that git server, from the root app
down, in their waves, onto the platform that install-platform.sh installed; pushes go through
git's smart HTTP protocol and the server's post-receive hook calls Argo CD's webhook as GitHub
does (tests/e2e/git_server.py). The ``argocd-cm`` health scripts are also run by Lua 5.1 (lupa;
Argo CD embeds gopher-lua, a Lua 5.1) on hand-made objects, for the states a run does not reach.

Not here (tests/e2e/argocd-layer says why): Dex and the notifications controller (scaled to 0),
GnuPG, Redis 8 (Debian's 7.0 runs instead), TF Serving (its image cannot be had here: the
project's ModelServer stands in, as a namespaced ServingRuntime under the name the
InferenceService in git asks for, :func:`_node_images_for_git`). Until the loop's pipeline run
publishes a version, the ML app's InferenceService is not Ready and the app says so, which is
what the push tests need (a push must sync while it is not Ready); the loop then runs the
pipeline from the synced WorkflowTemplate and the app ends Healthy, the version served.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import controllers
import gitops
import pytest
import real_node
import yaml
from e2e_kube import REPO_ROOT, Kubectl, one, wait_until
from git_server import GitServer, Webhook, git
from lupa import lua51
from pipeline_run import PIPELINE_TIMEOUT_S, SMOKE_RUN, clear_volume, fresh_run, script
from test_real_serving import RUNTIME
from test_serverless import ingress_url, post, ready, why_not_ready

from fmnist_common import (
    INPUT_NAME,
    MODEL_NAME,
    OUTPUT_NAME,
    SIGNATURE_KEY,
    predict_body,
    predict_path,
)

HEALTH_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
#: Every Application of argocd/apps/local-k3d by its sync wave in the root app.
WAVES = {
    -4: ("cert-manager", "knative-config", "traefik"),
    -3: ("training-operator", "argo-workflows", "kserve"),
    -2: ("kserve-runtimes",),
    0: ("fashion-mnist",),
}
ML_APP, ML_NAMESPACE = "fashion-mnist", "fashion-mnist"
WEBHOOK_SECRET = "e2e-webhook-secret"
#: argocd-cm timeout.reconciliation in the e2e's layer (tests/e2e/argocd-layer): polling's period.
RECONCILIATION_S = 20
#: Where a run's measurements go (docs/gitops.md quotes them).
MEASURED: dict[str, float] = {}


@dataclass
class GitOps:
    """The module's GitOps setup: the git ``server``, the ``served`` tree (origin: the served
    repository), the repository ``url``, the bootstrap's output, and the ``user`` clone that
    pushes changes as a developer would."""

    server: GitServer
    served: Path
    url: str
    bootstrap_out: str
    user: Path


def _bootstrap(clone: Path, kubectl: Kubectl, kubeconfig: Path) -> str:
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "KUBECTL": kubectl.binary,
        "PYTHON": str(REPO_ROOT / ".venv" / "bin" / "python"),
        "ARGOCD_LAYER_DIR": str(gitops.ARGOCD_LAYER),
        "UPSTREAM_MIRROR_DIR": str(controllers.shared_mirror_dir()),
    }
    proc = subprocess.run(
        [str(clone / "scripts" / "bootstrap-argocd.sh"), "local-k3d"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, f"bootstrap-argocd.sh failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def _teardown(kubectl: Kubectl) -> None:
    """Stop syncing, then remove the Applications without pruning the platform (later modules
    use it) and the ML layer's namespace (test_real_node.py deploys it itself), then Argo CD."""
    kubectl.run(
        "scale", "statefulset", "argocd-application-controller", "-n", "argocd", "--replicas=0"
    )
    kubectl.run(
        "wait",
        "--for=delete",
        "pod",
        "-l",
        "app.kubernetes.io/name=argocd-application-controller",
        "-n",
        "argocd",
        "--timeout=120s",
        timeout=130,
    )
    apps = kubectl.run(
        "get", "applications.argoproj.io", "-n", "argocd", "-o", "name"
    ).stdout.split()
    for a in apps:
        kubectl.run(
            "patch", a, "-n", "argocd", "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
        )
        kubectl.run("delete", a, "-n", "argocd", "--wait=false")
    for ns in (ML_NAMESPACE, "argocd"):  # both at once, then wait for both
        kubectl.run("delete", "namespace", ns, "--ignore-not-found", "--wait=false")
    for ns in (ML_NAMESPACE, "argocd"):
        kubectl.run("wait", "--for=delete", f"namespace/{ns}", "--timeout=300s", timeout=310)


@pytest.fixture(scope="module")
def setup(platform, kubectl: Kubectl, kubeconfig: Path, overlay, tmp_path_factory) -> GitOps:
    """docs/gitops.md's flow, once: the served repository (its URL set, pushed), the README's
    bootstrap from a clone of it, the webhook's secret in ``argocd-secret`` and the git
    server's webhook pointed at argocd-server's ``/api/webhook``. Before the bootstrap, the
    ML namespace gets the e2e's stand-in for TF Serving (:func:`_node_images_for_git`)."""
    work = tmp_path_factory.mktemp("gitops")
    (work / "repos").mkdir()
    server = GitServer(work / "repos", real_node.NODE_IP).start()
    url = server.url(gitops.REPO_NAME)
    try:
        server.create(gitops.REPO_NAME)
        served = gitops.served_tree(work, url, controllers.shared_mirror_dir(), kubectl.binary)
        proc = gitops.push(served)
        assert proc.returncode == 0, proc.stderr
        # Argo CD's pods, and the ML layer's, on the real node
        controllers.place_on_real_node(kubeconfig, ("argocd", ML_NAMESPACE))
        _load_balancer_address(kubectl)
        _node_images_for_git(kubectl, overlay)
        git("clone", "--quiet", url, str(work / "clone"))
        out = _bootstrap(work / "clone", kubectl, kubeconfig)
        kubectl(
            "patch",
            "secret",
            "argocd-secret",
            "-n",
            "argocd",
            "--type=merge",
            "-p",
            json.dumps({"stringData": {"webhook.github.secret": WEBHOOK_SECRET}}),
        )
        ip = kubectl(
            "get", "service", "argocd-server", "-n", "argocd", "-o", "jsonpath={.spec.clusterIP}"
        )
        server.webhooks[gitops.REPO_NAME] = Webhook(f"https://{ip}/api/webhook", WEBHOOK_SECRET)
        git("clone", "--quiet", url, str(work / "user"))
        yield GitOps(server, served, url, out, work / "user")
    finally:
        log_dir = os.environ.get("FMNIST_E2E_DIR")
        if log_dir:
            (Path(log_dir) / "logs").mkdir(parents=True, exist_ok=True)
            (Path(log_dir) / "logs" / "gitops-measured.json").write_text(json.dumps(MEASURED))
            _keep_argocd_logs(kubectl, Path(log_dir) / "logs" / "argocd")
        print(f"\ngitops measured: {MEASURED}")
        _teardown(kubectl)
        server.stop()


def _keep_argocd_logs(kubectl: Kubectl, into: Path) -> None:
    """Argo CD's logs before the teardown deletes its pods (and the kubelet their logs), next to
    the cluster's (scripts/e2e-cluster.sh keep_logs): one file per workload, kept as far as
    ``kubectl logs`` answers."""
    into.mkdir(parents=True, exist_ok=True)
    for workload in (
        "statefulset/argocd-application-controller",
        "deployment/argocd-repo-server",
        "deployment/argocd-server",
    ):
        proc = kubectl.run("logs", "-n", "argocd", workload, "--all-containers", "--tail=-1")
        (into / f"{workload.split('/')[1]}.log").write_text(proc.stdout + proc.stderr)


def _load_balancer_address(kubectl: Kubectl) -> None:
    """What k3s' ServiceLB (k3d) or a cloud's load balancer does, which the e2e's cluster has
    none of: Traefik's LoadBalancer Service gets an address (the real node's IP) in its status.
    Argo CD rates a LoadBalancer Service without one Progressing, so without it the Application
    ``traefik`` (wave -4) would hold every later wave (docs/gitops.md)."""
    status = {"status": {"loadBalancer": {"ingress": [{"ip": real_node.NODE_IP}]}}}
    kubectl("patch", "service", "traefik", "-n", "traefik", "--subresource=status",
            "--type=merge", "-p", json.dumps(status))  # fmt: skip


def _node_images_for_git(kubectl: Kubectl, overlay: list[dict]) -> None:
    """TF Serving's stand-in (hack/e2e/serving-runtime.yaml: the project's ModelServer, which
    loads the version in the base path the storageUri names) for the InferenceService that
    Argo CD syncs from git, which names KServe's ClusterServingRuntime
    ``kserve-tensorflow-serving`` and its ``runtimeVersion``: a namespaced ServingRuntime of
    that name, which KServe v0.20.0 takes first (utils.GetServingRuntime), and the pipeline
    image also under the tag that ``runtimeVersion`` gives it (utils.UpdateImageTag); and
    message-dumper's digest-pinned image, the node's event_display build under that name.
    Git's objects stay as they are."""
    model = one(overlay, "InferenceService")["spec"]["predictor"]["model"]
    image = real_node.ml_image(overlay)
    assert ":" in image.rsplit("/", 1)[-1], f"{image}: a tagged reference is what KServe retags"
    runtime = yaml.safe_load(RUNTIME.read_text())
    runtime["metadata"].update(name=model["runtime"], namespace=ML_NAMESPACE)
    runtime["spec"]["containers"][0]["image"] = image
    kubectl.apply(runtime)
    real_node.tag_image(image, f"{image.rsplit(':', 1)[0]}:{model['runtimeVersion']}")
    # message-dumper's image is pinned by upstream's digest, which no rebuild matches: the
    # node's event_display build gets that name too (test_real_serving.py sets the image instead)
    dumper = next(o for o in overlay if o["apiVersion"] == "serving.knative.dev/v1")
    (container,) = dumper["spec"]["template"]["spec"]["containers"]
    real_node.tag_image(real_node.imported_image("/event-display:"), container["image"])


def _live_param(kubectl: Kubectl, name: str) -> str:
    wt = kubectl.json("get", "workflowtemplate", "fashion-mnist-pipeline", "-n", ML_NAMESPACE)
    return next(p["value"] for p in wt["spec"]["arguments"]["parameters"] if p["name"] == name)


def _edit_environment(tree: Path, key: str, value: str) -> None:
    """The developer's change: one value of overlays/local-k3d/environment.yaml."""
    path = tree / "overlays" / "local-k3d" / "environment.yaml"
    pattern = rf"(?m)^(  {re.escape(key)}: ).*$"  # the value as a YAML double-quoted scalar
    text, n = re.subn(pattern, lambda m: m[1] + json.dumps(value), path.read_text())
    assert n == 1, f"{key} not in {path}"
    path.write_text(text)


def _push_change(setup: GitOps, message: str) -> tuple[str, str, float]:
    """Commit the user clone's changes and push; (revision, the push's stderr, push start)."""
    git("pull", "--quiet", "--rebase", "--autostash", "origin", "main", cwd=setup.user)
    rev = gitops.commit(setup.user, message)
    t0 = time.monotonic()
    proc = gitops.push(setup.user)
    assert proc.returncode == 0, proc.stderr
    return rev, proc.stderr, t0


def _all_synced(kubectl: Kubectl) -> dict[str, tuple[str, str, str]]:
    names = ["root", *(n for wave in WAVES.values() for n in wave)]
    got = {n: gitops.state(gitops.app(kubectl, n)) for n in names}
    return got if all(s[0] == "Synced" for s in got.values()) else {}


# --- bootstrap and the first sync ----------------------------------------------------------------


def test_bootstrap_applies_only_projects_and_root_app(setup: GitOps, kubectl: Kubectl):
    applied = re.findall(r"^(\S+\.argoproj\.io/\S+) serverside-applied", setup.bootstrap_out, re.M)
    apps = [a for a in applied if a.startswith("application.")]
    assert apps == ["application.argoproj.io/root"], applied
    assert {"appproject.argoproj.io/platform", "appproject.argoproj.io/fashion-mnist"} <= set(
        applied
    )
    root = gitops.app(kubectl, "root")["spec"]["source"]
    assert root == {
        "path": "argocd/apps/local-k3d",
        "repoURL": setup.url,
        "targetRevision": "main",
    }, root
    # the install's pods, from the images built here, on the real node
    pods = kubectl.json("get", "pods", "-n", "argocd")["items"]
    running = {
        p["metadata"]["labels"]["app.kubernetes.io/name"]
        for p in pods
        if p["status"].get("phase") == "Running"
    }
    assert {
        "argocd-application-controller",
        "argocd-repo-server",
        "argocd-server",
        "argocd-redis",
        "argocd-applicationset-controller",
    } <= running, running
    assert {p["spec"]["nodeName"] for p in pods} == {real_node.node_name()}


def test_every_application_syncs_from_git_in_its_waves(setup: GitOps, kubectl: Kubectl):
    """The root app creates its children wave by wave, each wave once the one before is
    Healthy; every Application ends Synced at the served revision. The platform apps adopt what
    install-platform.sh installed (Healthy); the ML app's InferenceService cannot be Ready here
    (module docstring), and the ML app says so."""
    got = wait_until(
        lambda: _all_synced(kubectl), timeout=600, interval=2, what="every Application Synced"
    )
    head = git("rev-parse", "HEAD", cwd=setup.served).strip()
    assert {rev for _, _, rev in got.values()} == {head}, got
    for wave in (-4, -3, -2):
        for name in WAVES[wave]:
            assert got[name][1] == "Healthy", gitops.describe(kubectl)
    ml = gitops.app(kubectl, ML_APP)
    assert got[ML_APP][1] in {"Progressing", "Degraded"}, gitops.describe(kubectl)
    isvc = next(r for r in ml["status"]["resources"] if r["kind"] == "InferenceService")
    print(f"\n{ML_APP}: {got[ML_APP][1]}; InferenceService: {isvc.get('health')}")
    created = {
        n: gitops.app(kubectl, n)["metadata"]["creationTimestamp"]
        for wave in WAVES.values()
        for n in wave
    }
    order = sorted(WAVES)
    for earlier, later in zip(order, order[1:], strict=False):
        assert max(created[n] for n in WAVES[earlier]) < min(created[n] for n in WAVES[later]), (
            created
        )
    # the live objects are git's
    assert _live_param(kubectl, "workers") == "2"


# --- pushes ---------------------------------------------------------------------------------


def test_a_push_syncs_through_the_webhook_while_no_model_is_served(setup: GitOps, kubectl: Kubectl):
    """The deadlock class (docs/gitops.md): with the InferenceService not Ready (no model yet),
    a push to a pipeline parameter is live within seconds, through the webhook."""
    _all_synced(kubectl) or wait_until(lambda: _all_synced(kubectl), timeout=600, interval=2)
    isvc = kubectl.json("get", "inferenceservice", "fashion-mnist", "-n", ML_NAMESPACE)
    ready = [c for c in isvc.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
    assert not ready or ready[0]["status"] != "True", "the InferenceService must not be Ready here"
    _edit_environment(setup.user, "workers", "3")
    rev, out, t0 = _push_change(setup, "local-k3d: 3 workers")
    assert "webhook refs/heads/main: 200" in out, out
    took = gitops.wait_synced(kubectl, ML_APP, rev, timeout=RECONCILIATION_S * 3)
    wait_until(lambda: _live_param(kubectl, "workers") == "3", timeout=30, what="workers=3 live")
    MEASURED["push_to_synced_webhook_s"] = round(time.monotonic() - t0, 1)
    print(f"\npush -> Synced: {took:.1f} s; -> live: {MEASURED['push_to_synced_webhook_s']} s")
    logs = kubectl("logs", "-n", "argocd", "deploy/argocd-server", "--tail=200")
    assert f"Received push event repo: {setup.server.web_url(gitops.REPO_NAME)}" in logs, logs[
        -2000:
    ]


def test_a_wrong_webhook_secret_is_refused_and_polling_still_syncs(setup: GitOps, kubectl: Kubectl):
    hook = setup.server.webhooks[gitops.REPO_NAME]
    setup.server.webhooks[gitops.REPO_NAME] = Webhook(hook.url, "not-the-secret")
    try:
        _edit_environment(setup.user, "workers", "2")
        rev, out, t0 = _push_change(setup, "local-k3d: 2 workers")
    finally:
        setup.server.webhooks[gitops.REPO_NAME] = hook
    # refused: v3.5.1 answers 400 (util/webhook: its 401 is for a registry webhook's HMAC
    # error; a forge's is "Webhook processing failed") and logs why
    assert "webhook refs/heads/main: 400 Webhook processing failed" in out, out
    logs = kubectl("logs", "-n", "argocd", "deploy/argocd-server", "--tail=200")
    assert "GitHub webhook HMAC verification failed" in logs, logs[-2000:]
    gitops.wait_synced(kubectl, ML_APP, rev, timeout=RECONCILIATION_S * 2 + 60)
    wait_until(lambda: _live_param(kubectl, "workers") == "2", timeout=30, what="workers=2 live")
    MEASURED["push_to_synced_polling_s"] = round(time.monotonic() - t0, 1)


def test_a_live_edit_is_reverted_by_self_heal(setup: GitOps, kubectl: Kubectl):
    wt = kubectl.json("get", "workflowtemplate", "fashion-mnist-pipeline", "-n", ML_NAMESPACE)
    params = wt["spec"]["arguments"]["parameters"]
    i = next(i for i, p in enumerate(params) if p["name"] == "workers")
    kubectl(
        "patch",
        "workflowtemplate",
        "fashion-mnist-pipeline",
        "-n",
        ML_NAMESPACE,
        "--type=json",
        "-p",
        json.dumps(
            [{"op": "replace", "path": f"/spec/arguments/parameters/{i}/value", "value": "7"}]
        ),
    )
    t0 = time.monotonic()
    wait_until(
        lambda: _live_param(kubectl, "workers") == "2",
        timeout=RECONCILIATION_S * 2,
        what="self-heal to git's workers=2",
    )
    MEASURED["self_heal_s"] = round(time.monotonic() - t0, 1)


def test_a_broken_push_is_reported_and_the_cluster_keeps_its_last_good_state(
    setup: GitOps, kubectl: Kubectl
):
    before = _live_param(kubectl, "workers")
    kfile = setup.user / "overlays" / "local-k3d" / "kustomization.yaml"
    good = kfile.read_text()
    kfile.write_text(
        good.replace("  - environment.yaml\n", "  - environment.yaml\n  - missing.yaml\n")
    )
    _edit_environment(setup.user, "workers", "5")
    since = gitops.resource_version(kubectl, ML_APP)
    rev, out, _ = _push_change(setup, "broken: a resource that does not exist")
    assert "webhook refs/heads/main: 200" in out, out
    msg = gitops.comparison_error(
        gitops.watch_app(
            kubectl, ML_APP, since, gitops.comparison_error, timeout=RECONCILIATION_S * 2
        )
    )
    assert "missing.yaml" in msg, msg
    assert _live_param(kubectl, "workers") == before  # the last good state
    kfile.write_text(good)
    rev, _, _ = _push_change(setup, "fix the kustomization")
    gitops.wait_synced(kubectl, ML_APP, rev, timeout=RECONCILIATION_S * 3)
    wait_until(lambda: _live_param(kubectl, "workers") == "5", timeout=30, what="workers=5 live")
    assert not gitops.comparison_error(gitops.app(kubectl, ML_APP))


def _ml_kustomization(setup: GitOps) -> Path:
    return setup.user / "overlays" / "local-k3d" / "kustomization.yaml"


def _add_resource(setup: GitOps, name: str, doc: dict) -> str:
    """The local-k3d overlay with one more resource file ``name`` holding ``doc``; returns the
    kustomization's text before (to restore)."""
    kfile = _ml_kustomization(setup)
    before = kfile.read_text()
    (kfile.parent / name).write_text(yaml.safe_dump(doc))
    kfile.write_text(
        before.replace("  - environment.yaml\n", f"  - environment.yaml\n  - {name}\n")
    )
    return before


def _service_account(name: str) -> dict:
    """A ServiceAccount: a kind the ML app's AppProject permits (a ConfigMap it refuses)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}


def _exists(kubectl: Kubectl, kind: str, name: str) -> bool:
    return kubectl.run("get", kind, name, "-n", ML_NAMESPACE).returncode == 0


def test_a_manifest_removed_from_git_is_pruned(setup: GitOps, kubectl: Kubectl):
    """The ML app syncs with ``prune: true``: what git no longer holds leaves the cluster."""
    before = _add_resource(setup, "e2e-extra.yaml", _service_account("e2e-extra"))
    rev, _, _ = _push_change(setup, "an extra ServiceAccount")
    gitops.wait_synced(kubectl, ML_APP, rev, timeout=RECONCILIATION_S * 3)
    assert _exists(kubectl, "serviceaccount", "e2e-extra")
    _ml_kustomization(setup).write_text(before)
    (_ml_kustomization(setup).parent / "e2e-extra.yaml").unlink()
    rev, _, _ = _push_change(setup, "remove the extra ServiceAccount")
    gitops.wait_synced(kubectl, ML_APP, rev, timeout=RECONCILIATION_S * 3)
    wait_until(
        lambda: not _exists(kubectl, "serviceaccount", "e2e-extra"), timeout=30, what="pruned"
    )


def test_an_object_the_api_server_refuses_fails_the_sync_and_the_next_push_recovers(
    setup: GitOps, kubectl: Kubectl
):
    """A push with an object the API server refuses (an invalid name) fails the sync with the
    API server's reason, and the Application stays OutOfSync. Argo CD's dry run is client-side
    (gitops-engine: ``cmdutil.DryRunClient``), so it passes such an object, and the objects of
    that push that the API server accepts are applied (the change of ``workers`` here): a sync
    is not atomic (docs/gitops.md). The next good push syncs although the failed sync is still
    retrying (``retry.refresh: true``: a retry takes the newest revision)."""
    before = _add_resource(setup, "e2e-bad.yaml", _service_account("Not_A_DNS_Name"))
    _edit_environment(setup.user, "workers", "4")
    rev, _, _ = _push_change(setup, "an object the API server refuses")

    def failure() -> str:
        """Where the Application reports the refused object: its conditions, the operation's
        message, or the operation's result for that resource ('' while nowhere)."""
        st = gitops.app(kubectl, ML_APP).get("status") or {}
        op = st.get("operationState") or {}
        found = [c.get("message", "") for c in st.get("conditions") or []]
        found.append(op.get("message", ""))
        found += [r.get("message", "") for r in (op.get("syncResult") or {}).get("resources") or []]
        return "\n".join(m for m in found if "Not_A_DNS_Name" in m)

    try:
        msg = wait_until(failure, timeout=RECONCILIATION_S * 3, what="the failed sync's reason")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{gitops.describe(kubectl)}") from None
    print(f"\nrefused push: {msg}")
    assert "RFC 1123" in msg or "invalid" in msg.lower(), msg
    assert gitops.state(gitops.app(kubectl, ML_APP))[0] == "OutOfSync"
    assert _live_param(kubectl, "workers") == "4"  # accepted by the API server: applied
    _ml_kustomization(setup).write_text(before)
    (_ml_kustomization(setup).parent / "e2e-bad.yaml").unlink()
    rev, _, t0 = _push_change(setup, "remove the refused object")
    gitops.wait_synced(kubectl, ML_APP, rev, timeout=240)
    op = gitops.app(kubectl, ML_APP)["status"]["operationState"]
    assert op["phase"] == "Succeeded", op.get("message")
    MEASURED["fix_after_refused_push_s"] = round(time.monotonic() - t0, 1)


# --- the platform from git: Knative's settings -------------------------------------------------

KNATIVE_APP, KNATIVE_NS = "knative-config", "knative-serving"
AUTOSCALER_FILE = Path("base/platform/knative-config/config-autoscaler.yaml")
#: The pushed setting: Knative's max-scale-up-rate (upstream 1000), which the autoscaler's config
#: store logs as ``MaxScaleUpRate`` (knative.dev/pkg configmap/store.go: "config was added or
#: updated", at debug: tests/e2e/platform-layer/knative raises the autoscaler's level).
SETTING, PUSHED, LIVE_EDIT, REFUSED = "max-scale-up-rate", "999", "500", "0.5"
#: The key of config-autoscaler.yaml that install-platform.sh applied before Argo CD adopted it.
SCRIPT_KEY = "enable-scale-to-zero"


def _autoscaler_config(kubectl: Kubectl) -> dict[str, str]:
    return kubectl.json("get", "configmap", "config-autoscaler", "-n", KNATIVE_NS)["data"]


def _push_autoscaler(setup: GitOps, keys: dict[str, str | None], message: str) -> tuple[str, str]:
    """config-autoscaler.yaml in the user clone with each of ``keys`` set (None: removed),
    pushed; (the revision, the push's time as ``kubectl logs --since-time`` takes it)."""
    path = setup.user / AUTOSCALER_FILE
    lines = [ln for ln in path.read_text().splitlines() if ln.split(":")[0].strip() not in keys]
    lines += [f'  {k}: "{v}"' for k, v in keys.items() if v is not None]
    path.write_text("\n".join(lines) + "\n")
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
    return _push_change(setup, message)[0], since


def _autoscaler_logged(kubectl: Kubectl, value: str, since: str) -> bool:
    """Whether Knative's autoscaler logged, since ``since``, a config-autoscaler with
    MaxScaleUpRate ``value``."""
    logs = kubectl("logs", "deployment/autoscaler", "-n", KNATIVE_NS, f"--since-time={since}")
    return any(
        "config-autoscaler" in ln and f"MaxScaleUpRate:{value}," in ln for ln in logs.splitlines()
    )


def test_a_pushed_knative_setting_reaches_the_autoscaler_and_a_live_edit_is_reverted(
    setup: GitOps, kubectl: Kubectl
):
    """Knative's settings are an Application (base/platform/knative-config): a pushed key of
    config-autoscaler is live in the ConfigMap and in the autoscaler, while the keys git does
    not hold stay (upstream's, the e2e layer's shorter windows: a partial object applied
    server-side); a live edit of it is reverted by self-heal; a value Knative's webhook refuses
    is refused in Argo CD's server-side diff (a ComparisonError: nothing applied, the live value
    stays); keys removed from git leave the live ConfigMap, a key install-platform.sh applied
    before Argo CD adopted it too (one owner: install-platform.sh manager_of), while the
    ConfigMap itself stays (Prune=false)."""
    before = _autoscaler_config(kubectl)
    assert SETTING not in before and before.get(SCRIPT_KEY) == "true", before
    rev, since = _push_autoscaler(setup, {SETTING: PUSHED}, "Knative: max-scale-up-rate 999")
    MEASURED["knative_setting_push_s"] = round(
        gitops.wait_synced(kubectl, KNATIVE_APP, rev, timeout=RECONCILIATION_S * 3), 1
    )
    live = _autoscaler_config(kubectl)
    assert live[SETTING] == PUSHED, live
    kept = {k: v for k, v in before.items() if k != SCRIPT_KEY}
    assert {k: live.get(k) for k in kept} == kept  # the keys git does not hold stay
    wait_until(
        lambda: _autoscaler_logged(kubectl, PUSHED, since),
        timeout=60,
        what=f"the autoscaler's config with MaxScaleUpRate:{PUSHED}",
    )

    kubectl(
        "patch", "configmap", "config-autoscaler", "-n", KNATIVE_NS, "--type=merge",
        "-p", json.dumps({"data": {SETTING: LIVE_EDIT}}),
    )  # fmt: skip
    t0 = time.monotonic()
    wait_until(
        lambda: _autoscaler_config(kubectl)[SETTING] == PUSHED,
        timeout=RECONCILIATION_S * 3,
        what=f"self-heal to git's {SETTING}={PUSHED}",
    )
    MEASURED["knative_self_heal_s"] = round(time.monotonic() - t0, 1)

    since = gitops.resource_version(kubectl, KNATIVE_APP)
    _push_autoscaler(setup, {SETTING: REFUSED}, "Knative: a max-scale-up-rate its webhook refuses")
    msg = gitops.comparison_error(
        gitops.watch_app(
            kubectl, KNATIVE_APP, since, gitops.comparison_error, timeout=RECONCILIATION_S * 3
        )
    )
    print(f"\nrefused setting: {msg}")
    assert SETTING in msg and "denied" in msg, msg
    assert _autoscaler_config(kubectl)[SETTING] == PUSHED  # the last good state

    rev, since = _push_autoscaler(
        setup, {SETTING: None, SCRIPT_KEY: None}, "Knative: upstream's defaults"
    )
    gitops.wait_synced(kubectl, KNATIVE_APP, rev, timeout=240)
    wait_until(
        lambda: not {SETTING, SCRIPT_KEY} & set(_autoscaler_config(kubectl)),
        timeout=30,
        what=f"{SETTING} and {SCRIPT_KEY} gone from the live ConfigMap",
    )
    live = _autoscaler_config(kubectl)
    assert {k: live.get(k) for k in kept if k != SETTING} == {
        k: v for k, v in kept.items() if k != SETTING
    }
    assert not gitops.comparison_error(gitops.app(kubectl, KNATIVE_APP))
    wait_until(
        lambda: _autoscaler_logged(kubectl, "1000", since),
        timeout=60,
        what="the autoscaler's config with upstream's MaxScaleUpRate:1000",
    )
    rev, _ = _push_autoscaler(setup, {SCRIPT_KEY: "true"}, "Knative: scale to zero, as before")
    gitops.wait_synced(kubectl, KNATIVE_APP, rev, timeout=RECONCILIATION_S * 3)
    assert _autoscaler_config(kubectl).get(SCRIPT_KEY) == "true"


# --- the loop: a push that changes training, a run of the synced template, the version served ---

#: The loop's push: overlays/local-k3d/environment.yaml's training values made the smoke run's
#: (pipeline_run.SMOKE_RUN: its requests fit the replicas of two jobs at once; float32
#: is exact on every CPU); the rest of its budget is the run's ``-p``, as a user cuts a run.
LOOP_PUSH = {k: SMOKE_RUN[k] for k in ("train-resources", "precision")} | {"workers": "2"}
#: The Secret of the pipeline's write-back (docs/gitops.md, "Write-back from the pipeline"):
#: this run's git server takes pushes without credentials, so it holds no key or token.
WRITE_BACK_SECRET = "fashion-mnist-write-back"
LOOP_ARGS = {k: v for k, v in SMOKE_RUN.items() if k not in LOOP_PUSH} | {
    "write-back-secret": WRITE_BACK_SECRET
}


def _write_back_secret(kubectl: Kubectl, url: str) -> None:
    """docs/gitops.md's write-back Secret: the repository Argo CD follows and the file."""
    path = "overlays/local-k3d/environment.yaml"
    kubectl.apply({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": WRITE_BACK_SECRET, "namespace": ML_NAMESPACE},
        "stringData": {"url": url, "path": path, "branch": "main"},
    })  # fmt: skip


@pytest.fixture(scope="module")
def loop(setup: GitOps, kubectl: Kubectl, kubeconfig: Path, overlay) -> dict:
    """docs/gitops.md's loop once: the push of :data:`LOOP_PUSH`, live through the webhook;
    then the README's ``submit-pipeline.sh --wait`` (:data:`LOOP_ARGS`) of the WorkflowTemplate
    Argo CD synced, on the ML namespace's PVC (a fresh volume with the offline tfds build).
    Returns the Workflow's ``name``, the push's start (``t0``, monotonic seconds) and its
    revision (``rev``)."""
    for key, value in LOOP_PUSH.items():
        _edit_environment(setup.user, key, value)
    rev, _, t0 = _push_change(setup, "local-k3d: train with the smoke run's resources")
    gitops.wait_synced(kubectl, ML_APP, rev, timeout=RECONCILIATION_S * 3)
    for key, value in LOOP_PUSH.items():
        wait_until(lambda k=key, v=value: _live_param(kubectl, k) == v, timeout=30, what=key)
    pvc = one(overlay, "PersistentVolumeClaim")
    clear_volume(kubectl, pvc, ML_NAMESPACE)
    fresh_run(kubectl, kubeconfig, pvc, ML_NAMESPACE)
    _write_back_secret(kubectl, setup.url)
    params = [a for k, v in LOOP_ARGS.items() for a in ("-p", f"{k}={v}")]
    proc = script(kubectl, kubeconfig, ML_NAMESPACE, "submit-pipeline.sh", "--wait", *params,
                  timeout=PIPELINE_TIMEOUT_S)  # fmt: skip
    name = proc.stdout.split()[0].split("/")[-1]  # the script's first line: workflow.argoproj.io/…
    if proc.returncode != 0:  # each step's phase and message, and the failed pods' logs
        nodes = kubectl.json("get", "workflow", name, "-n", ML_NAMESPACE)["status"]["nodes"]
        steps = {n["displayName"]: (n["phase"], n.get("message", "")) for n in nodes.values()}
        logs = kubectl.run("logs", "-n", ML_NAMESPACE, "--tail=30", "--prefix", "-c", "main",
                           "-l", f"workflows.argoproj.io/workflow={name}").stdout  # fmt: skip
        raise AssertionError(f"{proc.stdout}{proc.stderr}\n{steps}\n{logs}")
    MEASURED["loop_push_to_published_s"] = round(time.monotonic() - t0, 1)
    return {"name": name, "t0": t0, "rev": rev}


def test_a_pushed_training_change_runs_from_the_synced_template(
    loop: dict, setup: GitOps, kubectl: Kubectl
):
    """The run's training jobs carry the pushed values (from the synced WorkflowTemplate, not
    from the command line); select publishes version 1 and the serve step stamps the
    InferenceService, server-side under its own field manager: Argo CD neither reverts the
    stamp nor reports drift for three reconciliation periods (no fight with self-heal). The
    run's write-back (on) read version 1 from select's report and pushed nothing: git names
    it already."""
    resources = json.loads(LOOP_PUSH["train-resources"])
    jobs = [*kubectl.json("get", "tfjobs", "-n", ML_NAMESPACE)["items"],
            *kubectl.json("get", "pytorchjobs", "-n", ML_NAMESPACE)["items"]]  # fmt: skip
    assert len(jobs) == 4, [j["metadata"]["name"] for j in jobs]
    for job in jobs:
        assert job["metadata"]["name"].startswith(f"{loop['name']}-"), job["metadata"]["name"]
        for replica in next(
            v for k, v in job["spec"].items() if k.endswith("ReplicaSpecs")
        ).values():
            (c,) = replica["template"]["spec"]["containers"]
            assert c["resources"] == resources, c["resources"]
            assert c["args"][c["args"].index("--precision") + 1] == LOOP_PUSH["precision"]
    report = json.loads(
        (real_node.volume_root(ML_NAMESPACE) / "reports" / "selection.json").read_text()
    )
    assert report["published"] and report["version"] == 1, report
    # the write-back (on: LOOP_ARGS) read version 1 from select's report, which git names
    # already (both overlays start at 1): it pushed nothing
    nodes = kubectl.json("get", "workflow", loop["name"], "-n", ML_NAMESPACE)["status"]["nodes"]
    (back,) = [n for n in nodes.values() if n["displayName"] == "write-back"]
    assert back["phase"] == "Succeeded", back
    assert {"name": "version", "value": "1"} in back["inputs"]["parameters"], back["inputs"]
    assert git("ls-remote", setup.url, "refs/heads/main").split()[0] == loop["rev"]
    isvc = kubectl.json("get", "inferenceservice", "fashion-mnist", "-n", ML_NAMESPACE)
    stamped = isvc["metadata"]["annotations"]["fashion-mnist.example.com/published-by"]
    assert stamped == loop["name"]
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3 * RECONCILIATION_S:
        sync, _, _ = gitops.state(gitops.app(kubectl, ML_APP))
        assert sync == "Synced", gitops.describe(kubectl)
        time.sleep(2)
    isvc = kubectl.json("get", "inferenceservice", "fashion-mnist", "-n", ML_NAMESPACE)
    assert isvc["metadata"]["annotations"]["fashion-mnist.example.com/published-by"] == stamped


def test_the_published_version_is_served_and_the_ml_app_is_healthy(
    loop: dict, setup: GitOps, kubectl: Kubectl
):
    """The serve step's stamp reaches the predictor's revision template (KServe passes the
    InferenceService's annotations on), so Knative rolls a new revision, whose model server
    loads version 1 at its start; the InferenceService in git becomes Ready and answers
    through Traefik with version 1's signature, and the ML app is Healthy: the loop is closed.
    The revision that ran before any version existed failed (no model to load), as TF
    Serving's would have stayed unready."""
    import numpy as np
    import tensorflow as tf

    from loadtest.payload import load_encoded_test_images

    # (scripts/e2e-tiers.sh: the tier gitops runs only with the tier serving)
    assert controllers.serverless(), "the tier gitops needs the tier serving (Knative, Traefik)"
    try:
        got = wait_until(lambda: ready(kubectl, "inferenceservice", "fashion-mnist", ML_NAMESPACE),
                         timeout=300, what="the InferenceService Ready")  # fmt: skip
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why_not_ready(kubectl, ML_NAMESPACE)}") from None
    # served by the revision the stamp rolled, not by the first one coming back
    ksvc = kubectl.json("get", "ksvc", "fashion-mnist-predictor", "-n", ML_NAMESPACE)
    name = ksvc["status"]["latestReadyRevisionName"]
    revision = kubectl.json("get", "revision", name, "-n", ML_NAMESPACE)
    notes = revision["metadata"].get("annotations") or {}
    assert notes.get("fashion-mnist.example.com/published-by") == loop["name"], (name, notes)
    images, _ = load_encoded_test_images(8, "jpeg")
    host = got["status"]["url"].split("://", 1)[1]
    status, answer, _ = post(
        ingress_url(kubectl) + predict_path(MODEL_NAME), predict_body(images), host
    )
    assert status == 200, answer
    version = real_node.volume_root(ML_NAMESPACE) / "models" / "fashion-mnist" / "1" / "1"
    sig = tf.saved_model.load(str(version)).signatures[SIGNATURE_KEY]
    expected = sig(**{INPUT_NAME: tf.constant(images)})[OUTPUT_NAME].numpy()
    np.testing.assert_allclose(np.asarray(answer["predictions"]), expected, atol=1e-5)
    MEASURED["loop_push_to_served_s"] = round(time.monotonic() - loop["t0"], 1)
    try:
        wait_until(lambda: gitops.state(gitops.app(kubectl, ML_APP))[1] == "Healthy",
                   timeout=RECONCILIATION_S * 3, what="the ML app Healthy")  # fmt: skip
    except AssertionError as e:
        resources = gitops.app(kubectl, ML_APP)["status"]["resources"]
        unhealthy = [
            r for r in resources if (r.get("health") or {}).get("status") not in (None, "Healthy")
        ]
        raise AssertionError(f"{e}\n{unhealthy}\n{gitops.describe(kubectl)}") from None
    # scaled to zero (local-k3d's minReplicas 0), the InferenceService stays Ready and the app
    # Healthy (argocd/install's health check reads Ready; Argo CD's built-in one also reads
    # KServe's model state, which KServe v0.20's code sets Pending with no pod; in these runs it
    # did not turn InProgress at zero pods, so both read Healthy here: the Lua tests cover that)
    selector = f"serving.knative.dev/revision={name}"
    wait_until(lambda: not kubectl.json("get", "pods", "-n", ML_NAMESPACE, "-l", selector)["items"],
               timeout=180, what="the predictor scaled to zero")  # fmt: skip

    time.sleep(5)  # KServe's and Argo CD's reconciles of the scale-down
    isvc = kubectl.json("get", "inferenceservice", "fashion-mnist", "-n", ML_NAMESPACE)
    print(f"\nat zero pods: modelStatus {isvc['status'].get('modelStatus')}")
    assert gitops.state(gitops.app(kubectl, ML_APP))[1] == "Healthy", gitops.describe(kubectl)


# --- the image in git: a rebuilt image, named by a commit, is what the next run runs ------------

#: The test-only change under src/ and the image built from the tree that has it
#: (scripts/e2e-images.sh ml_next: ml with this file where the Dockerfile puts src/).
SRC_MARKER = REPO_ROOT / "hack" / "e2e" / "src-marker.txt"
NEXT_IMAGE = "localhost/fmnist-e2e/ml-next:marker"


def _build_image(tree: Path, kubectl: Kubectl, *args: str) -> subprocess.CompletedProcess:
    """docs/gitops.md's ``scripts/build-image.sh ARGS`` in the user's clone (no venv there:
    this Python and the e2e's kubectl render the overlay)."""
    env = {**os.environ, **gitops.AUTHOR, "KUBECTL": kubectl.binary, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(tree / "scripts" / "build-image.sh"), *args],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _containers(kubectl: Kubectl, selector: str, name: str) -> dict[str, tuple[str, str]]:
    """Pod name -> (image, imageID) of its container ``name``, for the pods of ``selector``
    in the ML namespace whose container has started (an imageID): the image its spec asks for
    (the status's ``image`` is any name the node has for that image: the e2e gives ml a second
    one, KServe's runtimeVersion tag) and the one the node ran."""
    out = {}
    for p in kubectl.json("get", "pods", "-n", ML_NAMESPACE, "-l", selector)["items"]:
        asked = {c["name"]: c["image"] for c in p["spec"]["containers"]}
        for c in (p.get("status") or {}).get("containerStatuses") or []:
            if c["name"] == name and c.get("imageID"):
                out[p["metadata"]["name"]] = (asked[name], c["imageID"])
    return out


def _digest(image_id: str) -> str:
    return "sha256:" + image_id.rsplit("sha256:", 1)[-1]


def test_a_rebuilt_image_named_in_git_is_what_the_next_run_runs(
    loop: dict, setup: GitOps, kubectl: Kubectl, kubeconfig: Path, overlay
):
    """docs/gitops.md "The image in git": a change under src/ (a test-only marker), its image
    under the tree's content tag, ``build-image.sh --set-only`` and a push: Argo CD syncs the
    tag into the WorkflowTemplate, and the next run's pod runs that image (its digest on the
    node) while the previous run's pods ran the old one; ``git revert`` of the image commit
    brings the old tag back. Simulated: the build (the node's ml_next image, ml plus that one
    file, stands in for `docker build` of the changed tree, which needs Docker and PyPI), and
    the -torch image under the new tag is ml_torch renamed (this run trains nothing)."""
    old = real_node.ml_image(overlay)
    before = _containers(kubectl, "training.kubeflow.org/replica-type", "tensorflow")
    before = {k: v for k, v in before.items() if k.startswith(f"{loop['name']}-")}
    assert before, "the loop's TFJob pods (kept: cleanPodPolicy Running)"
    assert {real_node.canonical(image) for image, _ in before.values()} == {
        real_node.canonical(old)
    }, before
    old_digests = real_node.image_digests(old)
    assert {_digest(i) for _, i in before.values()} <= old_digests, (before, old_digests)

    (setup.user / "src" / "e2e-marker.txt").write_text(SRC_MARKER.read_text())
    gitops.commit(setup.user, "src: a test-only change")
    tag = _build_image(setup.user, kubectl, "--tag").stdout.strip()
    new = f"{old.rsplit(':', 1)[0]}:{tag}"
    assert tag.startswith("src-") and new != old, (old, new)
    real_node.tag_image(NEXT_IMAGE, new)
    real_node.tag_image(f"{old}-torch", f"{new}-torch")
    proc = _build_image(setup.user, kubectl, "--set-only")
    assert proc.returncode == 0, proc.stderr
    assert git("log", "-1", "--format=%s", cwd=setup.user).startswith("image local-k3d:")
    t0 = time.monotonic()
    pushed = gitops.push(setup.user)
    assert pushed.returncode == 0, pushed.stderr
    rev = git("rev-parse", "HEAD", cwd=setup.user).strip()
    gitops.wait_synced(kubectl, ML_APP, rev, timeout=RECONCILIATION_S * 3)
    wait_until(lambda: _live_param(kubectl, "image") == new, timeout=30, what="the new image")
    MEASURED["image_push_to_synced_s"] = round(time.monotonic() - t0, 1)

    # the next run: ingest alone, its memoized result forgotten so that its pod runs
    kubectl("delete", "configmap", "fashion-mnist-ingest-cache", "-n", "argo", "--ignore-not-found")
    proc = script(kubectl, kubeconfig, ML_NAMESPACE, "submit-pipeline.sh", "--entrypoint", "ingest")
    assert proc.returncode == 0, proc.stderr
    name = proc.stdout.split()[0].split("/")[-1]
    seen: dict[str, tuple[str, str]] = {}

    def finished() -> str | None:  # the pod is collected once it succeeds: read it as it runs
        seen.update(_containers(kubectl, f"workflows.argoproj.io/workflow={name}", "main"))
        wf = kubectl.json("get", "workflow", name, "-n", ML_NAMESPACE)
        phase = (wf.get("status") or {}).get("phase")  # (none yet: just created)
        return phase if phase in ("Succeeded", "Failed", "Error") else None

    assert wait_until(finished, timeout=300, what=f"workflow {name}") == "Succeeded", seen
    assert len(seen) == 1, seen
    ((image, image_id),) = seen.values()
    assert real_node.canonical(image) == real_node.canonical(new), image
    new_digests = real_node.image_digests(new)
    assert _digest(image_id) in new_digests and not new_digests & old_digests, (
        image_id, new_digests, old_digests,
    )  # fmt: skip
    assert real_node.image_digests(NEXT_IMAGE) == new_digests  # the marker's image, no other

    # rolling code back is a revert of the image commit
    git("revert", "--no-edit", "HEAD", cwd=setup.user, env=gitops.AUTHOR)
    pushed = gitops.push(setup.user)
    assert pushed.returncode == 0, pushed.stderr
    rev = git("rev-parse", "HEAD", cwd=setup.user).strip()
    gitops.wait_synced(kubectl, ML_APP, rev, timeout=RECONCILIATION_S * 3)
    assert _live_param(kubectl, "image") == old


# --- promotion, rollback and canary: which version serves is a commit -------------------------


def _models(ns: str = ML_NAMESPACE) -> Path:
    return real_node.volume_root(ns) / "models" / "fashion-mnist"


def _outputs(version: int, images: list[bytes]):
    """Version ``version``'s serving signature called in-process on ``images`` (float [N, 10])."""
    import tensorflow as tf

    path = _models() / str(version) / str(version)
    sig = tf.saved_model.load(str(path)).signatures[SIGNATURE_KEY]
    return sig(**{INPUT_NAME: tf.constant(images)})[OUTPUT_NAME].numpy()


class Answers:
    """One-image V1 predict requests through Traefik, each answer told apart by the version
    whose signature outputs it equals (``None``: a failed request or an answer of neither)."""

    def __init__(self, kubectl: Kubectl, expected: dict) -> None:
        from loadtest.payload import load_encoded_test_images

        isvc = kubectl.json("get", "inferenceservice", "fashion-mnist", "-n", ML_NAMESPACE)
        self.host = isvc["status"]["url"].split("://", 1)[1]
        self.url = ingress_url(kubectl) + predict_path(MODEL_NAME)
        self.images = load_encoded_test_images(1, "jpeg")[0]
        self.expected = {v: _outputs(v, self.images) for v in expected}

    def one(self) -> tuple[int, int | None]:
        """``(HTTP status or 0, version)`` of one request."""
        import numpy as np

        try:
            status, answer, _ = post(self.url, predict_body(self.images), self.host, timeout=30)
        except OSError:  # refused, reset, timed out
            return 0, None
        got = np.asarray(answer.get("predictions", []), dtype=float)
        for version, want in self.expected.items():
            if status == 200 and got.shape == want.shape and np.allclose(got, want, atol=1e-4):
                return status, version
        return status, None

    def wait_for(self, version: int, in_a_row: int = 10, timeout: float = 420) -> None:
        """Until ``in_a_row`` answers in a row come from ``version``."""
        streak = []

        def settled():
            streak.append(self.one()[1] == version)
            return len(streak) >= in_a_row and all(streak[-in_a_row:])

        wait_until(settled, timeout=timeout, interval=0.2, what=f"version {version} answering")


def _promote(setup: GitOps, kubectl: Kubectl, kubeconfig: Path, *args: str) -> tuple[str, float]:
    """scripts/promote.sh ARGS in the user's clone (its cluster form: the version is checked
    on the volume by a pod), then the push; ``(revision, push start)``."""
    git("pull", "--quiet", "--rebase", "origin", "main", cwd=setup.user)
    env = {**os.environ, **gitops.AUTHOR, "KUBECTL": kubectl.binary, "KUBECONFIG": str(kubeconfig)}
    proc = subprocess.run(
        ["bash", "scripts/promote.sh", "local-k3d", *args],
        cwd=setup.user, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rev = git("rev-parse", "HEAD", cwd=setup.user).strip()
    t0 = time.monotonic()
    pushed = gitops.push(setup.user)
    assert pushed.returncode == 0, pushed.stderr
    return rev, t0


def test_promotion_rollback_and_canary_are_commits(
    loop: dict, setup: GitOps, kubectl: Kubectl, kubeconfig: Path
):
    """Which version serves is git's: version 2 (published beside the pipeline's version 1,
    other weights) is refused by promote.sh before it is on the volume; promoted, it answers
    every request; ``git revert`` of that commit, pushed while requests flow, brings version 1
    back with no failed request; a canary of version 2 at 20 % answers 10-30 % of 500
    requests, and its finish every request; a version forced into git that is not on the
    volume ends its revision's server with the reason while version 2 answers (issue 50
    items 1-3)."""
    import threading

    from small_model import publish_small_model

    refused = subprocess.run(
        ["bash", "scripts/promote.sh", "local-k3d", "2", "--no-commit"],
        cwd=setup.user, capture_output=True, text=True, timeout=300,
        env={**os.environ, "KUBECTL": kubectl.binary, "KUBECONFIG": str(kubeconfig)},
    )  # fmt: skip
    assert refused.returncode == 1 and "version 2 is not published" in refused.stderr, (
        refused.stderr
    )
    publish_small_model(_models(), 2, train_examples=0, seed=7)
    real_node.chown_tree(_models() / "2")
    answers = Answers(kubectl, [1, 2])
    answers.wait_for(1, in_a_row=3)

    promoted, t0 = _promote(setup, kubectl, kubeconfig, "2")
    answers.wait_for(2)
    MEASURED["promotion_push_to_new_version_s"] = round(time.monotonic() - t0, 1)
    isvc = kubectl.json("get", "inferenceservice", "fashion-mnist", "-n", ML_NAMESPACE)
    assert isvc["spec"]["predictor"]["model"]["storageUri"].endswith("/models/fashion-mnist/2")

    seen: list[tuple[float, int, int | None]] = []
    stop = threading.Event()

    def load():
        while not stop.is_set():
            status, version = answers.one()
            seen.append((time.monotonic(), status, version))

    git("pull", "--quiet", "--rebase", "origin", "main", cwd=setup.user)
    git("revert", "--no-edit", promoted, cwd=setup.user, env=gitops.AUTHOR)
    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        t0 = time.monotonic()
        pushed = gitops.push(setup.user)
        assert pushed.returncode == 0, pushed.stderr
        wait_until(lambda: [v for _, _, v in seen[-10:]] == [1] * 10, timeout=420,
                   what="version 1 back after the revert")  # fmt: skip
    finally:
        stop.set()
        thread.join(timeout=60)
    failed = [(round(t - t0, 1), status) for t, status, _ in seen if status != 200]
    first_old = next(t for t, _, v in seen if t > t0 and v == 1)
    MEASURED["rollback_push_to_old_version_s"] = round(first_old - t0, 1)
    MEASURED["rollback_requests"] = len(seen)
    assert not failed, (
        f"{len(failed)} of {len(seen)} requests failed during the rollback: {failed[:10]}"
    )
    assert {v for _, _, v in seen} <= {1, 2}

    _promote(setup, kubectl, kubeconfig, "2", "--canary", "20")
    answers.wait_for(2, in_a_row=1)
    time.sleep(5)  # the split in the Route: KServe sets both targets in one update
    share = [answers.one()[1] for _ in range(500)]
    MEASURED["canary_20_share"] = round(share.count(2) / len(share), 3)
    assert set(share) <= {1, 2}, sorted(set(map(str, share)))
    assert 0.10 <= share.count(2) / len(share) <= 0.30, MEASURED["canary_20_share"]
    _promote(setup, kubectl, kubeconfig, "--finish")
    answers.wait_for(2, in_a_row=30)

    # a version that is not on the volume, forced into git past promote.sh: the revision that
    # names it fails with the server's reason, the one before keeps answering
    _edit_environment(setup.user, "model-version", "9")
    forced, _, _ = _push_change(setup, "force model version 9, not published")
    gitops.wait_synced(kubectl, ML_APP, forced, timeout=RECONCILIATION_S * 3)

    def crashed_with_the_reason():
        """The revision of version 9 not Ready, its server's exit message (the termination
        message Knative's FallbackToLogsOnError keeps, which its revision status repeats at
        its next reconcile: minutes later in these runs)."""
        ksvc = kubectl.json("get", "ksvc", "fashion-mnist-predictor", "-n", ML_NAMESPACE)
        name = ksvc["status"].get("latestCreatedRevisionName")
        rev = kubectl.json("get", "revision", name, "-n", ML_NAMESPACE)
        if "models/fashion-mnist/9" not in json.dumps(rev["metadata"]):  # KServe's source-uri
            return None
        conds = {c["type"]: c for c in (rev.get("status") or {}).get("conditions", [])}
        selector = f"serving.knative.dev/revision={name}"
        for pod in kubectl.json("get", "pods", "-n", ML_NAMESPACE, "-l", selector)["items"]:
            for c in (pod.get("status") or {}).get("containerStatuses") or []:
                done = (c.get("lastState") or {}).get("terminated") or {}
                if c["name"] == "kserve-container" and "no version directory" in done.get(
                    "message", ""
                ):
                    ready = conds.get("Ready", {}).get("status")
                    return ready != "True" and {"exit": done.get("exitCode"), "ready": ready}
        return None

    t0 = time.monotonic()
    try:
        why = wait_until(crashed_with_the_reason, timeout=300, what="version 9's server exit")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{why_not_ready(kubectl, ML_NAMESPACE)}") from None
    assert why["exit"] == 2, why
    MEASURED["missing_version_synced_to_reason_s"] = round(time.monotonic() - t0, 1)
    answers.wait_for(2, in_a_row=10)  # still version 2, from the revision before
    git("revert", "--no-edit", forced, cwd=setup.user, env=gitops.AUTHOR)
    pushed = gitops.push(setup.user)
    assert pushed.returncode == 0, pushed.stderr
    answers.wait_for(2, in_a_row=10)
    print(f"\npromotion measurements: {MEASURED}")


def test_a_run_writes_its_published_version_back_to_git(
    loop: dict, setup: GitOps, kubectl: Kubectl, kubeconfig: Path
):
    """docs/gitops.md "Write-back from the pipeline": the pipeline's write-back step (here
    alone, as its entrypoint, for a version 3 published on the volume) pushes a commit naming
    that version to the branch Argo CD follows; Argo CD syncs it through the webhook and
    version 3 answers. A second write-back of it pushes nothing."""
    from small_model import publish_small_model

    publish_small_model(_models(), 3, train_examples=0, seed=11)
    real_node.chown_tree(_models() / "3")
    answers = Answers(kubectl, [2, 3])
    answers.wait_for(2, in_a_row=3)  # where the promotion test left it
    before = git("ls-remote", setup.url, "refs/heads/main").split()[0]
    args = ["--entrypoint", "write-back", "-p", "version=3", "-p",
            f"write-back-secret={WRITE_BACK_SECRET}"]  # fmt: skip
    t0 = time.monotonic()
    proc = script(kubectl, kubeconfig, ML_NAMESPACE, "submit-pipeline.sh", "--wait", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = git("ls-remote", setup.url, "refs/heads/main").split()[0]
    assert after != before
    git("pull", "--quiet", "--rebase", "origin", "main", cwd=setup.user)
    subject = git("log", "-1", "--format=%s %an", cwd=setup.user).strip()
    assert subject.startswith("promote local-k3d: serve model version 3 (was 2; written back"), (
        subject
    )
    assert subject.endswith("fashion-mnist pipeline"), subject
    data = yaml.safe_load((setup.user / "overlays/local-k3d/environment.yaml").read_text())["data"]
    assert (data["model-version"], data["canary-traffic-percent"]) == ("3", "100")
    gitops.wait_synced(kubectl, ML_APP, after, timeout=RECONCILIATION_S * 3)
    answers.wait_for(3)
    MEASURED["write_back_submit_to_new_version_s"] = round(time.monotonic() - t0, 1)
    proc = script(kubectl, kubeconfig, ML_NAMESPACE, "submit-pipeline.sh", "--wait", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert git("ls-remote", setup.url, "refs/heads/main").split()[0] == after


# --- the data outlives any sync and the Application: the volume with every model version -----

PVC_FILE = Path("base/ml/storage/pvc.yaml")


def _uid(kubectl: Kubectl, kind: str, name: str, ns: str | None = None) -> str:
    """The live object's uid ('' when it does not exist)."""
    where = ["-n", ns] if ns else []
    proc = kubectl.run("get", kind, name, *where, "-o", "jsonpath={.metadata.uid}")
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _versions(ns: str) -> list[str]:
    """The model versions published on namespace ``ns``'s volume (its host directory)."""
    models = real_node.volume_root(ns) / "models" / "fashion-mnist"
    return sorted(p.name for p in models.iterdir()) if models.is_dir() else []


def test_a_push_that_renames_the_volume_keeps_the_old_one_and_the_app_synced(
    loop: dict, setup: GitOps, kubectl: Kubectl, overlay
):
    """A push renaming the PVC in git creates the new one and prunes nothing (the PVC's
    Prune=false): the old PVC, its uid and every version on it stay, and the ML app reads Synced
    (IgnoreExtraneous: a kept object git no longer holds does not count); pushed back, the old
    name is git's again. The claim git held for a while is left too, as Prune=false says:
    deleted here on purpose."""
    old = one(overlay, "PersistentVolumeClaim")["metadata"]["name"]
    new = f"{old}-renamed"
    uid, versions = _uid(kubectl, "pvc", old, ML_NAMESPACE), _versions(ML_NAMESPACE)
    assert uid and versions, (uid, versions)
    path = setup.user / PVC_FILE
    text = path.read_text()
    path.write_text(text.replace(f"  name: {old}\n", f"  name: {new}\n"))
    rev, _, _ = _push_change(setup, "rename the volume")
    gitops.wait_synced(kubectl, ML_APP, rev, timeout=RECONCILIATION_S * 3)
    wait_until(lambda: _uid(kubectl, "pvc", new, ML_NAMESPACE), timeout=30, what=f"PVC {new}")
    assert _uid(kubectl, "pvc", old, ML_NAMESPACE) == uid
    assert _versions(ML_NAMESPACE) == versions
    path.write_text(text)
    rev, _, _ = _push_change(setup, "the volume's name back")
    gitops.wait_synced(kubectl, ML_APP, rev, timeout=RECONCILIATION_S * 3)
    assert _uid(kubectl, "pvc", old, ML_NAMESPACE) == uid
    assert _uid(kubectl, "pvc", new, ML_NAMESPACE)  # Prune=false: left, not pruned
    kubectl("delete", "pvc", new, "-n", ML_NAMESPACE, "--timeout=60s", timeout=70)


def test_deleting_the_ml_app_with_cascade_keeps_the_volume_and_every_version(
    loop: dict, setup: GitOps, kubectl: Kubectl, overlay
):
    """Deleting the ML Application deletes what it synced (its resources finalizer) but the
    Namespace and the PVC that git marks Delete=false: the same objects (uids), every
    published version on the volume. The root Application re-creates the ML app from git,
    which adopts them and syncs the rest again (a new WorkflowTemplate: the cascade ran)."""
    pvc = one(overlay, "PersistentVolumeClaim")["metadata"]["name"]
    template = one(overlay, "WorkflowTemplate")["metadata"]["name"]
    kept = {"namespace": _uid(kubectl, "namespace", ML_NAMESPACE),
            "pvc": _uid(kubectl, "pvc", pvc, ML_NAMESPACE)}  # fmt: skip
    template_uid, versions = (
        _uid(kubectl, "workflowtemplate", template, ML_NAMESPACE),
        _versions(ML_NAMESPACE),
    )
    rev = gitops.state(gitops.app(kubectl, ML_APP))[2]
    assert all(kept.values()) and template_uid and versions
    t0 = time.monotonic()
    # kubectl waits until this uid is gone: the finalizer's cascade is done
    kubectl("delete", "applications.argoproj.io", ML_APP, "-n", "argocd", "--timeout=300s",
            timeout=320)  # fmt: skip
    gitops.wait_synced(kubectl, ML_APP, rev, timeout=RECONCILIATION_S * 6)
    MEASURED["ml_app_deleted_to_synced_again_s"] = round(time.monotonic() - t0, 1)
    wait_until(lambda: _uid(kubectl, "workflowtemplate", template, ML_NAMESPACE), timeout=30,
               what="the WorkflowTemplate synced again")  # fmt: skip
    assert _uid(kubectl, "workflowtemplate", template, ML_NAMESPACE) != template_uid
    assert {"namespace": _uid(kubectl, "namespace", ML_NAMESPACE),
            "pvc": _uid(kubectl, "pvc", pvc, ML_NAMESPACE)} == kept  # fmt: skip
    assert _versions(ML_NAMESPACE) == versions


# --- the Applications against the API server ----------------------------------------------


@pytest.mark.parametrize("env", ("local-k3d", "gpu-cloud"))
def test_every_application_accepted_by_the_api_server(setup: GitOps, kubectl: Kubectl, env):
    out = kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=e2e",
        "--force-conflicts",
        "-k",
        str(REPO_ROOT / "argocd/apps" / env),
    )
    applied = [line for line in out.splitlines() if line.strip()]
    assert any(line.startswith("application.argoproj.io/") for line in applied), out
    assert any(line.startswith("appproject.argoproj.io/") for line in applied), out


def test_a_broken_application_is_refused(setup: GitOps, kubectl: Kubectl):
    """The API server really validates against Argo CD's CRD schema (so the test above can fail)."""
    bad = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "broken", "namespace": "argocd"},
        "spec": {"project": "fashion-mnist", "destination": {}, "source": {"repoURL": 7}},
    }
    proc = kubectl.run("apply", "--dry-run=server", "-f", "-", input=json.dumps(bad))
    assert proc.returncode != 0
    assert "repoURL" in proc.stderr, proc.stderr


# --- health scripts, as Argo CD runs them -------------------------------------------------


def _health(script: str, obj: dict) -> dict:
    """Run one Argo CD health script the way Argo CD does: global ``obj``, returns a table."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(script)
    out = dict(result.items())
    assert out["status"] in HEALTH_STATUSES, out
    return out


@pytest.fixture(scope="module")
def health_scripts(setup, kubectl: Kubectl) -> dict[str, str]:
    data = kubectl.json("get", "configmap", "argocd-cm", "-n", "argocd")["data"]
    prefix = "resource.customizations.health."
    return {k.removeprefix(prefix): v for k, v in data.items() if k.startswith(prefix)}


@pytest.mark.parametrize("status", ["Healthy", "Progressing", "Degraded", "Suspended", "Missing"])
def test_application_health_passes_the_child_health_through(health_scripts, status):
    app = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "ml", "namespace": "argocd"},
        "status": {"health": {"status": status, "message": f"child is {status}"}},
    }
    out = _health(health_scripts["argoproj.io_Application"], app)
    assert out["status"] == status
    assert out["message"] == f"child is {status}"
    fresh = _health(health_scripts["argoproj.io_Application"], {"kind": "Application"})
    assert fresh["status"] == "Progressing"
