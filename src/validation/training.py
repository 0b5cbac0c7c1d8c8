"""Training-job topic: the TFJobs and the pipeline steps that wait for them (training-operator
v1.9.4 reports a crash-looping job Failed in ``status.conditions`` while the
``replicaStatuses`` counters miss in-place restarts)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from validation.argo import requirements
from validation.core import Context, Hit, check

COUNTED_RESTART_POLICIES = ("ExitCode", "Never")


def condition_problem(key: str, req: str, parsed: re.Match | None, specs: dict) -> str:
    """Why one requirement of a TFJob step's condition is wrong ('' when it is right)."""
    path, op, value = (g or "" for g in parsed.groups()) if parsed else (req, "", "")
    parts = path.split(".")
    if parts[:2] == ["status", "conditions"]:
        return ""
    if key == "failureCondition" or parts[:2] != ["status", "replicaStatuses"] or len(parts) != 4:
        return f"{path}: judge the TFJob by status.conditions (counters miss in-place restarts)"
    if parts[2] not in specs:
        return f"{path}: replica type {parts[2]!r} is not in tfReplicaSpecs {sorted(specs)}"
    replicas = str((specs[parts[2]] or {}).get("replicas", 1))
    if parts[3] != "succeeded" or op not in ("=", "==") or value != replicas:
        return f"{path} {op} {value}: success needs succeeded = {replicas} (the replica count)"
    return ""


@check("tfjob-conditions")
def tfjob_conditions(ctx: Context) -> Iterator[Hit]:
    """A TFJob step fails on the operator's verdict (``status.conditions``) and succeeds on it
    or on ``status.replicaStatuses.<type>.succeeded = <replicas>``."""
    for job in ctx.kinds("TFJob"):
        if (res := job.extra.get("resource") or {}).get("action") != "create":
            continue
        wf, step = job.extra["workflow"], job.embedded_in.rsplit(".manifest", 1)[0]
        specs = (job.doc.get("spec") or {}).get("tfReplicaSpecs") or {}
        for key in ("successCondition", "failureCondition"):
            if key not in res:
                yield wf, f"{step}.{key}", "missing: the step must wait for the TFJob's verdict"
            for req, parsed in requirements(res.get(key), job.extra["values"]):
                if problem := condition_problem(key, req, parsed, specs):
                    yield wf, f"{step}.{key}", f"{problem} (call {job.extra['caller']})"


@check("tfjob-restart-policy")
def tfjob_restart_policy(ctx: Context) -> Iterator[Hit]:
    """Every TFJob replica restarts with a policy whose failures are counted."""
    for job in ctx.kinds("TFJob"):
        for rtype, rspec in ((job.doc.get("spec") or {}).get("tfReplicaSpecs") or {}).items():
            if (policy := (rspec or {}).get("restartPolicy")) not in COUNTED_RESTART_POLICIES:
                msg = f"{policy!r}: in-place restarts are never counted as failures; use one of"
                msg += f" {list(COUNTED_RESTART_POLICIES)} (ExitCode retries only retryable codes)"
                yield job, f"spec.tfReplicaSpecs.{rtype}.restartPolicy", msg
