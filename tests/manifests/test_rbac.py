"""RBAC topic: our Roles and bindings, the pipeline's grants, the Argo controller's grants."""

from __future__ import annotations

import pytest

from validation.rbac import plural

from .manifest_refs import (
    ARGO_PLATFORM,
    MEMO_RBAC,
    MEMO_ROLE,
    PIPELINE_ROLE,
    RBAC,
    WFT,
    WFT_REF,
    only,
)

ROLE_REF = f"Role/fashion-mnist/{PIPELINE_ROLE}"
BINDING_REF = f"RoleBinding/fashion-mnist/{PIPELINE_ROLE}"


def rule(role: dict, resource: str) -> dict:
    """The rule of a Role for one resource (the first that names it)."""
    return next(r for r in role["rules"] if resource in r["resources"])


def test_plurals():
    kinds = ("TFJob", "InferenceService", "WorkflowTaskResult", "Policy", "Ingress")
    assert [plural(k) for k in kinds] == [
        "tfjobs",
        "inferenceservices",
        "workflowtaskresults",
        "policies",
        "ingresses",
    ]


def test_rbac_without_wildcards(broken):
    broken.edit(RBAC, lambda d: rule(d, "tfjobs").update(verbs=["*"]), "Role", PIPELINE_ROLE)
    (f,) = only(broken.check(), "rbac-wildcard")
    assert (f.file, f.obj, f.field) == (RBAC, ROLE_REF, "rules")
    assert "tfjobs" in f.message


def test_role_ref_to_missing_role(broken):
    broken.edit(RBAC, lambda d: d["roleRef"].update(name="nope"), "RoleBinding", PIPELINE_ROLE)
    (f,) = only(broken.check(), "rbac-refs")
    assert (f.file, f.obj, f.field) == (RBAC, BINDING_REF, "roleRef.name")
    assert "no Role fashion-mnist/nope" in f.message


def test_role_ref_to_unknown_cluster_role(broken):
    ref = {"kind": "ClusterRole", "name": "viewer"}
    broken.edit(RBAC, lambda d: d["roleRef"].update(ref), "RoleBinding", PIPELINE_ROLE)
    (f,) = only(broken.check(), "rbac-refs")
    assert f.field == "roleRef.name" and "no ClusterRole viewer" in f.message


def test_builtin_cluster_role_is_a_valid_ref(broken):
    ref = {"kind": "ClusterRole", "name": "edit"}
    broken.edit(RBAC, lambda d: d["roleRef"].update(ref), "RoleBinding", PIPELINE_ROLE)
    assert not [f for f in broken.check() if f.check == "rbac-refs"]


def test_namespaces_of_rbac_subjects(broken):
    subject = lambda d: d["subjects"][0]  # noqa: E731 - the only subject
    broken.edit(
        RBAC, lambda d: subject(d).update(namespace="default"), "RoleBinding", PIPELINE_ROLE
    )
    (f,) = only(broken.check(), "namespaces")
    assert (f.file, f.field) == (RBAC, f"subjects[{PIPELINE_ROLE}].namespace")


def test_workflow_service_account_must_exist(broken):
    broken.edit(WFT, lambda d: d["spec"].update(serviceAccountName="pipeline"))
    (f,) = only(broken.check(), "namespaces")
    assert (f.obj, f.field) == (WFT_REF, "spec.serviceAccountName")


@pytest.mark.parametrize(
    ("resource", "verb", "why"),
    [
        ("inferenceservices", "patch", "spec.templates[serve]"),
        ("inferenceservices", "get", "spec.templates[serve]"),
        ("tfjobs", "create", "spec.templates[train]"),
        ("tfjobs", "watch", "success/failureCondition"),
        ("workflowtaskresults", "patch", "Argo executor"),
    ],
)
def test_pipeline_role_grants_what_the_steps_need(broken, resource, verb, why):
    broken.edit(RBAC, lambda d: rule(d, resource)["verbs"].remove(verb), "Role", PIPELINE_ROLE)
    hits = only(broken.check(), "rbac-grants")
    assert {(f.file, f.obj, f.field) for f in hits} == {(RBAC, ROLE_REF, "rules")}
    (f,) = [f for f in hits if f"{verb!r} on {resource}." in f.message]
    assert why in f.message and WFT_REF in f.message


@pytest.mark.parametrize("verb", ["create", "update"])
def test_controller_may_write_the_memoize_cache(broken, verb):
    kusts = ("base/ml", ARGO_PLATFORM)
    assert not [f.format() for f in broken.check(*kusts)]

    def drop(role):
        for r in role["rules"]:
            if verb in r["verbs"]:
                r["verbs"].remove(verb)

    broken.edit(MEMO_RBAC, drop, "Role", MEMO_ROLE)
    (f,) = only(broken.check(*kusts), "controller-grants")
    assert (f.file, f.obj) == (WFT, WFT_REF)
    assert f"argo/argo may not {verb} configmaps there" in f.message
    assert "namespace argo" in f.message


def test_controller_grant_must_name_the_cache(broken):
    def rename(role):
        for r in role["rules"]:
            if r.get("resourceNames"):
                r["resourceNames"] = ["other"]

    broken.edit(MEMO_RBAC, rename, "Role", MEMO_ROLE)
    (f,) = only(broken.check("base/ml", ARGO_PLATFORM), "controller-grants")
    assert "may not update configmaps" in f.message


def test_controller_grants_need_the_argo_platform_rendered(broken):
    broken.edit(MEMO_RBAC, lambda d: d.update(rules=[]), "Role", MEMO_ROLE)
    assert not [f for f in broken.check("base/ml") if f.check == "controller-grants"]
