"""Pulumi, for real, against the e2e's API server: ``scripts/pulumi.sh up|preview|destroy
local-k3d`` with the CLI and Kubernetes provider built here (hack/tools/pulumi*.sh), the
Automation API's inline program (pulumi/), a ``file://`` state. The e2e tier ``pulumi``
(scripts/e2e-tiers.sh). The program's graph under Pulumi's mocks: tests/pulumi_stack.

The module works on a copy of the repository's tree (an overlay is edited there) and starts from
a cluster where nothing of the overlay is live; it leaves none of it (``destroy``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import controllers
import pytest
import yaml
from e2e_kube import REPO_ROOT, one, wait_until

from validation.gitops import sync_option

ENV = "local-k3d"
COPIED = ("base", "overlays", "pulumi", "scripts", "hack", "versions.env")


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The repository's files that scripts/pulumi.sh reads, copied (the overlay is edited)."""
    root = tmp_path_factory.mktemp("pulumi-tree")
    for name in COPIED:
        src = REPO_ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, root / name)
    return root


@pytest.fixture(scope="module")
def env(tmp_path_factory, kubeconfig, kubectl) -> dict[str, str]:
    state = tmp_path_factory.mktemp("pulumi-state")
    out = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECTL": kubectl.binary,
           "PYTHON": sys.executable, "XDG_STATE_HOME": str(state),
           "PULUMI_CONFIG_PASSPHRASE": "e2e passphrase"}  # fmt: skip
    out.pop("PULUMI_BACKEND_URL", None)
    return out


def state_file(env: dict[str, str]) -> Path:
    """The stack's checkpoint in the default file:// backend."""
    return (Path(env["XDG_STATE_HOME"]) / "fashion-mnist-gitops" / "pulumi" / "state" / ".pulumi"
            / "stacks" / "fashion-mnist" / f"{ENV}.json")  # fmt: skip


