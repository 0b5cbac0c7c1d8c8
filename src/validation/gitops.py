"""GitOps topic: what Argo CD does with the rendered overlays (sync waves, drift)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from validation.argo import WORKFLOW_KINDS, workflow_spec
from validation.core import Context, Hit, Obj, check, dig
from validation.pods import pod_containers
from validation.workflow import memo_caches

WAVE = "argocd.argoproj.io/sync-wave"
# Storage classes of the target clusters that bind on first consumer and are not rendered
# here: k3s' built-in local-path (local-k3d).
KNOWN_WAIT_FOR_FIRST_CONSUMER = {"local-path"}
#: Kinds that Argo CD's built-in health calls Healthy only once a pipeline has run: an
#: InferenceService is Progressing until its predictor serves a published model version (its
#: health check wants every condition True).
PIPELINE_HEALTH = {"InferenceService"}
CLAIM = re.compile(r'"claimName": "([^"]*)"|"pvc://([^/"]*)')


#: Argo CD's per-object sync and compare options (docs/user-guide/sync-options.md,
#: compare-options.md), comma-separated.
SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
COMPARE_OPTIONS = "argocd.argoproj.io/compare-options"
#: What keeps an object through a pruning sync and the Application's cascade deletion, each
#: option with the value Argo CD must read and what happens without it; Pulumi's program reads
#: Delete=false as retainOnDelete (pulumi/program.py ``kept``).
KEEP = {
    "Prune": ("false", "a sync after a rename or removal in git prunes it, deleting"),
    "Delete": ("false", "deleting the Application deletes"),
}
#: What Go's strings.TrimSpace removes (gitops-engine trims each option with it), as far as a
#: Kubernetes annotation can hold: Python's str.strip() would remove more (U+001C-U+001F).
_GO_SPACE = " \t\n\v\f\r\x85\xa0"
HOOK_WEIGHT = "helm.sh/hook-weight"
INTEGER = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.Atoi takes


def wave(o: Obj) -> int:
    """The object's Argo CD sync wave, read as gitops-engine's ``syncwaves.Wave`` does: the
    sync-wave annotation when it is an integer (Go's ``strconv.Atoi``: no spaces, no ``_``),
    else Helm's hook weight likewise, else 0 (a value that is no integer is ignored, not an
    error: Argo CD syncs such an object in wave 0)."""
    notes = o.meta.get("annotations") or {}
    for key in (WAVE, HOOK_WEIGHT):
        if INTEGER.fullmatch(str(notes.get(key, ""))):
            return int(notes[key])
    return 0


def claims_of(o: Obj) -> set[str]:
    """PVC names an object consumes: each ``claimName`` and ``pvc://`` URI in its spec."""
    spec = workflow_spec(o) if o.kind in WORKFLOW_KINDS else o.doc.get("spec")
    return {a or b for a, b in CLAIM.findall(json.dumps(spec))}


@check("sync-waves")
def sync_waves(ctx: Context) -> Iterator[Hit]:
    """No first-consumer-bound PVC in an earlier sync wave than its consumers."""
    wffc = _first_consumer_classes(ctx)
    consumers = [o for o in ctx.ours if not o.embedded_in and o.kind != "PersistentVolumeClaim"]
    for pvc in ctx.kinds("PersistentVolumeClaim"):
        if dig(pvc.doc, "spec", "storageClassName") not in wffc:
            continue
        for o in consumers:
            if o.namespace == pvc.namespace and pvc.name in claims_of(o) and wave(o) > wave(pvc):
                msg = f"wave {wave(pvc)} < wave {wave(o)} of its consumer {o.ref}: the storage"
                msg += " class binds on first consumer, the PVC stays Pending and Argo CD never"
                yield pvc, f"metadata.annotations[{WAVE}]", f"{msg} reaches that wave"


def _first_consumer_classes(ctx: Context) -> set[str]:
    classes = ctx.everywhere("StorageClass")
    wffc = {o.name for o in classes if o.doc.get("volumeBindingMode") == "WaitForFirstConsumer"}
    return wffc | KNOWN_WAIT_FOR_FIRST_CONSUMER


def _unhealthy_until_a_run(o: Obj, wffc: set[str]) -> bool:
    """Whether ``o`` cannot be Healthy before a pipeline run: a kind of
    :data:`PIPELINE_HEALTH`, or a PVC that binds on first consumer (Pending: Progressing)."""
    pvc = o.kind == "PersistentVolumeClaim"
    return o.kind in PIPELINE_HEALTH or (pvc and dig(o.doc, "spec", "storageClassName") in wffc)


