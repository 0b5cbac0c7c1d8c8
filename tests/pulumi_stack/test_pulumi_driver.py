"""pulumi/deploy.py (scripts/pulumi.sh): the pins, and each check that stops a run before Pulumi
writes anything, with its one line. The real runs: tests/e2e/test_pulumi.py."""

from __future__ import annotations

import copy
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "pulumi"))
import deploy  # noqa: E402
import program  # noqa: E402

DIAGNOSTICS = """\
 +  pulumi:pulumi:Stack fashion-mnist-local-k3d **creating failed** 1 error
Diagnostics:
  kubernetes:core/v1:PersistentVolumeClaim (fashion-mnist/fashion-mnist-pvc):
    error: resource "urn:pulumi:local-k3d::fashion-mnist::kubernetes:core/v1:PersistentVolumeClaim\
::fashion-mnist/fashion-mnist-pvc" was not successfully created by the Kubernetes API server: \
PersistentVolumeClaim "fashion-mnist-pvc" is invalid: spec.accessModes: Unsupported value: "Bogus"

  kubernetes:core/v1:Namespace (fashion-mnist):
    error: resource "urn:pulumi:local-k3d::fashion-mnist::kubernetes:core/v1:Namespace::\
fashion-mnist" was not successfully created

  pulumi:pulumi:Stack (fashion-mnist-local-k3d):
    error: update failed

Resources:
    + 9 created
    2 errored
"""


def pyproject_pins() -> dict[str, str]:
    extra = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["pulumi"]
    return dict(re.fullmatch(r"([\w-]+)==([\w.]+)", pin).groups() for pin in extra)


def test_the_cli_and_provider_are_the_releases_of_the_python_sdks():
    """versions.env builds the CLI and the provider; pyproject.toml pins the SDKs: one release
    each, and the venv holds those SDKs (a provider the SDK does not ask for is not found)."""
    env, sdk = deploy.pins(), pyproject_pins()
    assert env["PULUMI_VERSION"] == f"v{sdk['pulumi']}"
    assert env["PULUMI_KUBERNETES_VERSION"] == f"v{sdk['pulumi-kubernetes']}"
    for name, version in sdk.items():
        assert importlib.metadata.version(name) == version, f"make venv: {name}"
    assert deploy.check_sdk(env) == sdk["pulumi-kubernetes"]


def test_an_sdk_other_than_the_providers_release_stops_the_run(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "4.26.0")
    with pytest.raises(
        deploy.SetupError, match=r"pulumi-kubernetes is 4\.26\.0, the provider is 4\.25\.0"
    ):
        deploy.check_sdk({"PULUMI_KUBERNETES_VERSION": "v4.25.0"})


def test_the_project_is_named_once():
    spec = yaml.safe_load((REPO_ROOT / "pulumi" / "Pulumi.yaml").read_text())
    assert spec["name"] == program.PROJECT
    assert spec["runtime"]["name"] == "python"
    venv = REPO_ROOT / "pulumi" / spec["runtime"]["options"]["virtualenv"]
    assert venv.resolve() == (REPO_ROOT / ".venv").resolve()


def test_an_unbuilt_cli_or_provider_names_the_command_that_builds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FMNIST_TOOLS_CACHE", str(tmp_path))
    for tool in ("pulumi", "pulumi-kubernetes"):
        with pytest.raises(deploy.SetupError) as err:
            deploy.tool_dir(tool)
        assert str(err.value) == (
            f"Pulumi's {tool} is not built: run scripts/tools.sh pulumi pulumi-kubernetes"
        )


def test_the_provider_is_the_private_homes_only_plugin_at_the_sdks_version(tmp_path):
    binary = tmp_path / "pulumi-resource-kubernetes"
    binary.write_text("")
    for _ in range(2):  # idempotent: a second run relinks
        home = deploy.pulumi_home(tmp_path / "state", binary, "4.25.0")
    plugins = list((home / "plugins").iterdir())
    assert [p.name for p in plugins] == ["resource-kubernetes-v4.25.0"]
    assert (plugins[0] / "pulumi-resource-kubernetes").resolve() == binary


def test_a_missing_kubeconfig_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    with pytest.raises(deploy.SetupError, match="no kubeconfig at .*nope: set KUBECONFIG"):
        deploy.kubeconfig_path()


def test_a_cluster_that_does_not_answer_is_one_line(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))  # fmt: skip
    kubectl = str(Path(sys.executable).parent / "kubectl")
    with pytest.raises(deploy.SetupError, match="does not answer .*: fix KUBECONFIG") as err:
        deploy.check_cluster(kubectl, config)
    assert "\n" not in str(err.value)


