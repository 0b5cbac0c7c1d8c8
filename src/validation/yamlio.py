"""The one YAML loader of the harness: libyaml's ``CSafeLoader`` (SafeLoader if unavailable)."""

from __future__ import annotations

import yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
YAMLError = yaml.YAMLError


def load(text: str):
    """One document (safe, libyaml when available)."""
    return yaml.load(text, Loader=LOADER)  # noqa: S506 - LOADER is a safe loader


def load_all(text: str) -> list:
    """Every non-empty document of a stream (safe, libyaml when available)."""
    return [d for d in yaml.load_all(text, Loader=LOADER) if d]  # noqa: S506


def dump(doc, **kw) -> str:
    """Safe dump (libyaml when available), keys in their order."""
    return yaml.dump(doc, Dumper=DUMPER, sort_keys=False, **kw)