HOOK_ANNOTATIONS = ("argocd.argoproj.io/hook", "helm.sh/hook")
#: Helm's hook names as Argo CD maps them to its phases (gitops-engine pkg/sync/hook/helm)
HELM_PHASES = {"pre-install": "PreSync", "pre-upgrade": "PreSync", "post-install": "PostSync",
               "post-upgrade": "PostSync"}  # fmt: skip


def _hook(o: Obj) -> str:
    """The object's Argo CD resource-hook phases ('' when it is no hook)."""
    notes = o.meta.get("annotations") or {}
    return ",".join(notes[k] for k in HOOK_ANNOTATIONS if k in notes)


def _phases(o: Obj) -> set[str]:
    """The Argo CD phases of hook ``o`` (Helm's hook names mapped to them)."""
    return {HELM_PHASES.get(p.strip(), p.strip()) for p in _hook(o).split(",")}


@check("wave-health")
def wave_health(ctx: Context) -> Iterator[Hit]:
    """Nothing that is Healthy only after a pipeline run holds a sync. gitops-engine
    (pkg/sync/sync_context.go) orders a sync by phase and wave, waits for every resource of a
    wave to be Healthy before the next, and ends the operation without waiting once the last
    wave of the last phase is applied and no hook is left (PruneLast adds a wave of prunes after
    it); a retried sync (``syncPolicy.retry``) of an Application with waves was seen waiting for
    the last wave too (docs/gitops.md, the e2e); while an operation runs,
    automated sync skips every later push. So such a resource (or a child Application syncing
    one) is never before the last wave nor a hook after it, and an Application that retries
    holds one only when all its resources are in one wave."""
    wffc = _first_consumer_classes(ctx)
    for app in ctx.kinds("Application"):
        if not (synced := ctx.rendered.get(str(dig(app.doc, "spec", "source", "path")))):
            continue
        resources = [o for o in synced if not o.embedded_in and not _hook(o)]
        if not resources:
            continue
        last = max(wave(o) for o in resources)
        hooks = [o for o in synced if _hook(o)]
        # a PostSync hook runs once the Sync phase is Healthy; a Sync hook in or after the last
        # wave makes that wave wait (PreSync and SyncFail hooks run before or instead)
        phases = {h.ref: _phases(h) for h in hooks}
        after = [
            h for h in hooks
            if "PostSync" in phases[h.ref] or ("Sync" in phases[h.ref] and wave(h) >= last)
        ]  # fmt: skip
        retries_across_waves = (
            dig(app.doc, "spec", "syncPolicy", "retry") is not None
            and len({wave(r) for r in resources}) > 1
        )
        # PruneLast: a sync that prunes does so in a wave after the last one (gitops-engine
        # WithPruneLast), so the last wave's resources are waited for like any earlier wave's
        options = dig(app.doc, "spec", "syncPolicy", "syncOptions") or []
        if "PruneLast=true" in options:
            last += 1
        for o in resources:
            why = ""
            if _unhealthy_until_a_run(o, wffc):
                why = f"{o.ref} is not Healthy until a pipeline has run"
            elif o.kind == "Application":
                child = ctx.rendered.get(str(dig(o.doc, "spec", "source", "path"))) or []
                if held := [c.ref for c in child if _unhealthy_until_a_run(c, wffc)]:
                    why = f"{o.ref} is not Healthy until a pipeline has run ({', '.join(held)})"
            if why and retries_across_waves:
                msg = f"{why}, and {app.ref} spans sync waves and retries failed syncs: a retry"
                msg += " of it was seen waiting for the last wave's resources too (docs/gitops.md)"
                msg += "; keep such an Application in one wave"
                yield o, f"metadata.annotations[{WAVE}]", msg
            elif why and wave(o) < last and "PruneLast=true" in options:
                msg = f"{why}, and {app.ref} syncs with PruneLast=true: a sync that prunes does so"
                msg += " after the last wave, waiting for it, and automated sync skips every later"
                yield o, "spec.syncPolicy.syncOptions", msg + " push; drop PruneLast"
            elif why and wave(o) < last:
                msg = f"wave {wave(o)} of {app.ref}, before its last wave {last}: {why}, so each"
                msg += " sync waits there and automated sync skips every later push; put it in"
                yield o, f"metadata.annotations[{WAVE}]", msg + f" wave {last}"
            elif why and after:
                msg = f"{why}, and the hook {after[0].ref} of {app.ref} runs after it: each sync"
                msg += " waits for it, and automated sync skips every later push; drop the hook"
                yield o, f"metadata.annotations[{WAVE}]", msg + " or move it before"


