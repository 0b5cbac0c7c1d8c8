"""``python -m validation [kustomization ...]``: render, validate schemas, run the checks.
Exit status 1 when a check fails; a configuration error (no versions.env in the root, a
missing mirror file, no kubectl or kubeconform) is one line on stderr, exit status 1."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from validation import cli_paths, gitops, pods, rbac, render, schemas, serving, training, workflow  # noqa: F401
from validation.argo import WORKFLOW_KINDS, embedded
from validation.core import Context, Finding, Obj, finding, run_checks
from validation.training import environment_problems, run_footprint


def expand(objs: list[Obj]) -> list[Obj]:
    """Objects plus the manifests our Workflows' resource steps create (parameters
    substituted; the ``workflow`` check reports those that do not parse)."""
    steps = (embedded(o)[0] for o in objs if o.kind in WORKFLOW_KINDS and not o.upstream)
    return [*objs, *(e for emb in steps for e in emb)]


def run(root: Path, kusts: list[str] | None = None, mirror_dir: Path | None = None):
    """Render (every kustomization, or those named), validate and check (:func:`expand`).
    Returns (findings, rendered objects by kustomization); FileNotFoundError for a missing
    mirror file, kubectl or kubeconform, ValueError for a bad versions.env."""
    k8s_version = render.parse_versions_env(root / "versions.env")["KUBERNETES_VERSION"]
    with tempfile.TemporaryDirectory(prefix="validation-") as tmp:
        findings, mirrors = render.prepare_tree(root, Path(tmp) / "tree", mirror_dir)
        findings += [finding("environment", m, file=f) for f, m in environment_problems(root)]
        kusts = kusts or render.discover_kustomizations(root)
        rendered, errors = render.render_all(Path(tmp) / "tree", kusts, mirrors)
        findings += [finding("render", err, kustomization=k) for k, err in errors.items()]
        expanded = [expand(objs) for objs in rendered.values()]
        every = [o for objs in expanded for o in objs]
        findings += schemas.validate(every, root, k8s_version, Path(tmp) / "kc")
    for objs in expanded:
        findings += run_checks(Context(objs, rendered))
    return sorted(set(findings), key=Finding.format), rendered  # one base, several overlays


def footprint_line(kust: str, objs: list[Obj]) -> str:
    """One line (with its newline) of what a pipeline run of ``kust`` asks for its training at
    most (:func:`validation.training.run_footprint`), '' where it renders no pipeline."""
    try:
        fp = run_footprint(expand(objs))
    except ValueError as e:
        return f"  {kust}: training requests not summed: {e}\n"
    if fp is None:
        return ""
    return (
        f"  {kust}: one pipeline run trains {fp['jobs']} of its {fp['of']} jobs at once, "
        f"their replicas requesting {fp['cpu']:g} CPU, {fp['memory'] / 2**30:g}Gi memory, "
        f"{fp['nvidia.com/gpu']:g} GPUs\n"
    )


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: the report; exit status 1 when a check fails or on a config error."""
    p = argparse.ArgumentParser(prog="python -m validation", description=__doc__)
    p.add_argument("kustomizations", nargs="*", help="only these (repo-relative dirs)")
    p.add_argument("--root", type=Path, help="repository root (default: the current directory)")
    args = p.parse_args(argv)
    t0, mirror = time.perf_counter(), os.environ.get("UPSTREAM_MIRROR_DIR")
    try:
        root = (args.root or Path.cwd()).resolve()
        if not (root / "versions.env").is_file():
            raise FileNotFoundError(f"no versions.env in {root}: run from the repository root")
        findings, rendered = run(root, args.kustomizations, Path(mirror) if mirror else None)
    except (FileNotFoundError, ValueError, KeyError) as e:
        print(f"validation: {e}", file=sys.stderr)
        return 1
    schemas_from = os.environ.get("KUBE_SCHEMA_DIR") or "CRDs-catalog online"
    n = sum(len(v) for v in rendered.values())
    print(f"rendered {len(rendered)} kustomizations, {n} objects", end=" ")
    print(f"(upstream: {mirror or 'online'}; CR schemas: {schemas_from})")
    for kust, objs in sorted(rendered.items()):
        if kust.startswith("overlays/"):  # what a cluster is given (base/ml is no environment)
            print(footprint_line(kust, objs), end="")
    print("".join(f"  FAIL {f.format()}\n" for f in findings), end="")
    print(f"{len(findings)} failure(s)" if findings else "all checks passed")
    print(f"total time {time.perf_counter() - t0:.2f}s")
    return 1 if findings else 0
