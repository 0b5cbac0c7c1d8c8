"""Serverless mode for real: the InferenceService as overlays/local-k3d renders it, reconciled by
KServe into a Knative Service, run by Knative Serving and routed by Traefik, on the real node.

What is real: Knative Serving v1.23's controller, webhook, activator and autoscaler (the pods of
its release's serving-core, built here from knative.dev/serving; tests/e2e/controllers.py
knative_serving_core) with every revision's queue-proxy sidecar; Traefik's Knative provider
(base/platform/traefik, built from its module) serving every KIngress, public and cluster-local;
message-dumper as the Knative Service base/ml/serving/message-dumper.yaml defines, reached by
KServe's agent through its cluster-local route; the KPA scaling the predictor on concurrency
(the overlay's ``scaleTarget: 1``, ``maxReplicas: 5``, ``minReplicas: 0``), the activator holding
requests while a pod starts; ``hey`` (loadtest/hey.sh), Locust and loadtest/observer.py through
the ingress, from this process inside the run's network namespace.

What the e2e's layer changes (tests/e2e/platform-layer/knative, and here): the images are local
builds under ko.local names, tags are not resolved to digests (no registry), the autoscaler's
stable window is 6 s and its scale-to-zero grace period 10 s (upstream 60 s and 30 s), the
platform's CPU requests are lowered, and so is the model container's (250m -> 100m), so that
five predictor pods fit the 2-core node. TF Serving stands in as in test_real_serving.py (the
project's ModelServer through hack/e2e/serving-runtime.yaml).
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

import controllers
import pytest
import real_node
import yaml
from e2e_kube import REPO_ROOT, create_namespace, one, wait_until
from knative_status import ready, wait_ksvc_ready, why_ksvc_not_ready
from test_real_serving import (
    MODEL_CPU_REQUEST,
    RUNTIME,
    dumper_events,
    dumper_ksvc,
    dumper_ready,
    publish_two_versions,
)

from fmnist_common import (
    INPUT_NAME,
    MODEL_NAME,
    OUTPUT_NAME,
    SIGNATURE_KEY,
    predict_body,
    predict_path,
)

READY_TIMEOUT_S = 300
COLD_STARTS = 5
#: The seed's test: ``hey -z 30s -c 5`` with target concurrency 1 gives about five pods.
HEY_CONCURRENCY = 5


def ingress_url(kubectl) -> str:
    """Traefik's public entry point (Service ``traefik``), as ``http://CLUSTER-IP:PORT``."""
    svc = kubectl.json("get", "service", "traefik", "-n", "traefik")
    return f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"


@pytest.fixture(scope="module")
def ingress(kubectl, platform) -> str:
    """:func:`ingress_url`; pytest.fail when the tier serving is skipped."""
    if not controllers.serverless():
        pytest.fail("the tier serving is skipped (E2E_SKIP_TIERS): Knative does not run")
    return ingress_url(kubectl)


def serverless_isvc(isvc: dict, namespace: str, runtime: str) -> dict:
    """The rendered InferenceService in ``namespace``, in KServe's default mode (Serverless:
    install's ``defaultDeploymentMode``, no annotation), on the e2e's ServingRuntime
    (``runtimeVersion`` dropped: KServe would rewrite the image's tag with it), its CPU request
    :data:`MODEL_CPU_REQUEST`, logging to the namespace's message-dumper."""
    out = json.loads(json.dumps(isvc))
    out["metadata"]["namespace"] = namespace
    pred = out["spec"]["predictor"]
    pred["model"]["runtime"] = runtime
    pred["model"].pop("runtimeVersion")
    pred["model"]["resources"]["requests"]["cpu"] = MODEL_CPU_REQUEST
    pred["logger"]["url"] = f"http://message-dumper.{namespace}.svc.cluster.local"
    return out


