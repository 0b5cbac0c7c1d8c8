"""Render kustomizations (in parallel, cached) and map every object back to its source file."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from validation import upstream, yamlio
from validation.config import (
    KUSTOMIZATION_NAMES,
    MANIFEST_DIRS,
    Remote,
    kubectl_path,
)
from validation.yamlio import LOADER  # noqa: F401 - re-exported

ORIGIN = "config.kubernetes.io/origin"
MIRROR_PREFIX = "_mirror_"
# Keys of a kustomization that only wraps one local kustomization (renders exactly like it).
WRAPPER_KEYS = {"apiVersion", "kind", "resources", "buildMetadata"}


@dataclass
class Obj:
    """A rendered object with where it came from."""

    doc: dict
    kustomization: str
    source: str  # repo-relative file, or "upstream:<mirror file or remote ref>"
    upstream: bool = False
    embedded_in: str = ""  # "spec.templates[3].resource.manifest" for manifests in Workflows
    extra: dict = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """The object's kind."""
        return self.doc.get("kind", "")

    @property
    def name(self) -> str:
        """metadata.name."""
        return (self.doc.get("metadata") or {}).get("name", "")

    @property
    def namespace(self) -> str:
        """metadata.namespace ('' for cluster-scoped or unset)."""
        return (self.doc.get("metadata") or {}).get("namespace", "") or ""

    @property
    def ref(self) -> str:
        """kind/namespace/name for reports."""
        ns = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind}/{ns}{self.name}"

    def path(self, p: str) -> str:
        """A JSON path inside this object, prefixed with the embedding field when embedded."""
        return f"{self.embedded_in} > {p}" if self.embedded_in else p


class RenderError(RuntimeError):
    """kubectl kustomize failed."""


def _load_kustomization(d: Path) -> tuple[Path, dict]:
    for name in KUSTOMIZATION_NAMES:
        if (d / name).is_file():
            return d / name, yamlio.load((d / name).read_text()) or {}
    raise FileNotFoundError(d)


def prepare_tree(root: Path, dest: Path, remotes: list[Remote], mirror_dir: Path | None) -> None:
    """Copy the manifest dirs to ``dest``; add origin annotations; substitute mirrored remotes.

    Every kustomization gets ``buildMetadata: [originAnnotations]`` so each rendered object
    names the file it came from. With ``mirror_dir``, each known remote ref/URL in
    ``resources`` is replaced by a copy of the matching mirror file (the repo itself keeps
    the pinned remote refs).
    """
    by_url = {r.url: r for r in remotes}
    for top in MANIFEST_DIRS:
        if (root / top).is_dir():
            shutil.copytree(root / top, dest / top, dirs_exist_ok=True)
    for top in MANIFEST_DIRS:
        for name in KUSTOMIZATION_NAMES:
            for kfile in (dest / top).rglob(name):
                _, k = _load_kustomization(kfile.parent)
                k["buildMetadata"] = sorted(
                    set(k.get("buildMetadata") or []) | {"originAnnotations"}
                )
                if mirror_dir is not None:
                    new = []
                    for res in k.get("resources") or []:
                        remote = by_url.get(res)
                        if remote is None:
                            new.append(res)
                            continue
                        src = mirror_dir / remote.mirror_file
                        if not src.is_file():
                            raise FileNotFoundError(f"mirror {src} missing (stands for {res})")
                        target = kfile.parent / f"{MIRROR_PREFIX}{remote.mirror_file}"
                        shutil.copyfile(src, target)
                        new.append(target.name)
                    k["resources"] = new
                kfile.write_text(yamlio.dump(k))


def _closure(d: Path, seen: set[Path]) -> None:
    """Files a kustomization dir depends on: its own tree plus local dirs/files it references."""
    d = d.resolve()
    if d in seen:
        return
    seen.add(d)
    try:
        _, k = _load_kustomization(d)
    except FileNotFoundError:
        return
    refs = list(k.get("resources") or []) + list(k.get("components") or [])
    refs += list(k.get("bases") or [])
    for p in k.get("patches") or []:
        if isinstance(p, dict) and p.get("path"):
            refs.append(p["path"])
    for ref in refs:
        if not isinstance(ref, str) or "://" in ref or ref.startswith("github.com/"):
            continue
        target = (d / ref).resolve()
        if target.is_dir():
            _closure(target, seen)
        elif target.is_file():
            seen.add(target)


