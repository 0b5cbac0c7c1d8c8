"""Consistency of the manifests with the Python code and with each other."""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import posixpath
import re
from collections.abc import Iterable
from pathlib import Path

from validation.config import MANIFEST_DIRS, Remote
from validation.policy import pod_templates
from validation.render import Obj
from validation.report import Finding
from validation.workflows import (
    PLACEHOLDER,
    WORKFLOW_KINDS,
    invocations,
    workflow_params,
    workflow_spec,
)

MODULE_RE = re.compile(r"^training\.(\w+)$")
# Argo resource conditions are Kubernetes label-selector requirements (comma separated),
# with Argo's numeric > and < ; keys are JSON paths of the object.
CONDITION_RE = re.compile(
    r"^\s*(?:!\s*)?[A-Za-z0-9_.\-/]+\s*"
    r"(?:(?:==|=|!=|>|<)\s*[A-Za-z0-9_.\-]+|\s+(?:in|notin)\s*\([A-Za-z0-9_.\-, ]*\))?\s*$"
)
MEMOIZE_TEMPLATE_TYPES = ("container", "script")


def _finding(check: str, o: Obj, field: str, msg: str) -> Finding:
    return Finding(check, msg, o.source, o.kustomization, o.ref, o.path(field) if field else "")


def python_command(c: dict) -> tuple[str, list[str]] | None:
    """``("training.train", args)`` if the container runs ``python -m training.<x>``."""
    argv = [str(x) for x in (c.get("command") or []) + (c.get("args") or [])]
    for i, tok in enumerate(argv[:-1]):
        if tok == "-m" and argv[0].split("/")[-1].startswith("python"):
            return argv[i + 1], argv[i + 2 :]
    return None


def parse_cli(module: str, args: list[str]):
    """Parse ``args`` with ``<module>.build_parser()``; returns (namespace, error message)."""
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure is a finding
        return None, f"cannot import {module}: {e}"
    if not hasattr(mod, "build_parser"):
        return None, f"{module} has no build_parser()"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = mod.build_parser().parse_args(args)
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        return None, f"{module} rejects the arguments: {lines[-1] if lines else 'exit'}"
    return ns, ""


def _mounts(pod: dict, container: dict, wf_volumes: list[dict]) -> dict[str, str]:
    """mountPath -> PVC claim name for a container."""
    claims = {}
    for v in list(pod.get("volumes") or []) + list(wf_volumes):
        pvc = v.get("persistentVolumeClaim")
        if pvc:
            claims[v.get("name")] = pvc.get("claimName")
    return {
        m["mountPath"].rstrip("/") or "/": claims[m["name"]]
        for m in container.get("volumeMounts") or []
        if m.get("name") in claims and m.get("mountPath")
    }


def on_claim(path: str, mounts: dict[str, str]) -> tuple[str, str] | None:
    """(claim, subpath) of a file path inside a mounted PVC, or None."""
    path = posixpath.normpath(path)
    for mp in sorted(mounts, key=len, reverse=True):
        if path == mp or path.startswith(mp.rstrip("/") + "/"):
            return mounts[mp], "" if path == mp else posixpath.relpath(path, mp)
    return None


def parse_pvc_uri(uri: str) -> tuple[str, str] | None:
    """``pvc://claim/sub/path`` -> (claim, sub/path)."""
    m = re.fullmatch(r"pvc://([^/]+)/?(.*)", uri or "")
    return (m.group(1), m.group(2).strip("/")) if m else None


class Commands:
    """Every ``python -m training.*`` invocation in a set of objects, parsed by the real CLI."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.findings: list[Finding] = []

    def collect(self, o: Obj, wf_volumes: list[dict]) -> None:
        """Parse the python commands of one object's pod templates."""
        for pt in pod_templates(o):
            for c, path in pt.containers:
                cmd = python_command(c)
                if not cmd or not MODULE_RE.match(cmd[0]):
                    continue
                module, args = cmd
                field = f"{path}.args"
                leftovers = [a for a in args if PLACEHOLDER.search(a)]
                if leftovers:
                    self.findings.append(
                        _finding("cli-flags", o, field, f"unresolved placeholders {leftovers}")
                    )
                    continue
                ns, err = parse_cli(module, args)
                if err:
                    self.findings.append(_finding("cli-flags", o, field, err))
                    continue
                mounts = _mounts(pt.pod, c, wf_volumes)
                self.calls.append(
                    {"module": module, "ns": ns, "obj": o, "field": field, "mounts": mounts}
                )


