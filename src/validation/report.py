"""Findings and the text report."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One problem: which check, where (file, kustomization, object, JSON path) and what."""

    check: str
    message: str
    file: str = ""
    kustomization: str = ""
    obj: str = ""
    field: str = ""
    severity: str = "error"

    def format(self) -> str:
        """One report line."""
        where = self.file or self.kustomization or "-"
        parts = [f"[{self.check}] {where}"]
        if self.kustomization and self.file and self.kustomization not in self.file:
            parts.append(f"(rendered by {self.kustomization})")
        if self.obj:
            parts.append(self.obj)
        if self.field:
            parts.append(f"field {self.field}")
        return " ".join(parts) + f": {self.message}"


def dedupe(findings: Iterable[Finding]) -> list[Finding]:
    """Drop duplicates (the same base object rendered by several overlays), keep order."""
    seen: set[tuple] = set()
    out = []
    for f in findings:
        key = (f.check, f.file, f.obj, f.field, f.message, f.severity)
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    return out
