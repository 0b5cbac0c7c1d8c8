"""Real containers on the e2e cluster's real node (scripts/e2e-node.sh, tests/e2e/real_node.py).

Nothing here is simulated: the kubelet v1.34.1 runs the pods through containerd and runc, the
CNI bridge gives them addresses, kube-proxy routes Service IPs, CoreDNS answers the cluster
domain, and the containers are the project's own image, built offline from the repository's
Dockerfile (scripts/e2e-images.sh). The pipeline's own run (``submit-pipeline.sh --wait``, a
small budget) runs every step for real through Argo's executor: ingest, three TFJobs whose two
TensorFlow workers each find each other by the TF_CONFIG host names and train with
MultiWorkerMirroredStrategy across the pods, the PyTorchJob whose Master and Worker train with
DDP over gloo, select, serve.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import real_node
import yaml
from e2e_kube import (
    REPO_ROOT,
    Kubectl,
    attempts,
    condition,
    one,
    train_retry_limit,
    versions_env,
    wait_until,
)
from pipeline_run import PIPELINE_TIMEOUT_S, SMOKE_RUN, clear_volume, fresh_run, script


@pytest.fixture
def node() -> str:
    """The real node's name (pytest.fail when the cluster has none)."""
    return real_node.node_name()


@pytest.fixture
def real_ns(kubectl: Kubectl, namespace: str, node: str) -> str:
    """A fresh namespace whose pods run on the real node, restricted Pod Security enforced."""
    real_node.opt_in(kubectl, namespace)
    return namespace