def check_paths(objs: list[Obj], cmds: Commands, model_types: Iterable[str]) -> list[Finding]:
    """Training output, selection input/output, serving storageUri and the PVC all agree."""
    out: list[Finding] = []
    by = {
        m: [c for c in cmds.calls if c["module"] == f"training.{m}"]
        for m in ("ingest", "train", "select")
    }
    pvcs = {(o.namespace, o.name) for o in objs if o.kind == "PersistentVolumeClaim"}

    def loc(call: dict, attr: str) -> tuple[str, str] | None:
        value = getattr(call["ns"], attr, None)
        if value is None:
            return None
        where = on_claim(str(value), call["mounts"])
        if where is None:
            out.append(
                _finding(
                    "paths",
                    call["obj"],
                    call["field"],
                    f"--{attr.replace('_', '-')} {value} is not on a mounted PVC "
                    f"(mounts: {call['mounts'] or 'none'})",
                )
            )
            return None
        claim = where[0]
        if pvcs and (call["obj"].namespace, claim) not in pvcs:
            out.append(
                _finding("paths", call["obj"], call["field"], f"PVC {claim} not in the manifests")
            )
        return where

    data_dirs = {}
    for _m, calls in by.items():
        for call in calls:
            d = loc(call, "data_dir")
            if d:
                data_dirs.setdefault(d, []).append(call)
    if len(data_dirs) > 1:
        call = next(iter(data_dirs.values()))[0]
        out.append(
            _finding(
                "paths", call["obj"], "", f"steps use different --data-dir: {sorted(data_dirs)}"
            )
        )

    candidates = [loc(c, "candidates_dir") for c in by["select"]]
    publish = [loc(c, "serving_base_path") for c in by["select"]]
    for call in by["train"]:
        saved = loc(call, "saved_model_dir")
        mt = call["ns"].model_type
        for cand in candidates:
            if saved and cand and saved != (cand[0], posixpath.join(cand[1], mt)):
                out.append(
                    _finding(
                        "paths",
                        call["obj"],
                        call["field"],
                        f"--saved-model-dir {call['ns'].saved_model_dir} is not "
                        f"<--candidates-dir>/{mt} of the select step ({cand[0]}:{cand[1]}/{mt})",
                    )
                )
    for o in objs:
        if o.kind != "InferenceService":
            continue
        for comp, spec in (o.doc.get("spec") or {}).items():
            model = (spec or {}).get("model") if isinstance(spec, dict) else None
            uri = (model or {}).get("storageUri")
            if not uri or not uri.startswith("pvc://"):
                continue
            field = f"spec.{comp}.model.storageUri"
            target = parse_pvc_uri(uri)
            if pvcs and (o.namespace, target[0]) not in pvcs:
                out.append(_finding("paths", o, field, f"PVC {target[0]} not in the manifests"))
            for pub in publish:
                if pub and pub != target:
                    out.append(
                        _finding(
                            "paths",
                            o,
                            field,
                            f"storageUri {uri} is not where selection publishes "
                            f"(pvc://{pub[0]}/{pub[1]})",
                        )
                    )
    mts = sorted(c["ns"].model_type for c in by["train"])
    if by["train"] and sorted(set(mts)) != sorted(model_types):
        call = by["train"][0]
        out.append(
            _finding(
                "model-types",
                call["obj"],
                "",
                f"trained model types {mts} != training.models.MODEL_TYPES {sorted(model_types)}",
            )
        )
    return out


