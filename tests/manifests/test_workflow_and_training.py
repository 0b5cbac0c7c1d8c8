"""Workflow and training-job topics catch broken copies of the real WorkflowTemplate."""

from __future__ import annotations

import re

import pytest
import yaml

from validation.argo import expression

from .conftest import ROOT, by_name, param, template
from .manifest_refs import (
    EXECUTOR_PATCH,
    PYTORCH_SPECS,
    TRAIN,
    TRAIN_PYTORCH,
    WFT,
    WFT_REF,
    WORKER,
    only,
)


def task(wft: dict, tmpl: str, name: str) -> dict:
    """A DAG task of a template, by names."""
    return by_name(template(wft, tmpl)["dag"]["tasks"], name)


@pytest.mark.parametrize(
    ("edit", "field", "text"),
    [
        (
            lambda d: task(d, "pipeline", "select").update(template="selekt"),
            "spec.templates[pipeline].dag.tasks[select].template",
            "no template",
        ),
        (lambda d: d["spec"].update(entrypoint="main"), "spec.entrypoint", "no template"),
        (
            lambda d: task(d, "train-all", "cnn").pop("arguments"),
            "spec.templates[train-all].dag.tasks[cnn].arguments",
            "not passed",
        ),
        (
            lambda d: task(d, "pipeline", "select").update(dependencies=["trian"]),
            "spec.templates[pipeline].dag.tasks[select].dependencies",
            "no task",
        ),
        (
            lambda d: template(d, "train")["resource"].update(successCondition="status.x >= 2"),
            f"{TRAIN}.successCondition",
            "not an Argo condition",
        ),
        (
            lambda d: template(d, "train")["resource"].update(
                failureCondition="status.conditions.0.type == Failed && true"
            ),
            f"{TRAIN}.failureCondition",
            "not an Argo condition",
        ),
        (
            lambda d: template(d, "train")["inputs"]["parameters"][0].update(name="variant"),
            "spec.templates[train]",
            "not declared in the inputs parameters",
        ),
        (
            lambda d: param(d, "epochs").update(name="epoch"),
            "spec.templates[train]",
            "not declared in the workflow parameters",
        ),
        (
            lambda d: template(d, "pipeline").update(memoize=template(d, "ingest").pop("memoize")),
            "spec.templates[pipeline].memoize",
            "container/script",
        ),
    ],
)
def test_workflow_structure(broken, edit, field, text):
    broken.edit(WFT, edit)
    hits = only(broken.check(), "workflow")
    assert any(f.field == field and text in f.message and f.file == WFT for f in hits), [
        h.format() for h in hits
    ]


def test_dag_cycle(broken):
    broken.edit(WFT, lambda d: task(d, "pipeline", "ingest").update(depends="serve"))
    (f,) = only(broken.check(), "workflow-dag")
    assert (f.file, f.obj) == (WFT, WFT_REF)
    assert f.field.startswith("spec.templates[pipeline].dag.tasks[")
    assert "dependency cycle" in f.message
    assert all(t in f.message for t in ("ingest", "train", "select", "serve"))


def test_dag_self_dependency(broken):
    broken.edit(WFT, lambda d: task(d, "pipeline", "select")["dependencies"].append("select"))
    (f,) = only(broken.check(), "workflow-dag")
    assert f.field == "spec.templates[pipeline].dag.tasks[select]"
    assert "'select' depends on itself" in f.message


@pytest.mark.parametrize("value", ["85", "-0.1", "high"])
def test_min_accuracy_is_a_fraction(broken, value):
    broken.edit(WFT, lambda d: param(d, "min-accuracy").update(value=value))
    (f,) = only(broken.check(), "workflow-params")
    assert (f.file, f.obj, f.field) == (
        WFT,
        WFT_REF,
        "spec.arguments.parameters[min-accuracy].value",
    )


@pytest.mark.parametrize("value", ["yes", "True", ""])
def test_train_pytorch_is_true_or_false(broken, value):
    broken.edit(WFT, lambda d: param(d, "train-pytorch").update(value=value))
    (f,) = only(broken.check(), "workflow-params")
    assert f.field == "spec.arguments.parameters[train-pytorch].value"
    assert repr(value) in f.message


@pytest.mark.parametrize(
    "key",
    [
        "tfds-fashion_mnist-3.0.1",
        "tfds-{{workflow.parameters.learning-rate}}",
        "tfds-fashion\n",  # a block scalar's final newline: Go's $ does not match before it
    ],
)
def test_memoize_key_is_a_valid_argo_cache_key(broken, key):
    broken.edit(WFT, lambda d: template(d, "ingest")["memoize"].update(key=key))
    (f,) = only(broken.check(), "memoize-key")
    assert (f.file, f.obj, f.field) == (WFT, WFT_REF, "spec.templates[ingest].memoize.key")
    assert "renders to 'tfds-" in f.message


