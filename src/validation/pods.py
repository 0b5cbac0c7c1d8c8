"""Pods topic: every container of our objects (any pod spec, KServe models, Workflow
templates). Upstream objects are exempt by source."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from kubernetes.utils import parse_quantity

from validation.argo import WORKFLOW_KINDS, calls, substitute, workflow_params, workflow_spec
from validation.core import Context, Hit, Obj, check, dig, named

SERVERS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"}  # with ports: a server


def containers(pod: dict, path: str, keys=("initContainers", "containers")) -> list:
    """(container, path) of a pod spec's containers, by name."""
    return [(c, p) for key in keys for c, p in named(pod.get(key), f"{path}.{key}")]


def mappings(node, path: str) -> Iterator[tuple[dict, str]]:
    """(mapping, dotted path) of a tree's mappings, ``node`` first (lists not entered)."""
    if isinstance(node, dict):
        yield node, path
        for k, v in node.items():
            yield from mappings(v, f"{path}.{k}")


def pod_containers(o: Obj) -> Iterator[tuple[dict, dict, str, bool]]:
    """(pod spec, container, path, server) of every container of an object: those of each
    mapping of its spec with containers (workloads, TFJob replicas, Knative Services) and
    KServe models (InferenceService components; KServe probes the runtime's port, no probe
    required); a Workflow's templates once per call, values substituted."""
    if o.kind in WORKFLOW_KINDS:
        pod_sc = workflow_spec(o).get("securityContext") or {}
        for call in calls(o):
            t = call.template
            conts = [(t[k], f"{call.path}.{k}") for k in ("container", "script") if t.get(k)]
            conts += containers(t, call.path, ("initContainers", "sidecars"))
            pod, server = {"securityContext": t.get("securityContext") or pod_sc}, t.get("daemon")
            yield from ((pod, substitute(c, call.values), p, bool(server)) for c, p in conts)
        return
    knative = o.doc.get("apiVersion", "").startswith("serving.knative.dev/")
    for pod, path in mappings(o.doc.get("spec"), "spec"):
        models = [(v, f"{path}.{k}") for k, v in pod.items() if dig(v, "modelFormat")]
        ports = any(c.get("ports") for c in pod.get("containers") or [])
        server = knative or (o.kind in SERVERS and ports)
        yield from ((pod, c, p, server) for c, p in containers(pod, path) + models)


def checked(ctx: Context) -> Iterator[tuple[Obj, dict, dict, str, bool]]:
    """(object, pod, container, path, server) of our objects' containers."""
    return ((o, *c) for o in ctx.ours for c in pod_containers(o))


@check("resources")
def resources(ctx: Context) -> Iterator[Hit]:
    """Every container requests and limits cpu and memory."""
    for o, _, c, path, _ in checked(ctx):
        for section, r in ((s, r) for s in ("requests", "limits") for r in ("cpu", "memory")):
            if not dig(c, "resources", section, r):
                yield o, f"{path}.resources.{section}.{r}", f"missing {section}.{r}"


@check("resource-limits")
def limits_not_below_requests(ctx: Context) -> Iterator[Hit]:
    """No cpu/memory limit lower than its request (the API server rejects such pods)."""
    for o, _, c, path, _ in checked(ctx):
        for r in ("cpu", "memory"):
            req, lim = dig(c, "resources", "requests", r), dig(c, "resources", "limits", r)
            with contextlib.suppress(ValueError):  # not a quantity: the schema check reports it
                if None not in (req, lim) and parse_quantity(lim) < parse_quantity(req):
                    msg = f"limit {lim} is lower than request {req}"
                    yield o, f"{path}.resources.limits.{r}", msg


def restricted(sc: dict, pod_sc: dict) -> Iterator[tuple[str, str]]:
    """(field, problem) of a container securityContext against the restricted profile."""
    if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
        yield "runAsNonRoot", "must be true"
    if sc.get("allowPrivilegeEscalation") is not False:
        yield "allowPrivilegeEscalation", "must be false"
    if "ALL" not in (dig(sc, "capabilities", "drop") or []):
        yield "capabilities.drop", "must drop ALL"
    seccomp = dig(sc, "seccompProfile", "type") or dig(pod_sc, "seccompProfile", "type")
    if seccomp != "RuntimeDefault":
        yield "seccompProfile.type", f"must be RuntimeDefault (pod or container), got {seccomp!r}"


