"""Why a Knative Service is not Ready: the chain Knative walks from a Service to a running pod,
read back link by link, so that a wait that times out names the link that broke.

Knative Serving reconciles a Service into a Configuration, whose latest Revision owns a
Deployment (``<revision>-deployment``) and a PodAutoscaler of the revision's name (the KPA,
which sets the Deployment's replicas); the Deployment's ReplicaSet creates the pods, the
scheduler binds them to a node, the kubelet starts them. A Service stays not Ready when any link
fails, and each says so in a place of its own: the Revision's and the PodAutoscaler's
conditions, the Deployment's ``ReplicaFailure`` condition (a pod refused at admission), the
pod's ``PodScheduled`` condition (no node with room: ``Insufficient cpu``), its containers'
waiting reasons (an image that cannot be had) and the namespace's Warning events.
:func:`why_ksvc_not_ready` collects them; :func:`wait_ksvc_ready` waits and raises with them.
"""

from __future__ import annotations

import os

from e2e_kube import Kubectl, KubectlError, wait_until

#: Warning events of the namespace quoted at most (the newest)
EVENTS = 12


def _not_true(obj: dict) -> list[str]:
    """``Type=Status (Reason: message)`` for each condition of ``obj`` that is not True."""
    out = []
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("status") != "True":
            why = ": ".join(p for p in (c.get("reason"), c.get("message")) if p)
            out.append(f"{c['type']}={c.get('status')}" + (f" ({why})" if why else ""))
    return out


def _get(kubectl: Kubectl, *args: str) -> dict | None:
    """``kubectl get ARGS -o json``, or None when it is not there (or cannot be read)."""
    try:
        return kubectl.json("get", *args)
    except KubectlError:
        return None


def _pod_line(pod: dict) -> str:
    """A pod's phase, node, unscheduled reason and containers' waiting/terminated reasons."""
    st = pod.get("status") or {}
    parts = [f"pod {pod['metadata']['name']}: {st.get('phase')}",
             f"node={(pod.get('spec') or {}).get('nodeName') or '-'}"]  # fmt: skip
    for c in st.get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] != "True":
            parts.append(f"unscheduled ({c.get('reason')}: {c.get('message')})")
    for cs in [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]:
        state = cs.get("state") or {}
        if "waiting" in state:
            w = state["waiting"]
            parts.append(f"{cs['name']} waiting {w.get('reason')}: {w.get('message', '')}".rstrip())
        elif "terminated" in state and state["terminated"].get("exitCode"):
            t = state["terminated"]
            parts.append(f"{cs['name']} exited {t['exitCode']} ({t.get('reason')})")
        elif not cs.get("ready"):
            parts.append(f"{cs['name']} not ready")
    return " ".join(parts)


def node_requests(kubectl: Kubectl, node: str) -> str:
    """``node``'s allocatable CPU and the CPU its running pods request, by namespace (what a
    FailedScheduling ``Insufficient cpu`` is about)."""
    got = _get(kubectl, "node", node)
    if got is None:
        return f"node {node}: not found"
    pods = _get(kubectl, "pods", "-A", "--field-selector", f"spec.nodeName={node}") or {}
    by_ns: dict[str, int] = {}
    for pod in pods.get("items", []):
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        ns = pod["metadata"]["namespace"]
        for c in pod["spec"].get("containers", []):
            by_ns[ns] = by_ns.get(ns, 0) + millicores(
                ((c.get("resources") or {}).get("requests") or {}).get("cpu", "0")
            )
    top = ", ".join(f"{ns} {m}m" for ns, m in sorted(by_ns.items(), key=lambda kv: -kv[1]))
    alloc = got["status"]["allocatable"].get("cpu")
    return f"node {node}: allocatable cpu {alloc}, requested {sum(by_ns.values())}m ({top})"