def test_memoize_cache_in_git_needs_argo_label(broken):
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "fashion-mnist-ingest-cache"},
    }
    broken.append("base/ml/pipeline/rbac.yaml", cm)
    (f,) = only(broken.check(), "memoize-cache")
    assert (f.obj, f.field) == (
        "ConfigMap/fashion-mnist/fashion-mnist-ingest-cache",
        "metadata.labels",
    )


def test_executor_containers_restricted(broken):
    broken.replace(
        EXECUTOR_PATCH, "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true"
    )
    (f,) = only(broken.check("base/platform/argo-workflows"), "executor-security-context")
    assert f.obj == "ConfigMap/argo/workflow-controller-configmap"
    assert f.field == "data.executor.securityContext.allowPrivilegeEscalation"


def test_argo_expressions_the_manifests_use():
    values = {"inputs.parameters.model-type": "batch_norm"}
    assert (
        expression("sprig.replace('_', '-', inputs.parameters['model-type'])", values)
        == "batch-norm"
    )
    double = """sprig.replace("_", "-", inputs.parameters["model-type"])"""  # expr allows both
    assert expression(double, values) == "batch-norm"
    assert expression("sprig.lower(inputs.parameters.model-type)", values) is None  # not a name
    assert expression("inputs.parameters['missing']", values) is None


# --- training job -------------------------------------------------------------------------


def test_restart_policy_must_count_failures(broken):
    broken.replace(WFT, "restartPolicy: Never", "restartPolicy: OnFailure")
    hits = only(broken.check(), "tfjob-restart-policy")
    assert {f.field for f in hits} == {
        f"{WORKER}.restartPolicy",
        f"{PYTORCH_SPECS}.Master.restartPolicy",
        f"{PYTORCH_SPECS}.Worker.restartPolicy",
    }
    assert len(hits) == 3 + 2 and all("'OnFailure'" in f.message for f in hits)


LIMIT = '        limit: "2"\n'
RUN_ID = '- --run-id\n                          - "{{workflow.name}}"\n'


@pytest.mark.parametrize(
    ("old", "new", "fields", "text"),
    [
        # the retry removed: a lost pod fails the run
        ("      retryStrategy: *retry\n", "", {"train-pytorch]"}, "missing: training-operator"),
        # unbounded: a crashing trainer retried forever (both templates share the anchor)
        (LIMIT, "", {"train].", "train-pytorch]."}, "retries a crashing"),
        (LIMIT, LIMIT.replace('"2"', '"0"'), {"train].", "train-pytorch]."}, "no retry"),
        ("retryPolicy: OnFailure", "retryPolicy: OnError", {"train].", "train-pytorch]."},
         "never retries"),
        # one name for every attempt: the retried create is refused
        ('-pytorch-{{retries}}"', '-pytorch"', {"train-pytorch]."}, "AlreadyExists"),
        # the resume directory changed between attempts: the retry starts over
        (RUN_ID, RUN_ID.replace('}}"', '}}-{{retries}}"'), {"train].", "train-pytorch]."},
         "would start over"),
    ],
)  # fmt: skip
def test_a_training_step_retries_a_lost_pod_into_the_same_run(broken, old, new, fields, text):
    broken.replace(WFT, old, new)
    hits = only(broken.check(), "training-retry")
    assert {next(f for f in fields if f in h.field) for h in hits} == fields, hits
    assert all(text in h.message for h in hits), [h.format() for h in hits]


def test_a_retry_limit_from_a_parameter_and_a_mapping_manifest_are_read_as_argo_reads_them(
    broken,
):
    """Argo substitutes the whole template, so a limit set by a parameter is a limit; a
    manifest that is not a string is the schema check's to report, not a crash."""
    broken.replace(WFT, 'limit: "2"', 'limit: "{{workflow.parameters.workers}}"')
    assert not [f for f in broken.check() if f.check == "training-retry"]
    broken.edit(WFT, lambda d: template(d, "train-pytorch")["resource"].update(manifest={}))
    findings = broken.check()
    assert not [f for f in findings if f.check == "training-retry"]
    assert any(f.field.startswith(TRAIN_PYTORCH) for f in findings), findings


MASTER_BLOCK = "              Master:\n                replicas: 1\n"


