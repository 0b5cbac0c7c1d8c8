"""``python -m validation``: render, validate, check, report."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from validation import consistency, policy, schemas
from validation.config import (
    CRDS_CATALOG_URL,
    discover_kustomizations,
    find_repo_root,
    parse_versions_env,
    remote_refs,
)
from validation.render import Obj, prepare_tree, render_all
from validation.report import Finding, dedupe
from validation.workflows import WORKFLOW_KINDS, embedded_manifests, workflow_spec


def default_cache_dir() -> Path:
    """Render cache: $VALIDATION_CACHE_DIR or ~/.cache/fashion-mnist-validation."""
    env = os.environ.get("VALIDATION_CACHE_DIR")
    if env:
        return Path(env)
    return (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fashion-mnist-validation"
    )


def expand(objs: list[Obj]) -> tuple[list[Obj], list[Finding]]:
    """Objects plus the manifests embedded in Workflow resource templates."""
    out, findings = list(objs), []
    for o in objs:
        if o.kind in WORKFLOW_KINDS and not o.upstream:
            emb, errors = embedded_manifests(o)
            out.extend(emb)
            for field, msg in errors:
                findings.append(Finding("workflow", msg, o.source, o.kustomization, o.ref, field))
    return out, findings


def check_kustomization(
    objs: list[Obj], k8s_version: str, schema_location: str | None, model_types
) -> list[Finding]:
    """Schema, policy and consistency checks of one kustomization's rendered objects."""
    findings: list[Finding] = []
    all_objs, emb_findings = expand(objs)
    findings.extend(emb_findings)
    for o in all_objs:
        findings.extend(schemas.validate_object(o, k8s_version, schema_location))
        findings.extend(policy.check_object(o))
    ours = [o for o in all_objs if not o.upstream]
    cmds = consistency.Commands()
    for o in ours:
        wf_volumes = workflow_spec(o).get("volumes") or [] if o.kind in WORKFLOW_KINDS else []
        cmds.collect(o, wf_volumes)
        if o.kind in WORKFLOW_KINDS:
            findings.extend(consistency.check_workflow(o))
    findings.extend(cmds.findings)
    findings.extend(consistency.check_paths(ours, cmds, model_types))
    findings.extend(consistency.check_namespaces(all_objs))
    findings.extend(consistency.check_memo_cache(all_objs))
    findings.extend(consistency.check_serve_step(ours))
    return findings


def run(
    root: Path,
    kustomizations: list[str] | None = None,
    mirror_dir: Path | None = None,
    schema_location: str | None = None,
    cache_dir: Path | None = None,
    check_versions: bool = True,
) -> tuple[list[Finding], dict[str, list[Obj]]]:
    """Render and check; returns (findings, rendered objects by kustomization)."""
    versions = parse_versions_env(root / "versions.env")
    remotes = remote_refs(versions)
    kusts = kustomizations or discover_kustomizations(root)
    try:
        from training.models import MODEL_TYPES
    except Exception as e:  # noqa: BLE001
        MODEL_TYPES = ()
        model_err = [Finding("model-types", f"cannot import training.models.MODEL_TYPES: {e}")]
    else:
        model_err = []
    findings: list[Finding] = list(model_err)
    with tempfile.TemporaryDirectory(prefix="validation-") as tmp:
        tree = Path(tmp)
        prepare_tree(root, tree, remotes, mirror_dir)
        rendered, errors = render_all(tree, kusts, remotes, cache_dir)
    for k, err in errors.items():
        findings.append(Finding("render", err, kustomization=k))
    for k in kusts:
        if k in rendered:
            findings.extend(
                check_kustomization(
                    rendered[k], versions["KUBERNETES_VERSION"], schema_location, MODEL_TYPES
                )
            )
    if check_versions:
        findings.extend(consistency.version_findings(root, versions, remotes))
    return dedupe(findings), rendered


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit 1 when any check fails."""
    p = argparse.ArgumentParser(prog="python -m validation", description=__doc__)
    p.add_argument("--root", type=Path, default=None, help="repo root (default: found from cwd)")
    p.add_argument("kustomizations", nargs="*", help="only these (repo-relative dirs)")
    p.add_argument("--no-cache", action="store_true", help="always re-render")
    p.add_argument("-q", "--quiet", action="store_true", help="no warnings in the report")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    root = args.root.resolve() if args.root else find_repo_root()
    mirror = os.environ.get("UPSTREAM_MIRROR_DIR")
    schema_dir = os.environ.get("KUBE_SCHEMA_DIR")
    findings, rendered = run(
        root,
        args.kustomizations or None,
        Path(mirror).resolve() if mirror else None,
        str(Path(schema_dir).resolve()) if schema_dir else CRDS_CATALOG_URL,
        None if args.no_cache else default_cache_dir(),
    )
    errors = [f for f in findings if f.severity == "error"]
    warnings = [f for f in findings if f.severity != "error"]
    n_objs = sum(len(v) for v in rendered.values())
    print(
        f"rendered {len(rendered)} kustomizations, {n_objs} objects"
        f" (upstream mirror: {mirror or 'none, fetched online'};"
        f" CR schemas: {schema_dir or 'CRDs-catalog online'})"
    )
    if warnings and not args.quiet:
        print(f"\n{len(warnings)} warning(s):")
        for f in warnings:
            print(f"  WARN {f.format()}")
    if errors:
        print(f"\n{len(errors)} failure(s):")
        for f in errors:
            print(f"  FAIL {f.format()}")
    else:
        print("\nall checks passed")
    print(f"total time {time.perf_counter() - t0:.2f}s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
