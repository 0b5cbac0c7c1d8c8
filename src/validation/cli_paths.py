"""CLI/paths topic: the ``python -m training.*`` commands of the manifests, parsed by their
real parsers, and the files they share through the PVC (checks: see docs/validation.md)."""

from __future__ import annotations

import contextlib
import importlib
import io
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass

from fmnist_common import CANDIDATES, MAX_VERSION, parse_version
from validation.argo import PLACEHOLDER, WORKFLOW_KINDS, workflow_spec
from validation.core import Context, Hit, Obj, check, dig
from validation.pods import checked

COMMAND = re.compile(r"(?:\S*/)?python[\w.]* -m (training\.\w+)")  # argv[:3], space-joined
PATH_OPTIONS = ("data_dir", "saved_model_dir", "candidates_dir", "serving_base_path")
TRAINERS = ("training.train", "training.torch_train")  # TFJob and PyTorchJob replicas


@dataclass
class Command:
    """A parsed ``python -m training.<module>`` container command."""

    module: str
    args: object  # argparse.Namespace
    obj: Obj
    field: str
    mounts: dict[str, str]  # mountPath -> PVC claim name

    def on_claim(self, attr: str) -> tuple[str, str] | None:
        """(claim, sub path) of the path option ``attr`` on a mounted PVC; None if not."""
        path = posixpath.normpath(str(getattr(self.args, attr)))
        for mp in sorted(self.mounts, key=len, reverse=True):
            if path == mp or path.startswith(mp.rstrip("/") + "/"):
                return self.mounts[mp], posixpath.relpath(path, mp) if path != mp else ""
        return None


def parse(module: str, args: list[str]):
    """``module.build_parser().parse_args(args)``; returns (namespace, error message)."""
    try:
        parser = importlib.import_module(module).build_parser()
    except Exception as e:  # noqa: BLE001 - an import failure is a finding
        return None, f"cannot load {module}.build_parser(): {e}"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(args), ""
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        return None, f"{module} rejects the arguments: {lines[-1] if lines else 'exit'}"


def commands(ctx: Context) -> Iterator[Command | Hit]:
    """Every training command (parsed), or a hit when it does not parse."""
    for o, pod, c, path, _ in checked(ctx):
        argv = [str(x) for x in (c.get("command") or []) + (c.get("args") or [])]
        if not (m := COMMAND.fullmatch(" ".join(argv[:3]))):
            continue
        if left := [a for a in argv[3:] if PLACEHOLDER.search(a)]:
            yield o, f"{path}.args", f"unresolved placeholders {left}"
            continue
        ns, err = parse(m.group(1), argv[3:])
        if err:
            yield o, f"{path}.args", err
            continue
        wf_volumes = workflow_spec(o).get("volumes") or [] if o.kind in WORKFLOW_KINDS else []
        volumes = [*(pod.get("volumes") or []), *wf_volumes]
        claims = {v.get("name"): dig(v, "persistentVolumeClaim", "claimName") for v in volumes}
        mounts = {}  # mountPath -> PVC claim name
        for vm in (vm for vm in c.get("volumeMounts") or [] if claims.get(vm.get("name"))):
            mounts[vm["mountPath"].rstrip("/") or "/"] = claims[vm["name"]]
        yield Command(m.group(1), ns, o, f"{path}.args", mounts)


@check("cli-flags")
def cli_flags(ctx: Context) -> Iterator[Hit]:
    """Every ``python -m training.*`` command parses with its module's real parser."""
    yield from (c for c in commands(ctx) if not isinstance(c, Command))


@check("paths")
def paths(ctx: Context) -> Iterator[Hit]:
    """Training output = selection input; storageUri = one version where selection publishes
    (``<--serving-base-path>/<N>``); paths on existing PVCs."""
    cmds = [c for c in commands(ctx) if isinstance(c, Command)]
    pvcs = {(o.namespace, o.name) for o in ctx.kinds("PersistentVolumeClaim")}
    at: dict[tuple[int, str], tuple[str, str]] = {}  # (command, option) -> (claim, sub path)
    opts = [(c, a) for c in cmds for a in PATH_OPTIONS if getattr(c.args, a, None) is not None]
    for c, attr in opts:
        if (loc := c.on_claim(attr)) is None:
            flag, value = "--" + attr.replace("_", "-"), getattr(c.args, attr)
            yield c.obj, c.field, f"{flag} {value} is not on a mounted PVC (mounts {c.mounts})"
        elif pvcs and (c.obj.namespace, loc[0]) not in pvcs:
            yield c.obj, c.field, f"PVC {loc[0]} not in the manifests"
        else:
            at[id(c), attr] = loc
    if len(data_dirs := {at[k] for k in at if k[1] == "data_dir"}) > 1:
        yield cmds[0].obj, "", f"steps use different --data-dir: {sorted(data_dirs)}"
    selects = [c for c in cmds if c.module == "training.select"]
    trainers = [c for c in cmds if c.module in TRAINERS]
    for t, s in ((t, s) for t in trainers for s in selects):
        saved, cand = at.get((id(t), "saved_model_dir")), at.get((id(s), "candidates_dir"))
        if saved and cand and saved != (cand[0], posixpath.join(cand[1], t.args.model_type)):
            msg = f"--saved-model-dir {t.args.saved_model_dir} is not <--candidates-dir>/"
            msg += f"{t.args.model_type} of the select step ({cand[0]}:{cand[1]})"
            yield t.obj, t.field, msg
    published = {at.get((id(s), "serving_base_path")) for s in selects} - {None}
    for o in ctx.kinds("InferenceService"):
        uri = str(dig(o.doc, "spec", "predictor", "model", "storageUri", default=""))
        if m := re.fullmatch(r"pvc://([^/]+)/?(.*)", uri):
            claim, sub, field = m.group(1), m.group(2).strip("/"), "spec.predictor.model.storageUri"
            if pvcs and (o.namespace, claim) not in pvcs:
                yield o, field, f"PVC {claim} not in the manifests"
            sub, _, version = sub.rpartition("/")
            if not 1 <= (parse_version(version) or 0) <= MAX_VERSION:
                msg = f"storageUri {uri} does not end in the model version it serves, /<N> "
                msg += f"(ASCII digits, 1 to {MAX_VERSION}): set the overlay's model-version"
                yield o, field, msg
            for pub in published - {(claim, sub)}:
                msg = f"storageUri {uri} is not a version where selection publishes "
                msg += f"(pvc://{pub[0]}/{pub[1]}/<N>)"
                yield o, field, msg


@check("model-types")
def model_types(ctx: Context) -> Iterator[Hit]:
    """The pipeline trains exactly ``fmnist_common.CANDIDATES`` (TFJobs and the PyTorchJob)."""
    trains = [c for c in commands(ctx) if isinstance(c, Command) and c.module in TRAINERS]
    got = sorted(c.args.model_type for c in trains)
    if trains and sorted(set(got)) != sorted(CANDIDATES):
        msg = f"trained model types {got} != fmnist_common.CANDIDATES {sorted(CANDIDATES)}"
        yield trains[0].obj, "", msg