def pulumi_sh(tree: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(tree / "scripts" / "pulumi.sh"), *args],
        cwd=tree, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def summary(proc: subprocess.CompletedProcess, action: str) -> dict:
    """The ``<action>: {...}`` line the script prints last for its action (its change counts)."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    line = next(ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(f"{action}: "))
    return json.loads(line.split(": ", 1)[1])


def outputs(proc: subprocess.CompletedProcess) -> dict:
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("outputs: "))
    return json.loads(line.split(": ", 1)[1])


def rendered(tree: Path, kubectl) -> list[dict]:
    text = kubectl("kustomize", str(tree / "overlays" / ENV))
    return [d for d in yaml.safe_load_all(text) if d]


def live(kubectl, objects: list[dict]) -> list[dict]:
    """The live objects among ``objects`` (kubectl get -f; managedFields kept)."""
    out = kubectl("get", "--ignore-not-found", "--show-managed-fields", "-o", "json", "-f", "-",
                  input=yaml.safe_dump_all(objects))  # fmt: skip
    if not out.strip():
        return []
    got = json.loads(out)
    return got["items"] if got.get("kind") == "List" else [got]


def managers(obj: dict) -> set[str]:
    return {f["manager"] for f in obj["metadata"].get("managedFields") or []}


@pytest.fixture(scope="module")
def nothing_live(platform, kubectl, kubeconfig, tree, env) -> Iterator[list[dict]]:
    """No object of the overlay live (an earlier module's namespace goes), and the PVC's
    StorageClass as k3s has it (the provider's PVC await reads its binding mode); the objects.
    Afterwards, whatever failed, nothing of the overlay is left: the stack is destroyed, and
    the namespace deleted (what a failed destroy left)."""
    objects = rendered(tree, kubectl)
    ns = one(objects, "Namespace")["metadata"]["name"]
    kubectl("delete", "namespace", ns, "--ignore-not-found", "--timeout=300s", timeout=320)
    controllers.ensure_storage_class(kubeconfig, one(objects, "PersistentVolumeClaim"))
    yield objects
    if state_file(env).exists():
        pulumi_sh(tree, env, "destroy", ENV, "--refresh")
    kubectl.run("delete", "namespace", ns, "--ignore-not-found", "--timeout=300s", timeout=320)


def test_objects_of_another_tool_are_a_conflict_and_no_state_is_written(
    tree, env, kubectl, nothing_live
):
    """An overlay object already applied by kubectl (deploy.sh's field manager) is named, with
    its managers, and nothing is taken over: no stack in the state, the object untouched. The
    Namespace applied with it is kept data (Delete=false), which ``up`` would adopt: not named."""
    ns, template = one(nothing_live, "Namespace"), one(nothing_live, "WorkflowTemplate")
    kubectl("apply", "--server-side", "--field-manager=fashion-mnist-deploy", "-f", "-",
            input=yaml.safe_dump_all([ns, template]))  # fmt: skip
    proc = pulumi_sh(tree, env, "up", ENV)
    after = live(kubectl, [template])
    kubectl("delete", "namespace", ns["metadata"]["name"], "--timeout=300s", timeout=320)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    meta = template["metadata"]
    assert (
        f"1 object(s) of overlays/{ENV} exist and are not this stack's: WorkflowTemplate "
        f"{meta['namespace']}/{meta['name']} (managed by fashion-mnist-deploy)." in proc.stderr
    )
    assert not state_file(env).exists()
    assert managers(after[0]) == {"fashion-mnist-deploy"}


def test_up_creates_the_overlay_and_kserve_reconciles_it(tree, env, kubectl, nothing_live):
    proc = pulumi_sh(tree, env, "up", ENV)
    n = len(nothing_live)
    assert summary(proc, "up") == {"create": n + 2}  # the objects, the stack, the provider
    got = live(kubectl, nothing_live)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in got) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in nothing_live
    )
    for obj in got:  # applied by Pulumi's provider alone (server-side apply, one field manager)
        applied = {
            f["manager"] for f in obj["metadata"]["managedFields"] if f["operation"] == "Apply"
        }
        assert len(applied) == 1 and applied.pop().startswith("pulumi-kubernetes-"), obj["kind"]
    isvc = one(nothing_live, "InferenceService")["metadata"]
    assert outputs(proc) == {
        "namespace": isvc["namespace"], "inferenceService": isvc["name"],
        "workflowTemplate": one(nothing_live, "WorkflowTemplate")["metadata"]["name"],
        "inferenceServiceUrl": "",  # not yet reconciled when created (--refresh reads it)
    }  # fmt: skip
    # the platform's KServe controller reconciles the InferenceService Pulumi created
    wait_until(
        lambda: kubectl.json("get", "inferenceservice", isvc["name"], "-n", isvc["namespace"])
        .get("status", {}).get("conditions"),
        timeout=120, what="KServe's conditions on the InferenceService",
    )  # fmt: skip


def test_a_second_preview_changes_nothing(tree, env, nothing_live):
    assert summary(pulumi_sh(tree, env, "preview", ENV), "preview") == {
        "same": len(nothing_live) + 2
    }


def test_an_overlay_change_updates_that_object_only(tree, env, kubectl, nothing_live):
    """An environment value edited in overlays/local-k3d/environment.yaml (what a user commits)
    reaches the WorkflowTemplate's parameter; only that object is updated."""
    path = tree / "overlays" / ENV / "environment.yaml"
    text = path.read_text()
    assert '  workers: "2"\n' in text
    path.write_text(text.replace('  workers: "2"\n', '  workers: "3"\n'))
    changes = summary(pulumi_sh(tree, env, "up", ENV), "up")
    assert changes == {"same": len(nothing_live) + 1, "update": 1}
    template = one(nothing_live, "WorkflowTemplate")["metadata"]
    params = kubectl.json("get", "workflowtemplate", template["name"], "-n", template["namespace"])
    values = {p["name"]: p.get("value") for p in params["spec"]["arguments"]["parameters"]}
    assert values["workers"] == "3"


def test_a_training_run_is_submitted_on_request_and_removed_with_it(
    tree, env, kubectl, nothing_live
):
    """``up --train -p epochs=1``: a Workflow of the pipeline's WorkflowTemplate, exported as
    trainingRun (Pulumi's example exports its training Job's name), taken up by the
    workflow-controller; an ``up`` without --train deletes it."""
    proc = pulumi_sh(tree, env, "up", ENV, "--train", "-p", "epochs=1")
    assert summary(proc, "up") == {"same": len(nothing_live) + 2, "create": 1}
    run = outputs(proc)["trainingRun"]
    ns = one(nothing_live, "Namespace")["metadata"]["name"]
    wf = wait_until(
        lambda: (w := kubectl.json("get", "workflow", run, "-n", ns)).get("status", {}).get("phase")
        and w,
        timeout=120, what="the workflow-controller taking up the training run",
    )  # fmt: skip
    assert (
        wf["spec"]["workflowTemplateRef"]["name"]
        == one(nothing_live, "WorkflowTemplate")["metadata"]["name"]
    )
    # asked again: a new run replaces it
    again = pulumi_sh(tree, env, "up", ENV, "--train", "-p", "epochs=1")
    assert summary(again, "up") == {"same": len(nothing_live) + 2, "replace": 1}
    second = outputs(again)["trainingRun"]
    assert second != run and kubectl.json("get", "workflow", second, "-n", ns)
    assert not kubectl("get", "workflow", run, "-n", ns, "--ignore-not-found").strip()
    run = second
    assert summary(pulumi_sh(tree, env, "up", ENV), "up") == {
        "same": len(nothing_live) + 2,
        "delete": 1,
    }
    wait_until(
        lambda: not kubectl("get", "workflow", run, "-n", ns, "--ignore-not-found").strip(),
        timeout=120, what="the training run deleted",
    )  # fmt: skip


def test_an_object_deleted_or_recreated_out_of_band_is_said_and_refresh_recovers(
    tree, env, kubectl, nothing_live
):
    """Pulumi diffs against its state: an object deleted behind its back is named (run with
    --refresh); one recreated by another tool (another uid) is a conflict even then; deleted
    again, ``up --refresh`` recreates it as the stack's."""
    template = one(rendered(tree, kubectl), "WorkflowTemplate")
    meta = template["metadata"]
    kubectl("delete", "workflowtemplate", meta["name"], "-n", meta["namespace"])
    proc = pulumi_sh(tree, env, "preview", ENV)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "in the stack's state but not live" in proc.stderr and "--refresh" in proc.stderr
    kubectl("apply", "--server-side", "--field-manager=fashion-mnist-deploy", "-f", "-",
            input=yaml.safe_dump(template))  # fmt: skip
    proc = pulumi_sh(tree, env, "up", ENV, "--refresh")
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "not the object this stack created; managed by fashion-mnist-deploy" in proc.stderr
    kubectl("delete", "workflowtemplate", meta["name"], "-n", meta["namespace"])
    assert summary(pulumi_sh(tree, env, "up", ENV, "--refresh"), "up").get("create") == 1
    applied = {f["manager"] for f in live(kubectl, [template])[0]["metadata"]["managedFields"]}
    assert all(m.startswith("pulumi-kubernetes-") for m in applied), applied


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"PULUMI_CONFIG_PASSPHRASE": "another"},
            "the passphrase does not open this stack's secrets",
        ),
        ({"KUBECONFIG": "/nonexistent/kubeconfig"}, "no kubeconfig at /nonexistent/kubeconfig"),
        ({"FMNIST_TOOLS_CACHE": "/nonexistent"}, "Pulumi's pulumi is not built"),
        ({"FMNIST_TOOLS_CACHE": "CLI-ONLY"}, "Pulumi's pulumi-kubernetes is not built"),
        ({"PULUMI_CONFIG_PASSPHRASE": ""}, "set PULUMI_CONFIG_PASSPHRASE"),
    ],
    ids=["passphrase", "kubeconfig", "cli-not-built", "provider-not-built", "no-passphrase"],
)
def test_bad_setup_is_one_line_and_the_state_is_intact(
    tree, env, nothing_live, change, message, tmp_path
):
    if change.get("FMNIST_TOOLS_CACHE") == "CLI-ONLY":  # a cache holding the CLI alone
        cli = Path(subprocess.check_output([str(tree / "scripts" / "tools.sh"), "--bin-dir",
                                            "pulumi"], text=True).strip()).parent  # fmt: skip
        (tmp_path / "cache").mkdir()
        (tmp_path / "cache" / cli.name).symlink_to(cli)
        change = {"FMNIST_TOOLS_CACHE": str(tmp_path / "cache")}
    before = hashlib.sha256(state_file(env).read_bytes()).hexdigest()
    proc = pulumi_sh(tree, {**env, **change}, "up", ENV)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr
    assert hashlib.sha256(state_file(env).read_bytes()).hexdigest() == before


