"""Strict schema validation of our objects (not upstream's) with the real ``kubeconform``;
offline (``KUBE_SCHEMA_DIR``) with the strict built-in schemas ``kubernetes-validate`` ships."""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import kubernetes_validate.utils as kv
import yaml

from validation.core import Finding, Obj, finding

CATALOG_LAYOUT = "{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json"
CRDS_CATALOG_URL = "https://raw.githubusercontent.com/datreeio/CRDs-catalog/main/" + CATALOG_LAYOUT
AT = re.compile(r"- at '([^']*)': (.*?)(?=\s+- at '|$)")
# kubeconform's verdict on one object, {JSON pointer: [messages]} ({} when valid), by
# (kubeconform binary, schema locations, Kubernetes version, the object's YAML). The schema
# files behind a location do not change while a process runs, so an object validated once is
# not sent to kubeconform again: the same object rendered by a base and its overlays, or by
# the many validator runs of one test session (each compiles every schema it loads: 0.1-0.5 s
# a kind). Only verdicts are kept: valid, or invalid against a schema (not an error such as a
# schema not found, nor anything of a kubeconform that failed).
_VERDICTS: dict[tuple[str, tuple[str, ...], str, str], dict[str, list[str]]] = {}


def kubeconform_path(root: Path) -> str:
    """$KUBECONFORM, else the pinned kubeconform ``scripts/kubeconform.sh --find`` finds (the
    tools cache's, or one on PATH of that version); FileNotFoundError if none."""
    cmd = ["bash", str(root / "scripts/kubeconform.sh"), "--find"]
    if not (exe := os.environ.get("KUBECONFORM")):
        exe = subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
    if not exe:  # --find prints nothing when there is none
        raise FileNotFoundError(
            "no kubeconform of the pinned version (versions.env KUBECONFORM_VERSION): set"
            " KUBECONFORM to its path, put it on PATH, or run `make kubeconform` (builds it: Go)"
        )
    return exe


def builtin_schemas(k8s_version: str, dest: Path) -> str:
    """A kubeconform location for kubernetes-validate's strict schemas of ``k8s_version``
    (the newest it ships at or below it), copied into ``dest`` with resolvable refs."""
    want = kv.major_minor(k8s_version.lstrip("v"))
    version = [v for v in kv.all_versions() if kv.major_minor(v) <= want][-1]
    src = Path(kv.__file__).parent / f"kubernetes-json-schema/v{version}-local-strict"
    dest.mkdir(parents=True, exist_ok=True)
    ref = ('"/api/_definitions.json', f'"file://{dest}/_definitions.json')
    for f in src.glob("*.json"):
        (dest / f.name).write_text(f.read_text().replace(*ref))
    return f"{dest}/{{{{.ResourceKind}}}}{{{{.KindSuffix}}}}.json"


@functools.cache
def _builtin_location(k8s_version: str) -> str:
    """:func:`builtin_schemas` of ``k8s_version`` copied once per process (into a temporary
    directory removed at exit), so that the location, and with it :data:`_VERDICTS`' keys,
    stays the same from one run to the next."""
    dest = Path(tempfile.mkdtemp(prefix="validation-schemas-"))
    atexit.register(shutil.rmtree, dest, True)
    return builtin_schemas(k8s_version, dest / "builtin")


def named_path(doc, pointer: str) -> str:
    """A JSON pointer as a dotted path, list items by their name where they have one."""
    out, node = "", doc
    for part in filter(None, pointer.split("/")):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
            out += f"[{node.get('name', part) if isinstance(node, dict) else part}]"
        else:
            node = node.get(part) if isinstance(node, dict) else None
            out += f".{part}" if out else part
    return out


def validate(objs: list[Obj], root: Path, k8s_version: str, workdir: Path) -> list[Finding]:
    """kubeconform -strict over our objects (one file each); a finding per schema error.
    An object kubeconform already judged in this process (the same YAML, binary, schema
    locations and version) is not sent again (:data:`_VERDICTS`), nor is a second copy of one.
    Only verdicts are kept (valid, or invalid against a schema): an error (no schema found, a
    failed download) is reported and the object sent again next time; a kubeconform that
    fails (an exit status other than 0 and 1, no JSON) is one finding, and nothing is kept.
    FileNotFoundError when there is no kubeconform (:func:`kubeconform_path`)."""
    ours, exe = [o for o in objs if not o.upstream], kubeconform_path(root)
    locations = ["default", CRDS_CATALOG_URL]  # offline: the package's and the mirror's
    if schema_dir := os.environ.get("KUBE_SCHEMA_DIR"):
        schema_dir = os.path.abspath(schema_dir)
        locations = [_builtin_location(k8s_version), f"{schema_dir}/{CATALOG_LAYOUT}"]
    keys = [
        (exe, tuple(locations), k8s_version, yaml.safe_dump(o.doc, sort_keys=False)) for o in ours
    ]
    new = list(dict.fromkeys(k for k in keys if k not in _VERDICTS))  # in order, no copies
    judged: dict[tuple[str, tuple[str, ...], str, str], dict[str, list[str]]] = {}
    if new:
        workdir.mkdir(parents=True, exist_ok=True)
        objs_dir = Path(tempfile.mkdtemp(prefix="objs-", dir=workdir))  # only this call's files
        for i, key in enumerate(new):
            (objs_dir / f"{i}.yaml").write_text(key[3])
        # one worker: parallel workers each compile the same large CRD schemas (3x slower)
        cmd = [exe, "-strict", "-n=1", "-output=json"]
        cmd += [f"-kubernetes-version={k8s_version.lstrip('v')}"]
        cmd += [f"-schema-location={loc}" for loc in locations]
        proc = subprocess.run([*cmd, str(objs_dir)], capture_output=True, text=True)
        try:
            if proc.returncode not in (0, 1):  # 1: an object invalid or not validated
                raise ValueError(f"exit status {proc.returncode}")
            results = json.loads(proc.stdout)["resources"] or []
        except (ValueError, KeyError, TypeError) as e:
            msg = f"kubeconform failed ({e}): {(proc.stderr or proc.stdout)[:300]}"
            return [finding("schema", msg)]
        judged = {key: {} for key in new}
        errored = set()
        for r in results:
            key = new[int(Path(r["filename"]).stem)]
            if r.get("status") != "statusInvalid":
                errored.add(key)  # e.g. no schema found: said now, asked again next time
            # the message lists every error, nested ones (under $refs) included;
            # validationErrors holds only the top level ("validation failed" at /spec)
            for path, msg in AT.findall(r.get("msg", "")) or [("", r.get("msg", r.get("status")))]:
                if msg != "validation failed":
                    judged[key].setdefault(path, []).append(msg)
        _VERDICTS.update((k, v) for k, v in judged.items() if k not in errored)
    out = []
    for o, key in zip(ours, keys, strict=True):
        for path, msgs in (judged[key] if key in judged else _VERDICTS[key]).items():
            out.append(finding("schema", "; ".join(msgs)[:300], o, named_path(o.doc, path)))
    return out