def millicores(q: str) -> int:
    """A CPU quantity (``"2"``, ``"250m"``, ``"0.5"``) in millicores."""
    q = str(q)
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def why_ksvc_not_ready(kubectl: Kubectl, ns: str, name: str) -> str:
    """Every link from Knative Service ``ns/name`` to its pods that is not well, one per line
    (module docstring): the Service's, latest Revision's and PodAutoscaler's conditions that are
    not True, the scale the KPA wants and has, the Deployment's replicas and failures, each pod
    of the revision, the node's CPU when a pod does not fit, and the namespace's Warning
    events."""
    lines = []
    ksvc = _get(kubectl, "ksvc", name, "-n", ns)
    if ksvc is None:
        return f"Knative Service {ns}/{name}: not found"
    lines.append(f"ksvc {name}: {'; '.join(_not_true(ksvc)) or 'conditions all True'}")
    rev_name = (ksvc.get("status") or {}).get("latestCreatedRevisionName")
    if not rev_name:
        lines.append("no Revision created yet (Knative's controller has not reconciled it)")
    else:
        rev = _get(kubectl, "revision", rev_name, "-n", ns) or {}
        lines.append(f"revision {rev_name}: {'; '.join(_not_true(rev)) or 'Ready'}")
        pa = _get(kubectl, "podautoscaler", rev_name, "-n", ns)
        if pa is None:
            lines.append(f"podautoscaler {rev_name}: not created")
        else:
            st = pa.get("status") or {}
            lines.append(
                f"podautoscaler {rev_name}: desiredScale={st.get('desiredScale')} "
                f"actualScale={st.get('actualScale')}; {'; '.join(_not_true(pa)) or 'Ready'}"
            )
        dep = _get(kubectl, "deployment", f"{rev_name}-deployment", "-n", ns)
        if dep is None:
            lines.append(f"deployment {rev_name}-deployment: not created")
        else:
            st = dep.get("status") or {}
            failing = [c for c in _not_true(dep) if not c.startswith("Available=")]
            failing += [
                f"{c['type']} ({c.get('reason')}: {c.get('message')})"
                for c in st.get("conditions") or []
                if c["type"] == "ReplicaFailure" and c["status"] == "True"
            ]
            lines.append(
                f"deployment {rev_name}-deployment: replicas={dep['spec'].get('replicas')} "
                f"created={st.get('replicas', 0)} ready={st.get('readyReplicas', 0)}"
                + (f"; {'; '.join(failing)}" if failing else "")
            )
        pods = _get(kubectl, "pods", "-n", ns, "-l", f"serving.knative.dev/revision={rev_name}")
        pod_lines = [_pod_line(p) for p in (pods or {}).get("items", [])]
        lines += pod_lines or ["no pod of the revision"]
        if any("Insufficient" in line for line in pod_lines) and (node := _first_node(kubectl)):
            lines.append(node_requests(kubectl, node))
    events = _get(kubectl, "events", "-n", ns, "--field-selector", "type=Warning") or {}

    # (events.k8s.io writers leave lastTimestamp empty and set eventTime)
    def when(e):
        return e.get("lastTimestamp") or e.get("eventTime") or e["metadata"]["creationTimestamp"]

    warn = sorted(events.get("items", []), key=when)[-EVENTS:]
    lines += [
        f"event {e['involvedObject'].get('kind')}/{e['involvedObject'].get('name')}: "
        f"{e.get('reason')}: {e.get('message', '').strip()}"
        for e in warn
    ]
    return "\n".join(lines)


def _first_node(kubectl: Kubectl) -> str | None:
    """The one node that runs containers: the real node when there is one (its name is
    $FMNIST_E2E_REAL_NODE), else the cluster's first node."""
    if name := os.environ.get("FMNIST_E2E_REAL_NODE"):
        return name
    nodes = _get(kubectl, "nodes") or {}
    return next((n["metadata"]["name"] for n in nodes.get("items", [])), None)


def ready(kubectl: Kubectl, kind: str, name: str, ns: str) -> dict | None:
    """The object ``kind/name`` of ``ns`` when its Ready condition is True, else None."""
    got = kubectl.json("get", kind, name, "-n", ns)
    conds = {c["type"]: c for c in (got.get("status") or {}).get("conditions", [])}
    return got if conds.get("Ready", {}).get("status") == "True" else None


def wait_ksvc_ready(kubectl: Kubectl, ns: str, name: str, timeout: float) -> dict:
    """Wait up to ``timeout`` seconds until Knative Service ``ns/name`` is Ready; the Service.
    Raises AssertionError naming what holds it (:func:`why_ksvc_not_ready`)."""
    try:
        return wait_until(
            lambda: ready(kubectl, "ksvc", name, ns),
            timeout=timeout,
            what=f"Knative Service {ns}/{name} Ready",
        )
    except AssertionError as e:
        first = str(e).split("; last:", 1)[0]
        raise AssertionError(f"{first}:\n{why_ksvc_not_ready(kubectl, ns, name)}") from None
