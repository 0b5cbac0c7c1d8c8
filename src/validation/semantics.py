"""Semantic checks of our objects beyond their schema.

* ``rbac-refs``: every RoleBinding/ClusterRoleBinding ``roleRef`` of our manifests names a
  Role/ClusterRole of the rendered output (ClusterRoles: also Kubernetes' built-ins);
* ``rbac-grants``: the Role(s) bound to a Workflow's service account grant what its steps need:
  per ``resource`` template the verbs of its action on the manifest's kind, ``get``/``watch``
  when it has a success/failureCondition, and ``workflowtaskresults`` create+patch (executor);
* ``workflow-dag``: no dependency cycles (self-dependency included) in DAG tasks;
* ``tfjob-conditions``: a TFJob resource step's conditions read fields the TFJob status has,
  of replica types the TFJob declares, and an ``= N`` success count equals the replica count;
* ``resource-limits``: no cpu/memory limit below its request;
* ``inferenceservice``: replica bounds, protocolVersion of the tensorflow format, runtime exists;
* ``workflow-params``: ``min-accuracy`` is a float in [0, 1].
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from validation.policy import pod_templates
from validation.render import Obj
from validation.report import Finding
from validation.workflows import (
    PLACEHOLDER,
    WORKFLOW_KINDS,
    invocations,
    substitute,
    workflow_spec,
)

BUILTIN_CLUSTER_ROLES = {"cluster-admin", "admin", "edit", "view"}
RBAC_GROUP = "rbac.authorization.k8s.io"
# Verbs the Argo executor uses for each resource action (create: `kubectl create`; apply: get
# the live object, then create or patch it; delete: `kubectl delete`; patch: get + patch).
ACTION_VERBS = {
    "create": ("create",),
    "apply": ("create", "patch", "get"),
    "delete": ("delete",),
    "patch": ("get", "patch"),
    "replace": ("create", "get", "update"),
}
CONDITION_VERBS = ("get", "watch")
EXECUTOR_GRANT = ("argoproj.io", "workflowtaskresults", ("create", "patch"))
REPLICA_FIELDS = ("active", "succeeded", "failed")
TFJOB_STATUS_FIELDS = ("startTime", "completionTime", "lastReconcileTime")
REQ_RE = re.compile(
    r"^\s*!?\s*([A-Za-z0-9_.\-/]+)\s*(==|=|!=|>|<|\s+in\s*|\s+notin\s*)?\s*(.*?)\s*$"
)


def _f(check: str, o: Obj, field: str, msg: str) -> Finding:
    return Finding(check, msg, o.source, o.kustomization, o.ref, o.path(field) if field else "")


def plural(kind: str) -> str:
    """The resource name of a kind (the lower-case English plural the API server uses)."""
    k = kind.lower()
    if k.endswith("y") and k[-2:-1] not in "aeiou":
        return k[:-1] + "ies"
    if k.endswith(("s", "x", "ch", "sh")):
        return k + "es"
    return k + "s"


# --- RBAC ---------------------------------------------------------------------------------


def check_role_refs(objs: list[Obj]) -> list[Finding]:
    """roleRef of our (Cluster)RoleBindings names a Role/ClusterRole of the rendered output."""
    out = []
    roles = {(o.namespace, o.name) for o in objs if o.kind == "Role"}
    cluster_roles = {o.name for o in objs if o.kind == "ClusterRole"}
    for o in objs:
        if o.upstream or o.embedded_in or o.kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = o.doc.get("roleRef") or {}
        kind, name = ref.get("kind"), ref.get("name")
        if ref.get("apiGroup") != RBAC_GROUP:
            out.append(_f("rbac-refs", o, "roleRef.apiGroup", f"must be {RBAC_GROUP}"))
        if kind == "Role" and o.kind == "RoleBinding":
            if (o.namespace, name) not in roles:
                have = sorted(n for ns, n in roles if ns == o.namespace)
                out.append(
                    _f(
                        "rbac-refs",
                        o,
                        "roleRef.name",
                        f"no Role {o.namespace}/{name} in the rendered output "
                        f"(Roles there: {have or 'none'})",
                    )
                )
        elif kind == "ClusterRole":
            if name not in cluster_roles and name not in BUILTIN_CLUSTER_ROLES:
                out.append(
                    _f(
                        "rbac-refs",
                        o,
                        "roleRef.name",
                        f"no ClusterRole {name} in the rendered output (nor a built-in one)",
                    )
                )
        else:
            out.append(_f("rbac-refs", o, "roleRef.kind", f"{kind!r} invalid in a {o.kind}"))
    return out


def _grants(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    for r in rules:
        if r.get("resourceNames") and verb in ("create", "list", "watch"):
            continue  # resourceNames cannot restrict these verbs
        if (
            (group in (r.get("apiGroups") or []) or "*" in (r.get("apiGroups") or []))
            and (resource in (r.get("resources") or []) or "*" in (r.get("resources") or []))
            and (verb in (r.get("verbs") or []) or "*" in (r.get("verbs") or []))
        ):
            return True
    return False


def _manifest_kind(text: str) -> tuple[str, str] | None:
    """(apiGroup, kind) of a resource template's manifest, read without substitution."""
    av = re.search(r"^apiVersion:\s*['\"]?([^\s'\"]+)", text, re.M)
    kd = re.search(r"^kind:\s*['\"]?([^\s'\"]+)", text, re.M)
    if not av or not kd:
        return None
    version = av.group(1)
    return (version.split("/")[0] if "/" in version else ""), kd.group(1)


