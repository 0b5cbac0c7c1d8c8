"""Policy checks over the pod templates and RBAC of OUR manifests.

Upstream operator manifests (objects rendered from a remote base / mirror file: training
operator, Argo Workflows, KServe, Argo CD) are exempt by source: we pin them, we do not
rewrite them.

Rules, per container of every pod template (TFJob replicas, Workflow container/script
templates, InferenceService predictors, Knative Services, Deployments/StatefulSets/DaemonSets/
Jobs/CronJobs/Pods):

* ``resources``: requests and limits for cpu and memory;
* ``security-context``: restricted profile: runAsNonRoot (pod or container),
  allowPrivilegeEscalation false, capabilities drop ALL, seccompProfile RuntimeDefault (pod
  or container);
* ``image-tag``: image pinned by tag or digest, never ``:latest`` or untagged;
* ``probes``: a readiness probe on containers that run a server (Knative Services,
  Deployments/StatefulSets/DaemonSets whose containers declare ports). InferenceService
  predictors are covered by the serving runtime defaults: KServe/Knative probe the runtime's
  port (queue-proxy readiness), so no explicit probe is required there. TFJob ports (2222)
  are the collective-ops port, not a server;
* partial server-side-apply manifests of Workflow resource steps are checked through the
  object in git they merge into (see ``serve-consistency``);
* ``rbac-wildcard``: no ``*`` in apiGroups/resources/verbs of our Roles/ClusterRoles.

Exemption: annotate the object with ``validation.fashion-mnist.example.com/exempt: <check>[,...]``
and a non-empty ``validation.fashion-mnist.example.com/exempt-reason``; an exemption without a
reason is itself a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from validation.render import Obj
from validation.report import Finding
from validation.workflows import WORKFLOW_KINDS, invocations, substitute_tree, workflow_spec

EXEMPT = "validation.fashion-mnist.example.com/exempt"
EXEMPT_REASON = "validation.fashion-mnist.example.com/exempt-reason"
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
SERVER_WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"}


@dataclass
class PodTemplate:
    """A pod spec found in an object: pod-level fields and its containers, with JSON paths."""

    pod: dict
    pod_path: str
    containers: list[tuple[dict, str]]
    server: bool  # containers run a server (probe required)


def pod_templates(o: Obj) -> Iterator[PodTemplate]:
    """Every pod template of an object (by kind), with paths for the report."""
    kind, spec = o.kind, o.doc.get("spec") or {}

    def containers(pod: dict, path: str) -> list[tuple[dict, str]]:
        out = []
        for key in ("initContainers", "containers"):
            for i, c in enumerate(pod.get(key) or []):
                out.append((c, f"{path}.{key}[{i}]"))
        return out

    if kind in WORKLOADS or kind == "CronJob":
        tpl, path = spec.get("template") or {}, "spec.template.spec"
        if kind == "CronJob":
            tpl = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
            path = "spec.jobTemplate.spec.template.spec"
        pod = tpl.get("spec") or {}
        server = kind in SERVER_WORKLOADS and any(
            c.get("ports") for c in pod.get("containers") or []
        )
        yield PodTemplate(pod, path, containers(pod, path), server)
    elif kind == "Pod":
        yield PodTemplate(spec, "spec", containers(spec, "spec"), False)
    elif kind == "TFJob":
        for rtype, rspec in (spec.get("tfReplicaSpecs") or {}).items():
            path = f"spec.tfReplicaSpecs.{rtype}.template.spec"
            pod = (rspec.get("template") or {}).get("spec") or {}
            yield PodTemplate(pod, path, containers(pod, path), False)
    elif kind == "Service" and o.doc.get("apiVersion", "").startswith("serving.knative.dev/"):
        path = "spec.template.spec"
        pod = (spec.get("template") or {}).get("spec") or {}
        yield PodTemplate(pod, path, containers(pod, path), True)
    elif kind == "InferenceService":
        for comp in ("predictor", "transformer", "explainer"):
            c = spec.get(comp)
            if not c:
                continue
            path = f"spec.{comp}"
            conts = containers(c, path)
            for key, val in c.items():
                if isinstance(val, dict) and ("storageUri" in val or "modelFormat" in val):
                    conts.append((val, f"{path}.{key}"))
            # runtime defaults provide the probes, see module docstring
            yield PodTemplate(c, path, conts, False)
    elif kind in WORKFLOW_KINDS:
        wspec = workflow_spec(o)
        pod = {"securityContext": wspec.get("securityContext") or {}}
        seen = set()
        for call in invocations(o):
            if call.template_index in seen:
                continue
            seen.add(call.template_index)
            t = call.template
            base = f"spec.templates[{call.template_index}]"
            conts = []
            for key in ("container", "script"):
                if t.get(key):
                    conts.append((substitute_tree(t[key], call.values), f"{base}.{key}"))
            for key in ("initContainers", "sidecars"):
                for i, c in enumerate(t.get(key) or []):
                    conts.append((substitute_tree(c, call.values), f"{base}.{key}[{i}]"))
            if conts:
                tpod = dict(pod)
                if t.get("securityContext"):
                    tpod = {"securityContext": t["securityContext"]}
                yield PodTemplate(tpod, base, conts, bool(t.get("daemon")))


def _exemptions(o: Obj) -> tuple[set[str], list[Finding]]:
    ann = (o.doc.get("metadata") or {}).get("annotations") or {}
    checks = {c.strip() for c in str(ann.get(EXEMPT, "")).split(",") if c.strip()}
    if checks and not str(ann.get(EXEMPT_REASON, "")).strip():
        msg = f"exemption {sorted(checks)} without a written reason ({EXEMPT_REASON})"
        return set(), [Finding("exemption", msg, o.source, o.kustomization, o.ref)]
    return checks, []


def image_problem(image: str) -> str:
    """Why an image reference is not pinned ('' when it is)."""
    if not image:
        return "no image"
    if "@sha256:" in image:
        return ""
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"image {image!r} has no tag (means :latest)"
    if last.rsplit(":", 1)[1] == "latest":
        return f"image {image!r} uses :latest"
    return ""


def check_pod(o: Obj, pt: PodTemplate) -> list[Finding]:
    """resources, security-context, image-tag and probes for one pod template."""
    out: list[Finding] = []

    def add(check: str, field: str, msg: str) -> None:
        out.append(Finding(check, msg, o.source, o.kustomization, o.ref, o.path(field)))

    psc = pt.pod.get("securityContext") or {}
    for c, path in pt.containers:
        res = c.get("resources") or {}
        for section in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if not (res.get(section) or {}).get(r):
                    add("resources", f"{path}.resources.{section}.{r}", f"missing {section}.{r}")
        csc = c.get("securityContext") or {}
        if not csc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            add("security-context", f"{path}.securityContext.runAsNonRoot", "must be true")
        if csc.get("allowPrivilegeEscalation") is not False:
            add(
                "security-context",
                f"{path}.securityContext.allowPrivilegeEscalation",
                "must be false",
            )
        drops = ((csc.get("capabilities") or {}).get("drop")) or []
        if "ALL" not in drops:
            add("security-context", f"{path}.securityContext.capabilities.drop", "must drop ALL")
        seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp != "RuntimeDefault":
            add(
                "security-context",
                f"{path}.securityContext.seccompProfile.type",
                f"must be RuntimeDefault (pod or container), got {seccomp!r}",
            )
        if "image" in c or o.kind != "InferenceService":
            problem = image_problem(str(c.get("image", "")))
            if problem:
                add("image-tag", f"{path}.image", problem)
        if pt.server and ".initContainers[" not in path and not c.get("readinessProbe"):
            add("probes", f"{path}.readinessProbe", "a server container needs a readinessProbe")
    return out


def check_rbac(o: Obj) -> list[Finding]:
    """No wildcards in our Roles/ClusterRoles."""
    out = []
    if o.kind not in {"Role", "ClusterRole"}:
        return out
    for i, rule in enumerate(o.doc.get("rules") or []):
        for key in ("apiGroups", "resources", "verbs"):
            if "*" in (rule.get(key) or []):
                out.append(
                    Finding(
                        "rbac-wildcard",
                        f"wildcard '*' in {key}",
                        o.source,
                        o.kustomization,
                        o.ref,
                        f"rules[{i}].{key}",
                    )
                )
    return out


def check_object(o: Obj) -> list[Finding]:
    """All policy checks of one object (none for upstream objects, exempt by source)."""
    if o.upstream:
        return []
    if o.extra.get("server_side"):
        # A partial server-side apply (the pipeline's serve step) only sets the fields it owns;
        # the full object it merges into is checked where it is defined in git.
        return []
    exempt, out = _exemptions(o)
    for pt in pod_templates(o):
        out.extend(check_pod(o, pt))
    out.extend(check_rbac(o))
    return [f for f in out if f.check not in exempt]
