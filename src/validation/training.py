"""Training-job topic: the TFJobs and PyTorchJobs and the pipeline steps that wait for them
(training-operator v1.9.4 reports a crash-looping job Failed in ``status.conditions`` while the
``replicaStatuses`` counters miss in-place restarts; it gives a PyTorchJob's pods their
``MASTER_ADDR``/``RANK`` only when the job has a Master, and finds the Master's port only on the
container named ``pytorch``, port ``pytorchjob-port``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import yaml
from kubernetes.utils import parse_quantity

from validation.argo import (
    RETRIES,
    WORKFLOW_KINDS,
    calls,
    requirements,
    substitute,
    tasks,
    workflow_params,
    workflow_spec,
)
from validation.cli_paths import COMMAND, parse
from validation.core import Context, Hit, check, dig

COUNTED_RESTART_POLICIES = ("ExitCode", "Never")
# job kind -> the spec field holding its replica specs
REPLICA_SPECS = {"TFJob": "tfReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs"}
# training-operator v1.9.4 (kubeflow.org/v1 constants): the PyTorchJob container and port names
PYTORCH_CONTAINER, PYTORCH_PORT = "pytorch", "pytorchjob-port"


def replica_specs(job) -> tuple[str, dict]:
    """(field name, replica type -> spec) of a TFJob or PyTorchJob."""
    field = REPLICA_SPECS[job.kind]
    return field, (job.doc.get("spec") or {}).get(field) or {}


def condition_problem(key: str, req: str, parsed: re.Match | None, specs: dict) -> str:
    """Why one requirement of a training job step's condition is wrong ('' when it is right)."""
    path, op, value = (g or "" for g in parsed.groups()) if parsed else (req, "", "")
    parts = path.split(".")
    if parts[:2] == ["status", "conditions"]:
        return ""
    if key == "failureCondition" or parts[:2] != ["status", "replicaStatuses"] or len(parts) != 4:
        return f"{path}: judge the job by status.conditions (counters miss in-place restarts)"
    if parts[2] not in specs:
        return f"{path}: replica type {parts[2]!r} is not in the replica specs {sorted(specs)}"
    replicas = str((specs[parts[2]] or {}).get("replicas", 1))
    if parts[3] != "succeeded" or op not in ("=", "==") or value != replicas:
        return f"{path} {op} {value}: success needs succeeded = {replicas} (the replica count)"
    return ""


@check("tfjob-conditions")
def tfjob_conditions(ctx: Context) -> Iterator[Hit]:
    """A TFJob or PyTorchJob step fails on the operator's verdict (``status.conditions``) and
    succeeds on it or on ``status.replicaStatuses.<type>.succeeded = <replicas>``."""
    for job in ctx.kinds(*REPLICA_SPECS):
        if (res := job.extra.get("resource") or {}).get("action") != "create":
            continue
        wf, step = job.extra["workflow"], job.embedded_in.rsplit(".manifest", 1)[0]
        _, specs = replica_specs(job)
        for key in ("successCondition", "failureCondition"):
            if key not in res:
                yield (
                    wf,
                    f"{step}.{key}",
                    f"missing: the step must wait for the {job.kind}'s verdict",
                )
            for req, parsed in requirements(res.get(key), job.extra["values"]):
                if problem := condition_problem(key, req, parsed, specs):
                    yield wf, f"{step}.{key}", f"{problem} (call {job.extra['caller']})"


# Argo retries a Failed step under these policies (OnError, OnTransientError: errors only)
RETRYING_POLICIES = ("OnFailure", "Always")
# the trainers' options naming the directory a run resumes from (<checkpoint-dir>/<type>/<run-id>)
RESUME_OPTIONS = ("checkpoint_dir", "run_id")


def resume_dirs(doc: dict, field: str) -> list[tuple]:
    """(checkpoint_dir, run_id) of every replica container's ``python -m training.*`` command
    in a rendered job, read by that module's own parser (:func:`validation.cli_paths.parse`;
    a command it rejects is the ``cli-flags`` check's finding, left out here)."""
    out = []
    for rspec in ((doc.get("spec") or {}).get(field) or {}).values():
        for c in (((rspec or {}).get("template") or {}).get("spec") or {}).get("containers") or []:
            argv = [str(x) for x in (c.get("command") or []) + (c.get("args") or [])]
            if m := COMMAND.fullmatch(" ".join(argv[:3])):
                args, _ = parse(m.group(1), argv[3:])
                if args is not None:
                    out.append(tuple(getattr(args, o, None) for o in RESUME_OPTIONS))
    return out