def required_grants(o: Obj) -> list[tuple[str, str, str, str]]:
    """(apiGroup, resource, verb, why) the Workflow's service account needs."""
    spec = workflow_spec(o)
    need = []
    for i, t in enumerate(spec.get("templates") or []):
        res = t.get("resource")
        if not res:
            continue
        gk = _manifest_kind(str(res.get("manifest") or ""))
        if not gk:
            continue
        group, kind = gk
        resource = plural(kind)
        action = str(res.get("action", ""))
        why = f"spec.templates[{i}] ({t.get('name')}: resource action {action})"
        for verb in ACTION_VERBS.get(action, ()):
            need.append((group, resource, verb, why))
        if "successCondition" in res or "failureCondition" in res:
            for verb in CONDITION_VERBS:
                need.append((group, resource, verb, f"{why} success/failureCondition"))
    if spec.get("templates"):
        group, resource, verbs = EXECUTOR_GRANT
        for verb in verbs:
            need.append((group, resource, verb, "the Argo executor (step outputs/progress)"))
    return need


def check_pipeline_grants(objs: list[Obj]) -> list[Finding]:
    """The Role(s) bound to each of our Workflows' service account grant what its steps use."""
    out = []
    roles = {(o.namespace, o.name): o for o in objs if o.kind == "Role"}
    cluster_roles = {o.name: o for o in objs if o.kind == "ClusterRole"}
    sas = {(o.namespace, o.name) for o in objs if o.kind == "ServiceAccount"}
    bindings = [o for o in objs if o.kind in ("RoleBinding", "ClusterRoleBinding")]
    for wf in objs:
        if wf.kind not in WORKFLOW_KINDS or wf.upstream:
            continue
        sa = workflow_spec(wf).get("serviceAccountName") or "default"
        key = (wf.namespace, sa)
        if key not in sas:
            continue  # the service account is not rendered here (namespaces check reports it)
        bound: list[Obj] = []
        for b in bindings:
            if b.kind == "RoleBinding" and b.namespace != wf.namespace:
                continue
            if not any(
                s.get("kind") == "ServiceAccount"
                and (s.get("namespace") or b.namespace, s.get("name")) == key
                for s in b.doc.get("subjects") or []
            ):
                continue
            ref = b.doc.get("roleRef") or {}
            role = (
                roles.get((b.namespace, ref.get("name")))
                if ref.get("kind") == "Role"
                else cluster_roles.get(ref.get("name"))
            )
            if role is not None:
                bound.append(role)
        rules = [r for role in bound for r in role.doc.get("rules") or []]
        names = ", ".join(r.ref.split("/", 1)[0] + " " + r.ref.split("/", 1)[1] for r in bound)
        for group, resource, verb, why in required_grants(wf):
            if _grants(rules, group, resource, verb):
                continue
            gr = f"{resource}.{group}" if group else resource
            msg = f"missing verb {verb!r} on {gr}, needed by {why} of {wf.ref}"
            if len(bound) == 1:
                role = bound[0]
                out.append(
                    _f(
                        "rbac-grants",
                        role,
                        "rules",
                        f"{role.kind} {role.namespace + '/' if role.namespace else ''}"
                        f"{role.name} (bound to ServiceAccount {key[0]}/{key[1]}): {msg}",
                    )
                )
            else:
                out.append(
                    _f(
                        "rbac-grants",
                        wf,
                        "spec.serviceAccountName",
                        f"Roles bound to ServiceAccount {key[0]}/{key[1]} "
                        f"({names or 'none'}): {msg}",
                    )
                )
    return out