def check_namespaces(objs: list[Obj]) -> list[Finding]:
    """RBAC subjects, service accounts, logger URLs and PVCs point into the right namespace."""
    out = []
    sas = {(o.namespace, o.name) for o in objs if o.kind == "ServiceAccount"}
    services = {(o.namespace, o.name) for o in objs if o.kind == "Service"}
    ours = [o for o in objs if not o.upstream]
    namespaces = {o.namespace for o in ours if o.namespace}
    for o in ours:
        if o.kind == "RoleBinding":
            for i, s in enumerate(o.doc.get("subjects") or []):
                if s.get("kind") != "ServiceAccount":
                    continue
                ns = s.get("namespace", o.namespace)
                field = f"subjects[{i}].namespace"
                if ns != o.namespace:
                    out.append(
                        _finding("namespaces", o, field, f"{ns} != binding namespace {o.namespace}")
                    )
                elif sas and (ns, s.get("name")) not in sas:
                    out.append(
                        _finding(
                            "namespaces",
                            o,
                            f"subjects[{i}].name",
                            f"no ServiceAccount {ns}/{s.get('name')}",
                        )
                    )
        if o.kind in WORKFLOW_KINDS:
            sa = workflow_spec(o).get("serviceAccountName")
            if sa and sas and (o.namespace, sa) not in sas:
                out.append(
                    _finding(
                        "namespaces",
                        o,
                        "spec.serviceAccountName",
                        f"no ServiceAccount {o.namespace}/{sa}",
                    )
                )
        if o.kind == "InferenceService":
            for comp, spec in (o.doc.get("spec") or {}).items():
                url = (
                    ((spec or {}).get("logger") or {}).get("url")
                    if isinstance(spec, dict)
                    else None
                )
                if not url:
                    continue
                m = re.match(
                    r"^https?://([^./:]+)\.([^./:]+)(?:\.svc(?:\.cluster\.local)?)?(?::\d+)?(?:/|$)",
                    url,
                )
                field = f"spec.{comp}.logger.url"
                if not m:
                    out.append(
                        _finding("namespaces", o, field, f"logger url {url} is not <svc>.<ns>.svc")
                    )
                    continue
                svc, ns = m.groups()
                if ns != o.namespace:
                    out.append(
                        _finding("namespaces", o, field, f"logger namespace {ns} != {o.namespace}")
                    )
                elif (ns, svc) not in services and namespaces:
                    out.append(
                        _finding("namespaces", o, field, f"no Service {ns}/{svc} for the logger")
                    )
    return out


def check_workflow(o: Obj) -> list[Finding]:
    """Templates/entrypoint exist, parameters are declared, conditions and memoize are valid."""
    out = []
    spec = workflow_spec(o)
    templates = spec.get("templates") or []
    names = {t.get("name") for t in templates}
    wparams = set(workflow_params(spec))
    if spec.get("entrypoint") not in names and "workflowTemplateRef" not in spec:
        out.append(
            _finding("workflow", o, "spec.entrypoint", f"no template {spec.get('entrypoint')!r}")
        )
    if spec.get("onExit") and spec["onExit"] not in names:
        out.append(_finding("workflow", o, "spec.onExit", f"no template {spec['onExit']!r}"))
    for i, t in enumerate(templates):
        base = f"spec.templates[{i}]"
        inputs = {p.get("name") for p in (t.get("inputs") or {}).get("parameters") or []}
        text = repr({k: v for k, v in t.items() if k not in ("dag", "steps")})
        for ref in PLACEHOLDER.findall(text):
            if ref.startswith("inputs.parameters.") and ref.split(".", 2)[2] not in inputs:
                out.append(_finding("workflow", o, base, f"{{{{{ref}}}}} not declared in inputs"))
            if ref.startswith("workflow.parameters.") and ref.split(".", 2)[2] not in wparams:
                out.append(_finding("workflow", o, base, f"{{{{{ref}}}}} not in spec.arguments"))
        tasks = [
            (f"{base}.dag.tasks[{j}]", x)
            for j, x in enumerate((t.get("dag") or {}).get("tasks") or [])
        ]
        for g, group in enumerate(t.get("steps") or []):
            tasks += [(f"{base}.steps[{g}][{j}]", x) for j, x in enumerate(group or [])]
        task_names = {x.get("name") for _, x in tasks}
        for path, task in tasks:
            target = task.get("template")
            if target and target not in names:
                out.append(_finding("workflow", o, f"{path}.template", f"no template {target!r}"))
                continue
            for dep in task.get("dependencies") or []:
                if dep not in task_names:
                    out.append(_finding("workflow", o, f"{path}.dependencies", f"no task {dep!r}"))
            if target:
                tmpl = next(x for x in templates if x.get("name") == target)
                given = {
                    p.get("name") for p in (task.get("arguments") or {}).get("parameters") or []
                }
                for p in (tmpl.get("inputs") or {}).get("parameters") or []:
                    if p.get("name") not in given and "value" not in p and "default" not in p:
                        out.append(
                            _finding(
                                "workflow",
                                o,
                                f"{path}.arguments",
                                f"input {p.get('name')!r} not passed",
                            )
                        )
        if t.get("memoize") is not None:
            kind = next((k for k in MEMOIZE_TEMPLATE_TYPES if t.get(k)), None)
            if kind is None:
                out.append(
                    _finding(
                        "workflow",
                        o,
                        f"{base}.memoize",
                        "memoize belongs on a container/script template (where Argo caches)",
                    )
                )
        res = t.get("resource") or {}
        for key in ("successCondition", "failureCondition"):
            if key not in res:
                continue
            cond = str(res[key])
            for call in invocations(o):
                if call.template_index == i:
                    cond = PLACEHOLDER.sub(
                        lambda m, v=call.values: v.get(m.group(1), m.group(0)), cond
                    )
                    break
            for req in cond.split(","):
                if not CONDITION_RE.match(req):
                    out.append(
                        _finding(
                            "workflow",
                            o,
                            f"{base}.resource.{key}",
                            f"{req.strip()!r} is not an Argo condition (label-selector syntax, "
                            "e.g. status.replicaStatuses.Worker.succeeded = 2)",
                        )
                    )
    return out