def test_a_cluster_that_does_not_answer_is_one_line(tree, env, nothing_live, tmp_path):
    config = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = "https://127.0.0.1:1"
    (tmp_path / "dead").write_text(yaml.safe_dump(config))
    proc = pulumi_sh(tree, {**env, "KUBECONFIG": str(tmp_path / "dead")}, "preview", ENV)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "does not answer" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_destroy_removes_every_object_it_created_but_the_kept_volume(
    tree, env, kubectl, nothing_live
):
    """``destroy`` deletes every object of the stack but those git marks Delete=false (the PVC
    holding every model version and its Namespace: pulumi/program.py ``kept``), which stay
    live, the same objects (uids), and leave the state; the module's end deletes them on
    purpose, as docs/gitops.md says."""
    kept = [o for o in nothing_live if sync_option(o, "Delete") == "false"]
    assert {o["kind"] for o in kept} == {"Namespace", "PersistentVolumeClaim"}
    uids = {o["metadata"]["uid"] for o in live(kubectl, kept)}
    assert len(uids) == 2
    assert summary(pulumi_sh(tree, env, "destroy", ENV), "destroy") == {
        "delete": len(nothing_live) + 2
    }
    others = [o for o in nothing_live if o not in kept]
    wait_until(lambda: not live(kubectl, others), timeout=300,
               what="every object of the overlay but the kept ones gone")  # fmt: skip
    assert {o["metadata"]["uid"] for o in live(kubectl, kept)} == uids


def test_an_up_after_destroy_adopts_the_kept_volume(tree, env, kubectl, nothing_live):
    """The next ``up`` adopts the Namespace and PVC the destroy kept (the same objects, their
    data with them) instead of refusing them as another tool's, and creates the rest."""
    kept = [o for o in nothing_live if sync_option(o, "Delete") == "false"]
    uids = {o["metadata"]["uid"] for o in live(kubectl, kept)}
    assert len(uids) == 2, "run after the destroy test, which keeps them"
    proc = pulumi_sh(tree, env, "up", ENV)
    assert summary(proc, "up") == {"create": len(nothing_live) + 2}
    assert "adopting Namespace " in proc.stdout and " PersistentVolumeClaim " in proc.stdout
    assert {o["metadata"]["uid"] for o in live(kubectl, kept)} == uids
    assert (
        summary(pulumi_sh(tree, env, "destroy", ENV), "destroy")["delete"] == len(nothing_live) + 2
    )
