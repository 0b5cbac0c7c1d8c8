"""Strict schema validation: built-in kinds (kubernetes-validate), custom resources (jsonschema)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import urllib.request
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate.utils as kv
from referencing import Registry, Resource

from validation.config import CRDS_CATALOG_URL
from validation.render import Obj
from validation.report import Finding

_lock = threading.Lock()


def _schema_dir(k8s_version: str) -> str:
    want = kv.major_minor(k8s_version.lstrip("v"))
    versions = [v for v in kv.all_versions() if kv.major_minor(v) <= want]
    if not versions:
        raise ValueError(f"kubernetes-validate has no schemas for {k8s_version}")
    return f"kubernetes-json-schema/v{versions[-1]}-local-strict"


@cache
def _definitions(schema_dir: str) -> Registry:
    defs = kv.schema_contents(f"{schema_dir}/_definitions.json", schema_dir)
    return Resource.from_contents(defs) @ Registry()


@cache
def builtin_validator(k8s_version: str, api_version: str, kind: str):
    """Compiled strict validator of a built-in kind, or None when it is not a built-in."""
    schema_dir = _schema_dir(k8s_version)
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kv.schema_contents(f"{schema_dir}/{kind.lower()}-{api}.json", k8s_version)
    except (FileNotFoundError, kv.SchemaNotFoundError):
        return None
    registry = Resource.from_contents(schema) @ _definitions(schema_dir)
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@cache
def cr_validator(schema_location: str, group: str, kind: str, version: str):
    """Compiled draft-7 validator of a custom resource from a CRDs-catalog layout, or None."""
    name = f"{group}/{kind.lower()}_{version}.json"
    if "://" in schema_location:
        url = schema_location.format(group=group, kind=kind.lower(), version=version)
        try:
            with urllib.request.urlopen(url, timeout=20) as r:  # noqa: S310 (pinned https URL)
                schema = json.load(r)
        except OSError:
            return None
    else:
        path = Path(schema_location) / name
        if not path.is_file():
            return None
        schema = json.loads(path.read_text())
    return jsonschema.Draft7Validator(schema)


def _json_path(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(root)"


def validate_object(o: Obj, k8s_version: str, schema_location: str | None) -> list[Finding]:
    """Strict schema validation of one object; all errors, each with its JSON path."""
    doc = o.doc
    api, kind = doc.get("apiVersion", ""), doc.get("kind", "")
    if not api or not kind:
        return [Finding("schema", "object without apiVersion/kind", o.source, o.kustomization)]
    with _lock:
        validator = builtin_validator(k8s_version, api, kind)
        group, _, version = api.rpartition("/")
        if validator is None and schema_location:
            validator = cr_validator(schema_location, group, kind, version)
    if validator is None:
        msg = f"no schema for {api} {kind}"
        if o.upstream:
            # Upstream manifests (e.g. cert-manager Certificate in kserve.yaml) may use kinds
            # whose schemas are not mirrored: reported, not failed.
            return [Finding("schema", msg, o.source, o.kustomization, o.ref, severity="warning")]
        return [Finding("schema", msg, o.source, o.kustomization, o.ref)]
    out = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        out.append(
            Finding(
                "schema",
                err.message[:300],
                o.source,
                o.kustomization,
                o.ref,
                o.path(_json_path(err.absolute_path)),
            )
        )
    return out


def run_kubeconform(rendered_yaml: str, schema_dir: str | None, k8s_version: str) -> list[Finding]:
    """Also run kubeconform (when on PATH) strictly on a rendered stream."""
    exe = shutil.which("kubeconform")
    if not exe:
        return []
    cmd = [
        exe,
        "-strict",
        "-summary",
        "-ignore-missing-schemas",
        "-kubernetes-version",
        k8s_version.lstrip("v"),
    ]
    cmd += ["-schema-location", "default"]
    if schema_dir:
        loc = f"{schema_dir}/{{{{.Group}}}}/{{{{.ResourceKind}}}}_{{{{.ResourceAPIVersion}}}}.json"
        cmd += ["-schema-location", loc]
    else:
        loc = CRDS_CATALOG_URL.replace("{group}", "{{.Group}}")
        loc = loc.replace("{kind}", "{{.ResourceKind}}").replace(
            "{version}", "{{.ResourceAPIVersion}}"
        )
        cmd += ["-schema-location", loc]
    proc = subprocess.run(cmd, input=rendered_yaml, capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return []
    return [Finding("kubeconform", line) for line in proc.stdout.splitlines() if " - " in line]
