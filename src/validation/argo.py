"""The Argo Workflows model the checks share: parameters, template calls, embedded manifests,
resource conditions. Templates are named by their ``name`` in field paths
(``spec.templates[train]``)."""

from __future__ import annotations

import re
from typing import NamedTuple

import yaml

from validation.core import Obj, dig

WORKFLOW_KINDS = {"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"}
PLACEHOLDER = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
# What {{workflow.name}} becomes when the harness substitutes it (a generateName-like name).
SAMPLE_WORKFLOW_NAME = "fashion-mnist-pipeline-x7k2p"
# The attempt number of a template with a retryStrategy (0, then 1, 2... for each retry).
RETRIES = "retries"
# The one Argo expression the manifests use: sprig.replace('old', 'new', inputs.parameters['x'])
REPLACE = re.compile(r"sprig\.replace\('([^']*)', *'([^']*)', *inputs\.parameters\['([^']+)'\]\)")
# One requirement of a resource condition: (key, operator, value) of a Kubernetes label-selector
# requirement (``in``/``notin`` value lists: no operator group).
REQUIREMENT = re.compile(
    r"^\s*!?\s*([A-Za-z0-9_.\-/]+)\s*"
    r"(?:(==|=|!=|>|<)\s*([A-Za-z0-9_.\-]+)|\s+(?:in|notin)\s*\([A-Za-z0-9_.\-, ]*\))?\s*$"
)


def workflow_spec(o: Obj) -> dict:
    """The Workflow spec (CronWorkflow: its workflowSpec)."""
    spec = o.doc.get("spec") or {}
    return spec.get("workflowSpec", spec) if o.kind == "CronWorkflow" else spec


def workflow_params(spec: dict) -> dict[str, str]:
    """Workflow-level parameters with their (default) values, as strings."""
    params = dig(spec, "arguments", "parameters", default=[])
    return {p["name"]: str(p.get("value", "")) for p in params if "name" in p}


def expression(expr: str, values: dict[str, str]) -> str | None:
    """An Argo ``{{=expr}}`` of the one form the manifests use (:data:`REPLACE`); None for any
    other, which stays unresolved (the ``workflow`` check reports it)."""
    m = REPLACE.fullmatch(expr.strip().replace('"', "'"))  # expr accepts either quote
    value = values.get(f"inputs.parameters.{m[3]}") if m else None
    return None if value is None else value.replace(m[1], m[2])


def substitute(node, values: dict[str, str]):
    """A copy of a string (or of every string of a JSON-like tree) with the ``{{name}}``
    placeholders whose name is in ``values`` and the ``{{=expr}}`` that :func:`expression`
    evaluates replaced; the others left."""
    if isinstance(node, dict):
        return {k: substitute(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [substitute(v, values) for v in node]
    if not isinstance(node, str):
        return node

    def one(m: re.Match) -> str:
        name = m.group(1)
        got = expression(name[1:], values) if name.startswith("=") else values.get(name)
        return m.group(0) if got is None else got

    return PLACEHOLDER.sub(one, node)


def requirements(condition, values: dict[str, str]) -> list[tuple[str, re.Match | None]]:
    """(requirement, :data:`REQUIREMENT` match or None) of a resource condition after
    substitution. Argo parses it with Kubernetes' ``labels.Parse``: commas separate
    requirements except inside an ``in (a,b)`` / ``notin (a,b)`` value list."""
    reqs = re.split(r",(?![^()]*\))", substitute(str(condition or ""), values))
    return [(r.strip(), REQUIREMENT.match(r)) for r in reqs if r.strip()]


def tasks(template: dict) -> list[dict]:
    """The DAG tasks or steps of a template (steps flattened)."""
    steps = [t for group in template.get("steps") or [] for t in group or []]
    return [*dig(template, "dag", "tasks", default=[]), *steps]


class Call(NamedTuple):
    """One call of a template (a DAG task, a step, or the entrypoint) with its values."""

    template: dict
    caller: str
    values: dict[str, str]  # placeholder -> value
    path: str  # the template's field path, by name


def calls(o: Obj) -> list[Call]:
    """Every call of every template, with ``workflow.*`` and ``inputs.parameters.*`` values; a
    template nobody calls is listed once, with its input defaults. Checks of a template look
    at each call (the same finding from several calls is reported once)."""
    spec = workflow_spec(o)
    by_name = {t.get("name"): t for t in spec.get("templates") or []}
    base = {f"workflow.parameters.{k}": v for k, v in workflow_params(spec).items()}
    base |= {"workflow.name": SAMPLE_WORKFLOW_NAME, "workflow.namespace": o.namespace or "default"}

    def call(t: dict, caller: str, args: dict) -> Call:
        values = dict(base)
        if t.get("retryStrategy"):  # Argo defines {{retries}} only there (0: the first attempt)
            values[RETRIES] = "0"
        for p in dig(t, "inputs", "parameters", default=[]):
            if (v := args.get(p.get("name"), p.get("value", p.get("default")))) is not None:
                values[f"inputs.parameters.{p.get('name')}"] = str(v)
        return Call(t, caller, values, f"spec.templates[{t.get('name')}]")

    out = []
    for task in (task for t in by_name.values() for task in tasks(t)):
        if (target := by_name.get(task.get("template"))) is not None:
            params = dig(task, "arguments", "parameters", default=[])
            args = {p.get("name"): substitute(str(p.get("value", "")), base) for p in params}
            out.append(call(target, task.get("name", ""), args))
    called = {id(c.template) for c in out}
    out += [call(t, "entrypoint", {}) for t in by_name.values() if id(t) not in called]
    return out


def embedded(o: Obj) -> tuple[list[Obj], list[tuple[str, str]]]:
    """(objects, problems as (field, message)) of the ``resource`` templates' manifests, one
    per call, after parameter substitution."""
    out, problems = [], []
    for call in calls(o):
        res = call.template.get("resource") or {}
        if not res.get("manifest"):
            continue
        where = f"{call.path}.resource.manifest"
        text = substitute(str(res["manifest"]), call.values)
        if left := sorted(set(PLACEHOLDER.findall(text))):
            problems.append((where, f"unresolved placeholders {left} (call {call.caller})"))
            continue
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            doc = f"not YAML after substitution: {e}"
        if not isinstance(doc, dict):
            problems.append((where, f"manifest is {doc if isinstance(doc, str) else 'no object'}"))
            continue
        doc.setdefault("metadata", {}).setdefault("namespace", o.namespace)
        extra = {"resource": res, "caller": call.caller, "workflow": o, "values": call.values}
        out.append(Obj(doc, o.kustomization, o.source, o.upstream, where, extra))
    return out, problems
