"""Workflow topic: the Argo WorkflowTemplate and the Argo Workflows controller configuration."""

from __future__ import annotations

import re
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter

import yaml

from validation.argo import (
    PLACEHOLDER,
    WORKFLOW_KINDS,
    first_calls,
    requirements,
    substitute,
    tasks,
    workflow_params,
    workflow_spec,
)
from validation.core import Context, Hit, check, dig, named
from validation.pods import restricted

# Argo resource conditions: Kubernetes label-selector requirements, comma separated.
CONDITION_RE = re.compile(
    r"^\s*(?:!\s*)?[A-Za-z0-9_.\-/]+\s*"
    r"(?:(?:==|=|!=|>|<)\s*[A-Za-z0-9_.\-]+|\s+(?:in|notin)\s*\([A-Za-z0-9_.\-, ]*\))?\s*$"
)
# argo-workflows: cache keys must be valid ConfigMap keys without dots/underscores (#14626)
CONDITIONS = ("successCondition", "failureCondition")
MEMOIZE_KEY = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9]*$")
CACHE_LABEL = ("workflows.argoproj.io/configmap-type", "Cache")
CONTROLLER_CONFIG = "workflow-controller-configmap"
DEPENDS_NAME = re.compile(r"([A-Za-z0-9][A-Za-z0-9_\-]*)(?:\.[A-Za-z]+)?")


def workflows(ctx: Context):
    """Our Workflows/WorkflowTemplates/CronWorkflows."""
    return ctx.kinds(*WORKFLOW_KINDS)


@check("workflow")
def structure(ctx: Context) -> Iterator[Hit]:
    """Templates, tasks and parameters refer to what exists; memoize and conditions are valid."""
    for o in workflows(ctx):
        spec = workflow_spec(o)
        by_name = {t.get("name"): t for t in spec.get("templates") or []}
        wparams = workflow_params(spec)
        if spec.get("entrypoint") not in by_name and "workflowTemplateRef" not in spec:
            yield o, "spec.entrypoint", f"no template {spec.get('entrypoint')!r}"
        if spec.get("onExit") and spec["onExit"] not in by_name:
            yield o, "spec.onExit", f"no template {spec['onExit']!r}"
        for call in first_calls(o):
            t, base = call.template, call.path
            inputs = {p.get("name") for p in dig(t, "inputs", "parameters", default=[])}
            own = repr({k: v for k, v in t.items() if k not in ("dag", "steps")})
            for ref in PLACEHOLDER.findall(own):
                scope, _, name = ref.partition(".parameters.")
                if scope == "inputs" and name not in inputs:
                    yield o, base, f"{{{{{ref}}}}} not declared in inputs"
                if scope == "workflow" and name not in wparams:
                    yield o, base, f"{{{{{ref}}}}} not in spec.arguments"
            task_names = {x.get("name") for x in tasks(t)}
            kind = "dag.tasks" if t.get("dag") else "steps"
            for task, path in named(tasks(t), f"{base}.{kind}"):
                target = by_name.get(task.get("template"))
                if task.get("template") and target is None:
                    yield o, f"{path}.template", f"no template {task.get('template')!r}"
                    continue
                for dep in task.get("dependencies") or []:
                    if dep not in task_names:
                        yield o, f"{path}.dependencies", f"no task {dep!r}"
                given = {p.get("name") for p in dig(task, "arguments", "parameters", default=[])}
                for p in dig(target, "inputs", "parameters", default=[]):
                    if p.get("name") not in given and "value" not in p and "default" not in p:
                        yield o, f"{path}.arguments", f"input {p.get('name')!r} not passed"
            if t.get("memoize") is not None and not (t.get("container") or t.get("script")):
                yield o, f"{base}.memoize", "memoize belongs on a container/script template"
            for key, cond in ((k, dig(t, "resource", k)) for k in CONDITIONS):
                for req in requirements(substitute(str(cond), call.values)) if cond else []:
                    if not CONDITION_RE.match(req):
                        msg = f"{req.strip()!r} is not an Argo condition"
                        yield o, f"{base}.resource.{key}", msg