# --- Workflows ----------------------------------------------------------------------------

DEPENDS_NAME = re.compile(r"([A-Za-z0-9][A-Za-z0-9_\-]*)(?:\.[A-Za-z]+)?")


def _task_deps(task: dict) -> list[str]:
    deps = [str(d) for d in task.get("dependencies") or []]
    if task.get("depends"):
        deps += DEPENDS_NAME.findall(str(task["depends"]))
    return deps


def check_dag_cycles(o: Obj) -> list[Finding]:
    """No cycles (self-dependencies included) among the tasks of each DAG template."""
    out = []
    for i, t in enumerate(workflow_spec(o).get("templates") or []):
        tasks = (t.get("dag") or {}).get("tasks") or []
        graph = {x.get("name"): _task_deps(x) for x in tasks}
        index = {x.get("name"): j for j, x in enumerate(tasks)}
        state: dict[str, int] = {}  # 1: on the stack, 2: done
        reported: set[frozenset] = set()

        def visit(
            n: str, stack: list[str], i=i, graph=graph, index=index, state=state, reported=reported
        ) -> None:
            state[n] = 1
            stack.append(n)
            for d in graph.get(n, []):
                if d not in graph:
                    continue
                if state.get(d) == 1:
                    cycle = stack[stack.index(d) :] + [d]
                    key = frozenset(cycle)
                    if key not in reported:
                        reported.add(key)
                        what = (
                            f"task {d!r} depends on itself"
                            if len(cycle) == 2
                            else "dependency cycle " + " -> ".join(cycle)
                        )
                        out.append(
                            _f(
                                "workflow-dag",
                                o,
                                f"spec.templates[{i}].dag.tasks[{index[n]}]",
                                f"{what} (tasks never start)",
                            )
                        )
                elif state.get(d) is None:
                    visit(d, stack)
            stack.pop()
            state[n] = 2

        for n in graph:
            if state.get(n) is None:
                visit(n, [])
    return out


def check_min_accuracy(o: Obj) -> list[Finding]:
    """The ``min-accuracy`` parameter is a float in [0, 1]."""
    out = []
    params = (workflow_spec(o).get("arguments") or {}).get("parameters") or []
    for j, p in enumerate(params):
        if p.get("name") != "min-accuracy" or "value" not in p:
            continue
        v = str(p["value"])
        try:
            x = float(v)
        except ValueError:
            x = None
        if x is None or not 0.0 <= x <= 1.0:
            out.append(
                _f(
                    "workflow-params",
                    o,
                    f"spec.arguments.parameters[{j}].value",
                    f"min-accuracy {v!r} is not a float in [0, 1]",
                )
            )
    return out


