"""scripts/submit-pipeline.sh and scripts/train.sh against a fake kubectl (KUBECTL=...).

The fake records the Workflow it is given and answers `get ... {.status.phase}` from a list of
phases, one per call, so the tests see what the scripts submit and how fast --wait returns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE = """#!{python}
import json, pathlib, sys
state = pathlib.Path({state!r})
args = sys.argv[1:]
if "create" in args:
    (state / "created.json").write_text(sys.stdin.read())
    print("workflow.argoproj.io/fashion-mnist-pipeline-abcde")
elif any("status.phase" in a for a in args):
    phases = json.loads((state / "phases.json").read_text())
    n = int((state / "n").read_text()) if (state / "n").exists() else 0
    (state / "n").write_text(str(n + 1))
    print(phases[min(n, len(phases) - 1)], end="")
elif any("status.message" in a for a in args):
    print("child 'train' failed", end="")
elif any("activeDeadlineSeconds" in a for a in args):
    (state / "deadline_read").write_text(" ".join(args))
    print((state / "deadline").read_text(), end="")
"""


@pytest.fixture
def fake(tmp_path):
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(FAKE.format(python=sys.executable, state=str(tmp_path)))
    kubectl.chmod(0o755)

    def run(script: str, *args: str, phases=("Succeeded",), timeout_s="60", deadline="21600"):
        (tmp_path / "phases.json").write_text(json.dumps(list(phases)))
        (tmp_path / "deadline").write_text(deadline)
        (tmp_path / "created.json").unlink(missing_ok=True)
        env = {**os.environ, "KUBECTL": str(kubectl), "POLL": "0.05", "TIMEOUT": timeout_s}
        if timeout_s is None:
            env.pop("TIMEOUT")
        start = time.monotonic()
        proc = subprocess.run(
            [str(REPO / "scripts" / script), *args],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        created = tmp_path / "created.json"
        wf = json.loads(created.read_text()) if created.exists() else None
        return proc, wf, time.monotonic() - start

    return run


def params(wf: dict) -> dict[str, str]:
    return {p["name"]: p["value"] for p in wf["spec"]["arguments"]["parameters"]}


def test_values_with_quotes_survive(fake):
    resources = '{"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}'
    selector = '{"pool": "a \'b\' \\"c\\"\nd"}'
    proc, wf, _ = fake(
        "submit-pipeline.sh",
        "-p",
        f"train-resources={resources}",
        "-p",
        f"train-node-selector={selector}",
    )
    assert proc.returncode == 0, proc.stderr
    assert wf["spec"]["workflowTemplateRef"] == {"name": "fashion-mnist-pipeline"}
    assert wf["spec"]["entrypoint"] == "pipeline"
    assert params(wf) == {"train-resources": resources, "train-node-selector": selector}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-p", "epoch=3"], "has no parameter 'epoch'"),  # Argo would ignore it silently
        (["-p", "epochs=3", "-p", "epochs=4"], "'epochs' given twice"),
        (["-p", "model-type=cnn"], "has no parameter 'model-type'"),  # the train template's
        (["--entrypoint", "trian"], "no template 'trian'"),
    ],
)
def test_undeclared_or_repeated_parameters_are_refused(fake, argv, message):
    proc, wf, _ = fake("submit-pipeline.sh", *argv)
    assert proc.returncode != 0 and wf is None
    assert message in proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("phase", ["Failed", "Error"])
def test_wait_fails_promptly(fake, phase):
    proc, _, seconds = fake("submit-pipeline.sh", "--wait", phases=("Running", phase))
    assert proc.returncode == 1, proc.stderr
    assert phase in proc.stderr and "child 'train' failed" in proc.stderr
    assert seconds < 10


def test_wait_succeeds(fake):
    proc, _, _ = fake("submit-pipeline.sh", "--wait", phases=("Pending", "Running", "Succeeded"))
    assert proc.returncode == 0, proc.stderr


def test_wait_times_out(fake):
    proc, _, _ = fake("submit-pipeline.sh", "--wait", phases=("Running",), timeout_s="0")
    assert proc.returncode == 1 and "still Running" in proc.stderr


def test_wait_defaults_to_the_live_templates_deadline(fake, tmp_path):
    """Without TIMEOUT, --wait waits as long as the run may last: the live WorkflowTemplate's
    activeDeadlineSeconds (the overlay's workflow-deadline-seconds), plus Argo's margin."""
    proc, _, _ = fake("submit-pipeline.sh", "--wait", timeout_s=None, deadline="1234")
    assert proc.returncode == 0, proc.stderr
    assert "waiting at most 1294 s (the template's activeDeadlineSeconds 1234 + 60)" in proc.stderr
    assert "workflowtemplate fashion-mnist-pipeline" in (tmp_path / "deadline_read").read_text()
    proc, wf, _ = fake("submit-pipeline.sh", "--wait", timeout_s=None, deadline="")
    assert proc.returncode == 1 and wf is None
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: workflowtemplate/fashion-mnist-pipeline has no activeDeadlineSeconds: set TIMEOUT"
    )


def test_bad_parameter_is_one_line_error(fake):
    proc, wf, _ = fake("submit-pipeline.sh", "-p", "epochs")
    assert proc.returncode != 0 and wf is None
    assert proc.stderr.strip().splitlines()[-1].startswith("error:")


def test_dev_loop_runs_the_pipelines_train_template(fake):
    proc, wf, _ = fake("train.sh", "batch_norm", "-p", "epochs=1")
    assert proc.returncode == 0, proc.stderr
    assert wf["spec"]["entrypoint"] == "train"
    assert params(wf) == {"model-type": "batch_norm", "epochs": "1"}
    proc, wf, _ = fake("train.sh")
    assert wf["spec"]["entrypoint"] == "train-all" and params(wf) == {}
    proc, wf, _ = fake("train.sh", "pytorch", "-p", "pytorch-workers=2")
    assert proc.returncode == 0, proc.stderr
    assert wf["spec"]["entrypoint"] == "train-pytorch"  # the PyTorchJob, no model-type input
    assert params(wf) == {"pytorch-workers": "2"}


def test_dev_loop_refuses_an_unknown_model_type_before_any_kubectl_call(fake):
    proc, wf, _ = fake("train.sh", "resnet")
    assert proc.returncode == 1 and wf is None  # nothing submitted
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: unknown model type 'resnet' (one of: cnn | dropout | batch_norm | pytorch)"
    )


def test_dev_loop_fails_when_training_fails(fake):
    proc, _, _ = fake("train.sh", "cnn", phases=("Running", "Failed"))
    assert proc.returncode == 1


@pytest.mark.parametrize(
    ("value", "kind", "out"),
    [("08", "", "8"), ("010", "", "10"), ("0.5", "fraction", "0.5"), ("1234567890123", "", None),
     ("1h", "", None), ("-5", "", None), ("", "", None)],
)  # fmt: skip
def test_seconds_are_decimal_whole_numbers_or_a_clear_error(value, kind, out):
    """scripts/lib.sh ``seconds``, which every TIMEOUT and POLL goes through: leading zeros are
    decimal (bash alone reads 010 as 8 and fails on 08), at most 12 digits (no overflow in the
    margin added to a template's deadline), anything else one line naming the variable."""
    proc = subprocess.run(
        ["bash", "-c", f'source "{REPO}/scripts/lib.sh"; seconds TIMEOUT "$0" $1', value, kind],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out is None:
        assert proc.returncode == 1 and proc.stdout == "", proc
        assert (
            proc.stderr
            == f"error: TIMEOUT must be a number of seconds (at most 12 digits), got '{value}'\n"
        )
    else:
        assert (proc.returncode, proc.stdout) == (0, f"{out}\n"), proc