@pytest.mark.parametrize(
    ("old", "new", "fields", "text"),
    [
        (MASTER_BLOCK, MASTER_BLOCK.replace("Master", "Chief"), [""], "no Master replica"),
        (MASTER_BLOCK, MASTER_BLOCK.replace("1", "2"), [".Master.replicas"], "exactly 1 Master"),
        (
            "- name: pytorch\n",
            "- name: torch\n",
            [".Master.template.spec.containers", ".Worker.template.spec.containers"],
            "needs a container 'pytorch' with a port 'pytorchjob-port'",
        ),
        (
            "- name: pytorchjob-port\n",
            "- name: master-port\n",
            [".Master.template.spec.containers", ".Worker.template.spec.containers"],
            "finds no master port",
        ),
    ],
)
def test_pytorchjob_has_one_master_and_the_operators_names(broken, old, new, fields, text):
    broken.replace(WFT, old, new)
    hits = only(broken.check(), "pytorchjob-master")
    assert {f.field for f in hits} == {f"{PYTORCH_SPECS}{field}" for field in fields}
    assert all(text in f.message for f in hits), [f.format() for f in hits]


def test_pytorchjob_step_is_judged_like_the_tfjob(broken):
    cond = "status.replicaStatuses.Master.succeeded = 2"
    broken.edit(
        WFT, lambda d: template(d, "train-pytorch")["resource"].update(successCondition=cond)
    )
    (f,) = only(broken.check(), "tfjob-conditions")
    assert f.field == f"{TRAIN_PYTORCH}.successCondition"
    assert "success needs succeeded = 1" in f.message


@pytest.mark.parametrize(
    ("key", "condition", "text"),
    [
        (
            "failureCondition",
            "status.replicaStatuses.Worker.failed > 0",
            "judge the job by status.conditions",
        ),
        (
            "successCondition",
            "status.replicaStatuses.worker.succeeded = {{workflow.parameters.workers}}",
            "replica type 'worker' is not in the replica specs ['Worker']",
        ),
        (
            "successCondition",
            "status.replicaStatuses.Worker.succeeded = 1",
            "success needs succeeded = 2",
        ),
        (
            "successCondition",
            "status.replicaStatuses.Worker.completed = 2",
            "success needs succeeded",
        ),
        (
            "successCondition",
            "status.replicaStatus.Worker.succeeded = 2",
            "judge the job by status.conditions",
        ),
    ],
)
def test_tfjob_step_conditions(broken, key, condition, text):
    broken.edit(WFT, lambda d: template(d, "train")["resource"].update({key: condition}))
    hits = only(broken.check(), "tfjob-conditions")
    assert {(f.file, f.obj, f.field) for f in hits} == {(WFT, WFT_REF, f"{TRAIN}.{key}")}
    assert all(text in f.message for f in hits)


def test_condition_value_lists_are_one_requirement(broken):
    """Commas inside ``in (a,b)`` do not separate requirements (Kubernetes' labels.Parse)."""
    cond = "status.conditions.0.type in (Failed,Error), status.conditions.1.type in (Failed,Error)"
    broken.edit(WFT, lambda d: template(d, "train")["resource"].update(failureCondition=cond))
    hits = [f for f in broken.check() if f.check in {"workflow", "tfjob-conditions"}]
    assert not hits, [f.format() for f in hits]


def test_tfjob_step_without_failure_condition(broken):
    broken.edit(WFT, lambda d: template(d, "train")["resource"].pop("failureCondition"))
    (f,) = only(broken.check(), "tfjob-conditions")
    assert f.field == f"{TRAIN}.failureCondition" and f.message.startswith("missing")


def test_success_count_follows_the_overlay(broken):
    # gpu-cloud sets workers=4: a TFJob hard-coding 2 replicas no longer matches the condition
    broken.replace(WFT, "replicas: {{workflow.parameters.workers}}", "replicas: 2")
    assert not [f for f in broken.check("overlays/local-k3d") if f.check == "tfjob-conditions"]
    hits = only(broken.check("overlays/gpu-cloud"), "tfjob-conditions")
    assert all("= 4: success needs succeeded = 2" in f.message for f in hits)


@pytest.mark.parametrize(
    ("old", "new", "fields", "variable"),
    [
        (
            "- name: TF_NUM_INTRAOP_THREADS\n",
            "- name: TF_NUM_INTEROP_THREADS\n",
            [f"{WORKER}.template.spec.containers[tensorflow]"],
            "TF_NUM_INTRAOP_THREADS",
        ),
        (
            "- name: OMP_NUM_THREADS\n",
            "- name: OMP_THREADS\n",
            [
                f"{PYTORCH_SPECS}.Master.template.spec.containers[pytorch]",
                f"{PYTORCH_SPECS}.Worker.template.spec.containers[pytorch]",
            ],
            "OMP_NUM_THREADS",
        ),
    ],
)
def test_every_training_replica_sets_its_thread_count(broken, old, new, fields, variable):
    broken.replace(WFT, old, new)
    hits = only(broken.check(), "training-threads")
    assert {f.field for f in hits} == set(fields)  # once per call of the template
    assert all(f.message.startswith(f"{variable} unset") for f in hits), [f.format() for f in hits]