def _obj(kind: str, name: str, ns: str = "fashion-mnist", managers=(), uid="", api="") -> dict:
    api = api or {"InferenceService": "serving.kserve.io/v1beta1"}.get(kind, "v1")
    meta = {"name": name, **({"namespace": ns} if kind != "Namespace" else {})}
    if managers:
        meta["managedFields"] = [{"manager": m, "operation": "Apply"} for m in managers]
    if uid:
        meta["uid"] = uid
    return {"apiVersion": api, "kind": kind, "metadata": meta}


STATE = {"resources": [
    {"type": "pulumi:pulumi:Stack", "urn": "s"},
    {"type": "pulumi:providers:kubernetes", "id": "x"},
    {"type": "kubernetes:core/v1:Namespace", "id": "fashion-mnist",
     "outputs": {"metadata": {"uid": "ns-1"}}},
    {"type": "kubernetes:serving.kserve.io/v1beta1:InferenceService",
     "id": "fashion-mnist/fashion-mnist", "outputs": {"metadata": {"uid": "isvc-1"}}},
]}  # fmt: skip


def test_live_objects_outside_the_stack_are_a_conflict_naming_their_managers():
    objects = [_obj("Namespace", "fashion-mnist"), _obj("InferenceService", "fashion-mnist")]
    live = [
        _obj("Namespace", "fashion-mnist", managers=["fashion-mnist-deploy"], uid="ns-1"),
        _obj("InferenceService", "fashion-mnist", managers=["argocd-controller", "serve"],
             uid="isvc-1"),
    ]  # fmt: skip
    assert deploy.conflicts(objects, live, {}) == [
        "Namespace fashion-mnist (managed by fashion-mnist-deploy)",
        "InferenceService fashion-mnist/fashion-mnist (managed by argocd-controller, serve)",
    ]
    # what the stack created is its own, however many managers share it since
    owned = deploy.owned_in_state(STATE)
    assert owned == {
        ("core", "Namespace", "fashion-mnist"): "ns-1",
        ("serving.kserve.io", "InferenceService", "fashion-mnist/fashion-mnist"): "isvc-1",
    }
    assert deploy.conflicts(objects, live, owned) == []
    assert deploy.conflicts(objects, [], {}) == []  # nothing live: nothing taken
    # the overlay moving an object to another version of its group keeps it the stack's
    moved = [_obj("InferenceService", "fashion-mnist", api="serving.kserve.io/v1")]
    assert deploy.conflicts(moved, live[1:], owned) == []


def test_kept_data_left_by_an_earlier_deployment_is_adopted_and_nothing_else():
    """A live Namespace and PVC marked Delete=false (a destroyed stack's, a deleted Argo CD
    Application's) that the state lacks are adopted; an unmarked live object is not."""
    keep = {"argocd.argoproj.io/sync-options": "Prune=false,Delete=false"}
    ns, pvc, isvc = (_obj("Namespace", "fashion-mnist"), _obj("PersistentVolumeClaim", "data"),
                     _obj("InferenceService", "fashion-mnist"))  # fmt: skip
    for o in (ns, pvc):
        o["metadata"]["annotations"] = keep
    live = [_obj(o["kind"], o["metadata"]["name"], managers=["argocd-controller"], uid="u")
            for o in (ns, pvc, isvc)]  # fmt: skip
    for o in live[:2]:
        o["metadata"]["annotations"] = {**keep, deploy.TRACKING_ID: "fashion-mnist:/x:y"}
    assert deploy.adoptable([ns, pvc, isvc], live, {}) == [ns, pvc]
    assert deploy.adoptable([ns, pvc, isvc], live[2:], {}) == []  # not live: created
    owned = deploy.owned_in_state(STATE)  # the stack's own Namespace is not adopted again
    assert deploy.adoptable([ns, pvc, isvc], live, owned) == [pvc]
    # an Application that exists still syncs them (its first sync under way): not adopted
    assert deploy.adoptable([ns, pvc, isvc], live, {}, {"fashion-mnist"}) == []
    assert deploy.adoptable([ns, pvc, isvc], live, {}, {"argocd_fashion-mnist"}) == [ns, pvc]
    # kept in git but not live (applied before git kept it): another tool's, not adopted
    live[1]["metadata"]["annotations"] = {}
    assert deploy.adoptable([ns, pvc, isvc], live, {}) == [ns]
    live[1]["metadata"]["annotations"] = keep
    pvc["metadata"]["annotations"] = {"argocd.argoproj.io/sync-options": "Prune=false"}
    assert deploy.adoptable([ns, pvc, isvc], live, {}) == [ns]