def check_memo_cache(objs: list[Obj]) -> list[Finding]:
    """A memoize cache ConfigMap in the manifests must carry Argo's cache label."""
    out = []
    cms = {(o.namespace, o.name): o for o in objs if o.kind == "ConfigMap"}
    for o in objs:
        if o.kind not in WORKFLOW_KINDS or o.upstream:
            continue
        for _i, t in enumerate(workflow_spec(o).get("templates") or []):
            name = (((t.get("memoize") or {}).get("cache") or {}).get("configMap") or {}).get(
                "name"
            )
            cm = cms.get((o.namespace, name))
            labels = ((cm.doc.get("metadata") or {}).get("labels") or {}) if cm else {}
            if cm and labels.get("workflows.argoproj.io/configmap-type") != "Cache":
                out.append(
                    _finding(
                        "workflow",
                        cm,
                        "metadata.labels",
                        "memoize cache needs label workflows.argoproj.io/configmap-type=Cache",
                    )
                )
    return out


def check_serve_step(objs: list[Obj]) -> list[Finding]:
    """What the pipeline applies to an InferenceService agrees with the one in git."""
    out = []
    live = {
        (o.namespace, o.name): o for o in objs if o.kind == "InferenceService" and not o.embedded_in
    }
    for e in objs:
        if e.kind != "InferenceService" or not e.embedded_in:
            continue
        ref = live.get((e.namespace, e.name))
        if ref is None:
            continue
        for key in ("storageUri", "modelFormat"):
            a = (((e.doc.get("spec") or {}).get("predictor") or {}).get("model") or {}).get(key)
            b = (((ref.doc.get("spec") or {}).get("predictor") or {}).get("model") or {}).get(key)
            if a is not None and a != b:
                out.append(
                    _finding(
                        "serve-consistency",
                        e,
                        f"spec.predictor.model.{key}",
                        f"{a!r} != {b!r} of {ref.ref} ({ref.source})",
                    )
                )
    return out


def version_findings(root: Path, versions: dict[str, str], remotes: list[Remote]) -> list[Finding]:
    """Every remote ref/URL and pinned image in base/, overlays/, argocd/ matches versions.env."""
    out = []
    known = {r.url for r in remotes}
    image = f"{versions['IMAGE_NAME']}:"
    patterns = [
        (re.compile(r"(?<![\w.-])(?:https?://|github\.com/)[^\s\"'#]+"), "url"),
        (re.compile(r"(?:([\w.-]+(?::\d+)?)/)?" + re.escape(image) + r"([\w.-]+)"), "image"),
        (re.compile(r"runtimeVersion:\s*\"?([\w.-]+)\"?"), "tf-serving"),
        (re.compile(r"gcr\.io/knative-releases/[^\s\"']+"), "message-dumper"),
    ]
    allowed_url_prefixes = (
        versions.get("REPO_URL", "https://github.com/example/fashion-mnist-gitops.git"),
        "https://kubernetes.default.svc",
        "http://message-dumper.",
    )
    for top in MANIFEST_DIRS:
        for f in sorted((root / top).rglob("*")):
            if not f.is_file() or f.suffix not in (".yaml", ".yml"):
                continue
            rel = f.relative_to(root).as_posix()
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if line.lstrip().startswith("#"):
                    continue
                for rx, what in patterns:
                    for m in rx.finditer(line):
                        val = m.group(0)
                        msg = ""
                        if (
                            what == "url"
                            and val not in known
                            and not val.startswith(allowed_url_prefixes)
                        ):
                            msg = f"remote {val} is not a pinned ref derived from versions.env"
                        elif what == "image":
                            registry, tag = m.group(1), m.group(2)
                            if tag not in (versions["IMAGE_TAG"], versions["IMAGE_TAG"] + "-gpu"):
                                msg = f"image tag {tag} != IMAGE_TAG={versions['IMAGE_TAG']}"
                            elif registry and registry != versions["REGISTRY"]:
                                msg = f"registry {registry} != REGISTRY={versions['REGISTRY']}"
                        elif what == "tf-serving":
                            v = m.group(1)
                            if v not in (
                                versions["TF_SERVING_VERSION"],
                                versions["TF_SERVING_VERSION"] + "-gpu",
                            ):
                                msg = f"runtimeVersion {v} != TF_SERVING_VERSION"
                        elif what == "message-dumper" and val != versions["MESSAGE_DUMPER_IMAGE"]:
                            msg = "message-dumper image != MESSAGE_DUMPER_IMAGE"
                        if msg:
                            out.append(Finding("versions", msg, rel, field=f"line {n}"))
    return out


