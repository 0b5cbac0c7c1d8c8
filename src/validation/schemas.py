"""Strict schema validation of our objects (not upstream's) with the real ``kubeconform``;
offline (``KUBE_SCHEMA_DIR``) with the strict built-in schemas ``kubernetes-validate`` ships."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import kubernetes_validate.utils as kv
import yaml

from validation.core import Finding, Obj, finding

CATALOG_LAYOUT = "{{.Group}}/{{.ResourceKind}}_{{.ResourceAPIVersion}}.json"
CRDS_CATALOG_URL = "https://raw.githubusercontent.com/datreeio/CRDs-catalog/main/" + CATALOG_LAYOUT
AT = re.compile(r"- at '([^']*)': (.*?)(?=\s+- at '|$)")


def kubeconform_path(root: Path) -> str:
    """$KUBECONFORM, else the binary ``scripts/tools.sh`` built; FileNotFoundError if neither."""
    cmd = ["bash", str(root / "scripts/tools.sh"), "--bin", "kubeconform"]
    if not (exe := os.environ.get("KUBECONFORM")):
        exe = subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
    if not exe:  # tools.sh --bin prints nothing when the tool is not built
        raise FileNotFoundError("kubeconform is not built: run scripts/tools.sh kubeconform")
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
    FileNotFoundError when kubeconform is not built (:func:`kubeconform_path`)."""
    ours, exe = [o for o in objs if not o.upstream], kubeconform_path(root)
    locations = ["default", CRDS_CATALOG_URL]  # offline: the package's and the mirror's
    if schema_dir := os.environ.get("KUBE_SCHEMA_DIR"):
        builtin = builtin_schemas(k8s_version, workdir / "builtin")
        locations = [builtin, f"{schema_dir}/{CATALOG_LAYOUT}"]
    (workdir / "objs").mkdir(parents=True, exist_ok=True)
    for i, o in enumerate(ours):
        (workdir / "objs" / f"{i}.yaml").write_text(yaml.safe_dump(o.doc, sort_keys=False))
    # one worker: parallel workers each compile the same large CRD schemas (measured 3x slower)
    cmd = [exe, "-strict", "-n=1", "-output=json", f"-kubernetes-version={k8s_version.lstrip('v')}"]
    cmd += [f"-schema-location={loc}" for loc in locations]
    proc = subprocess.run([*cmd, str(workdir / "objs")], capture_output=True, text=True)
    try:
        results = json.loads(proc.stdout or "{}").get("resources") or []
    except ValueError:
        return [finding("schema", f"kubeconform failed: {(proc.stderr or proc.stdout)[:300]}")]
    out = []
    for r in results:
        # the message lists every error, nested ones (under $refs) included; validationErrors
        # holds only the top level ("validation failed" at /spec)
        errors: dict[str, list[str]] = {}
        for path, msg in AT.findall(r.get("msg", "")) or [("", r.get("msg", r.get("status")))]:
            if msg != "validation failed":
                errors.setdefault(path, []).append(msg)
        o = ours[int(Path(r["filename"]).stem)]
        for path, msgs in errors.items():
            out.append(finding("schema", "; ".join(msgs)[:300], o, named_path(o.doc, path)))
    return out