def retry_problems(
    template: dict, attempts: list[dict], field: str, values: dict[str, str]
) -> Iterator[tuple]:
    """(field under the step, message) for each way a retried training step would not resume:
    no bounded retry of a Failed step, one job name for every attempt, a resume directory that
    changes between attempts. ``attempts``: the job as attempts 0 and 1 render it; ``values``:
    the call's placeholder values (Argo substitutes the whole template, ``limit`` included)."""
    strategy = template.get("retryStrategy")
    if not strategy:
        yield (
            "retryStrategy",
            (
                "missing: training-operator v1.9.4 fails the whole job when a pod is deleted, "
                "evicted or drained; only a retried step (a new job) resumes the run"
            ),
        )
        return
    limit = substitute(str(strategy.get("limit", "")), values)
    if "{{" not in limit and not (re.fullmatch(r"[0-9]+", limit) and int(limit) >= 1):
        why = "unset: Argo retries a crashing trainer forever" if not limit else "no retry"
        yield "retryStrategy.limit", f"{limit!r}: a whole number >= 1 ({why})"
    if (policy := strategy.get("retryPolicy", "OnFailure")) not in RETRYING_POLICIES:
        yield "retryStrategy.retryPolicy", f"{policy!r} never retries a Failed step"
    meta = [a.get("metadata") or {} for a in attempts]
    names = [m.get("name") for m in meta]
    if names[0] == names[1] and not meta[0].get("generateName"):  # generateName: new each time
        yield (
            "resource.manifest.metadata.name",
            (
                f"{names[0]!r} in every attempt: the retried create is refused (AlreadyExists); "
                f"name the job per attempt with {{{{{RETRIES}}}}}"
            ),
        )
    first, second = (resume_dirs(a, field) for a in attempts)
    if first != second:
        yield (
            "resource.manifest",
            (
                f"--checkpoint-dir/--run-id {first} becomes {second} on a retry: the retried job "
                "would start over instead of resuming the run's backup"
            ),
        )


@check("training-retry")
def training_retry(ctx: Context) -> Iterator[Hit]:
    """A step creating a TFJob or PyTorchJob retries a lost pod: a bounded ``retryStrategy``
    that retries a Failed step, a job named per attempt (``{{retries}}``), and the same resume
    directory (``--checkpoint-dir``, ``--run-id``) in every attempt. Read from the templates
    themselves (a manifest using ``{{retries}}`` without a retryStrategy does not resolve)."""
    for wf in ctx.kinds(*WORKFLOW_KINDS):
        for call in calls(wf):
            res = call.template.get("resource") or {}
            if res.get("action") != "create" or not isinstance(res.get("manifest"), str):
                continue  # the schema check reports a manifest that is not a string
            try:
                attempts = [
                    yaml.safe_load(substitute(res["manifest"], call.values | {RETRIES: n}))
                    for n in ("0", "1")
                ]
            except yaml.YAMLError:
                continue  # the `workflow` check reports a manifest that does not parse
            if not all(isinstance(a, dict) for a in attempts):
                continue
            if (kind := attempts[0].get("kind")) not in REPLICA_SPECS:
                continue
            field = REPLICA_SPECS[kind]
            for where, msg in retry_problems(call.template, attempts, field, call.values):
                yield wf, f"{call.path}.{where}", f"{msg} (call {call.caller})"


@check("tfjob-restart-policy")
def tfjob_restart_policy(ctx: Context) -> Iterator[Hit]:
    """Every TFJob and PyTorchJob replica restarts with a policy whose failures are counted."""
    for job in ctx.kinds(*REPLICA_SPECS):
        field, specs = replica_specs(job)
        for rtype, rspec in specs.items():
            if (policy := (rspec or {}).get("restartPolicy")) not in COUNTED_RESTART_POLICIES:
                msg = f"{policy!r}: in-place restarts are never counted as failures; use one of"
                msg += f" {list(COUNTED_RESTART_POLICIES)} (ExitCode retries only retryable codes)"
                yield job, f"spec.{field}.{rtype}.restartPolicy", msg


@check("pytorchjob-master")
def pytorchjob_master(ctx: Context) -> Iterator[Hit]:
    """A PyTorchJob has exactly one Master (the operator sets ``MASTER_ADDR``/``RANK`` only
    then, and rank 0 is the Master), and every replica's container ``pytorch`` declares the
    port ``pytorchjob-port`` (where the operator reads ``MASTER_PORT`` from)."""
    for job in ctx.kinds("PyTorchJob"):
        field, specs = replica_specs(job)
        master = specs.get("Master")
        if master is None:
            msg = "no Master replica: a Worker-only job gets no MASTER_ADDR/WORLD_SIZE/RANK"
            yield job, f"spec.{field}", msg
        elif str(master.get("replicas", 1)) != "1":
            yield job, f"spec.{field}.Master.replicas", "exactly 1 Master (rank 0)"
        for rtype, rspec in specs.items():
            containers = ((rspec or {}).get("template") or {}).get("spec", {}).get("containers")
            named = [c for c in containers or [] if c.get("name") == PYTORCH_CONTAINER]
            ports = [p.get("name") for c in named for p in c.get("ports") or []]
            if not named or PYTORCH_PORT not in ports:
                msg = f"needs a container {PYTORCH_CONTAINER!r} with a port {PYTORCH_PORT!r} "
                msg += "(the operator's names; without them it finds no master port)"
                yield job, f"spec.{field}.{rtype}.template.spec.containers", msg