def why_not_ready(kubectl, ns: str) -> str:
    """The namespace's Knative and KServe objects' conditions, pods and recent events."""
    parts = [
        kubectl(
            "get", "inferenceservice,ksvc,route,revision,kingress,pods", "-n", ns, "-o", "wide"
        ),
        kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp")[-3000:],
    ]
    for kind in ("inferenceservice", "ksvc", "kingress"):
        for obj in kubectl.json("get", kind, "-n", ns)["items"]:
            conds = (obj.get("status") or {}).get("conditions", [])
            parts.append(f"{kind}/{obj['metadata']['name']}: {json.dumps(conds)}")
    return "\n".join(parts)


@pytest.fixture(scope="module")
def served(kubectl, kubeconfig, overlay, platform, ingress) -> dict:
    """The overlay's InferenceService Ready in Serverless mode with message-dumper, versions 1
    and 2 of the model on its PVC. Yields ``namespace``, ``name``, ``host`` (its URL's host, the
    Host header Traefik routes on), ``isvc`` (as applied) and ``version_dir`` (version 2)."""
    real_node.node_name()
    ns = create_namespace(kubectl, f"e2e-serverless-{uuid.uuid4().hex[:6]}")
    real_node.opt_in(kubectl, ns)
    try:
        root = real_node.seeded_volume(ns)
        isvc = one(overlay, "InferenceService")
        uri, version_dir = publish_two_versions(
            root, isvc["spec"]["predictor"]["model"]["storageUri"]
        )
        real_node.chown_tree(root)
        pvc = one(overlay, "PersistentVolumeClaim")
        assert pvc["metadata"]["name"] == uri.removeprefix("pvc://").split("/", 1)[0]
        controllers.provide_volume(kubeconfig, pvc, ns, root)

        kubectl.apply(dumper_ksvc(overlay, ns))
        runtime = yaml.safe_load(RUNTIME.read_text())
        runtime["metadata"]["namespace"] = ns
        runtime["spec"]["containers"][0]["image"] = real_node.ml_image(overlay)
        kubectl.apply(runtime)
        obj = serverless_isvc(isvc, ns, runtime["metadata"]["name"])
        obj["spec"]["predictor"]["model"]["storageUri"] = uri
        kubectl.apply(obj)
        name = obj["metadata"]["name"]
        try:
            dumper_ready(kubectl, ns)
            got = wait_until(lambda: ready(kubectl, "inferenceservice", name, ns),
                             timeout=READY_TIMEOUT_S, what=f"{name} Ready")  # fmt: skip
        except AssertionError as e:
            raise AssertionError(f"{e}\n{why_not_ready(kubectl, ns)}") from None
        host = got["status"]["url"].split("://", 1)[1]
        yield {"namespace": ns, "name": name, "host": host, "isvc": obj,
               "version_dir": version_dir}  # fmt: skip
    finally:
        kubectl.run("delete", "namespace", ns, "--wait=false")


def post(url: str, body: dict, host: str, headers: dict | None = None, timeout: float = 60):
    """POST ``body`` as JSON with Host ``host``: ``(status, JSON answer (``{"text": ...}`` for an
    error page that is not JSON), seconds to the first byte of the answer)``."""
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Host": host, **(headers or {})},
    )
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            first = r.read(1)
            took = time.monotonic() - t0
            return r.status, json.loads(first + r.read()), took
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            answer = json.loads(text or b"{}")
        except ValueError:  # not JSON (Traefik's own 404 page): the text
            answer = {"text": text.decode(errors="replace")}
        return e.code, answer, time.monotonic() - t0


def reader(kubeconfig, ns: str, name: str):
    """loadtest/observer.py's ClusterReader for the InferenceService (the project's count of
    ready predictor pods and of desired replicas: the Knative PodAutoscaler's desiredScale)."""
    from kubernetes import client, config

    from loadtest.observer import ClusterReader

    api = config.new_client_from_config(str(kubeconfig))
    return ClusterReader(
        client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api), ns, name,
        client.AutoscalingV2Api(api),
    )  # fmt: skip


