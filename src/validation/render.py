"""Render kustomizations (in parallel, cached) and map every object back to its source file."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
import subprocess
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
    seen: set[Path] = set()
    _closure(kdir, seen)
    files: set[Path] = set()
    for p in seen:
        if p.is_dir():
            files.update(f for f in p.rglob("*") if f.is_file())
        else:
            files.add(p)
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
    tree: Path, kust: str, kubectl: str, cache_dir: Path | None, kver: str
) -> list[dict]:
    """Render one kustomization of the prepared tree into parsed documents (cached by content)."""
    kdir = tree / kust
    cached = None
    if cache_dir is not None:
        cached = cache_dir / f"{cache_key(kdir, kver)}.json"
        if cached.is_file():
            try:
                return json.loads(cached.read_text())
            except ValueError:
                pass
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
        raise RenderError(f"kubectl kustomize {kust} failed{hint}: {proc.stderr.strip()}")
    docs = [d for d in yaml.load_all(proc.stdout, Loader=LOADER) if d]
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(docs))
        tmp.replace(cached)
    return docs


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
        origin = yaml.safe_load(origin_raw) if origin_raw else {}
        source, upstream = kust, False
        if origin.get("repo") or origin.get("ref"):
            source, upstream = f"upstream:{origin.get('repo')}?ref={origin.get('ref')}", True
        elif origin.get("path"):
            p = origin["path"]
            base = posixpath.basename(p)
            if base in mirror_names:
                source, upstream = f"upstream:{mirror_names[base]}", True
            elif "://" in p:
                source, upstream = f"upstream:{p}", True
            else:
                source = posixpath.normpath(posixpath.join(kust, p))
        out.append(Obj(doc=doc, kustomization=kust, source=source, upstream=upstream))
    return out


def render_all(
    tree: Path,
    kustomizations: list[str],
    remotes: list[Remote],
    cache_dir: Path | None,
    workers: int | None = None,
) -> tuple[dict[str, list[Obj]], dict[str, str]]:
    """Render kustomizations in parallel threads; returns (objects by kustomization, errors)."""
    kubectl = kubectl_path()
    kver = kubectl_version(kubectl)
    results: dict[str, list[Obj]] = {}
    errors: dict[str, str] = {}

    def job(k: str) -> tuple[str, list[Obj] | None, str]:
        try:
            docs = render_one(tree, k, kubectl, cache_dir, kver)
            return k, to_objects(k, docs, remotes), ""
        except (RenderError, OSError, yaml.YAMLError) as e:
            return k, None, str(e)

    with ThreadPoolExecutor(max_workers=workers or max(2, (os.cpu_count() or 2) * 2)) as pool:
        for k, objs, err in pool.map(job, kustomizations):
            if objs is None:
                errors[k] = err
            else:
                results[k] = objs
    return results, errors