# job kind -> its framework's intra-op thread count variable (TensorFlow's; torch's OpenMP)
THREAD_VARIABLES = {"TFJob": "TF_NUM_INTRAOP_THREADS", "PyTorchJob": "OMP_NUM_THREADS"}


@check("training-threads")
def training_threads(ctx: Context) -> Iterator[Hit]:
    """Every TFJob and PyTorchJob replica's containers set their framework's intra-op thread
    count (:data:`THREAD_VARIABLES`), as a value or from the container's CPU limit
    (``resourceFieldRef: limits.cpu``). Unset, TensorFlow and torch start one thread per core of
    the node, however small the CPU limit, and the replica runs throttled; neither the training
    operator nor the container runtime sets them."""
    for job in ctx.kinds(*REPLICA_SPECS):
        field, specs = replica_specs(job)
        var = THREAD_VARIABLES[job.kind]
        for rtype, rspec in specs.items():
            pod = ((rspec or {}).get("template") or {}).get("spec") or {}
            for c in pod.get("containers") or []:
                env = {e.get("name"): e for e in c.get("env") or [] if isinstance(e, dict)}
                if var not in env or not ("value" in env[var] or "valueFrom" in env[var]):
                    msg = f"{var} unset: {job.kind} replicas start one thread per node core "
                    msg += "under their CPU limit; set it, e.g. from resourceFieldRef limits.cpu"
                    yield (
                        job,
                        f"spec.{field}.{rtype}.template.spec.containers[{c.get('name')}]",
                        msg,
                    )


# what a run's footprint counts: CPU cores, memory bytes, GPUs
FOOTPRINT_RESOURCES = ("cpu", "memory", "nvidia.com/gpu")


def quantity(text) -> float:
    """A Kubernetes quantity (``"500m"``, ``"1"``, ``"768Mi"``, ``2``) as a number of units
    (cores, bytes, devices), read by the Kubernetes client's ``parse_quantity`` (as the
    ``resource-limits`` check reads them). Raises ValueError for another form, and for blanks
    inside one (``"1 Gi"``), which ``parse_quantity`` takes and the API server refuses."""
    try:
        if " " in str(text).strip():
            raise ValueError(text)
        return float(parse_quantity(text))
    except ValueError:
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from None


def jobs_at_once(fan_out: dict, jobs: int) -> int:
    """How many of ``jobs`` training jobs the ``train-all`` template ``fan_out`` runs at once:
    its ``parallelism`` (Argo: unset = all), at most ``jobs``, at least 1."""
    return max(1, min(int(fan_out.get("parallelism") or jobs), jobs))


def job_requests(job) -> dict[str, float]:
    """The requests of every replica of a TFJob or PyTorchJob, summed: ``FOOTPRINT_RESOURCES``
    -> cores, bytes, GPUs (a replica spec without ``replicas`` counts 1, as the operator's
    default)."""
    total = dict.fromkeys(FOOTPRINT_RESOURCES, 0.0)
    for spec in replica_specs(job)[1].values():
        pod = ((spec or {}).get("template") or {}).get("spec") or {}
        for c in pod.get("containers") or []:
            requests = (c.get("resources") or {}).get("requests") or {}
            for r in FOOTPRINT_RESOURCES:
                total[r] += int(spec.get("replicas", 1)) * quantity(requests.get(r, 0))
    return total


def run_footprint(objs) -> dict | None:
    """What one pipeline run's training asks of a cluster at most: the ``parallelism`` largest
    training jobs (by CPU) that the WorkflowTemplate's ``train-all`` runs at once, their
    requests summed. ``objs``: one kustomization's objects with the resource steps' manifests
    (:func:`validation.main.expand`). Returns ``{"jobs": N, "of": M, "cpu": cores, "memory":
    bytes, "nvidia.com/gpu": GPUs}``, or None where no such template renders.
    Raises ValueError for a request that is no quantity."""
    jobs = {  # the resource steps' training jobs, one per variant (by its name)
        o.name: job_requests(o)
        for o in objs
        if o.kind in REPLICA_SPECS and o.embedded_in and not o.upstream
    }
    templates = [
        t
        for o in objs
        if o.kind in WORKFLOW_KINDS and not o.upstream and not o.embedded_in
        for t in (o.doc.get("spec") or {}).get("templates") or []
        if t.get("name") == "train-all"
    ]
    if not jobs or not templates:
        return None
    at_once = jobs_at_once(templates[0], len(jobs))
    largest = sorted(jobs.values(), key=lambda r: r["cpu"], reverse=True)[:at_once]
    return {"jobs": at_once, "of": len(jobs)} | {
        r: sum(j[r] for j in largest) for r in FOOTPRINT_RESOURCES
    }