@check("argocd-drift")
def memoize_cache_drift(ctx: Context) -> Iterator[Hit]:
    """Applications syncing a memoize cache ConfigMap ignore its differences."""
    for app in ctx.kinds("Application"):
        if not (synced := ctx.rendered.get(str(dig(app.doc, "spec", "source", "path")))):
            continue
        ignores = dig(app.doc, "spec", "ignoreDifferences", default=[])
        ignored = {i.get("name") for i in ignores if i.get("kind") == "ConfigMap"}
        caches = {name for _, name in memo_caches(Context(synced, ctx.rendered))}
        for cm in (o for o in synced if o.kind == "ConfigMap" and o.name in caches - ignored):
            msg = f"ConfigMap {cm.namespace}/{cm.name} is a memoize cache the Argo controller"
            msg += " rewrites: ignore its differences (or leave it out of git)"
            yield app, "spec.ignoreDifferences", msg


def annotation_options(doc: dict, annotation: str) -> list[str]:
    """The comma-separated options of an Argo CD annotation of ``doc``, each trimmed, empty ones
    and repeats dropped, in order: gitops-engine's ``resource.GetAnnotationCSVs``."""
    notes = (doc.get("metadata") or {}).get("annotations") or {}
    items = (x.strip(_GO_SPACE) for x in str(notes.get(annotation, "")).split(","))
    return list(dict.fromkeys(x for x in items if x))


def sync_option(doc: dict, name: str) -> str | None:
    """The value Argo CD reads for sync option ``name`` (``"Delete"`` -> ``"false"``): the first
    ``name=value`` item, as gitops-engine's ``resource.GetAnnotationOptionValue`` (so
    ``Delete=true,Delete=false`` reads ``true``); None when the object sets none."""
    prefix = f"{name}="
    return next(
        (x.removeprefix(prefix) for x in annotation_options(doc, SYNC_OPTIONS)
         if x.startswith(prefix)),
        None,
    )  # fmt: skip


@check("kept-data")
def kept_data(ctx: Context) -> Iterator[Hit]:
    """Each PersistentVolumeClaim of ours, and the Namespace it lives in (deleting a namespace
    deletes its claims), carries Prune=false and Delete=false as Argo CD reads them (the first
    value of each: :func:`sync_option`) and the compare option IgnoreExtraneous: every
    Application here prunes and deletes with the resources finalizer, so without them a rename
    in git or deleting the Application deletes the dataset and every published model version,
    and a claim kept after a rename leaves the Application OutOfSync. Not seen: claims that a
    StatefulSet's volumeClaimTemplates or a Workflow step create (none here)."""
    pvcs = [o for o in ctx.kinds("PersistentVolumeClaim") if not o.embedded_in]
    homes = {o.namespace for o in pvcs}
    for o in pvcs + [n for n in ctx.kinds("Namespace") if n.name in homes]:
        what = "its claims' data" if o.kind == "Namespace" else "its data"
        for name, (value, without) in KEEP.items():
            got = sync_option(o.doc, name)
            if got != value:
                reads = f" (Argo CD reads {name}={got}: the first)" if got is not None else ""
                yield (
                    o,
                    f"metadata.annotations[{SYNC_OPTIONS}]",
                    f"without {name}={value}{reads} {without} {what}",
                )
        if "IgnoreExtraneous" not in annotation_options(o.doc, COMPARE_OPTIONS):
            yield (
                o,
                f"metadata.annotations[{COMPARE_OPTIONS}]",
                "without IgnoreExtraneous the object kept after a rename or removal in git "
                "leaves the Application OutOfSync",
            )


#: Argo CD's image (argocd/install's Deployments), which the pipeline's write-back also runs:
#: its name, on any registry.
ARGOCD_IMAGE = re.compile(r"(?:^|/)argoproj/argocd(?=[:@]|$)")


@check("write-back-image")
def write_back_image(ctx: Context) -> Iterator[Hit]:
    """A Workflow container that runs Argo CD's image (the pipeline's ``write-back``) runs the
    one argocd/install installs, the same reference: the version is pinned once, by the
    install's URL, and checked equal here (kustomize cannot copy it from a URL). Silent when
    argocd/install is not among the rendered kustomizations."""
    installed = {
        c.get("image")
        for o in ctx.everywhere("Deployment", "StatefulSet")
        for c in dig(o.doc, "spec", "template", "spec", "containers", default=[]) or []
        if ARGOCD_IMAGE.search(str(c.get("image", "")))
    }
    if not installed:
        return
    for o in ctx.kinds(*WORKFLOW_KINDS):
        for _, c, path, _ in pod_containers(o):
            image = str(c.get("image", ""))
            if ARGOCD_IMAGE.search(image) and image not in installed:
                yield (
                    o,
                    f"{path}.image",
                    (
                        f"{image} is not the Argo CD argocd/install installs "
                        f"({', '.join(sorted(installed))})"
                    ),
                )