STANDALONE_CHECK = "standalone-tfjob"
# Pod-template labels that only the pipeline's TFJobs carry (per run), not compared.
RUN_LABELS = ("workflows.argoproj.io/workflow",)


def standalone_tfjobs(objs: list[Obj]) -> list[Obj]:
    """Our TFJobs that are objects of their own (not created by a Workflow step)."""
    return [o for o in objs if o.kind == "TFJob" and not o.embedded_in and not o.upstream]


def _train_model_type(o: Obj) -> str | None:
    for pt in pod_templates(o):
        for c, _ in pt.containers:
            cmd = python_command(c)
            if cmd and cmd[0] == "training.train":
                args = cmd[1]
                for i, a in enumerate(args):
                    if a == "--model-type" and i + 1 < len(args):
                        return args[i + 1]
                    if a.startswith("--model-type="):
                        return a.split("=", 1)[1]
    return None


def _without_run_id(args: list) -> list:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--run-id":
            skip = True
        elif not str(a).startswith("--run-id="):
            out.append(a)
    return out


def _normalized_tfjob_spec(o: Obj) -> dict:
    """The TFJob spec without what differs per run: --run-id and the pipeline's run label."""
    spec = copy.deepcopy(o.doc.get("spec") or {})
    for rspec in (spec.get("tfReplicaSpecs") or {}).values():
        tpl = (rspec or {}).get("template") or {}
        labels = (tpl.get("metadata") or {}).get("labels")
        if isinstance(labels, dict):
            for k in RUN_LABELS:
                labels.pop(k, None)
        for key in ("initContainers", "containers"):
            for c in (tpl.get("spec") or {}).get(key) or []:
                if isinstance(c.get("args"), list):
                    c["args"] = _without_run_id(c["args"])
    return spec


def _diff(a, b, path: str = "spec") -> list[tuple[str, object, object]]:
    """Differing fields (lists of scalars, such as args, compare as one field)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            out += _diff(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{path}.{k}")
        return out
    nested = any(isinstance(x, dict | list) for x in (a if isinstance(a, list) else []))
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and nested:
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += _diff(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [(path, a, b)]


def check_standalone_tfjobs(standalone: list[Obj], pipeline_objs: list[Obj]) -> list[Finding]:
    """Standalone TFJobs train exactly like the pipeline's TFJob of the same model type.

    ``pipeline_objs``: the expanded objects of the same environment's pipeline kustomization
    (its WorkflowTemplate's TFJobs after parameter substitution). The whole TFJob spec is
    compared (container command/args, image, resources, security context, volumes, replicas,
    placement, run policy), except ``--run-id`` and the pipeline's per-run pod label.
    """
    out = []
    pipeline = {}
    for e in pipeline_objs:
        if e.kind == "TFJob" and e.embedded_in:
            pipeline.setdefault((e.namespace, _train_model_type(e)), e)
    for o in standalone:
        mt = _train_model_type(o)
        ref = pipeline.get((o.namespace, mt))
        if mt is None:
            out.append(_finding(STANDALONE_CHECK, o, "spec", "runs no python -m training.train"))
            continue
        if ref is None:
            have = sorted(str(k[1]) for k in pipeline)
            out.append(
                _finding(
                    STANDALONE_CHECK,
                    o,
                    "spec",
                    f"no TFJob of the pipeline trains --model-type {mt} in namespace "
                    f"{o.namespace} (pipeline model types: {have or 'none'})",
                )
            )
            continue
        for path, mine, theirs in _diff(_normalized_tfjob_spec(o), _normalized_tfjob_spec(ref)):
            out.append(
                _finding(
                    STANDALONE_CHECK,
                    o,
                    path,
                    f"{mine!r} != {theirs!r} in the pipeline's TFJob for --model-type {mt} "
                    f"({ref.source} {ref.embedded_in}, rendered by {ref.kustomization}; "
                    "--run-id ignored)",
                )
            )
    return out
