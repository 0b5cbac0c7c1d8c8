"""The health checks that argocd/install adds to argocd-cm, run as Argo CD runs them: Lua 5.1
(lupa; Argo CD embeds gopher-lua, a Lua 5.1) with the global ``obj``, on the states KServe v0.20
reports for an InferenceService (the e2e runs the Application's too, from the live ConfigMap:
tests/e2e/test_argocd.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from lupa import lua51

PATCH = Path(__file__).resolve().parents[2] / "argocd/install/patches/argocd-cm-health-checks.yaml"
KEY = "resource.customizations.health.serving.kserve.io_InferenceService"


def health(obj: dict) -> dict:
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    return dict(lua.execute(yaml.safe_load(PATCH.read_text())["data"][KEY]).items())


def isvc(ready: str | None, transition: str | None = None, **extra: str) -> dict:
    status: dict = {}
    if ready is not None:
        status["conditions"] = [
            {"type": "PredictorReady", "status": ready},
            {"type": "Ready", "status": ready, "reason": "R", "message": "m"},
            *([{"type": k, "status": v} for k, v in extra.items()]),
        ]
    if transition:
        status["modelStatus"] = {"transitionStatus": transition}
    return {"kind": "InferenceService", "status": status} if status else {"kind": "x"}


@pytest.mark.parametrize(
    "obj, want",
    [
        # scaled to zero: Ready, model Pending (InProgress) with no pod: Healthy, not Progressing
        (isvc("True", "InProgress"), "Healthy"),
        (isvc("True", "UpToDate"), "Healthy"),
        # no version yet: not Ready, the revision still starting; then failed (progress deadline)
        (isvc("False", "InProgress"), "Progressing"),
        (isvc("Unknown"), "Progressing"),
        (isvc("False", "BlockedByFailedLoad"), "Degraded"),
        (isvc("False", "InvalidSpec"), "Degraded"),
        (isvc("True", Stopped="True"), "Suspended"),
        (isvc(None), "Progressing"),  # no status yet
    ],
)
def test_inferenceservice_health_is_its_ready_condition(obj, want):
    got = health(obj)
    assert got["status"] == want, got
    if want in ("Progressing", "Degraded") and obj.get("status"):
        assert "Ready" in got["message"], got  # the reason is shown
