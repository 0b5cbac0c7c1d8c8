"""Workflow topic: the Argo WorkflowTemplate and the Argo Workflows controller configuration."""

from __future__ import annotations

import re
from argparse import ArgumentTypeError
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter

import yaml

from fmnist_common.cli import number
from validation import argo
from validation.core import Context, Hit, check, dig, named
from validation.pods import restricted

# argo-workflows: cache keys must be valid ConfigMap keys without dots/underscores (#14626)
MEMOIZE_KEY = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9]*$")
CACHE_LABEL = ("workflows.argoproj.io/configmap-type", "Cache")
DEPENDS_NAME = re.compile(r"([A-Za-z0-9][A-Za-z0-9_\-]*)(?:\.[A-Za-z]+)?")
FRACTION = number(float, 0, 1)
CONTROLLER_CONFIG = "workflow-controller-configmap"


@check("workflow")
def structure(ctx: Context) -> Iterator[Hit]:
    """Templates, tasks and parameters refer to what exists; memoize and conditions are valid."""
    for o in ctx.kinds(*argo.WORKFLOW_KINDS):
        spec = argo.workflow_spec(o)
        by_name = {t.get("name"): t for t in spec.get("templates") or []}
        declared = {"workflow": argo.workflow_params(spec)}  # parameters in scope, by scope
        if spec.get("entrypoint") not in by_name and "workflowTemplateRef" not in spec:
            yield o, "spec.entrypoint", f"no template {spec.get('entrypoint')!r}"
        if spec.get("onExit") and spec["onExit"] not in by_name:
            yield o, "spec.onExit", f"no template {spec['onExit']!r}"
        yield from ((o, fld, msg) for fld, msg in argo.embedded(o)[1])  # resource step manifests
        for call in argo.calls(o):
            t, base = call.template, call.path
            declared["inputs"] = {p.get("name") for p in dig(t, "inputs", "parameters", default=[])}
            own = repr({k: v for k, v in t.items() if k not in ("dag", "steps")})
            for ref in argo.PLACEHOLDER.findall(own):
                scope, _, name = ref.partition(".parameters.")
                if scope in declared and name not in declared[scope]:
                    yield o, base, f"{{{{{ref}}}}} not declared in the {scope} parameters"
            yield from task_refs(o, t, base, by_name)
            if t.get("memoize") is not None and not (t.get("container") or t.get("script")):
                yield o, f"{base}.memoize", "memoize belongs on a container/script template"
            for key in ("successCondition", "failureCondition"):
                for req, parsed in argo.requirements(dig(t, "resource", key), call.values):
                    if not parsed:
                        yield o, f"{base}.resource.{key}", f"{req!r} is not an Argo condition"


def task_refs(o, t: dict, base: str, by_name: dict) -> Iterator[Hit]:
    """A template's tasks call templates that exist, wait for tasks that exist, pass inputs."""
    names = {x.get("name") for x in argo.tasks(t)}
    for task, path in named(argo.tasks(t), f"{base}.{'dag.tasks' if t.get('dag') else 'steps'}"):
        if (target := by_name.get(task.get("template"))) is None:
            if task.get("template"):
                yield o, f"{path}.template", f"no template {task.get('template')!r}"
            continue
        for dep in set(task.get("dependencies") or []) - names:
            yield o, f"{path}.dependencies", f"no task {dep!r}"
        given = {p.get("name") for p in dig(task, "arguments", "parameters", default=[])}
        for p in dig(target, "inputs", "parameters", default=[]):
            if p.get("name") not in given and "value" not in p and "default" not in p:
                yield o, f"{path}.arguments", f"input {p.get('name')!r} not passed"


@check("workflow-dag")
def dag_cycles(ctx: Context) -> Iterator[Hit]:
    """No dependency cycle (self-dependency included) among a DAG's tasks (graphlib)."""
    for o in ctx.kinds(*argo.WORKFLOW_KINDS):
        for t, path in named(argo.workflow_spec(o).get("templates"), "spec.templates"):
            graph = {}  # task -> the tasks of its dependencies and of its depends expression
            for x in dig(t, "dag", "tasks", default=[]):
                depends = DEPENDS_NAME.findall(str(x.get("depends") or ""))  # a.Succeeded || b
                graph[x.get("name")] = [*(x.get("dependencies") or []), *depends]
            try:
                TopologicalSorter(graph).prepare()
            except CycleError as e:
                cycle = e.args[1]
                what = "dependency cycle " + " -> ".join(cycle)
                if len(cycle) == 2:
                    what = f"task {cycle[0]!r} depends on itself"
                yield o, f"{path}.dag.tasks[{cycle[0]}]", f"{what} (tasks never start)"


@check("workflow-params")
def workflow_params(ctx: Context) -> Iterator[Hit]:
    """``min-accuracy`` is a number in [0, 1] (the project's range type); ``train-pytorch`` is
    ``true`` or ``false``: the pytorch task's ``when`` compares it with ``true`` (govaluate), and
    any other word fails the run at that task, after ingest, instead of skipping it."""
    for o in ctx.kinds(*argo.WORKFLOW_KINDS):
        params = argo.workflow_params(argo.workflow_spec(o))
        try:
            FRACTION(params.get("min-accuracy", "0"))
        except ArgumentTypeError as e:
            yield o, "spec.arguments.parameters[min-accuracy].value", f"min-accuracy: {e}"
        flag = params.get("train-pytorch", "true")
        if flag not in ("true", "false"):
            yield (
                o,
                "spec.arguments.parameters[train-pytorch].value",
                f"train-pytorch: {flag!r} is neither 'true' nor 'false'",
            )


@check("memoize-key")
def memoize_key(ctx: Context) -> Iterator[Hit]:
    """A memoize key, rendered with the parameter defaults, is a valid Argo cache key."""
    for o in ctx.kinds(*argo.WORKFLOW_KINDS):
        for call in argo.calls(o):
            if (memo := call.template.get("memoize")) is not None:
                key = argo.substitute(str(memo.get("key", "")), call.values)
                if not MEMOIZE_KEY.fullmatch(key):  # Go's $ does not match before a final \n
                    msg = f"renders to {key!r}; Argo accepts only {MEMOIZE_KEY.pattern}"
                    yield o, f"{call.path}.memoize.key", msg


def memo_caches(ctx: Context) -> Iterator[tuple[str, str]]:
    """(namespace, ConfigMap name) of every memoize cache our Workflows use."""
    for o in ctx.kinds(*argo.WORKFLOW_KINDS):
        for t in argo.workflow_spec(o).get("templates") or []:
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
    """The controller config (where rendered) gives Argo's injected init/wait (executor)
    containers a restricted securityContext."""
    for cm in (o for o in ctx.kinds("ConfigMap", ours=False) if o.name == CONTROLLER_CONFIG):
        try:
            executor = yaml.safe_load(dig(cm.doc, "data", "executor", default="{}")) or {}
        except yaml.YAMLError as e:
            yield cm, "data.executor", f"not YAML: {e}"
            continue
        for fld, msg in restricted(executor.get("securityContext") or {}, {}):
            yield cm, f"data.executor.securityContext.{fld}", f"{msg} (Argo's init/wait containers)"