def _pod(name: str, image: str, command: list[str], labels: dict | None = None) -> dict:
    """A restricted pod (the project's security context and requests/limits) running ``command``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": real_node.UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": command,
                    "resources": {
                        "requests": {"cpu": "50m", "memory": "64Mi"},
                        "limits": {"cpu": "500m", "memory": "512Mi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def _phase(kubectl: Kubectl, ns: str, name: str) -> str:
    return kubectl.json("get", "pod", name, "-n", ns)["status"].get("phase", "")


def test_the_real_node_is_the_kubelets_and_kwok_leaves_it_alone(kubectl, node):
    """Registered by kubelet v1.34.1 over containerd at the pinned versions, Ready by the
    kubelet's own report, tainted so that only opted-in pods land there, and not managed by kwok
    (kwok-controller runs with an annotation selector: no field of the Node is kwok's)."""
    v = versions_env()
    n = kubectl.json("get", "node", node)
    info = n["status"]["nodeInfo"]
    assert info["kubeletVersion"] == f"v{v['KUBERNETES_VERSION']}"
    assert info["kubeProxyVersion"] in ("", f"v{v['KUBERNETES_VERSION']}")  # deprecated field
    assert info["containerRuntimeVersion"] == f"containerd://{v['CONTAINERD_VERSION'].lstrip('v')}"
    ready = next(c for c in n["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["reason"] == "KubeletReady", ready
    assert "kwok.x-k8s.io/node" not in (n["metadata"].get("annotations") or {})
    taints = {(t["key"], t["effect"]) for t in n["spec"].get("taints") or []}
    assert (real_node.NODE_LABEL, "NoSchedule") in taints
    addresses = {a["type"]: a["address"] for a in n["status"]["addresses"]}
    assert addresses["InternalIP"] == real_node.NODE_IP
    # the kubelet wrote its own status with its node credentials (system:node:<name>)
    full = kubectl.json("get", "node", node, "--show-managed-fields")
    managers = {f["manager"] for f in full["metadata"]["managedFields"]}
    assert "kubelet" in managers, managers
    assert not any(m.startswith("kwok") for m in managers), managers


def test_a_pod_of_the_project_image_resolves_services_and_reaches_the_api(
    kubectl, overlay, real_ns
):
    """The project image runs under restricted Pod Security; from inside it, CoreDNS resolves a
    headless Service (the kind TF_CONFIG names) in the cluster domain to the pod's own IP and
    ``kubernetes.default`` to its ClusterIP; the API server answers over that ClusterIP
    (kube-proxy) with TLS verified against the pod's CA and its ServiceAccount token; the
    API server's `logs` and `exec` reach the kubelet."""
    image = real_node.ml_image(overlay)
    sleep = "print('started', flush=True)\nimport time\ntime.sleep(600)"
    pod = _pod("dns", image, ["python", "-c", sleep])
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "peers"},
        "spec": {"clusterIP": "None", "selector": {"app": "dns"}, "ports": [{"port": 2222}]},
    }
    kubectl.apply([pod, svc], "-n", real_ns)
    kubectl(
        "wait", "--for=condition=Ready", "pod/dns", "-n", real_ns, "--timeout=120s", timeout=130
    )
    got = kubectl.json("get", "pod", "dns", "-n", real_ns)
    assert got["spec"]["nodeName"] == real_node.node_name()
    pod_ip = got["status"]["podIP"]
    probe = f"""
import json, socket, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
ctx = ssl.create_default_context(cafile=sa + "ca.crt")
req = urllib.request.Request("https://kubernetes.default.svc/version",
                             headers={{"Authorization": "Bearer " + open(sa + "token").read()}})
print(json.dumps({{
    "peer": socket.gethostbyname("peers.{real_ns}.svc.{real_node.CLUSTER_DOMAIN}"),
    "short": socket.gethostbyname("peers"),
    "kubernetes": socket.gethostbyname("kubernetes.default"),
    "version": json.load(urllib.request.urlopen(req, context=ctx, timeout=10))["gitVersion"],
}}))
"""
    out = kubectl("exec", "-n", real_ns, "dns", "--", "python", "-c", probe, timeout=60)
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["peer"] == pod_ip and seen["short"] == pod_ip, seen
    assert seen["kubernetes"] == kubectl.json("get", "service", "kubernetes", "-n", "default")[
        "spec"]["clusterIP"]  # fmt: skip
    assert seen["version"] == f"v{versions_env()['KUBERNETES_VERSION']}"
    assert "started" in kubectl("logs", "-n", real_ns, "dns")


def test_the_run_has_no_uplink(node):
    """The run's network namespace (pytest runs in it) holds loopback, the node's bridge and the
    pods' veths, and no route out: no default route, none but the pod network's and the
    Service range's, both on the bridge."""
    # /proc/net is the reading process's network namespace (/sys/class/net is the one that
    # mounted /sys: the host's)
    dev = Path("/proc/net/dev").read_text().splitlines()[2:]
    links = {line.split(":")[0].strip() for line in dev}
    assert "fmnist0" in links, f"not in the run's network namespace: {links}"
    assert all(n in ("lo", "fmnist0") or n.startswith("veth") for n in links), links
    routes = [line.split() for line in Path("/proc/net/route").read_text().splitlines()[1:]]
    # columns: Iface Destination Gateway Flags RefCnt Use Metric Mask ...; hex, little-endian
    assert all(r[1] != "00000000" for r in routes), routes  # no default route
    pods, services = ("fmnist0", "0000F40A", "00FFFFFF"), ("fmnist0", "0000000A", "00FFFFFF")
    assert {(r[0], r[1], r[7]) for r in routes} == {pods, services}, routes


def test_an_image_that_was_not_imported_never_starts(kubectl, overlay, real_ns):
    """Nothing can be pulled (no uplink): a pod whose image the node did not import waits in
    ErrImagePull / ImagePullBackOff, while the pipeline image is among the imported ones."""
    image = real_node.ml_image(overlay)
    assert real_node.canonical(image) in real_node.imported_images()
    missing = image.rsplit(":", 1)[0] + ":not-imported"
    assert real_node.canonical(missing) not in real_node.imported_images()
    kubectl.apply(_pod("missing", missing, ["true"]), "-n", real_ns)

    def waiting_reason():
        st = kubectl.json("get", "pod", "missing", "-n", real_ns)["status"]
        for c in st.get("containerStatuses") or []:
            reason = (c["state"].get("waiting") or {}).get("reason")
            if reason in ("ErrImagePull", "ImagePullBackOff"):
                return reason
        return None

    wait_until(waiting_reason, timeout=90, what="ErrImagePull for an image not imported")
    assert _phase(kubectl, real_ns, "missing") == "Pending"


# --- the pipeline's own Argo steps, real pods ------------------------------------------------

PIPELINE_OBJECTS = {"ServiceAccount", "Role", "RoleBinding", "WorkflowTemplate"}


def _in_namespace(obj: dict, ns: str) -> dict:
    """``obj`` moved to namespace ``ns`` (and a RoleBinding's ServiceAccount subjects with it)."""
    obj = json.loads(json.dumps(obj))
    obj["metadata"]["namespace"] = ns
    for subject in obj.get("subjects") or []:
        if subject.get("kind") == "ServiceAccount":
            subject["namespace"] = ns
    return obj


@pytest.fixture
def pipeline_ns(kubectl, kubeconfig, overlay, real_ns, platform) -> str:
    """The pipeline as local-k3d deploys it (its ServiceAccount, Role, RoleBinding and
    WorkflowTemplate, from the rendered overlay), moved to a real-node namespace, with its PVC on
    a volume seeded with the offline tfds build."""
    objs = [
        _in_namespace(o, real_ns)
        for o in overlay
        if o["kind"] in PIPELINE_OBJECTS and o["metadata"]["name"] == "fashion-mnist-pipeline"
    ]
    assert {o["kind"] for o in objs} == PIPELINE_OBJECTS
    for o in objs:
        if o["kind"] == "WorkflowTemplate":
            # the one change: keep the finished pods (podGC OnPodSuccess would delete them before
            # the test reads their containers' exit codes); the namespace goes after the test
            assert o["spec"].pop("podGC") == {"strategy": "OnPodSuccess"}
    kubectl.apply(objs)
    fresh_run(kubectl, kubeconfig, one(overlay, "PersistentVolumeClaim"), real_ns)
    return real_ns


def _workflow_pods(kubectl, ns: str) -> list[dict]:
    return kubectl.json("get", "pods", "-n", ns, "-l", "workflows.argoproj.io/workflow")["items"]


def test_ingest_step_runs_with_the_real_executor(kubectl, kubeconfig, pipeline_ns):
    """The pipeline's ingest step (a container step: Argo's `init` and `wait` beside `main`) run
    for real by `submit-pipeline.sh --wait --entrypoint ingest`: the executor's containers (the
    argoexec image) and the project image's ingest, which finds the offline tfds build on the
    PVC, verifies it and exits 0; the `wait` container reports through the pipeline Role. A
    second run is answered from the memoization cache without a pod."""
    proc = script(kubectl, kubeconfig, pipeline_ns, "submit-pipeline.sh", "--wait",
                     "--entrypoint", "ingest")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (pod,) = _workflow_pods(kubectl, pipeline_ns)
    assert pod["spec"]["nodeName"] == real_node.node_name()
    names = {c["name"]: c for c in pod["status"]["containerStatuses"]}
    assert set(names) == {"wait", "main"}
    for c in names.values():
        assert c["state"]["terminated"]["exitCode"] == 0, c
    (init,) = pod["status"]["initContainerStatuses"]
    assert init["name"] == "init" and init["state"]["terminated"]["exitCode"] == 0
    assert init["image"].startswith("quay.io/argoproj/argoexec:")
    log = kubectl("logs", "-n", pipeline_ns, pod["metadata"]["name"], "-c", "main")
    assert "fashion_mnist already ingested at /mnt/shared/tfds" in log, log[-2000:]
    # memoized: the second run finds the step in the cache the first one wrote, runs no pod
    proc = script(kubectl, kubeconfig, pipeline_ns, "submit-pipeline.sh", "--wait",
                     "--entrypoint", "ingest")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(_workflow_pods(kubectl, pipeline_ns)) == 1


# The namespace of the ML layer in the overlays, where the README's deploy.sh puts it
NAMESPACE = "fashion-mnist"


@pytest.fixture(scope="module")
def deployed(platform, kubectl, kubeconfig, overlay) -> str:
    """The README's ``scripts/deploy.sh local-k3d``, as it is: the ML layer in its namespace
    (the WorkflowTemplate, its RBAC, the PVC, the InferenceService, message-dumper). The
    namespace is then opted in to the real node and its PVC bound to a host directory seeded
    with the offline tfds build (what k3s' local-path provisioner and a first ingest give a
    user). A namespace left by an earlier session on the same cluster goes first, with its
    volume: the test counts one run's jobs and versions."""
    pvc = one(overlay, "PersistentVolumeClaim")
    kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=300s")
    clear_volume(kubectl, pvc, NAMESPACE)
    proc = script(kubectl, kubeconfig, NAMESPACE, "deploy.sh", "local-k3d")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    real_node.opt_in(kubectl, NAMESPACE)
    fresh_run(kubectl, kubeconfig, pvc, NAMESPACE)
    return NAMESPACE


def test_the_readme_pipeline_runs_every_step_on_real_pods(kubectl, kubeconfig, deployed):
    """The README's loop on the real node: ``deploy.sh local-k3d``, then
    ``submit-pipeline.sh --wait`` with a small budget (``-p``). Every step is a real pod of the
    real executor, in the DAG's order: ingest finds the tfds build on the PVC; the three TFJobs
    each run two real TensorFlow workers that resolve their TF_CONFIG peers (the operator's
    headless Services, through CoreDNS) and train with MultiWorkerMirroredStrategy, the chief
    alone exporting; the PyTorchJob's Master and Worker (the Worker after the operator's init
    container resolved the Master) join one gloo process group and train with DDP, rank 0
    alone exporting; select scores the four candidates through their signatures and publishes
    version 1 on the PVC; serve stamps the InferenceService through the pipeline's Role, a
    server-side apply that shares the object with deploy.sh's."""
    ns = deployed
    params = [a for k, v in SMOKE_RUN.items() for a in ("-p", f"{k}={v}")]
    proc = script(
        kubectl, kubeconfig, ns, "submit-pipeline.sh", "--wait", *params,
        timeout=PIPELINE_TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workflow = proc.stdout.split()[0]  # "workflow.argoproj.io/<name>", the script's first line
    wf = kubectl.json("get", workflow, "-n", ns)
    name = wf["metadata"]["name"]
    nodes = {n["displayName"]: n for n in wf["status"]["nodes"].values()}
    steps = ("ingest", "cnn", "dropout", "batch-norm", "pytorch", "select", "serve")
    for step in steps:
        assert nodes[step]["phase"] == "Succeeded", {k: n["phase"] for k, n in nodes.items()}
    # each step's pod ran on the real node, each step in one attempt (a retry here would be a
    # failure: the jobs' names end in -0 below); the WorkflowTemplate's podGC (OnPodSuccess) has
    # deleted the pods since
    pods = [n for n in nodes.values() if n["type"] == "Pod"]
    assert len(pods) == len(steps), sorted(nodes)
    assert {n["hostNodeName"] for n in pods} == {real_node.node_name()}, pods
    start = {k: n["startedAt"] for k, n in nodes.items()}
    end = {k: n["finishedAt"] for k, n in nodes.items()}
    for step in steps[1:5]:  # the DAG: ingest, then the four trainings, then select, serve
        assert end["ingest"] <= start[step] and end[step] <= start["select"], (start, end)
    assert end["select"] <= start["serve"], (start, end)

    tfjobs = kubectl.json("get", "tfjobs", "-n", ns)["items"]
    assert sorted(j["metadata"]["labels"]["fashion-mnist.example.com/model-type"]
                  for j in tfjobs) == ["batch_norm", "cnn", "dropout"]  # fmt: skip
    jobs = [*tfjobs, *kubectl.json("get", "pytorchjobs", "-n", ns)["items"]]
    for job in jobs:  # created by the step's first attempt, owned by the run, its -p values
        meta = job["metadata"]
        assert meta["name"].startswith(f"{name}-") and meta["name"].endswith("-0"), meta["name"]
        owners = meta.get("ownerReferences") or []
        assert any(o["kind"] == "Workflow" and o["name"] == name for o in owners), owners
        (replicas,) = [v for k, v in job["spec"].items() if k.endswith("ReplicaSpecs")]
        args = next(iter(replicas.values()))["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--run-id") + 1] == name
        assert args[args.index("--epochs") + 1] == SMOKE_RUN["epochs"]
    for job in tfjobs:
        job_name = job["metadata"]["name"]
        assert condition(job, "Succeeded"), job["status"]
        assert job["status"]["replicaStatuses"]["Worker"]["succeeded"] == 2
        hosts = [f"{job_name}-worker-{i}.{ns}.svc:2222" for i in (0, 1)]
        logs = {}
        for i in (0, 1):
            pod = kubectl.json("get", "pod", f"{job_name}-worker-{i}", "-n", ns)
            assert pod["spec"]["nodeName"] == real_node.node_name()
            (cs,) = pod["status"]["containerStatuses"]
            assert cs["state"]["terminated"]["exitCode"] == 0
            # the operator's TF_CONFIG: every worker by its headless Service, this one's index
            env = _replica_env(pod, "tensorflow")
            tf_config = json.loads(env["TF_CONFIG"])
            assert tf_config["cluster"] == {"worker": hosts}, tf_config
            assert tf_config["task"] == {"type": "worker", "index": i}, tf_config
            logs[i] = kubectl("logs", "-n", ns, f"{job_name}-worker-{i}")
        assert "task worker:0 chief=True replicas=2" in logs[0], logs[0][-3000:]
        assert "task worker:1 chief=False replicas=2" in logs[1], logs[1][-3000:]
        assert "chief exported" in logs[0] and "chief exported" not in logs[1]

    (pytorchjob,) = kubectl.json("get", "pytorchjobs", "-n", ns)["items"]
    _check_real_pytorchjob(kubectl, ns, pytorchjob)

    root = real_node.volume_root(ns)
    report = json.loads((root / "reports" / "selection.json").read_text())
    assert report["published"] and report["version"] == 1, report
    status = {k: c["status"] for k, c in report["candidates"].items()}
    assert status == {"cnn": "ok", "dropout": "ok", "batch_norm": "ok", "pytorch": "ok"}
    assert report["chosen_model"] in status, report
    assert (root / "models" / "fashion-mnist" / "1" / "1" / "saved_model.pb").is_file()
    assert sorted(p.name for p in (root / "models" / "fashion-mnist").iterdir()) == ["1"]
    served = kubectl.json("get", "inferenceservice", "fashion-mnist", "-n", ns,
                          "--show-managed-fields")  # fmt: skip
    assert served["metadata"]["annotations"]["fashion-mnist.example.com/published-by"] == name
    managers = {m["manager"] for m in served["metadata"]["managedFields"]}
    assert {"fashion-mnist-deploy", "fashion-mnist-pipeline"} <= managers, managers


def test_a_select_alone_publishes_an_earlier_runs_candidates_as_the_next_version(
    kubectl, kubeconfig, deployed
):
    """Each step alone: ``submit-pipeline.sh --wait --entrypoint select -p
    candidates-runs=<run>`` scores the candidates that the run above trained (the run id in
    their training_history.json) and publishes the best as version 2, without training again;
    the select Workflow's own name alone would refuse them all as stale."""
    ns = deployed
    root = real_node.volume_root(ns)
    (trained_by,) = {
        json.loads(p.read_text())["run_id"]
        for p in (root / "candidates").glob("*/training_history.json")
    }
    proc = script(
        kubectl, kubeconfig, ns, "submit-pipeline.sh", "--wait", "--entrypoint", "select",
        "-p", f"candidates-runs={trained_by}", "-p", "min-accuracy=0",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wf = kubectl.json("get", proc.stdout.split()[0], "-n", ns)
    assert wf["metadata"]["name"] != trained_by
    report = json.loads((root / "reports" / "selection.json").read_text())
    assert report["published"] and report["version"] == 2, report
    assert {k: c["status"] for k, c in report["candidates"].items()} == dict.fromkeys(
        ("cnn", "dropout", "batch_norm", "pytorch"), "ok"
    )
    assert sorted(p.name for p in (root / "models" / "fashion-mnist").iterdir()) == ["1", "2"]


def _replica_env(pod: dict, container: str) -> dict[str, str]:
    """The environment of a training replica's ``container`` (``tensorflow``, ``pytorch``),
    after checking the rest of what the job's template and the operator gave the pod: the
    run's ``train-resources``, the project's PVC at /mnt/shared, the restricted security
    context, ``restartPolicy: Never`` (each attempt is a new job: docs/training.md)."""
    (c,) = pod["spec"]["containers"]
    assert c["name"] == container, c["name"]
    assert c["resources"] == json.loads(SMOKE_RUN["train-resources"]), c["resources"]
    assert {m["name"]: m["mountPath"] for m in c["volumeMounts"]}["shared"] == "/mnt/shared"
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["shared"]["persistentVolumeClaim"]["claimName"] == "fashion-mnist-pvc"
    psc, csc = pod["spec"]["securityContext"], c["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["seccompProfile"]["type"] == "RuntimeDefault"
    assert csc["allowPrivilegeEscalation"] is False and csc["capabilities"]["drop"] == ["ALL"]
    assert pod["spec"]["restartPolicy"] == "Never"
    return {e["name"]: e.get("value") for e in c.get("env") or []}


def _check_real_pytorchjob(kubectl, ns: str, job: dict) -> None:
    """``job`` Succeeded on the real node: Master (rank 0) and Worker (rank 1) exited 0 after
    joining one gloo process group at the Master's Service, with the operator's MASTER_ADDR,
    MASTER_PORT, WORLD_SIZE and RANK; the Worker's init container (the operator's, from
    base/platform/training-operator's restricted template: Pod Security admission would have
    refused upstream's) resolved that Service first; only rank 0 exported."""
    name = job["metadata"]["name"]
    assert condition(job, "Succeeded"), job["status"]
    assert job["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
    logs = {}
    for rtype, rank in (("master", 0), ("worker", 1)):
        pod = kubectl.json("get", "pod", f"{name}-{rtype}-0", "-n", ns)
        assert pod["spec"]["nodeName"] == real_node.node_name()
        (cs,) = pod["status"]["containerStatuses"]
        assert cs["image"].endswith("-torch") and cs["state"]["terminated"]["exitCode"] == 0, cs
        env = _replica_env(pod, "pytorch")
        assert env["MASTER_ADDR"] == f"{name}-master-0" and env["MASTER_PORT"] == "23456", env
        assert env["WORLD_SIZE"] == "2" and env["RANK"] == str(rank), env
        inits = pod["status"].get("initContainerStatuses") or []
        if rtype == "worker":
            (init,) = inits
            assert init["name"] == "init-pytorch", init
            assert init["state"]["terminated"]["exitCode"] == 0, init
            (spec,) = pod["spec"]["initContainers"]
            assert spec["securityContext"]["allowPrivilegeEscalation"] is False
            assert spec["securityContext"]["capabilities"]["drop"] == ["ALL"]
        else:
            assert inits == []
        logs[rank] = kubectl("logs", "-n", ns, f"{name}-{rtype}-0", "-c", "pytorch")
    for rank, log in logs.items():
        assert f"rank {rank} of 2, master {name}-master-0:23456" in log, log[-3000:]
        assert f"rank {rank} joined the process group (gloo)" in log, log[-3000:]
    assert "rank 0 exported" in logs[0] and "rank 0 exported" not in logs[1]


def test_a_worker_that_really_fails_fails_train_sh_promptly(
    kubectl, kubeconfig, overlay, pipeline_ns
):
    """The failure path on real pods: `scripts/train.sh cnn` with a learning rate the trainer
    rejects. Both workers really exit 2 (argparse) in every attempt: the step's retryStrategy
    cannot tell a crash from a lost pod (the operator reports both as Failed), so it makes
    ``limit + 1`` TFJobs, each Failed, then the Workflow fails and the script exits 1 with
    Argo's message instead of waiting for its TIMEOUT: the bound on a trainer that always
    crashes."""
    t0 = time.monotonic()
    proc = script(kubectl, kubeconfig, pipeline_ns, "train.sh", "cnn",
                     "-p", "learning-rate=not-a-number", timeout=PIPELINE_TIMEOUT_S)  # fmt: skip
    print(f"a crashing trainer failed train.sh after {time.monotonic() - t0:.0f} s")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ": Failed:" in proc.stderr and "still" not in proc.stderr, proc.stderr
    workflow = proc.stdout.split()[0].removeprefix("workflow.argoproj.io/")
    jobs = attempts(kubectl, pipeline_ns, "tfjobs", workflow)
    limit = train_retry_limit(overlay)
    assert [j["metadata"]["name"] for j in jobs] == [
        f"{workflow}-cnn-{n}" for n in range(limit + 1)
    ]
    for tfjob in jobs:
        assert condition(tfjob, "Failed") and not condition(tfjob, "Succeeded"), tfjob["status"]
        pods = kubectl.json(
            "get", "pods", "-n", pipeline_ns, "-l",
            f"training.kubeflow.org/job-name={tfjob['metadata']['name']}",
        )["items"]  # fmt: skip
        codes = [
            (cs["state"].get("terminated") or {}).get("exitCode")
            for p in pods
            for cs in p["status"].get("containerStatuses") or []
        ]
        assert 2 in codes, (codes, tfjob["status"])
        assert all(p["spec"]["nodeName"] == real_node.node_name() for p in pods)


# A run long enough to lose pods in mid-run: four epochs of 16,384 images (about 8 s each on a
# 2-core AMD EPYC beside the other job, 1-2 s on an Intel with AMX; the small budget
# otherwise). Each loss follows an epoch that its attempt saved; on a fast CPU the attempt can
# finish the remaining epochs in the second or two that its lost pod takes to fail the job, and
# the next attempt then finds the training done (it exports alone, the same backup).
LOSS_RUN = {**SMOKE_RUN, "epochs": "4", "train-examples": "16384"}


def _lose(kubectl, ns: str, pod: str, how: str) -> None:
    """Take ``pod`` away as a cluster does: ``delete`` (kubectl delete, a preemption, a node's
    pods garbage-collected) or ``evict`` (the Eviction API, what a drain and the kubelet's
    node-pressure eviction use; no PodDisruptionBudget guards the training pods)."""
    if how == "delete":
        kubectl("delete", "pod", pod, "-n", ns, "--wait=false")
        return
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": ns},
    }
    path = f"/api/v1/namespaces/{ns}/pods/{pod}/eviction"
    proc = kubectl.run("create", "--raw", path, "-f", "-", input=json.dumps(eviction))
    assert proc.returncode == 0, proc.stderr


# How each kind loses a pod in each of its attempts but the last (the step's retry limit is 2:
# three attempts): a deletion and an eviction each, of which replica. The PyTorchJob loses its
# Master once: any replica lost fails the job (the Master's own failure too), and the next
# attempt resumes from the Master's epoch-NNN.pt on the volume.
LOSSES = {
    "cnn": (("delete", "worker-1"), ("evict", "worker-1")),
    "pytorch": (("evict", "worker-0"), ("delete", "master-0")),
}


def test_a_run_that_loses_pods_resumes_in_new_attempts(kubectl, kubeconfig, overlay, pipeline_ns):
    """Both job kinds lose pods mid-run and still succeed, from where they were. `train.sh cnn`
    (a 2-worker TFJob) and `train.sh pytorch` (Master + Worker) run at once. Each time an
    attempt has saved an epoch (a new BackupAndRestore/ModelCheckpoint epoch of the TF chief, a
    new epoch-NNN.pt of the PyTorch Master), one of its pods is taken away (:data:`LOSSES`: a
    TF worker, the PyTorch Worker, then its Master), deleted once and evicted once per kind.
    training-operator v1.9.4 fails that attempt's job; the
    step's retryStrategy creates the next attempt under a new name, whose replicas resume
    from the run's backup (the same --checkpoint-dir/--run-id), and the last attempt trains
    the remaining epochs and exports once; both scripts exit 0."""
    assert train_retry_limit(overlay) >= max(len(v) for v in LOSSES.values())
    params = [a for k, v in LOSS_RUN.items() for a in ("-p", f"{k}={v}")]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECTL": kubectl.binary,
           "NAMESPACE": pipeline_ns, "TIMEOUT": str(PIPELINE_TIMEOUT_S), "POLL": "2"}  # fmt: skip
    runs = {
        kind: subprocess.Popen(
            [str(REPO_ROOT / "scripts/train.sh"), kind, *params],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for kind in LOSSES
    }
    root = real_node.volume_root(pipeline_ns)
    try:
        wf = {k: p.stdout.readline().split("/", 1)[1].strip() for k, p in runs.items()}
        # the files (in the attempt's checkpoint directory, read from its job's arguments)
        # that say an epoch was saved
        plurals = {"cnn": "tfjobs", "pytorch": "pytorchjobs"}
        marks = {"cnn": "epoch-*/weights.index", "pytorch": "epoch-*.pt"}
        pending = {k: list(v) for k, v in LOSSES.items()}  # the losses still to come
        lost = {k: 0 for k in LOSSES}  # the pods lost so far: attempt lost[k] runs now
        dirs: dict[str, Path] = {}  # job -> its checkpoint directory on the volume
        before: dict[str, set[Path]] = {}  # job -> the marks there when the job was found
        t0 = time.monotonic()
        while any(pending.values()):
            assert time.monotonic() - t0 < PIPELINE_TIMEOUT_S, f"no epoch saved: {pending}"
            for kind in [k for k, v in pending.items() if v]:
                n = lost[kind]  # the attempt running now
                if runs[kind].poll() is not None:
                    # on a fast CPU an attempt can finish every epoch before its save is seen:
                    # the run ended in attempt n, which is fine once a loss was resumed from
                    assert n >= 1, f"{kind} ended before it lost a pod"
                    print(f"{kind} ended in attempt {n}, before it lost {pending[kind]}")
                    pending[kind] = []
                    continue
                how, replica = pending[kind][0]
                job = f"{wf[kind]}-{kind}-{n}"
                pod = f"{job}-{replica}"
                if job not in dirs:  # read once per job: its arguments do not change
                    found = _checkpoint_dir(kubectl, pipeline_ns, plurals[kind], job, root)
                    if found is None:
                        continue
                    dirs[job], before[job] = found, set(found.glob(marks[kind]))
                saved = set(dirs[job].glob(marks[kind])) - before[job]  # by this attempt
                phase = kubectl.run(
                    "get", "pod", pod, "-n", pipeline_ns, "-o", "jsonpath={.status.phase}"
                ).stdout  # fmt: skip
                if not saved or phase != "Running":  # (a finished pod's loss fails nothing)
                    continue
                pending[kind].pop(0)
                lost[kind] += 1
                _lose(kubectl, pipeline_ns, pod, how)
                print(f"{kind}: {pod} lost ({how}) {time.monotonic() - t0:.0f} s after the start")
            time.sleep(0.5)
        outs = {k: p.communicate(timeout=PIPELINE_TIMEOUT_S + 60) for k, p in runs.items()}
    finally:
        for p in runs.values():
            p.kill()
    print(f"both runs ended {time.monotonic() - t0:.0f} s after the start")
    for kind, p in runs.items():
        assert p.returncode == 0, f"{kind}: {outs[kind]}"
    epochs = int(LOSS_RUN["epochs"])

    for plural, kind in (("tfjobs", "cnn"), ("pytorchjobs", "pytorch")):
        jobs = attempts(kubectl, pipeline_ns, plural, wf[kind])
        last = lost[kind]  # the attempt that succeeded
        names = [j["metadata"]["name"] for j in jobs]
        assert names == [f"{wf[kind]}-{kind}-{n}" for n in range(last + 1)], names
        assert all(condition(j, "Failed") for j in jobs[:last]), [j["status"] for j in jobs]
        assert condition(jobs[last], "Succeeded"), jobs[last]["status"]
    final = f"{wf['cnn']}-cnn-{lost['cnn']}"
    logs = [kubectl("logs", "-n", pipeline_ns, f"{final}-worker-{i}") for i in (0, 1)]
    done = [_continued(log, epochs) for log in logs]
    for log, n in zip(logs, done, strict=True):  # both replicas restored the chief's backup
        assert n >= 1 and f"Epoch 1/{epochs}" not in log, log[-3000:]
        assert n == epochs or f"Epoch {epochs}/{epochs}" in log, log[-3000:]
    print(f"cnn's last attempt found {done[0]} of {epochs} epochs done")
    assert "chief exported" in logs[0] and "chief exported" not in logs[1]
    final = f"{wf['pytorch']}-pytorch-{lost['pytorch']}"
    master = kubectl("logs", "-n", pipeline_ns, f"{final}-master-0", "-c", "pytorch")
    done_master = _continued(master, epochs)
    assert done_master >= 1, master[-3000:]
    print(f"pytorch's last attempt found {done_master} of {epochs} epochs done")
    assert master.count("rank 0 exported") == 1, master[-3000:]

    for kind in LOSSES:  # one candidate each, of this run
        history = json.loads((root / "candidates" / kind / "training_history.json").read_text())
        assert history["run_id"] == wf[kind], history
        assert (root / "candidates" / kind / "saved_model.pb").is_file()


def _checkpoint_dir(kubectl, ns: str, plural: str, name: str, root: Path) -> Path | None:
    """Where job ``name``'s replicas keep their checkpoints on the node's volume ``root``
    (``<--checkpoint-dir>/<--model-type>/<--run-id>`` of its first replica's arguments, the
    trainers' layout); None while the job does not exist."""
    got = kubectl.run("get", plural, name, "-n", ns, "-o", "json")
    if got.returncode != 0:
        return None
    spec = json.loads(got.stdout)["spec"]
    (field,) = [k for k in spec if k.endswith("ReplicaSpecs")]
    args = next(iter(spec[field].values()))["template"]["spec"]["containers"][0]["args"]
    arg = {flag: value for flag, value in zip(args, args[1:], strict=False)}
    mounted = Path(arg["--checkpoint-dir"]).relative_to("/mnt/shared")
    return root / mounted / arg["--model-type"] / arg["--run-id"]


def _continued(log: str, epochs: int) -> int:
    """How many epochs the replica found done when it started: its trainer's "resumes from ...
    (N of E epochs done)" line, or E when the TF trainer found the training finished (the
    chief's "training finished already", another worker's "this run's training is finished");
    AssertionError when it started over."""
    if "training finished already" in log or "this run's training is finished" in log:
        return epochs
    found = re.findall(rf"resumes from \S+ \((\d+) of {epochs} epochs done\)", log)
    assert found, f"no resume in the log: {log[-3000:]}"
    return int(found[0])


def test_overlays_apply_cleanly_and_idempotently(deployed, kubectl: Kubectl, namespace: str):
    """The README's ``deploy.sh local-k3d`` left nothing to change (``kubectl diff`` exits 0
    under its field manager, after the pipeline's own apply), and ``overlays/gpu-cloud`` is
    accepted by the API server and the KServe/training-operator webhooks: a server-side dry run
    into a fresh namespace (the PVC of local-k3d cannot change class in place, and the node has
    no GPUs)."""
    diff = kubectl.run(
        "diff", "--server-side", "--field-manager=fashion-mnist-deploy",
        "-k", str(REPO_ROOT / "overlays/local-k3d"),
    )  # fmt: skip
    assert diff.returncode == 0, diff.stdout + diff.stderr
    rendered = kubectl("kustomize", str(REPO_ROOT / "overlays/gpu-cloud"))
    moved = [
        _in_namespace(d, namespace)
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] != "Namespace"
    ]
    dry = kubectl.apply(moved, "--server-side", "--dry-run=server", "--field-manager=e2e")
    assert "inferenceservice.serving.kserve.io/fashion-mnist serverside-applied" in dry, dry
    assert "workflowtemplate.argoproj.io/fashion-mnist-pipeline serverside-applied" in dry, dry
