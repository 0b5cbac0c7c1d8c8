"""RBAC topic: our Roles and bindings, and what the pipeline and the Argo controller may do."""

from __future__ import annotations

from collections.abc import Iterator

from validation.argo import WORKFLOW_KINDS, workflow_spec
from validation.core import Context, Hit, Obj, check, dig
from validation.workflow import memo_caches

BUILTIN_CLUSTER_ROLES = {"cluster-admin", "admin", "edit", "view"}
RBAC_GROUP = "rbac.authorization.k8s.io"
# Verbs of the Argo executor per resource action (apply: get, then create or patch).
ACTION_VERBS = {
    "create": ("create",),
    "apply": ("create", "patch", "get"),
    "delete": ("delete",),
    "patch": ("get", "patch"),
    "replace": ("create", "get", "update"),
}
EXECUTOR_GRANTS = [("argoproj.io", "workflowtaskresults", v) for v in ("create", "patch")]


@check("rbac-wildcard")
def wildcards(ctx: Context) -> Iterator[Hit]:
    """No ``*`` in apiGroups/resources/verbs of our Roles/ClusterRoles."""
    for o in ctx.kinds("Role", "ClusterRole"):
        for rule in o.doc.get("rules") or []:
            for key in ("apiGroups", "resources", "verbs"):
                if "*" in (rule.get(key) or []):
                    yield o, "rules", f"wildcard '*' in {key} of rule {rule}"


@check("rbac-refs")
def role_refs(ctx: Context) -> Iterator[Hit]:
    """roleRef of our (Cluster)RoleBindings names a Role/ClusterRole that exists."""
    roles = {(o.namespace, o.name) for o in ctx.kinds("Role")}
    cluster_roles = {o.name for o in ctx.everywhere("ClusterRole")} | BUILTIN_CLUSTER_ROLES
    for o in ctx.kinds("RoleBinding", "ClusterRoleBinding"):
        ref = o.doc.get("roleRef") or {}
        kind, name = ref.get("kind"), ref.get("name")
        if ref.get("apiGroup") != RBAC_GROUP:
            yield o, "roleRef.apiGroup", f"must be {RBAC_GROUP}"
        if kind == "Role" and o.kind == "RoleBinding" and (o.namespace, name) not in roles:
            yield o, "roleRef.name", f"no Role {o.namespace}/{name} (have: {sorted(roles)})"
        elif kind == "ClusterRole" and name not in cluster_roles:
            yield o, "roleRef.name", f"no ClusterRole {name} rendered (nor a built-in one)"
        elif kind != "ClusterRole" and (kind, o.kind) != ("Role", "RoleBinding"):
            yield o, "roleRef.kind", f"{kind!r} invalid in a {o.kind}"


@check("namespaces")
def subject_namespaces(ctx: Context) -> Iterator[Hit]:
    """RoleBinding subjects and Workflow service accounts exist, in the object's namespace."""
    sas = {(o.namespace, o.name) for o in ctx.kinds("ServiceAccount")}
    for o in ctx.kinds("RoleBinding"):
        for s in o.doc.get("subjects") or []:
            ns, name = s.get("namespace", o.namespace), s.get("name")
            if s.get("kind") != "ServiceAccount" or (ns, name) == ("argo", "argo"):
                continue  # the Argo controller's account is upstream's (see controller-grants)
            if ns != o.namespace:
                yield o, f"subjects[{name}].namespace", f"{ns} != binding namespace {o.namespace}"
            elif sas and (ns, name) not in sas:
                yield o, f"subjects[{name}].name", f"no ServiceAccount {ns}/{name}"
    for o in ctx.kinds(*WORKFLOW_KINDS):
        sa = workflow_spec(o).get("serviceAccountName")
        if sa and sas and (o.namespace, sa) not in sas:
            yield o, "spec.serviceAccountName", f"no ServiceAccount {o.namespace}/{sa}"


def plural(kind: str) -> str:
    """The resource name of a kind (the lower-case English plural the API server uses)."""
    k = kind.lower()
    if k.endswith("y") and k[-2:-1] not in "aeiou":
        return k[:-1] + "ies"
    return k + ("es" if k.endswith(("s", "x", "ch", "sh")) else "s")


