"""Argo Workflows specifics: parameter substitution, invocations, embedded resource manifests."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

from validation import yamlio
from validation.render import Obj

WORKFLOW_KINDS = {"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"}
PLACEHOLDER = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
# What {{workflow.name}} becomes when the harness substitutes it (a generateName-like name).
SAMPLE_WORKFLOW_NAME = "fashion-mnist-pipeline-x7k2p"


def workflow_spec(o: Obj) -> dict:
    """The Workflow spec (CronWorkflow: its workflowSpec)."""
    spec = o.doc.get("spec") or {}
    return spec.get("workflowSpec", spec) if o.kind == "CronWorkflow" else spec


def workflow_params(spec: dict) -> dict[str, str]:
    """Workflow-level parameters with their (default) values."""
    params = (spec.get("arguments") or {}).get("parameters") or []
    return {p["name"]: str(p.get("value", "")) for p in params if "name" in p}


def substitute(text: str, values: dict[str, str]) -> str:
    """Replace ``{{name}}`` placeholders whose name is in ``values``; leave the others."""
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def substitute_tree(node, values: dict[str, str]):
    """``substitute`` on every string of a JSON-like tree (returns a copy)."""
    if isinstance(node, str):
        return substitute(node, values)
    if isinstance(node, list):
        return [substitute_tree(x, values) for x in node]
    if isinstance(node, dict):
        return {k: substitute_tree(v, values) for k, v in node.items()}
    return node


@dataclass
class Invocation:
    """One call of a template (from a DAG task or a step) with its argument values."""

    template_index: int
    template: dict
    caller: str  # "entrypoint" or the task/step name
    values: dict[str, str] = field(default_factory=dict)  # placeholder -> value


def invocations(o: Obj) -> list[Invocation]:
    """Every call of every template, with ``workflow.*`` and ``inputs.parameters.*`` values."""
    spec = workflow_spec(o)
    templates = spec.get("templates") or []
    index = {t.get("name"): i for i, t in enumerate(templates)}
    base = {f"workflow.parameters.{k}": v for k, v in workflow_params(spec).items()}
    base["workflow.name"] = SAMPLE_WORKFLOW_NAME
    base["workflow.namespace"] = o.namespace or "default"
    calls: list[Invocation] = []

    def inputs_of(t: dict, args: dict) -> dict[str, str]:
        vals = {}
        for p in (t.get("inputs") or {}).get("parameters") or []:
            v = args.get(p.get("name"), p.get("value", p.get("default")))
            if v is not None:
                vals[f"inputs.parameters.{p['name']}"] = str(v)
        return vals

    for t in templates:
        tasks = list((t.get("dag") or {}).get("tasks") or [])
        for group in t.get("steps") or []:
            tasks.extend(group or [])
        for task in tasks:
            target = task.get("template")
            if target not in index:
                continue
            args = {
                p.get("name"): substitute(str(p.get("value", "")), base)
                for p in (task.get("arguments") or {}).get("parameters") or []
            }
            tmpl = templates[index[target]]
            calls.append(
                Invocation(
                    index[target], tmpl, task.get("name", ""), {**base, **inputs_of(tmpl, args)}
                )
            )
    called = {c.template_index for c in calls}
    for i, t in enumerate(templates):
        if i not in called:
            calls.append(Invocation(i, t, "entrypoint", {**base, **inputs_of(t, {})}))
    return calls


def embedded_manifests(o: Obj) -> tuple[list[Obj], list[tuple[str, str]]]:
    """Objects of ``resource`` templates, parsed after parameter substitution, one per call.

    Returns (objects, errors as (field, message)).
    """
    out, errors = [], []
    for call in invocations(o):
        res = call.template.get("resource") or {}
        manifest = res.get("manifest")
        if not manifest:
            continue
        where = f"spec.templates[{call.template_index}].resource.manifest"
        text = substitute(manifest, call.values)
        left = PLACEHOLDER.findall(text)
        if left:
            errors.append(
                (where, f"unresolved placeholders {sorted(set(left))} (call {call.caller})")
            )
            continue
        try:
            doc = yamlio.load(text)
        except yamlio.YAMLError as e:
            errors.append((where, f"manifest is not YAML after substitution: {e}"))
            continue
        if not isinstance(doc, dict):
            errors.append((where, "manifest is not an object"))
            continue
        doc = copy.deepcopy(doc)
        doc.setdefault("metadata", {}).setdefault("namespace", o.namespace)
        out.append(
            Obj(
                doc=doc,
                kustomization=o.kustomization,
                source=o.source,
                upstream=o.upstream,
                embedded_in=where,
                extra={
                    "action": res.get("action"),
                    "server_side": "--server-side" in (res.get("flags") or []),
                    "caller": call.caller,
                    "workflow": o.ref,
                },
            )
        )
    return out, errors