def test_the_deadline_outlasts_the_trainings_longest_wait_for_replicas(broken):
    """base/ml: 4 jobs at once (1 round) x 3 attempts x 600 s = 1800 s; local-k3d: 2 jobs at a
    time (2 rounds) = 3600 s. A deadline at that or under it is reported, with the product."""
    broken.replace(WFT, "  activeDeadlineSeconds: 21600\n", "  activeDeadlineSeconds: 1800\n")
    (hit,) = only(broken.check(), "training-deadline")
    assert hit.field == "spec.activeDeadlineSeconds", hit.format()
    assert hit.message == (
        "1800 s ends a run before its training's longest wait for replicas: 1 round(s) of "
        "train-all x 3 attempt(s) x collective-timeout 600 s = 1800 s"
    )
    env = "overlays/local-k3d/environment.yaml"
    broken.replace(env, 'workflow-deadline-seconds: "21600"', 'workflow-deadline-seconds: "3000"')
    hits = only(broken.check("overlays/local-k3d"), "training-deadline")
    assert [h.message.split(":")[-1] for h in hits] == [
        " 2 round(s) of train-all x 3 attempt(s) x collective-timeout 600 s = 3600 s"
    ]
    broken.replace(env, 'workflow-deadline-seconds: "3000"', 'workflow-deadline-seconds: "3601"')
    assert [f for f in broken.check("overlays/local-k3d") if f.check == "training-deadline"] == []


@pytest.mark.parametrize("value", ["two", "1.5", "0", "6h"])
def test_an_integer_environment_value_that_is_no_whole_number_names_its_key_and_file(broken, value):
    env = "overlays/local-k3d/environment.yaml"
    broken.replace(env, 'training-parallelism: "2"', f'training-parallelism: "{value}"')
    (hit,) = only(broken.check("overlays/local-k3d"), "environment")
    assert hit.file == env, hit.format()
    assert hit.message == f"training-parallelism: {value!r} is not a whole number of at least 1"


@pytest.mark.parametrize(
    ("key", "value", "span"),
    [
        ("canary-traffic-percent", "150", "from 0 to 100"),
        ("canary-traffic-percent", "-5", "from 0 to 100"),
        ("canary-traffic-percent", "050", "from 0 to 100"),
        ("model-version", "007", "of at least 1"),
        ("model-version", "0", "of at least 1"),
    ],
)
def test_the_served_versions_values_are_bounded(broken, key, value, span):
    """``model-version`` and ``canary-traffic-percent`` (integers in the InferenceService) are
    refused out of their range, naming the key and the file: a share above 100 would reach KServe
    unchecked, and ``007`` names a directory selection never makes (it publishes ``7``)."""
    env = "overlays/gpu-cloud/environment.yaml"
    old = {"canary-traffic-percent": '"100"', "model-version": '"1"'}[key]
    broken.replace(env, f"{key}: {old}", f'{key}: "{value}"')
    hits = only(broken.check("overlays/gpu-cloud"), "environment")
    assert [h.message for h in hits] == [f"{key}: {value!r} is not a whole number {span}"]
    assert hits[0].file == env


def test_a_canary_share_of_0_or_100_is_accepted(broken):
    env = "overlays/gpu-cloud/environment.yaml"
    broken.replace(env, 'canary-traffic-percent: "100"', 'canary-traffic-percent: "0"')
    assert [f for f in broken.check("overlays/gpu-cloud") if f.check == "environment"] == []


def test_the_write_back_task_reads_the_version_select_reports_and_runs_only_when_on():
    """The pipeline's write-back (docs/gitops.md): after serve, only with write-back-secret
    set (off by default: its pod would mount a Secret named ""), its version the ``version``
    of select's report, read from the file select writes on the volume."""
    wft = yaml.safe_load((ROOT / WFT).read_text())
    t = task(wft, "pipeline", "write-back")
    assert t["template"] == "write-back" and t["dependencies"] == ["serve"]
    assert t["when"] == "'{{workflow.parameters.write-back-secret}}' != ''"
    assert param(wft, "write-back-secret")["value"] == ""
    (arg,) = t["arguments"]["parameters"]
    got = re.fullmatch(
        r"\{\{=jsonpath\(tasks\.([\w-]+)\.outputs\.parameters\.([\w-]+), '\$\.(\w+)'\)\}\}",
        arg["value"],
    )
    assert got and got.groups() == ("select", "report", "version"), arg
    assert [i["name"] for i in template(wft, "write-back")["inputs"]["parameters"]] == [arg["name"]]
    select = template(wft, "select")
    (out,) = select["outputs"]["parameters"]
    args = select["container"]["args"]
    path = out["valueFrom"]["path"]
    assert out["name"] == "report" and path == args[args.index("--report") + 1]
    mounts = [m["mountPath"] for m in select["container"]["volumeMounts"]]
    assert any(path.startswith(f"{m}/") for m in mounts), (path, mounts)
    assert "select" in task(wft, "pipeline", "serve")["dependencies"]