def test_destroy_of_a_state_without_retain_on_delete_is_refused_for_kept_objects():
    """destroy reads retainOnDelete from the state, not the program: a kept object whose state
    entry lacks it (an up before git kept it) is named, so destroy is refused before it runs."""
    ns = _obj("Namespace", "fashion-mnist")
    ns["metadata"]["annotations"] = {"argocd.argoproj.io/sync-options": "Delete=false"}
    isvc = _obj("InferenceService", "fashion-mnist")
    assert deploy.unretained([ns, isvc], STATE) == ["Namespace fashion-mnist"]
    retained = {"resources": [dict(r, retainOnDelete=True) for r in STATE["resources"]]}
    assert deploy.unretained([ns, isvc], retained) == []
    assert deploy.unretained([_obj("Namespace", "fashion-mnist"), isvc], STATE) == []


def test_an_object_recreated_by_another_tool_or_deleted_out_of_band_is_not_the_stacks():
    objects = [_obj("Namespace", "fashion-mnist"), _obj("InferenceService", "fashion-mnist")]
    owned = deploy.owned_in_state(STATE)
    recreated = [_obj("Namespace", "fashion-mnist", managers=["argocd-controller"], uid="ns-2")]
    assert deploy.conflicts(objects, recreated, owned) == [
        "Namespace fashion-mnist (not the object this stack created; managed by argocd-controller)"
    ]
    # the InferenceService is in the state, not live: only a refresh sees it gone
    assert deploy.missing(objects, recreated, owned) == [
        "InferenceService fashion-mnist/fashion-mnist"
    ]
    assert deploy.missing(objects, [], {}) == []


def test_destroy_checks_the_objects_the_state_holds():
    """``destroy`` deletes by name what the state holds: the objects it checks first."""
    state = copy.deepcopy(STATE)
    state["resources"].append({"type": "kubernetes:core/v1:Namespace", "id": "x"})  # no outputs
    for r in state["resources"][2:4]:
        kind = r["type"].rpartition(":")[2]
        name = r["id"].rpartition("/")[2]
        api = {"Namespace": "v1"}.get(kind, "serving.kserve.io/v1beta1")
        r["outputs"] = {**r["outputs"], "apiVersion": api, "kind": kind}
        r["outputs"]["metadata"] = {**r["outputs"]["metadata"], "name": name}
        if "/" in r["id"]:
            r["outputs"]["metadata"]["namespace"] = r["id"].partition("/")[0]
    assert deploy.state_objects(state) == [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fashion-mnist"}},
        {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
         "metadata": {"name": "fashion-mnist", "namespace": "fashion-mnist"}},
    ]  # fmt: skip


def test_a_failed_run_is_told_by_its_first_resource_error():
    line = deploy.one_line(DIAGNOSTICS)
    assert line.startswith(
        "PersistentVolumeClaim fashion-mnist/fashion-mnist-pvc: was not successfully"
    )
    assert 'Unsupported value: "Bogus"' in line and line.endswith("(and 1 more above)")
    assert "urn:" not in line
    assert deploy.one_line("x\nerror: getting stack: incorrect passphrase\n").startswith(
        "the passphrase does not open this stack's secrets"
    )
    assert deploy.one_line("stdout: \nerror: no stack named 'x'\n") == "no stack named 'x'"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["up", "local-k3d", "-p", "epochs=1"], "-p needs --train"),
        (["up", "local-k3d", "--train", "-p", "epochs"], "-p needs name=value"),
        (["apply", "local-k3d"], "invalid choice: 'apply'"),
        (["destroy", "local-k3d", "--train"], "--train is for up and preview"),
    ],
)
def test_bad_arguments_exit_2_with_the_usage(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        deploy.parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_the_script_refuses_an_unknown_environment_before_anything_runs(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "s")}
    proc = subprocess.run(
        [str(REPO_ROOT / "scripts" / "pulumi.sh"), "up", "nope"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: no environment 'nope' (have: gpu-cloud, local-k3d)"
    assert not (tmp_path / "s").exists()  # no state, no home made


def test_a_cluster_without_the_platforms_crds_is_one_line(tmp_path):
    """kubectl's "no matches for kind" (one line per kind, and discovery noise) is said once."""
    (tmp_path / "stderr").write_text(
        "E1205 memcache.go:265 couldn't get resource list for serving.kserve.io/v1beta1\n"
        'error: unable to recognize "STDIN": no matches for kind "InferenceService" in version x\n'
        'error: unable to recognize "STDIN": no matches for kind "Service" in version y\n'
    )
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f"#!/bin/sh\ncat >/dev/null\ncat {tmp_path / 'stderr'} >&2\nexit 1\n")
    kubectl.chmod(0o755)
    with pytest.raises(deploy.SetupError) as err:
        deploy.live_objects(str(kubectl), tmp_path / "kubeconfig", [_obj("Namespace", "x")])
    assert str(err.value) == (
        "the cluster has no InferenceService, Service (the platform's CRDs): "
        "run scripts/install-platform.sh first"
    )