def test_knative_and_traefik_run_as_pods_and_route_the_predictor(kubectl, served, platform):
    """Knative's objects for the InferenceService: a Knative Service whose Route's KIngress is
    Traefik's class, public under the overlay's domain; message-dumper's route cluster-local,
    its Service an ExternalName to Traefik's private Service."""
    ns, name = served["namespace"], served["name"]
    platform.check_alive()  # Knative's four and Traefik among them (controllers.pod_namespaces)
    ksvc = kubectl.json("get", "ksvc", f"{name}-predictor", "-n", ns)
    assert ksvc["status"]["url"] == f"http://{served['host']}"
    kingress = kubectl.json("get", "kingress", f"{name}-predictor", "-n", ns)
    cls = kingress["metadata"]["annotations"]["networking.knative.dev/ingress.class"]
    assert cls == "traefik.ingress.networking.knative.dev"
    lb = kingress["status"]["publicLoadBalancer"]["ingress"][0]["domainInternal"]
    assert lb == "traefik.traefik.svc.cluster.local", kingress["status"]
    dumper = kubectl.json("get", "ksvc", "message-dumper", "-n", ns)
    assert dumper["status"]["url"] == f"http://message-dumper.{ns}.svc.cluster.local"
    route_svc = kubectl.json("get", "service", "message-dumper", "-n", ns)
    assert route_svc["spec"]["type"] == "ExternalName"
    assert route_svc["spec"]["externalName"] == "traefik-internal.traefik.svc.cluster.local"


def test_predicts_through_traefik_and_logs_to_message_dumper(kubectl, served, ingress):
    """The docs' curl through the ingress: V1 predict of real test JPEGs with the Host header
    of the InferenceService's URL answers with version 2's signature called in-process; KServe's
    agent sends the request and the response to message-dumper's Knative Service as
    CloudEvents; a malformed request is a 4xx with a message."""
    import numpy as np
    import tensorflow as tf

    from loadtest.payload import load_encoded_test_images

    ns, name, host = served["namespace"], served["name"], served["host"]
    url = ingress + predict_path(MODEL_NAME)
    images, labels = load_encoded_test_images(32, "jpeg")
    request_id = f"e2e-{uuid.uuid4().hex}"
    status, got, _ = post(url, predict_body(images), host, {"Ce-Id": request_id})
    assert status == 200, got
    probs = np.asarray(got["predictions"], dtype=np.float64)
    loaded = tf.saved_model.load(str(served["version_dir"]))
    expected = loaded.signatures[SIGNATURE_KEY](**{INPUT_NAME: tf.constant(images)})[OUTPUT_NAME]
    np.testing.assert_allclose(probs, expected.numpy(), atol=1e-5)
    assert (probs.argmax(1) == np.asarray(labels)).mean() > 0.5  # version 2, not 1

    status, err, _ = post(url, {"instances": [{"b64": "!"}]}, host)
    assert 400 <= status < 500 and "error" in err, (status, err)
    status, _, _ = post(url, predict_body(images[:1]), f"nosuch.{ns}.example.com")
    assert status == 404  # Traefik routes by Host: an unknown one reaches no revision

    events = dumper_events(kubectl, ns, request_id)
    assert {e["type"] for e in events} == {
        "org.kubeflow.serving.inference.request",
        "org.kubeflow.serving.inference.response",
    }
    assert all(e["inferenceservicename"] == name and e["namespace"] == ns for e in events)


def pod_phases(kubectl, ns: str, selector: str) -> str:
    """Where a cold start's time went, from the newest matching pod's own timestamps (1 s
    resolution): created -> scheduled -> each container started -> Ready."""
    pods = kubectl.json("get", "pods", "-n", ns, "-l", selector)["items"]
    if not pods:
        return "no pod"
    pod = max(pods, key=lambda p: p["metadata"]["creationTimestamp"])

    def at(stamp: str) -> float:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

    t0 = at(pod["metadata"]["creationTimestamp"])
    st = pod.get("status") or {}
    conds = {c["type"]: c.get("lastTransitionTime") for c in st.get("conditions") or []}
    parts = (
        [f"scheduled +{at(conds['PodScheduled']) - t0:.0f} s"] if conds.get("PodScheduled") else []
    )
    for c in st.get("containerStatuses") or []:
        if started := (c.get("state") or {}).get("running", {}).get("startedAt"):
            parts.append(f"{c['name']} started +{at(started) - t0:.0f} s")
    if conds.get("Ready"):
        parts.append(f"Ready +{at(conds['Ready']) - t0:.0f} s")
    return ", ".join(parts)