def bound_roles(objs: list[Obj], sa: tuple[str, str], namespace: str) -> list[Obj]:
    """Roles/ClusterRoles bound to service account ``sa`` with effect in ``namespace``."""
    roles = {(o.kind, o.namespace, o.name): o for o in objs if o.kind in ("Role", "ClusterRole")}
    out = []
    for b in (b for b in objs if b.kind in ("RoleBinding", "ClusterRoleBinding")):
        ref, subjects = b.doc.get("roleRef") or {}, b.doc.get("subjects") or []
        scope = b.namespace if ref.get("kind") == "Role" else ""
        role = roles.get((ref.get("kind"), scope, ref.get("name")))
        bound = {(s.get("namespace") or b.namespace, s.get("name")) for s in subjects}
        if sa in bound and role is not None and b.namespace in ("", namespace):
            out.append(role)
    return out


def grants(roles: list[Obj], group: str, resource: str, verb: str, name: str = "") -> bool:
    """Whether a rule of ``roles`` allows ``verb`` on ``group``/``resource`` (named ``name``)."""
    for r in (r for role in roles for r in role.doc.get("rules") or []):
        names = r.get("resourceNames") or []
        if names and (verb in ("create", "list", "watch") or name not in names):
            continue  # resourceNames cannot restrict these verbs
        wanted = (("apiGroups", group), ("resources", resource), ("verbs", verb))
        if all({want, "*"} & set(r.get(key) or []) for key, want in wanted):
            return True
    return False


def needed(ctx: Context, wf: Obj) -> Iterator[tuple[str, str, str, str]]:
    """(group, resource, verb, why) the Workflow's service account needs: what its resource
    steps do with the objects they manage, and what the Argo executor does."""
    for e in (e for e in ctx.ours if e.extra.get("workflow") is wf):
        res, group = e.extra["resource"], e.doc.get("apiVersion", "").rpartition("/")[0]
        why = f"{e.embedded_in.rsplit('.manifest', 1)[0]} (action {res.get('action')})"
        for verb in ACTION_VERBS.get(str(res.get("action")), ()):
            yield group, plural(e.kind), verb, why
        if "successCondition" in res or "failureCondition" in res:
            for verb in ("get", "watch"):
                yield group, plural(e.kind), verb, f"{why} success/failureCondition"
    for group, resource, verb in EXECUTOR_GRANTS:
        yield group, resource, verb, "the Argo executor (step outputs/progress)"


@check("rbac-grants")
def pipeline_grants(ctx: Context) -> Iterator[Hit]:
    """The Role(s) bound to each Workflow's service account grant what its steps use."""
    sas = {(o.namespace, o.name) for o in ctx.kinds("ServiceAccount")}
    for wf in ctx.kinds(*WORKFLOW_KINDS):
        sa = (wf.namespace, workflow_spec(wf).get("serviceAccountName") or "default")
        if sa not in sas:
            continue  # not rendered here (namespaces reports it)
        roles = bound_roles(ctx.ours, sa, wf.namespace)
        for group, resource, verb, why in needed(ctx, wf):
            if not grants(roles, group, resource, verb):
                msg = f"missing verb {verb!r} on {resource}.{group or 'core'} for {'/'.join(sa)}"
                msg += f", needed by {why} of {wf.ref} (bound: {[r.ref for r in roles]})"
                where = (roles[0], "rules") if len(roles) == 1 else (wf, "spec.serviceAccountName")
                yield *where, msg


@check("controller-grants")
def controller_grants(ctx: Context) -> Iterator[Hit]:
    """The workflow-controller's service account may create/update the memoize caches, which
    Argo keeps in the controller's own namespace (controller.go: NewCacheFactory)."""
    controllers = [o for o in ctx.everywhere("Deployment") if o.name == "workflow-controller"]
    for c in controllers:  # none where the Argo platform is not rendered: nothing to check
        pod = dig(c.doc, "spec", "template", "spec", default={})
        sa = (c.namespace, pod.get("serviceAccountName") or "default")
        roles = bound_roles([o for objs in ctx.rendered.values() for o in objs], sa, c.namespace)
        for ns, cm in sorted(set(memo_caches(ctx))):
            wf = next(o for o in ctx.kinds(*WORKFLOW_KINDS) if o.namespace == ns)
            for verb in ("create", "update"):
                if not grants(roles, "", "configmaps", verb, "" if verb == "create" else cm):
                    msg = f"memoize cache {cm} (kept in the controller's namespace {c.namespace}):"
                    msg += f" its ServiceAccount {'/'.join(sa)} may not {verb} configmaps there"
                    yield wf, "spec.templates", f"{msg} (bound: {[r.ref for r in roles]})"