@check("security-context")
def security_context(ctx: Context) -> Iterator[Hit]:
    """Restricted profile: non-root, no privilege escalation, drop ALL, RuntimeDefault seccomp."""
    for o, pod, c, path, _ in checked(ctx):
        for fld, msg in restricted(c.get("securityContext") or {}, pod.get("securityContext", {})):
            yield o, f"{path}.securityContext.{fld}", msg


# The image reference grammar of distribution/reference (regexp.go): [domain/]path[:tag][@digest]
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
IMAGE_REFERENCE = re.compile(
    rf"(?:{_DOMAIN}/)?{_PATH}(?:/{_PATH})*(?::(?P<tag>[\w][\w.-]{{0,127}}))?"
    r"(?P<digest>@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?"
)


@check("image-tag")
def image_tag(ctx: Context) -> Iterator[Hit]:
    """Images are valid references pinned by tag or digest, never ``:latest`` or untagged
    (KServe sets the image of an InferenceService model, which names none)."""
    for o, _, c, path, _ in checked(ctx):
        if "image" not in c and o.kind == "InferenceService":
            continue
        if not (ref := IMAGE_REFERENCE.fullmatch(image := str(c.get("image", "")))):
            problem = "not a valid image reference ([registry/]name[:tag][@digest])"
        elif ref["digest"] or ref["tag"] not in (None, "latest"):
            continue
        else:
            problem = "uses :latest" if ref["tag"] else "no tag (means :latest)"
        yield o, f"{path}.image", f"image {image!r}: {problem}" if image else "no image"


#: A tag that names its content: scripts/build-image.sh's ``src-<12 hex>`` (lib.sh content_tag:
#: sha256 of the build context and the base image), or a digest.
CONTENT_TAG = re.compile(r"src-[0-9a-f]{12}")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")  # core/v1 PullPolicy


@check("image-by-content")
def image_by_content(ctx: Context) -> Iterator[Hit]:
    """The image this repository builds (the ``image`` parameter of a Workflow kind, which its
    steps, TFJobs and PyTorchJob run, the last with ``-torch``) is named by its content
    wherever a node may keep a cached copy: each container of that image repository whose pull
    policy (its own, else Kubernetes' default: IfNotPresent for a tag other than latest) is not
    ``Always`` has a tag of :data:`CONTENT_TAG` (``-torch`` after it allowed) or a digest. A
    mutable tag such as ``0.1.0``, rebuilt, would leave every node that has the old image
    running it. The ``image-pull-policy`` parameter must be a Kubernetes pull policy (the API
    server refuses the pods of any other, once the run starts)."""
    built = set()
    for o in ctx.ours:
        if o.kind not in WORKFLOW_KINDS:
            continue
        params = workflow_params(workflow_spec(o))
        policy = params.get("image-pull-policy")
        if policy is not None and policy not in PULL_POLICIES:
            yield (
                o,
                "spec.arguments.parameters[image-pull-policy].value",
                (f"image-pull-policy {policy!r} is none of Kubernetes' {', '.join(PULL_POLICIES)}"),
            )
        if ref := IMAGE_REFERENCE.fullmatch(params.get("image", "")):
            built.add(_repository(ref))  # (an invalid one: image-tag reports it)
    for o, _, c, path, _ in checked(ctx):  # the steps' pods and the embedded jobs' replicas
        ref = IMAGE_REFERENCE.fullmatch(image := str(c.get("image", "")))
        if not ref or ref["digest"] or _repository(ref) not in built:
            continue
        default = "Always" if ref["tag"] in (None, "latest") else "IfNotPresent"
        pull = c.get("imagePullPolicy") or default
        if pull != "Always" and not CONTENT_TAG.fullmatch(
            (ref["tag"] or "").removesuffix("-torch")
        ):
            yield (
                o,
                f"{path}.image",
                (
                    f"image {image!r} pulled {pull}: a mutable tag (a node keeps the image it "
                    "cached under it); tag it by content with scripts/build-image.sh "
                    "(src-<12 hex>, set by the overlay's images: entry), or pull Always"
                ),
            )


def _repository(ref: re.Match) -> str:
    """An image reference's ``[registry/]name``: the text before its tag and digest."""
    if ref["tag"] is not None:
        return ref[0][: ref.start("tag") - 1]
    return ref[0][: ref.start("digest")] if ref["digest"] else ref[0]


@check("probes")
def probes(ctx: Context) -> Iterator[Hit]:
    """A readiness probe on server containers (Knative Services, workloads with ports)."""
    for o, _, c, path, server in checked(ctx):
        if server and ".initContainers[" not in path and not c.get("readinessProbe"):
            yield o, f"{path}.readinessProbe", "a server container needs a readinessProbe"