def check_tfjob_conditions(o: Obj) -> list[Finding]:
    """TFJob resource steps: conditions on real status fields of declared replica types."""
    from validation import yamlio

    out = []
    seen = set()
    for call in invocations(o):
        res = call.template.get("resource") or {}
        if call.template_index in seen or not res.get("manifest"):
            continue
        seen.add(call.template_index)
        try:
            doc = yamlio.load(substitute(str(res["manifest"]), call.values))
        except yamlio.YAMLError:
            continue  # reported by the embedded-manifest parsing
        if not isinstance(doc, dict) or doc.get("kind") != "TFJob":
            continue
        specs = (doc.get("spec") or {}).get("tfReplicaSpecs") or {}
        for key in ("successCondition", "failureCondition"):
            if key not in res:
                continue
            field = f"spec.templates[{call.template_index}].resource.{key}"
            cond = substitute(str(res[key]), call.values)
            if PLACEHOLDER.search(cond):
                continue
            for req in cond.split(","):
                m = REQ_RE.match(req)
                if not m:
                    continue  # syntax is the workflow check's
                path, op, value = m.group(1), (m.group(2) or "").strip(), m.group(3)
                parts = path.split(".")
                if parts[:2] == ["status", "replicaStatuses"] and len(parts) == 4:
                    rtype, attr = parts[2], parts[3]
                    if rtype not in specs:
                        out.append(
                            _f(
                                "tfjob-conditions",
                                o,
                                field,
                                f"{path}: replica type {rtype!r} is not in the TFJob's "
                                f"tfReplicaSpecs {sorted(specs)} (case-sensitive)",
                            )
                        )
                        continue
                    if attr not in REPLICA_FIELDS:
                        out.append(
                            _f(
                                "tfjob-conditions",
                                o,
                                field,
                                f"{path}: replica status has no {attr!r} "
                                f"(one of {list(REPLICA_FIELDS)})",
                            )
                        )
                        continue
                    if key == "successCondition" and attr == "succeeded" and op in ("=", "=="):
                        replicas = (specs[rtype] or {}).get("replicas", 1)
                        if str(value) != str(replicas):
                            out.append(
                                _f(
                                    "tfjob-conditions",
                                    o,
                                    field,
                                    f"{path} = {value} but {rtype} has {replicas} replicas "
                                    f"(call {call.caller}): the step never succeeds or "
                                    "succeeds early",
                                )
                            )
                elif not (
                    parts[:2] == ["status", "conditions"]
                    or (
                        len(parts) == 2 and parts[0] == "status" and parts[1] in TFJOB_STATUS_FIELDS
                    )
                ):
                    out.append(
                        _f(
                            "tfjob-conditions",
                            o,
                            field,
                            f"{path} is not a TFJob status field (status.replicaStatuses."
                            "<ReplicaType>.{active,succeeded,failed} or status.conditions...)",
                        )
                    )
    return out


# --- Containers ---------------------------------------------------------------------------

SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
QUANTITY_RE = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$"
)


def parse_quantity(q) -> Decimal | None:
    """A Kubernetes resource quantity as a number (None when it does not parse)."""
    m = QUANTITY_RE.match(str(q).strip())
    if not m:
        return None
    try:
        return Decimal(m.group(1)) * Decimal(SUFFIXES[m.group(2)])
    except InvalidOperation:
        return None


def check_limits(o: Obj) -> list[Finding]:
    """No cpu/memory limit lower than its request (the API server rejects such pods)."""
    out = []
    if o.upstream or o.extra.get("server_side"):
        return out
    for pt in pod_templates(o):
        for c, path in pt.containers:
            res = c.get("resources") or {}
            if not isinstance(res, dict):
                continue
            req, lim = res.get("requests") or {}, res.get("limits") or {}
            for r in ("cpu", "memory"):
                if r not in req or r not in lim:
                    continue
                a, b = parse_quantity(req[r]), parse_quantity(lim[r])
                if a is not None and b is not None and b < a:
                    out.append(
                        _f(
                            "resource-limits",
                            o,
                            f"{path}.resources.limits.{r}",
                            f"limit {lim[r]} is lower than the request {req[r]}",
                        )
                    )
    return out