def depends_on(task: dict) -> list[str]:
    """Task names a DAG task waits for (``dependencies`` and the names in ``depends``)."""
    depends = DEPENDS_NAME.findall(str(task.get("depends") or ""))
    return [str(d) for d in task.get("dependencies") or []] + depends


@check("workflow-dag")
def dag_cycles(ctx: Context) -> Iterator[Hit]:
    """No dependency cycle (self-dependency included) among a DAG's tasks (graphlib)."""
    for o in workflows(ctx):
        for t, path in named(workflow_spec(o).get("templates"), "spec.templates"):
            graph = {x.get("name"): depends_on(x) for x in dig(t, "dag", "tasks", default=[])}
            try:
                TopologicalSorter(graph).prepare()
            except CycleError as e:
                cycle = e.args[1]
                what = "dependency cycle " + " -> ".join(cycle)
                if len(cycle) == 2:
                    what = f"task {cycle[0]!r} depends on itself"
                yield o, f"{path}.dag.tasks[{cycle[0]}]", f"{what} (tasks never start)"


@check("workflow-params")
def min_accuracy(ctx: Context) -> Iterator[Hit]:
    """The ``min-accuracy`` parameter is a number in [0, 1]."""
    for o in workflows(ctx):
        value = workflow_params(workflow_spec(o)).get("min-accuracy")
        try:
            ok = value is None or 0.0 <= float(value) <= 1.0
        except ValueError:
            ok = False
        if not ok:
            field = "spec.arguments.parameters[min-accuracy].value"
            yield o, field, f"min-accuracy {value!r} is not a float in [0, 1]"


@check("memoize-key")
def memoize_key(ctx: Context) -> Iterator[Hit]:
    """A memoize key, rendered with the parameter defaults, is a valid Argo cache key."""
    for o in workflows(ctx):
        for call in first_calls(o):
            if (memo := call.template.get("memoize")) is not None:
                key = substitute(str(memo.get("key", "")), call.values)
                if not MEMOIZE_KEY.fullmatch(key):  # Go's $ does not match before a final \n
                    msg = f"renders to {key!r}; Argo accepts only {MEMOIZE_KEY.pattern}"
                    yield o, f"{call.path}.memoize.key", msg


def memo_caches(ctx: Context) -> Iterator[tuple[str, str]]:
    """(namespace, ConfigMap name) of every memoize cache our Workflows use."""
    for o in workflows(ctx):
        for t in workflow_spec(o).get("templates") or []:
            if name := dig(t, "memoize", "cache", "configMap", "name"):
                yield o.namespace, name


@check("memoize-cache")
def memoize_cache_label(ctx: Context) -> Iterator[Hit]:
    """A memoize cache ConfigMap in git carries Argo's cache label (else Argo ignores it)."""
    caches = set(memo_caches(ctx))
    for cm in ctx.kinds("ConfigMap"):
        labels = cm.meta.get("labels") or {}
        if (cm.namespace, cm.name) in caches and labels.get(CACHE_LABEL[0]) != CACHE_LABEL[1]:
            yield cm, "metadata.labels", "memoize cache needs label {}={}".format(*CACHE_LABEL)


@check("executor-security-context")
def executor_security_context(ctx: Context) -> Iterator[Hit]:
    """The controller config gives Argo's injected init/wait (executor) containers a
    restricted securityContext (checked where the controller is rendered)."""
    for cm in ctx.kinds("ConfigMap", ours=False):
        if cm.name != CONTROLLER_CONFIG:
            continue
        try:
            executor = yaml.safe_load(dig(cm.doc, "data", "executor", default="{}")) or {}
        except yaml.YAMLError as e:
            yield cm, "data.executor", f"not YAML: {e}"
            continue
        for fld, msg in restricted(executor.get("securityContext") or {}, {}):
            yield cm, f"data.executor.securityContext.{fld}", f"{msg} (Argo's init/wait containers)"