def retry_limit(template: dict) -> int:
    """A template's ``retryStrategy.limit`` as a number (0 without one, or for an expression)."""
    try:
        return int(dig(template, "retryStrategy", "limit", default=0))
    except (TypeError, ValueError):
        return 0


@check("training-deadline")
def training_deadline(ctx: Context) -> Iterator[Hit]:
    """The Workflow's ``activeDeadlineSeconds`` outlasts the training's longest wait for
    replicas that never gather: rounds (``train-all``'s jobs over its ``parallelism``, rounded
    up) x attempts (the training templates' ``retryStrategy`` limit + 1) x the trainers'
    ``--collective-timeout`` parameter. A shorter deadline ends such a run first, with Argo's
    "deadline exceeded" instead of the trainers' line naming what did not join."""
    for wf in ctx.kinds(*WORKFLOW_KINDS):
        spec = workflow_spec(wf)
        templates = {t.get("name"): t for t in spec.get("templates") or []}
        fan_out = templates.get("train-all")
        timeout = workflow_params(spec).get("collective-timeout")
        if fan_out is None or timeout is None or spec.get("activeDeadlineSeconds") is None:
            continue
        try:
            deadline, timeout = int(spec["activeDeadlineSeconds"]), float(timeout)
        except (TypeError, ValueError):
            continue  # the schema (an integer) and cli-flags (the trainers' parser) report it
        jobs = [templates.get(t.get("template")) or {} for t in tasks(fan_out)]
        if not jobs:
            continue
        rounds = -(-len(jobs) // jobs_at_once(fan_out, len(jobs)))
        attempts = max(retry_limit(t) for t in jobs) + 1
        longest = rounds * attempts * timeout
        if deadline <= longest:
            yield (
                wf,
                "spec.activeDeadlineSeconds",
                f"{deadline} s ends a run before its training's longest wait for replicas: "
                f"{rounds} round(s) of train-all x {attempts} attempt(s) x "
                f"collective-timeout {timeout:g} s = {longest:g} s",
            )


ENVIRONMENT_COMPONENT = "base/ml/environment/kustomization.yaml"
#: Bounds of the integer environment values that are not "at least 1": a canary's share of the
#: requests (KServe's canaryTrafficPercent: 0 is its rollback, 100 every request to the latest).
INTEGER_BOUNDS = {"canary-traffic-percent": (0, 100)}


def environment_problems(root) -> list[tuple[str, str]]:
    """(file, message) for each value of an ``overlays/<env>/environment.yaml`` that the
    component ``base/ml/environment`` copies into an integer field (a target outside
    ``spec.arguments.parameters``: Argo's ``parallelism`` and ``activeDeadlineSeconds``, the
    InferenceService's ``storageUri`` version and ``canaryTrafficPercent``) and that is no whole
    number of at least 1 (:data:`INTEGER_BOUNDS`: other bounds), written without leading
    zeros. kustomize's own error ("cannot decode !!str `two` as a !!int") names neither the key
    nor the file."""
    root = Path(root)
    try:
        component = yaml.safe_load((root / ENVIRONMENT_COMPONENT).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []  # the render reports it
    integer_keys = [
        r["source"]["fieldPath"].removeprefix("data.")
        for r in component.get("replacements") or []
        if any(
            not path.startswith("spec.arguments.parameters")
            for target in r.get("targets") or []
            for path in target.get("fieldPaths") or []
        )
    ]
    problems = []
    for env in sorted(root.glob("overlays/*/environment.yaml")):
        try:
            data = (yaml.safe_load(env.read_text()) or {}).get("data") or {}
        except (OSError, yaml.YAMLError, AttributeError):
            continue  # the render reports it
        rel = str(env.relative_to(root))
        for key in integer_keys:
            value = data.get(key)
            low, high = INTEGER_BOUNDS.get(key, (1, None))
            number = int(value) if re.fullmatch(r"0|[1-9][0-9]*", str(value)) else None
            if value is not None and (
                number is None or number < low or (high is not None and number > high)
            ):
                span = f"from {low} to {high}" if high is not None else f"of at least {low}"
                problems.append((rel, f"{key}: {value!r} is not a whole number {span}"))
    return problems