# --- InferenceService ---------------------------------------------------------------------


def check_inference_service(o: Obj, runtimes: set[str] | None = None) -> list[Finding]:
    """Replica bounds, tensorflow protocolVersion v1 and (when known) the runtime exists.

    ``runtimes``: names of the ServingRuntimes/ClusterServingRuntimes rendered by the platform;
    None when the platform was not rendered (the runtime is then not checked).
    """
    out = []
    if o.kind != "InferenceService" or o.upstream:
        return out
    for comp, spec in (o.doc.get("spec") or {}).items():
        if not isinstance(spec, dict):
            continue
        base = f"spec.{comp}"
        lo, hi = spec.get("minReplicas"), spec.get("maxReplicas")
        if isinstance(lo, int) and lo < 0:
            out.append(_f("inferenceservice", o, f"{base}.minReplicas", f"{lo} < 0"))
        if isinstance(hi, int) and hi < 0:
            out.append(_f("inferenceservice", o, f"{base}.maxReplicas", f"{hi} < 0"))
        # maxReplicas 0 (or unset) means no upper bound in KServe
        if isinstance(lo, int) and isinstance(hi, int) and hi > 0 and lo > hi:
            out.append(
                _f(
                    "inferenceservice",
                    o,
                    f"{base}.minReplicas",
                    f"minReplicas {lo} > maxReplicas {hi}",
                )
            )
        model = spec.get("model")
        if not isinstance(model, dict):
            continue
        fmt = (model.get("modelFormat") or {}).get("name")
        proto = model.get("protocolVersion")
        if fmt == "tensorflow" and proto is not None and proto != "v1":
            out.append(
                _f(
                    "inferenceservice",
                    o,
                    f"{base}.model.protocolVersion",
                    f"{proto!r}: the tensorflow format (TF Serving) speaks v1 only",
                )
            )
        rt = model.get("runtime")
        if rt and runtimes is not None and rt not in runtimes:
            out.append(
                _f(
                    "inferenceservice",
                    o,
                    f"{base}.model.runtime",
                    f"no ServingRuntime/ClusterServingRuntime {rt!r} in the rendered platform "
                    f"(have: {sorted(runtimes)})",
                )
            )
    return out


def serving_runtimes(rendered: dict[str, list[Obj]]) -> set[str] | None:
    """Names of every (Cluster)ServingRuntime rendered; None when there is none at all."""
    names = {
        o.name
        for objs in rendered.values()
        for o in objs
        if o.kind in ("ServingRuntime", "ClusterServingRuntime")
    }
    return names or None


def check(all_objs: list[Obj]) -> list[Finding]:
    """The per-kustomization semantic checks (runtime existence: see check_runtimes)."""
    out = check_role_refs(all_objs) + check_pipeline_grants(all_objs)
    for o in all_objs:
        if o.kind in WORKFLOW_KINDS and not o.upstream:
            out += check_dag_cycles(o) + check_tfjob_conditions(o) + check_min_accuracy(o)
        out += check_limits(o)
        out += check_inference_service(o)
    return out


def check_runtimes(rendered: dict[str, list[Obj]], expanded: list[Obj]) -> list[Finding]:
    """InferenceService runtimes exist among the runtimes rendered by any kustomization."""
    runtimes = serving_runtimes(rendered)
    if runtimes is None:
        return []
    return [
        f
        for o in expanded
        if o.kind == "InferenceService"
        for f in check_inference_service(o, runtimes)
        if f.field.endswith("model.runtime")
    ]
