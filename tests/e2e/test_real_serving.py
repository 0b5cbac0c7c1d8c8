"""The project's InferenceService served, logged and autoscaled by real pods on the real node.

What is real: KServe v0.20.0's controller and pod mutator (the pod of its install, tests/e2e/
controllers.py) reconcile the rendered InferenceService in Standard mode (the overlays' own
Serverless mode: test_serverless.py) into a Deployment, a Service and an HPA; the kubelet runs
the predictor's pods (the model container and KServe's agent sidecar, built from KServe's
cmd/agent), mounting the PVC for ``pvc://`` at /mnt/models; kube-proxy routes the Service;
message-dumper is the Knative Service of base/ml/serving/message-dumper.yaml (Knative's
event_display, built from knative.dev/eventing), run by Knative Serving and reached through
Traefik's cluster-local entry point, as in Serverless mode; metrics-server (scripts/e2e-node.sh)
feeds the real HPA controller of kube-controller-manager; Locust runs the project's locustfile
from this process, inside the run's network namespace.

What stands in: TF Serving. Its image cannot be had here (no ``tensorflow_model_server`` in
Debian, PyPI or the Go proxy), so the predictor runs the project's own KServe ModelServer from the
pipeline image through the namespaced ServingRuntime hack/e2e/serving-runtime.yaml. That server
is held to TF Serving's V1 REST contract by tests/serving/test_serving_parity.py; it loads the
version in the directory the storageUri names and has no gRPC port.

The model is the pipeline's own export (training.export, laid out as selection publishes it):
version 1 with untrained weights and version 2 briefly trained, both on the volume, and the
storageUri names version 2, so that an answer of version 2's signature shows that the version
named (and only it) was loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import controllers
import pytest
import real_node
import yaml
from e2e_kube import REPO_ROOT, create_namespace, one, wait_until
from knative_status import wait_ksvc_ready
from test_kserve import standard_mode

from fmnist_common import (
    INPUT_NAME,
    MODEL_NAME,
    OUTPUT_NAME,
    SIGNATURE_KEY,
    predict_body,
    predict_path,
)

RUNTIME = REPO_ROOT / "hack" / "e2e" / "serving-runtime.yaml"
AGENT_PORT = 9081  # KServe's agent (constants.InferenceServiceDefaultAgentPort)
READY_TIMEOUT_S = 300
#: message-dumper's first pod: its image is imported, so it starts in seconds
DUMPER_READY_TIMEOUT_S = 120
# Standard mode's metric for the Knative one (concurrency): KServe's HPA on CPU utilisation of
# the pod's requests summed, out at 50 %. The bounds and the requests are the rendered object's
# own (but the CPU request, below); with the controller-manager's 30 s scale-in stabilisation
# (scripts/e2e-cluster.sh) the run takes minutes.
CPU_TARGET = 50
#: The model container's CPU request on the real node (the overlay's 250m: five predictor pods,
#: with KServe's agent beside each, would not fit the 2-core node next to the platform, Knative
#: and Traefik included; seen: two of five pods Pending).
MODEL_CPU_REQUEST = "100m"


def dumper_ksvc(overlay: list[dict], namespace: str) -> dict:
    """base/ml/serving/message-dumper.yaml's Knative Service in ``namespace``, its image the
    local build of event_display (upstream's digest cannot be matched by a rebuild)."""
    found = next(o for o in overlay if o["apiVersion"] == "serving.knative.dev/v1")
    ksvc = json.loads(json.dumps(found))
    ksvc["metadata"]["namespace"] = namespace
    (container,) = ksvc["spec"]["template"]["spec"]["containers"]
    container["image"] = real_node.imported_image("/event-display:")
    return ksvc


def dumper_ready(kubectl, namespace: str) -> None:
    """Wait until message-dumper's Knative Service in ``namespace`` is Ready (its route
    reachable through Traefik's private entry point); AssertionError naming what holds it
    (knative_status.why_ksvc_not_ready: the Revision's, PodAutoscaler's and pod's reasons)."""
    wait_ksvc_ready(kubectl, namespace, "message-dumper", timeout=DUMPER_READY_TIMEOUT_S)


def dumper_events(kubectl, namespace: str, request_id: str) -> list[dict]:
    """The request and response CloudEvents with id ``request_id`` that message-dumper's pods
    printed (the pod scales to zero a few seconds later: read while it lives)."""

    def logged():
        proc = kubectl.run("logs", "-n", namespace, "-l",
                           "serving.knative.dev/service=message-dumper", "-c", "event-display",
                           "--tail=-1")  # fmt: skip
        mine = [e for e in _events(proc.stdout) if e.get("id") == request_id]
        return mine if len(mine) == 2 else None

    return wait_until(logged, timeout=90, what=f"message-dumper events with id {request_id}")


def served_isvc(isvc: dict, namespace: str, runtime: str) -> dict:
    """The rendered InferenceService in Standard mode (:func:`test_kserve.standard_mode`) on the
    e2e's ServingRuntime (``runtimeVersion`` dropped: KServe would rewrite the image's tag with
    it), logging to the namespace's message-dumper, autoscaled on CPU (:data:`CPU_TARGET`)
    within its own replica bounds, with its own resources but the CPU request
    (:data:`MODEL_CPU_REQUEST`)."""
    out = standard_mode(isvc, namespace)
    pred = out["spec"]["predictor"]
    model = pred["model"]
    model["runtime"] = runtime
    model.pop("runtimeVersion")
    pred["logger"]["url"] = f"http://message-dumper.{namespace}.svc.cluster.local"
    pred.update(scaleMetric="cpu", scaleTarget=CPU_TARGET)
    model["resources"]["requests"]["cpu"] = MODEL_CPU_REQUEST
    return out


def publish_two_versions(root: Path, uri: str) -> tuple[str, Path]:
    """Versions 1 (untrained) and 2 (briefly trained) published as selection does on the
    volume at ``root``, where the overlay's ``uri`` (``pvc://CLAIM/PATH/N``) points:
    ``(the storageUri naming version 2, version 2's SavedModel directory)``."""
    from small_model import publish_small_model

    claim, sub_path = uri.removeprefix("pvc://").split("/", 1)
    models = sub_path.rsplit("/", 1)[0]
    publish_small_model(root / models, 1, train_examples=0, seed=7)
    saved = publish_small_model(root / models, 2, train_examples=2048, seed=0)
    return f"pvc://{claim}/{models}/2", saved


@pytest.fixture(scope="module")
def served(kubectl, kubeconfig, overlay, platform) -> dict:
    """The InferenceService PredictorReady on the real node, with message-dumper, versions 1
    and 2 of the model on its PVC. Yields ``namespace``, ``name``, ``url`` (the predictor
    Service), ``svc`` (that Service) and ``version_dir`` (version 2)."""
    real_node.node_name()
    ns = create_namespace(kubectl, f"e2e-serving-{uuid.uuid4().hex[:6]}")
    real_node.opt_in(kubectl, ns)
    try:
        root = real_node.seeded_volume(ns)
        isvc = one(overlay, "InferenceService")
        uri, version_dir = publish_two_versions(
            root, isvc["spec"]["predictor"]["model"]["storageUri"]
        )
        pvc = one(overlay, "PersistentVolumeClaim")
        assert pvc["metadata"]["name"] == uri.removeprefix("pvc://").split("/", 1)[0]
        real_node.chown_tree(root)
        controllers.provide_volume(kubeconfig, pvc, ns, root)

        kubectl.apply(dumper_ksvc(overlay, ns))
        runtime = yaml.safe_load(RUNTIME.read_text())
        runtime["metadata"]["namespace"] = ns
        runtime["spec"]["containers"][0]["image"] = real_node.ml_image(overlay)
        kubectl.apply(runtime)
        obj = served_isvc(isvc, ns, runtime["metadata"]["name"])
        obj["spec"]["predictor"]["model"]["storageUri"] = uri
        kubectl.apply(obj)
        name = obj["metadata"]["name"]
        dumper_ready(kubectl, ns)

        def ready():
            got = kubectl.json("get", f"inferenceservice/{name}", "-n", ns)
            conds = (got.get("status") or {}).get("conditions", [])
            ready = {c["type"]: c["status"] for c in conds}.get("PredictorReady") == "True"
            return got if ready else None

        try:
            wait_until(ready, timeout=READY_TIMEOUT_S, what=f"{name} PredictorReady")
        except AssertionError:
            pods = kubectl("get", "pods", "-n", ns, "-o", "wide")
            events = kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp")
            raise AssertionError(f"{pods}\n{events[-3000:]}") from None
        svc = kubectl.json("get", "service", f"{name}-predictor", "-n", ns)
        url = f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"
        yield {"namespace": ns, "name": name, "url": url, "version_dir": version_dir, "svc": svc,
               "isvc": obj}  # fmt: skip
    finally:
        kubectl.run("delete", "namespace", ns, "--wait=false")


def _post(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _events(log: str) -> list[dict]:
    """CloudEvents as event_display prints them: attributes, extensions and the data text."""
    out = []
    for block in log.split("☁️  cloudevents.Event")[1:]:
        attrs, _, data = block.partition("\nData,\n")
        event = {}
        for line in attrs.splitlines():
            key, sep, value = line.strip().partition(": ")
            if sep:
                event[key] = value
        event["data"] = data.split("\n☁️")[0].strip()
        out.append(event)
    return out


def test_predictor_serves_the_published_version_through_the_agent_and_logs_it(
    kubectl, served, platform
):
    """V1 predict of real test JPEGs through the predictor Service: the answers are version 2's
    signature called in-process; the Service goes through KServe's agent, which sends the
    request and the response to message-dumper as CloudEvents."""
    import numpy as np
    import tensorflow as tf

    from loadtest.payload import load_encoded_test_images

    ns, name = served["namespace"], served["name"]
    pods = kubectl.json(
        "get", "pods", "-n", ns, "-l", f"serving.kserve.io/inferenceservice={name}"
    )["items"]
    assert pods and all(p["spec"]["nodeName"] == real_node.node_name() for p in pods)
    containers = {c["name"] for c in pods[0]["spec"]["containers"]}
    assert containers == {"kserve-container", "agent"}, containers
    # KServe's Service targets the agent, not the model server (else nothing is logged)
    assert served["svc"]["spec"]["ports"][0]["targetPort"] == AGENT_PORT

    images, labels = load_encoded_test_images(32, "jpeg")
    request_id = f"e2e-{uuid.uuid4().hex}"
    status, got = _post(
        served["url"] + predict_path(MODEL_NAME), predict_body(images), {"Ce-Id": request_id}
    )
    assert status == 200, got
    served_probs = np.asarray(got["predictions"], dtype=np.float64)
    loaded = tf.saved_model.load(str(served["version_dir"]))
    out = loaded.signatures[SIGNATURE_KEY](**{INPUT_NAME: tf.constant(images)})
    expected = out[OUTPUT_NAME].numpy()
    np.testing.assert_allclose(served_probs, expected, atol=1e-5)
    assert (served_probs.argmax(1) == np.asarray(labels)).mean() > 0.5  # trained, not version 1

    # a malformed request is a 4xx with a message through the agent too
    status, err = _post(served["url"] + predict_path(MODEL_NAME), {"instances": [{"b64": "!"}]})
    assert 400 <= status < 500 and "error" in err, (status, err)

    events = dumper_events(kubectl, ns, request_id)
    by_type = {e["type"]: e for e in events}
    assert set(by_type) == {
        "org.kubeflow.serving.inference.request",
        "org.kubeflow.serving.inference.response",
    }
    for e in events:
        assert e["inferenceservicename"] == name and e["namespace"] == ns, e
        assert e["component"] == "predictor", e
    request = json.loads(by_type["org.kubeflow.serving.inference.request"]["data"])
    assert len(request["instances"]) == len(images)
    response = json.loads(by_type["org.kubeflow.serving.inference.response"]["data"])
    np.testing.assert_allclose(response["predictions"], served_probs, atol=1e-6)
    platform.check_alive()


def test_predictor_scales_out_under_locust_and_back_in(kubectl, kubeconfig, served, tmp_path):
    """A headless Locust run of loadtest/locustfile.py against the predictor Service loads it
    until the HPA that KServe created scales the Deployment out, then, once the load is gone,
    back in; loadtest/observer.py judges the real timeline and plots it. The bounds are the
    rendered InferenceService's: without maxReplicas (or with a predictor that does not fit the
    node twice) it never scales out, and the verdict says so."""
    ns, name = served["namespace"], served["name"]
    pred = served["isvc"]["spec"]["predictor"]
    lo, hi = max(1, pred.get("minReplicas") or 0), pred.get("maxReplicas") or 0

    # the metrics API answers for the predictor's pods before the load starts
    def pod_metrics():
        proc = kubectl.run("get", "--raw", f"/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods")
        items = json.loads(proc.stdout)["items"] if proc.returncode == 0 else []
        return [i for i in items if i["metadata"]["name"].startswith(f"{name}-predictor")] or None

    wait_until(pod_metrics, timeout=90, what="metrics.k8s.io for the predictor pods")

    out = tmp_path / "autoscaling"
    out.mkdir()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    locust = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "loadtest" / "locustfile.py"),
         "--headless", "--csv-full-history", "--only-summary", "--host", served["url"],
         "--peak-users", "6", "--shape-spawn-rate", "2", "--ramp-up-s", "5", "--hold-s", "100",
         "--ramp-down-s", "5", "--idle-s", "1", "--image-count", "64",
         "--max-failure-ratio", "0.01", "--max-p95-ms", "5000", "--min-rps", "1",
         "--csv", str(out / "locust"), "--loglevel", "WARNING"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    # the scale-in window bounds whether it scales in, not how fast: the HPA steps down as
    # metrics-server's 15-s samples of the idle pods come in (2026-12-07, AMD EPYC: 5 -> 3
    # replicas 47 s and 3 -> 1 at 151 s after the load ended, past an earlier bound of 150 s)
    observer = subprocess.run(
        [sys.executable, "-m", "loadtest.observer", "--namespace", ns, "--isvc", name,
         "--locust-history", str(out / "locust_stats_history.csv"),
         "--min-replicas", str(lo), "--max-replicas", str(max(hi, lo)),
         "--scale-in-window-s", "240", "--cold-start-s", "90", "--hold-s", "20",
         "--interval", "2", "--duration", "420", "--out-dir", str(out)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=480,
    )  # fmt: skip
    t0 = time.monotonic()
    locust_out, _ = locust.communicate(timeout=60)
    verdict = json.loads((out / "verdict.json").read_text())
    report = f"{observer.stdout[-4000:]}\n{observer.stderr[-2000:]}\nlocust:\n{locust_out[-2000:]}"
    assert locust.returncode == 0, report
    assert observer.returncode == 0 and verdict["passed"], report
    assert (out / "timeline.png").stat().st_size > 0
    # what scaled it: the HPA KServe made from the InferenceService, on the metrics API
    hpa = kubectl.json("get", "hpa", f"{name}-predictor", "-n", ns)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (lo, hi), hpa["spec"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["averageUtilization"] == CPU_TARGET
    print(f"autoscaling timeline: {out} (locust waited {time.monotonic() - t0:.0f} s)")
    print(observer.stdout[-3000:])
