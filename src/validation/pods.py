"""Pods topic: every container of our pod templates (TFJob replicas, Workflow templates,
InferenceService predictors, Knative Services, workloads) has requests and limits (limits not
below requests), a restricted securityContext, a pinned image, and a readiness probe where it
runs a server.

Checks: ``resources``, ``resource-limits``, ``security-context``, ``image-tag``, ``probes``.
Upstream objects are exempt by source (pinned, not rewritten); a partial server-side apply of
a Workflow step (the serve step) is checked through the object in git it merges into.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from kubernetes.utils import parse_quantity

from validation.argo import WORKFLOW_KINDS, first_calls, substitute_tree, workflow_spec
from validation.core import Context, Hit, Obj, check, named

WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
SERVERS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"}


@dataclass
class PodTemplate:
    """A pod spec of an object: pod-level fields and its containers with their field paths."""

    pod: dict
    containers: list[tuple[dict, str]]
    server: bool  # containers run a server (readiness probe required)


def containers(pod: dict, path: str) -> list[tuple[dict, str]]:
    """(container, path) of a pod spec's initContainers and containers, by name."""
    return [
        (c, p)
        for key in ("initContainers", "containers")
        for _, c, p in named(pod.get(key), f"{path}.{key}")
    ]


def pod_templates(o: Obj) -> Iterator[PodTemplate]:
    """Every pod template of an object, by kind."""
    kind, spec = o.kind, o.doc.get("spec") or {}
    if kind in WORKLOADS or kind == "CronJob":
        path = "spec.jobTemplate.spec.template.spec" if kind == "CronJob" else "spec.template.spec"
        node = o.doc
        for part in path.split("."):
            node = node.get(part) or {}
        server = kind in SERVERS and any(c.get("ports") for c in node.get("containers") or [])
        yield PodTemplate(node, containers(node, path), server)
    elif kind == "Pod":
        yield PodTemplate(spec, containers(spec, "spec"), False)
    elif kind == "TFJob":
        for rtype, rspec in (spec.get("tfReplicaSpecs") or {}).items():
            pod = ((rspec or {}).get("template") or {}).get("spec") or {}
            yield PodTemplate(
                pod, containers(pod, f"spec.tfReplicaSpecs.{rtype}.template.spec"), False
            )
    elif kind == "Service" and o.doc.get("apiVersion", "").startswith("serving.knative.dev/"):
        pod = (spec.get("template") or {}).get("spec") or {}
        yield PodTemplate(pod, containers(pod, "spec.template.spec"), True)
    elif kind == "InferenceService":
        for comp in ("predictor", "transformer", "explainer"):
            if c := spec.get(comp):
                conts = containers(c, f"spec.{comp}")
                conts += [
                    (v, f"spec.{comp}.{k}")
                    for k, v in c.items()
                    if isinstance(v, dict) and "modelFormat" in v
                ]
                # KServe/Knative probe the runtime's port (queue-proxy): no explicit probe needed
                yield PodTemplate(c, conts, False)
    elif kind in WORKFLOW_KINDS:
        pod_sc = workflow_spec(o).get("securityContext") or {}
        for call in first_calls(o):
            t, base = call.template, call.path
            conts = [
                (substitute_tree(t[k], call.values), f"{base}.{k}")
                for k in ("container", "script")
                if t.get(k)
            ]
            for key in ("initContainers", "sidecars"):
                conts += [
                    (substitute_tree(c, call.values), p)
                    for _, c, p in named(t.get(key), f"{base}.{key}")
                ]
            if conts:
                yield PodTemplate(
                    {"securityContext": t.get("securityContext") or pod_sc},
                    conts,
                    bool(t.get("daemon")),
                )


def checked(ctx: Context) -> Iterator[tuple[Obj, PodTemplate]]:
    """Pod templates of our objects, partial server-side applies left out."""
    for o in ctx.ours:
        if "--server-side" not in ((o.extra.get("resource") or {}).get("flags") or []):
            for pt in pod_templates(o):
                yield o, pt


@check("resources")
def resources(ctx: Context) -> Iterator[Hit]:
    """Every container requests and limits cpu and memory."""
    for o, pt in checked(ctx):
        for c, path in pt.containers:
            res = c.get("resources") or {}
            for section in ("requests", "limits"):
                for r in ("cpu", "memory"):
                    if not (res.get(section) or {}).get(r):
                        yield o, f"{path}.resources.{section}.{r}", f"missing {section}.{r}"


@check("resource-limits")
def limits_not_below_requests(ctx: Context) -> Iterator[Hit]:
    """No cpu/memory limit lower than its request (the API server rejects such pods)."""
    for o, pt in checked(ctx):
        for c, path in pt.containers:
            res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
            req, lim = res.get("requests") or {}, res.get("limits") or {}
            for r in ("cpu", "memory"):
                try:
                    low = r in req and r in lim and parse_quantity(lim[r]) < parse_quantity(req[r])
                except ValueError:
                    continue  # not a quantity: the schema check reports it
                if low:
                    yield (
                        o,
                        f"{path}.resources.limits.{r}",
                        f"limit {lim[r]} is lower than the request {req[r]}",
                    )


def restricted(sc: dict, pod_sc: dict) -> Iterator[tuple[str, str]]:
    """(field, problem) of a container securityContext against the restricted profile."""
    if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
        yield "runAsNonRoot", "must be true"
    if sc.get("allowPrivilegeEscalation") is not False:
        yield "allowPrivilegeEscalation", "must be false"
    if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
        yield "capabilities.drop", "must drop ALL"
    seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
    if seccomp != "RuntimeDefault":
        yield "seccompProfile.type", f"must be RuntimeDefault (pod or container), got {seccomp!r}"


@check("security-context")
def security_context(ctx: Context) -> Iterator[Hit]:
    """Restricted profile: non-root, no privilege escalation, drop ALL, RuntimeDefault seccomp."""
    for o, pt in checked(ctx):
        for c, path in pt.containers:
            for fld, msg in restricted(
                c.get("securityContext") or {}, pt.pod.get("securityContext") or {}
            ):
                yield o, f"{path}.securityContext.{fld}", msg


def image_problem(image: str) -> str:
    """Why an image is not pinned ('' when it is: a tag other than latest, or a digest)."""
    last = image.rsplit("/", 1)[-1]
    if not image:
        return "no image"
    if "@sha256:" in image:
        return ""
    if ":" not in last:
        return f"image {image!r} has no tag (means :latest)"
    return f"image {image!r} uses :latest" if last.endswith(":latest") else ""


@check("image-tag")
def image_tag(ctx: Context) -> Iterator[Hit]:
    """Images pinned by tag or digest, never ``:latest`` or untagged."""
    for o, pt in checked(ctx):
        for c, path in pt.containers:
            if ("image" in c or o.kind != "InferenceService") and (
                p := image_problem(str(c.get("image", "")))
            ):
                yield o, f"{path}.image", p


@check("probes")
def probes(ctx: Context) -> Iterator[Hit]:
    """A readiness probe on server containers (Knative Services, workloads with ports)."""
    for o, pt in checked(ctx):
        for c, path in pt.containers:
            if pt.server and ".initContainers[" not in path and not c.get("readinessProbe"):
                yield o, f"{path}.readinessProbe", "a server container needs a readinessProbe"
