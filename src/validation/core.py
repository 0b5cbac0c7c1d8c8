"""Findings, rendered objects and the check registry. A check (registered by name with
:func:`check`) gets a :class:`Context` and yields ``(object, field, message)``;
:func:`run_checks` makes each a :class:`Finding` with :func:`finding`, the one constructor."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

EXEMPT = "validation.fashion-mnist.example.com/exempt"


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
        where = self.file or self.kustomization or "-"
        if self.kustomization and self.file and self.kustomization not in self.file:
            where += f" (rendered by {self.kustomization})"
        parts = [f"[{self.check}] {where}", self.obj, f"field {self.field}" if self.field else ""]
        return " ".join(p for p in parts if p) + f": {self.message}"


@dataclass
class Obj:
    """A rendered object with where it came from (``source``: repo-relative file, or
    ``upstream:<remote>``); ``embedded_in``: the Workflow field holding its manifest."""

    doc: dict
    kustomization: str
    source: str
    upstream: bool = False
    embedded_in: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.meta: dict = self.doc.get("metadata") or {}
        self.kind: str = self.doc.get("kind", "")
        self.name: str = self.meta.get("name", "")
        self.namespace: str = self.meta.get("namespace") or ""
        self.ref = f"{self.kind}/{self.namespace + '/' if self.namespace else ''}{self.name}"


def finding(check: str, message: str, obj: Obj | None = None, field: str = "", **where) -> Finding:
    """The one way to build a finding: about ``obj`` (and a field of it, after the embedding
    field when embedded), or about a file or kustomization (``where``: file=, kustomization=)."""
    if obj is None:
        return Finding(check, message, field=field, **where)
    field = " > ".join(f for f in (obj.embedded_in, field) if f)
    return Finding(check, message, obj.source, obj.kustomization, obj.ref, field)


@dataclass
class Context:
    """What a check sees: one kustomization's objects (embedded manifests included), and
    every kustomization's (``rendered``: e.g. the runtimes the platform renders)."""

    objs: list[Obj]
    rendered: dict[str, list[Obj]]

    def __post_init__(self) -> None:
        self.ours = [o for o in self.objs if not o.upstream]  # upstream: pinned, not ours to fix

    def kinds(self, *kinds: str, ours: bool = True) -> list[Obj]:
        """Objects of these kinds (ours only unless ``ours=False``)."""
        return [o for o in (self.ours if ours else self.objs) if o.kind in kinds]

    def everywhere(self, *kinds: str) -> list[Obj]:
        """Objects of these kinds in every rendered kustomization."""
        return [o for objs in self.rendered.values() for o in objs if o.kind in kinds]


Hit = tuple[Obj, str, str]  # (object, field, message)
CHECKS: dict[str, Callable[[Context], Iterable[Hit]]] = {}


def check(name: str):
    """Register a check under ``name``, the name of every finding it yields."""
    assert name not in CHECKS, f"check {name!r} registered twice"
    return lambda fn: CHECKS.setdefault(name, fn)


def exemptions(o: Obj) -> set[str]:
    """Checks an object is exempt from (annotation EXEMPT; the reason: EXEMPT + "-reason")."""
    names = str((o.meta.get("annotations") or {}).get(EXEMPT, "")).split(",")
    return {c.strip() for c in names if c.strip()}


@check("exemption")
def exemption_needs_reason(ctx: Context) -> Iterator[Hit]:
    """An exemption needs a written reason."""
    for o in ctx.ours:
        if exemptions(o) and not (o.meta.get("annotations") or {}).get(EXEMPT + "-reason"):
            yield o, "", f"exemption {sorted(exemptions(o))} without a reason ({EXEMPT}-reason)"


def run_checks(ctx: Context) -> list[Finding]:
    """Every registered check over one context, exemptions applied."""
    hits = ((name, o, fld, msg) for name, fn in CHECKS.items() for o, fld, msg in fn(ctx))
    return [finding(n, msg, o, fld) for n, o, fld, msg in hits if n not in exemptions(o)]


def named(items, prefix: str) -> Iterator[tuple[dict, str]]:
    """(item, ``prefix[name]``) of a list whose items have names (else their index)."""
    for i, item in enumerate(items or []):
        if isinstance(item, dict):
            yield item, f"{prefix}[{item.get('name', i)}]"


def dig(node, *keys, default=None):
    """``node[k1][k2]...``, or ``default`` where a level is missing or not a mapping."""
    for k in keys:
        node = node.get(k) if isinstance(node, dict) else None
        if node is None:
            return default
    return node
