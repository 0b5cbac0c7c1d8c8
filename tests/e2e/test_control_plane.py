"""The e2e control plane itself: real API server version, RBAC, controllers, kwok stages."""

from __future__ import annotations

import json
import time

from e2e_kube import E2E_ANNOTATION_EXIT_CODE, E2E_LABEL_FAIL, versions_env, wait_until


def test_api_server_and_kubectl_report_the_pinned_version(kubectl):
    want = "v" + versions_env()["KUBERNETES_VERSION"].removeprefix("v")
    server = json.loads(kubectl("get", "--raw", "/version"))
    assert server["gitVersion"] == want
    assert (server["major"], server["minor"]) == tuple(want[1:].split(".")[:2])
    client = kubectl.json("version", "--client")
    assert client["clientVersion"]["gitVersion"] == want


def test_rbac_is_enforced_for_a_service_account_token(kubectl, namespace, sa_kubeconfig):
    kubectl("create", "serviceaccount", "nobody", "-n", namespace)
    cfg = sa_kubeconfig(namespace, "nobody")

    # The token authenticates as the ServiceAccount (TokenRequest API works) ...
    whoami = kubectl.json("auth", "whoami", kubeconfig=cfg)
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:nobody"
    # ... and a real request without a grant is refused by the RBAC authorizer.
    denied = kubectl.run("get", "pods", "-n", namespace, kubeconfig=cfg)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower(), denied.stderr

    kubectl("create", "role", "pod-reader", "--verb=get,list", "--resource=pods", "-n", namespace)
    kubectl(
        "create",
        "rolebinding",
        "nobody-reads-pods",
        "--role=pod-reader",
        f"--serviceaccount={namespace}:nobody",
        "-n",
        namespace,
    )
    wait_until(
        lambda: kubectl.run("get", "pods", "-n", namespace, kubeconfig=cfg).returncode == 0,
        timeout=20,
        what="the RoleBinding to take effect",
    )
    # The grant is exactly what was bound: other verbs and namespaces stay forbidden.
    for args in (
        ("create", "configmap", "x", "-n", namespace),
        ("get", "pods", "-n", "default"),
    ):
        refused = kubectl.run(*args, kubeconfig=cfg)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), args
    can_delete = kubectl.run("auth", "can-i", "delete", "pods", "-n", namespace, kubeconfig=cfg)
    assert (can_delete.returncode, can_delete.stdout.strip()) == (1, "no")


def test_kwok_nodes_are_ready(kubectl):
    nodes = kubectl.json("get", "nodes")["items"]
    kwok_nodes = [
        n for n in nodes if n["metadata"].get("annotations", {}).get("kwok.x-k8s.io/node") == "fake"
    ]
    assert len(kwok_nodes) >= 2
    for node in kwok_nodes:
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True", node["metadata"]["name"]


def _job(name: str, spec: dict, labels: dict | None = None, annotations: dict | None = None):
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels or {}, "annotations": annotations or {}},
                "spec": spec,
            },
        },
    }


def test_job_pod_succeeds_and_the_job_controller_completes_the_job(
    kubectl, namespace, restricted_pod_spec
):
    kubectl.apply(_job("ok", restricted_pod_spec()), "-n", namespace)
    kubectl.wait("job/ok", "condition=Complete", "-n", namespace, timeout=60)
    pods = kubectl.json("get", "pods", "-n", namespace, "-l", "job-name=ok")["items"]
    assert len(pods) == 1
    pod = pods[0]
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["spec"]["nodeName"].startswith("kwok-node-")  # placed by the real scheduler
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_labelled_pod_fails_with_its_exit_code_and_the_job_fails(
    kubectl, namespace, restricted_pod_spec
):
    job = _job(
        "broken",
        restricted_pod_spec(),
        labels={E2E_LABEL_FAIL: "true"},
        annotations={E2E_ANNOTATION_EXIT_CODE: "3"},
    )
    kubectl.apply(job, "-n", namespace)
    kubectl.wait("job/broken", "condition=Failed", "-n", namespace, timeout=60)
    pod = kubectl.json("get", "pods", "-n", namespace, "-l", "job-name=broken")["items"][0]
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


def test_labelled_pod_with_restart_policy_on_failure_restarts_in_place(
    kubectl, namespace, restricted_pod_spec
):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "crashloop", "labels": {E2E_LABEL_FAIL: "true"}},
        "spec": restricted_pod_spec(restart_policy="OnFailure"),
    }
    kubectl.apply(pod, "-n", namespace)

    def restarts():
        status = kubectl.json("get", "pod", "crashloop", "-n", namespace)["status"]
        statuses = status.get("containerStatuses") or [{}]
        return status["phase"] == "Running" and statuses[0].get("restartCount", 0) >= 2

    wait_until(restarts, timeout=30, what="two in-place restarts")
    status = kubectl.json("get", "pod", "crashloop", "-n", namespace)["status"]
    last = status["containerStatuses"][0]["lastState"]["terminated"]
    assert last["exitCode"] == 1
    assert status["phase"] == "Running"  # a kubelet keeps restarting; the pod never fails


def test_deployment_pods_become_ready_and_stay_running(kubectl, namespace, restricted_pod_spec):
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": restricted_pod_spec(restart_policy="Always"),
            },
        },
    }
    kubectl.apply(deployment, "-n", namespace)
    kubectl.wait("deployment/web", "condition=Available", "-n", namespace, timeout=60)
    kubectl("rollout", "status", "deployment/web", "-n", namespace, "--timeout=60s", timeout=75)
    time.sleep(3)  # longer than every pod stage's delay: nothing moves a Deployment pod on
    pods = kubectl.json("get", "pods", "-n", namespace, "-l", "app=web")["items"]
    assert len(pods) == 2
    assert all(p["status"]["phase"] == "Running" for p in pods)
    ready = [{c["type"]: c["status"] for c in p["status"]["conditions"]}["Ready"] for p in pods]
    assert ready == ["True", "True"]


def test_namespace_deletion_and_garbage_collection_run(kubectl):
    name = f"e2e-gc-{int(time.time() * 1000) % 10**8}"
    kubectl("create", "namespace", name)
    kubectl("create", "configmap", "owner", "-n", name)
    owner_uid = kubectl("get", "configmap", "owner", "-n", name, "-o", "jsonpath={.metadata.uid}")
    dependent = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "dependent",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}
            ],
        },
    }
    kubectl.apply(dependent, "-n", name)
    kubectl("delete", "configmap", "owner", "-n", name)
    kubectl.wait("configmap/dependent", "delete", "-n", name, timeout=60)  # garbage collector
    kubectl("delete", "namespace", name, "--wait=false")
    kubectl.wait(f"namespace/{name}", "delete", timeout=60)  # namespace controller