def cache_key(kdir: Path, kubectl_version: str) -> str:
    """Content hash of everything a kustomization's output depends on."""
    files = closure_files(kdir)
    h = hashlib.sha256(kubectl_version.encode())
    base = kdir.resolve()
    for f in sorted(files):
        h.update(os.path.relpath(f, base).encode())
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def kubectl_version(kubectl: str) -> str:
    """``kubectl version --client`` output (part of the cache key)."""
    return subprocess.run(
        [kubectl, "version", "--client"], capture_output=True, text=True, check=False
    ).stdout


def render_one(
    tree: Path,
    kust: str,
    kubectl: str,
    cache_dir: Path | None,
    kver: str,
    schemas: dict[str, dict] | None = None,
    key: str | None = None,
) -> list[dict]:
    """Render one kustomization of the prepared tree into parsed documents (cached by content).

    ``schemas``: the CRD schemas stubbed out of mirror files (:mod:`validation.upstream`),
    spliced back into the output. ``key``: the cache key, when computed before stubbing.
    """
    kdir = tree / kust
    cached = None
    if cache_dir is not None:
        cached = cache_dir / f"{key or cache_key(kdir, kver)}.json"
        docs = load_cached(cached)
        if docs is not None:
            return docs
    proc = subprocess.run(
        [kubectl, "kustomize", str(kdir)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        hint = ""
        if "git" in proc.stderr or "http" in proc.stderr:
            hint = (
                " (remote base not reachable: set UPSTREAM_MIRROR_DIR=<shared>/upstream, e.g."
                " MIRROR_DIR=../shared make validate)"
            )
        elif schemas and upstream.STUB_PREFIX in proc.stderr + proc.stdout:
            hint = " (upstream CRD schemas are pinned, not patched)"
        raise RenderError(f"kubectl kustomize {kust} failed{hint}: {proc.stderr.strip()}")
    docs = yamlio.load_all(proc.stdout)
    try:
        upstream.splice(docs, schemas or {})
    except upstream.StubError as e:
        raise RenderError(f"kubectl kustomize {kust}: {e}") from None
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(docs))
        tmp.replace(cached)
    return docs


def load_cached(path: Path) -> list[dict] | None:
    """A cached rendering, or None (absent or unreadable)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def wrapped(tree: Path, kust: str) -> str:
    """The kustomization ``kust`` renders exactly like: itself, or the one local dir it wraps.

    A kustomization with nothing but ``resources: [<one local kustomization dir>]`` (e.g.
    ``argocd`` -> ``argocd/install``, ``argocd/apps/local-k3d`` -> ``argocd/apps/common``)
    yields the same objects from the same source files; it is rendered and checked once.
    """
    seen = {kust}
    while True:
        try:
            _, k = _load_kustomization(tree / kust)
        except (FileNotFoundError, yamlio.YAMLError):
            return kust
        res = k.get("resources") or []
        if set(k) - WRAPPER_KEYS or len(res) != 1 or not isinstance(res[0], str):
            return kust
        target = posixpath.normpath(posixpath.join(kust, res[0]))
        if target.startswith("..") or "://" in res[0] or target in seen:
            return kust
        try:
            _load_kustomization(tree / target)
        except (FileNotFoundError, yamlio.YAMLError):
            return kust
        seen.add(target)
        kust = target


def closure_files(kdir: Path) -> set[Path]:
    """Every file a kustomization's rendering depends on."""
    seen: set[Path] = set()
    _closure(kdir, seen)
    files: set[Path] = set()
    for p in seen:
        if p.is_dir():
            files.update(f for f in p.rglob("*") if f.is_file())
        else:
            files.add(p)
    return files


def to_objects(kust: str, docs: list[dict], remotes: list[Remote]) -> list[Obj]:
    """Strip origin annotations, resolving each object's source file (repo-relative)."""
    mirror_names = {f"{MIRROR_PREFIX}{r.mirror_file}": r.url for r in remotes}
    out = []
    for doc in docs:
        meta = doc.setdefault("metadata", {})
        ann = meta.get("annotations") or {}
        origin_raw = ann.pop(ORIGIN, None)
        if not ann and "annotations" in meta:
            del meta["annotations"]
        origin = yamlio.load(origin_raw) if origin_raw else {}
        source, upstream_obj = kust, False
        if origin.get("repo") or origin.get("ref"):
            source, upstream_obj = f"upstream:{origin.get('repo')}?ref={origin.get('ref')}", True
        elif origin.get("path"):
            p = origin["path"]
            base = posixpath.basename(p)
            if base in mirror_names:
                source, upstream_obj = f"upstream:{mirror_names[base]}", True
            elif "://" in p:
                source, upstream_obj = f"upstream:{p}", True
            else:
                source = posixpath.normpath(posixpath.join(kust, p))
        out.append(Obj(doc=doc, kustomization=kust, source=source, upstream=upstream_obj))
    return out


def render_all(
    tree: Path,
    kustomizations: list[str],
    remotes: list[Remote],
    cache_dir: Path | None,
    workers: int | None = None,
    timings: dict[str, float] | None = None,
) -> tuple[dict[str, list[Obj]], dict[str, str]]:
    """Render kustomizations; returns (objects by kustomization, errors by kustomization).

    Wrappers are rendered once through what they wrap (:func:`wrapped`); cached renderings
    are reused; for the others, the CRDs of the mirror files they use are parsed once in
    parallel processes and stubbed (:mod:`validation.upstream`), then kustomize runs in
    parallel threads. ``timings`` receives seconds per phase.
    """
    t0 = time.perf_counter()
    timings = timings if timings is not None else {}
    kubectl = kubectl_path()
    kver = kubectl_version(kubectl)
    alias = {k: wrapped(tree, k) for k in kustomizations}
    targets = sorted(set(alias.values()))
    keys = {t: cache_key(tree / t, kver) for t in targets} if cache_dir is not None else {}
    docs_by: dict[str, list[dict]] = {}
    failed: dict[str, str] = {}
    for t in targets:
        docs = load_cached(cache_dir / f"{keys[t]}.json") if cache_dir is not None else None
        if docs is not None:
            docs_by[t] = docs
    misses = [t for t in targets if t not in docs_by]
    timings["cache"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    mirrors = sorted(
        {f for t in misses for f in closure_files(tree / t) if f.name.startswith(MIRROR_PREFIX)}
    )
    schemas = upstream.stub_files(mirrors, workers) if mirrors else {}
    timings["upstream-parse"] = time.perf_counter() - t1

    t2 = time.perf_counter()

    def job(t: str) -> tuple[str, list[dict] | None, str]:
        try:
            return t, render_one(tree, t, kubectl, cache_dir, kver, schemas, keys.get(t)), ""
        except (RenderError, OSError, yamlio.YAMLError) as e:
            return t, None, str(e)

    if misses:
        n = min(len(misses), workers or max(2, (os.cpu_count() or 2) * 2))
        with ThreadPoolExecutor(max_workers=n) as pool:
            for t, docs, err in pool.map(job, misses):
                if docs is None:
                    failed[t] = err
                else:
                    docs_by[t] = docs
    timings["kustomize"] = time.perf_counter() - t2

    results: dict[str, list[Obj]] = {}
    errors: dict[str, str] = {}
    objs_by = {t: to_objects(t, docs, remotes) for t, docs in docs_by.items()}
    for k in kustomizations:
        t = alias[k]
        if t in failed:
            errors[k] = failed[t] if t == k else f"{failed[t]} (wrapped by {k})"
        elif k == t:
            results[k] = objs_by[t]
        else:
            results[k] = [
                Obj(o.doc, k, o.source, o.upstream, o.embedded_in, dict(o.extra))
                for o in objs_by[t]
            ]
    return results, errors