def test_scales_to_zero_and_the_activator_answers_each_cold_start(kubectl, served, ingress):
    """With no traffic the predictor goes to zero pods (the overlay's ``minReplicas: 0``); each
    first request after that is held by the activator until a pod is ready, and answered.
    Cold start, request to the first byte of the answer, is measured over
    :data:`COLD_STARTS` starts (printed: median and max)."""
    from loadtest.payload import load_encoded_test_images

    ns, name, host = served["namespace"], served["name"], served["host"]
    selector = f"serving.kserve.io/inferenceservice={name}"

    def no_pod():  # none at all: a terminating pod still drains requests (queue-proxy)
        return not kubectl.json("get", "pods", "-n", ns, "-l", selector)["items"] or None

    images, _ = load_encoded_test_images(1, "jpeg")
    body, url = predict_body(images), ingress + predict_path(MODEL_NAME)
    cold = []
    for i in range(COLD_STARTS):
        t0 = time.monotonic()
        wait_until(no_pod, timeout=180, what=f"no predictor pod (cold start {i + 1})")
        to_zero = time.monotonic() - t0
        status, got, took = post(url, body, host, timeout=120)
        assert status == 200 and len(got["predictions"]) == 1, (status, got)
        cold.append(took)
        print(f"cold start {i + 1}: {took:.2f} s to the first byte (zero after {to_zero:.0f} s);"
              f" {pod_phases(kubectl, ns, selector)}")  # fmt: skip
    print(
        f"cold start over {COLD_STARTS}: median {statistics.median(cold):.2f} s,"
        f" max {max(cold):.2f} s"
    )


def test_hey_with_target_concurrency_one_scales_to_about_five_pods(
    kubeconfig, served, ingress, tmp_path
):
    """The seed's test: ``hey -z 30s -c 5`` (loadtest/hey.sh) through the ingress against the
    overlay's target of one request in flight per pod gives 5 ready pods (±1, never above
    ``maxReplicas``), counted by the project's observer; every request answered."""
    ns, name, host = served["namespace"], served["name"], served["host"]
    hi = served["isvc"]["spec"]["predictor"]["maxReplicas"]
    pods = reader(kubeconfig, ns, name)
    seen: list[tuple[int, int | None]] = []
    done = threading.Event()

    def sample():
        while not done.wait(1.0):
            seen.append((pods.pods()[0], pods.desired()))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        proc = subprocess.run(
            ["bash", str(REPO_ROOT / "loadtest" / "hey.sh"), "--url",
             ingress + predict_path(MODEL_NAME), "--host", host, "-z", "30s",
             "-c", str(HEY_CONCURRENCY), "--payload", str(tmp_path / "input.json")],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
            env={**os.environ, "PYTHON": sys.executable},
        )  # fmt: skip
    finally:
        done.set()
        sampler.join()
    assert proc.returncode == 0, proc.stderr[-2000:]
    codes = {
        ln.split("]")[0].strip("[ "): ln for ln in proc.stdout.splitlines() if "responses" in ln
    }
    assert set(codes) == {"200"} and "Error distribution" not in proc.stdout, proc.stdout[-2000:]
    assert seen, "the observer's reader took no sample"
    most = max(r for r, _ in seen)
    print(f"hey -c {HEY_CONCURRENCY}: at most {most} ready pods; samples {seen}")
    print(proc.stdout[-1500:])
    assert HEY_CONCURRENCY - 1 <= most <= min(HEY_CONCURRENCY + 1, hi), seen
    assert all(d is None or d <= hi for _, d in seen), seen


