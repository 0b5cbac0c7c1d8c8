"""Findings, rendered objects and the check registry: one way to build a finding.

A check is a function registered under its name with :func:`check`; it receives a
:class:`Context` (one kustomization's rendered objects, plus every rendering for checks that
look across kustomizations) and yields ``(object, field, message)``. :func:`run_checks` turns
each into a :class:`Finding` named after the check; :func:`finding` is the only constructor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import yaml

EXEMPT = "validation.fashion-mnist.example.com/exempt"
EXEMPT_REASON = "validation.fashion-mnist.example.com/exempt-reason"


@dataclass(frozen=True)
class Finding:
    """One problem: which check, where (file, kustomization, object, field) and what."""

    check: str
    message: str
    file: str = ""
    kustomization: str = ""
    obj: str = ""
    field: str = ""

    def format(self) -> str:
        """One report line."""
        parts = [f"[{self.check}] {self.file or self.kustomization or '-'}"]
        if self.kustomization and self.file and self.kustomization not in self.file:
            parts.append(f"(rendered by {self.kustomization})")
        parts += [self.obj] if self.obj else []
        parts += [f"field {self.field}"] if self.field else []
        return " ".join(parts) + f": {self.message}"


@dataclass
class Obj:
    """A rendered object with where it came from (``source``: repo-relative file or upstream)."""

    doc: dict
    kustomization: str
    source: str
    upstream: bool = False
    embedded_in: str = ""  # e.g. "spec.templates[train].resource.manifest"
    extra: dict = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """The object's kind."""
        return self.doc.get("kind", "")

    @property
    def meta(self) -> dict:
        """metadata ({} when absent)."""
        return self.doc.get("metadata") or {}

    @property
    def name(self) -> str:
        """metadata.name."""
        return self.meta.get("name", "")

    @property
    def namespace(self) -> str:
        """metadata.namespace ('' for cluster-scoped or unset)."""
        return self.meta.get("namespace") or ""

    @property
    def ref(self) -> str:
        """kind/namespace/name for reports."""
        return f"{self.kind}/{self.namespace + '/' if self.namespace else ''}{self.name}"

    def path(self, p: str) -> str:
        """A field of this object, prefixed with the embedding field when embedded."""
        return f"{self.embedded_in} > {p}" if self.embedded_in and p else (p or self.embedded_in)


def finding(check: str, message: str, obj: Obj | None = None, field: str = "", **where) -> Finding:
    """The one way to build a finding: about ``obj`` (and a field of it), or ``where`` (file=,
    kustomization=) for findings about no object."""
    if obj is None:
        return Finding(check, message, field=field, **where)
    return Finding(check, message, obj.source, obj.kustomization, obj.ref, obj.path(field))


@dataclass
class Context:
    """What a check sees: one kustomization's objects (embedded manifests included), and every
    kustomization's (for checks across them, e.g. runtimes from the platform)."""

    objs: list[Obj]
    rendered: dict[str, list[Obj]]

    @property
    def ours(self) -> list[Obj]:
        """Objects from this repository (upstream ones are pinned, not checked by policy)."""
        return [o for o in self.objs if not o.upstream]

    def kinds(self, *kinds: str, ours: bool = True) -> list[Obj]:
        """Objects of these kinds (ours only unless ``ours=False``)."""
        return [o for o in (self.ours if ours else self.objs) if o.kind in kinds]

    def everywhere(self, *kinds: str) -> list[Obj]:
        """Objects of these kinds in every rendered kustomization."""
        return [o for objs in self.rendered.values() for o in objs if o.kind in kinds]


Hit = tuple[Obj, str, str]  # (object, field, message)
CHECKS: dict[str, Callable[[Context], Iterable[Hit]]] = {}


def check(name: str):
    """Register a check under ``name`` (the name printed in every finding it yields)."""

    def register(fn: Callable[[Context], Iterable[Hit]]):
        if name in CHECKS:
            raise ValueError(f"check {name!r} registered twice")
        CHECKS[name] = fn
        return fn

    return register


def exemptions(o: Obj) -> set[str]:
    """Checks an object is exempt from (annotation EXEMPT, with a reason: see ``exemption``)."""
    ann = o.meta.get("annotations") or {}
    return {c.strip() for c in str(ann.get(EXEMPT, "")).split(",") if c.strip()}


@check("exemption")
def exemption_needs_reason(ctx: Context) -> Iterator[Hit]:
    """An exemption annotation needs a written reason."""
    for o in ctx.ours:
        if exemptions(o) and not str((o.meta.get("annotations") or {}).get(EXEMPT_REASON, "")):
            yield o, "", f"exemption {sorted(exemptions(o))} without a reason ({EXEMPT_REASON})"


def run_checks(ctx: Context, names: Iterable[str] | None = None) -> list[Finding]:
    """Every registered check (or those named) over one context, exemptions applied."""
    out = []
    for name in names or CHECKS:
        for o, fld, msg in CHECKS[name](ctx):
            if name not in exemptions(o):
                out.append(finding(name, msg, o, fld))
    return out


def named(items, prefix: str) -> Iterator[tuple[int, dict, str]]:
    """(index, item, path) of a list whose items have names: ``prefix[name]``."""
    for i, item in enumerate(items or []):
        if isinstance(item, dict):
            yield i, item, f"{prefix}[{item.get('name', i)}]"


def dig(node, *keys, default=None):
    """``node[k1][k2]...``, or ``default`` where a level is missing or not a mapping."""
    for k in keys:
        node = node.get(k) if isinstance(node, dict) else None
        if node is None:
            return default
    return node


def load_all(text: str) -> list:
    """Every non-empty document of a YAML stream (safe loader, libyaml when available)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(text, Loader=loader) if d]  # noqa: S506 - safe loader


def dedupe(findings: Iterable[Finding]) -> list[Finding]:
    """Drop repeats (one base object rendered by several overlays), keep order."""
    seen, out = set(), []
    for f in findings:
        key = (f.check, f.file, f.obj, f.field, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
