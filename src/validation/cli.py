"""``python -m validation``: render, validate, check, report."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

from validation import consistency, policy, schemas, semantics
from validation.config import (
    CRDS_CATALOG_URL,
    KUSTOMIZATION_NAMES,
    discover_kustomizations,
    find_repo_root,
    parse_versions_env,
    remote_refs,
)
from validation.render import Obj, prepare_tree, render_all, wrapped
from validation.report import Finding, dedupe
from validation.upstream import process_pool
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
    findings.extend(semantics.check(all_objs))
    return findings


# What forked check workers read (set before the pool forks: inherited, never pickled).
_CHECK_INPUT: dict = {}


def pipeline_kustomization(tree: Path, kust: str) -> str | None:
    """The nearest kustomization above ``kust`` (overlays/x/training -> overlays/x)."""
    parts = kust.split("/")[:-1]
    while parts:
        candidate = "/".join(parts)
        if any((tree / candidate / n).is_file() for n in KUSTOMIZATION_NAMES):
            return candidate
        parts.pop()
    return None


def _check_job(k: str) -> list[Finding]:
    objs, k8s_version, schema_location, model_types = _CHECK_INPUT[k]
    return check_kustomization(objs, k8s_version, schema_location, model_types)


def check_all(
    rendered: dict[str, list[Obj]],
    k8s_version: str,
    schema_location: str | None,
    model_types,
    workers: int | None = None,
) -> list[Finding]:
    """check_kustomization of each kustomization, in forked processes when there are several."""
    n = min(len(rendered), workers or os.cpu_count() or 1)
    if n <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        out = []
        for objs in rendered.values():
            out.extend(check_kustomization(objs, k8s_version, schema_location, model_types))
        return out
    for m in ("training.train", "training.select", "training.ingest"):
        # imported once here rather than in every worker (failures are reported by the checks)
        with contextlib.suppress(Exception):
            importlib.import_module(m)
    _CHECK_INPUT.clear()
    for k, objs in rendered.items():
        _CHECK_INPUT[k] = (objs, k8s_version, schema_location, model_types)
    # biggest first, so the longest job does not start last
    order = sorted(rendered, key=lambda k: len(rendered[k]), reverse=True)
    try:
        with process_pool(n) as pool:
            results = dict(zip(order, pool.map(_check_job, order), strict=True))
    finally:
        _CHECK_INPUT.clear()
    return [f for k in rendered for f in results[k]]


def run(
    root: Path,
    kustomizations: list[str] | None = None,
    mirror_dir: Path | None = None,
    schema_location: str | None = None,
    cache_dir: Path | None = None,
    check_versions: bool = True,
    timings: dict[str, float] | None = None,
) -> tuple[list[Finding], dict[str, list[Obj]]]:
    """Render and check; returns (findings, rendered objects by kustomization).

    A wrapper kustomization (see :func:`validation.render.wrapped`) is checked once with what
    it wraps: the objects and source files are the same.
    """
    timings = timings if timings is not None else {}
    t0 = time.perf_counter()
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
        timings["prepare"] = time.perf_counter() - t0
        rendered, errors = render_all(tree, kusts, remotes, cache_dir, timings=timings)
        groups: dict[str, str] = {}
        for k in kusts:
            groups.setdefault(wrapped(tree, k), k)
        to_check = {k: rendered[k] for k in groups.values() if k in rendered}
        # standalone TFJobs are compared with the pipeline of the kustomization above them
        partners = {
            k: pipeline_kustomization(tree, k)
            for k, objs in to_check.items()
            if consistency.standalone_tfjobs(objs)
        }
        extra = sorted({p for p in partners.values() if p and p not in rendered})
        more, more_errors = render_all(tree, extra, remotes, cache_dir) if extra else ({}, {})
    for k, err in errors.items():
        findings.append(Finding("render", err, kustomization=k))
    t1 = time.perf_counter()
    findings.extend(
        check_all(to_check, versions["KUBERNETES_VERSION"], schema_location, MODEL_TYPES)
    )
    for objs in to_check.values():
        findings.extend(semantics.check_runtimes(rendered, expand(objs)[0]))
    for k, partner in partners.items():
        standalone = consistency.standalone_tfjobs(to_check[k])
        pipeline_objs = rendered.get(partner) or more.get(partner) if partner else None
        if pipeline_objs is None:
            why = more_errors.get(partner, "") if partner else ""
            findings.append(
                Finding(
                    consistency.STANDALONE_CHECK,
                    "no pipeline kustomization above to compare the standalone TFJobs with"
                    + (f": {partner} does not render ({why})" if partner else ""),
                    kustomization=k,
                )
            )
            continue
        findings.extend(consistency.check_standalone_tfjobs(standalone, expand(pipeline_objs)[0]))
    if check_versions:
        findings.extend(consistency.version_findings(root, versions, remotes))
    timings["checks"] = time.perf_counter() - t1
    return dedupe(findings), rendered


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit 1 when any check fails."""
    p = argparse.ArgumentParser(prog="python -m validation", description=__doc__)
    p.add_argument("--root", type=Path, default=None, help="repo root (default: found from cwd)")
    p.add_argument("kustomizations", nargs="*", help="only these (repo-relative dirs)")
    p.add_argument("--no-cache", action="store_true", help="always re-render")
    p.add_argument("-q", "--quiet", action="store_true", help="no warnings in the report")
    p.add_argument("--timing", action="store_true", help="print seconds per phase")
    args = p.parse_args(argv)
    timings: dict[str, float] = {}
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
        timings=timings,
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
    if args.timing:
        print("timing: " + ", ".join(f"{k} {v:.2f}s" for k, v in timings.items()))
    print(f"total time {time.perf_counter() - t0:.2f}s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