def test_locust_scales_out_back_in_and_to_zero_without_failures(
    kubeconfig, served, ingress, tmp_path
):
    """The project's Locust shape through the ingress: the KPA scales the predictor out under
    load, back in after it, and to zero after the idle period; the observer judges the
    timeline (``--min-replicas 0``) and Locust's thresholds allow no failed request while pods
    come and go."""
    ns, name, host = served["namespace"], served["name"], served["host"]
    hi = served["isvc"]["spec"]["predictor"]["maxReplicas"]
    out = tmp_path / "autoscaling"
    out.mkdir()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    locust = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "loadtest" / "locustfile.py"),
         "--headless", "--csv-full-history", "--only-summary", "--host", ingress,
         "--host-header", host, "--peak-users", "4", "--shape-spawn-rate", "2",
         "--ramp-up-s", "5", "--hold-s", "40", "--ramp-down-s", "5", "--idle-s", "1",
         "--image-count", "64", "--max-failure-ratio", "0", "--max-p95-ms", "20000",
         "--min-rps", "1", "--csv", str(out / "locust"), "--loglevel", "WARNING"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    observer = subprocess.run(
        [sys.executable, "-m", "loadtest.observer", "--namespace", ns, "--isvc", name,
         "--locust-history", str(out / "locust_stats_history.csv"),
         "--min-replicas", "0", "--max-replicas", str(hi), "--scale-in-window-s", "120",
         "--cold-start-s", "60", "--hold-s", "10", "--interval", "2", "--duration", "300",
         "--out-dir", str(out)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=360,
    )  # fmt: skip
    locust_out, _ = locust.communicate(timeout=60)
    verdict = json.loads((out / "verdict.json").read_text())
    report = f"{observer.stdout[-4000:]}\n{observer.stderr[-2000:]}\nlocust:\n{locust_out[-2000:]}"
    assert locust.returncode == 0, report
    assert observer.returncode == 0 and verdict["passed"], report
    print(f"autoscaling timeline: {out}")
    print(observer.stdout[-3000:])


def test_a_knative_service_held_not_ready_is_named_with_its_reason(kubectl, overlay, ingress):
    """A Knative Service that cannot become Ready makes the wait name the link that broke, never
    ``last: None``: message-dumper's Service asking for more CPU than any node has (1000 cores)
    gets a pod that the scheduler cannot place (the pod's ``Insufficient cpu`` and the node's CPU by
    namespace), and one whose image tag cannot be resolved to a digest gets no pod at all (the
    Revision's reason)."""
    ns = create_namespace(kubectl, f"e2e-notready-{uuid.uuid4().hex[:6]}")
    real_node.opt_in(kubectl, ns)
    try:
        too_big = dumper_ksvc(overlay, ns)
        too_big["metadata"]["name"] = "too-big"
        (c,) = too_big["spec"]["template"]["spec"]["containers"]
        c["resources"] = {"requests": {"cpu": "1000", "memory": "32Mi"},
                          "limits": {"cpu": "1000", "memory": "128Mi"}}  # fmt: skip
        unresolvable = dumper_ksvc(overlay, ns)
        unresolvable["metadata"]["name"] = "unresolvable"
        # a registry that is not in config-deployment's registries-skipping-tag-resolving: the
        # controller asks it for the digest and the run's network has none
        (c,) = unresolvable["spec"]["template"]["spec"]["containers"]
        c["image"] = "registry.invalid/fmnist-e2e/not-there:0.0.0"
        kubectl.apply([too_big, unresolvable])
        for name, mark in (("too-big", "Insufficient cpu"), ("unresolvable", "registry.invalid")):
            # once the link has broken (seconds), the wait's message names it
            wait_until(lambda n=name, m=mark: m in why_ksvc_not_ready(kubectl, ns, n), timeout=120,
                       what=f"{name}: {mark!r} in why it is not Ready")  # fmt: skip
        with pytest.raises(AssertionError) as big:
            wait_ksvc_ready(kubectl, ns, "too-big", timeout=1)
        msg = str(big.value)
        assert "Knative Service" in msg and "too-big-00001" in msg, msg
        assert "Insufficient cpu" in msg and "allocatable cpu" in msg, msg
        assert "last: None" not in msg, msg
        with pytest.raises(AssertionError) as unres:
            wait_ksvc_ready(kubectl, ns, "unresolvable", timeout=1)
        msg = str(unres.value)
        assert "revision unresolvable-00001:" in msg and "registry.invalid" in msg, msg
        assert "no pod of the revision" in msg, msg
    finally:
        kubectl.run("delete", "namespace", ns, "--wait=false")
