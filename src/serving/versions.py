"""Version discovery in a serving base path, TF Serving's layout: ``<base>/<version>/``.

The version-directory rule (ASCII digits only) is :func:`fmnist_common.parse_version`; a
version counts once it holds ``saved_model.pb`` (selection publishes by renaming a complete
staging directory, so a half-written version is never seen under a digits-only name).
"""

from __future__ import annotations

import logging
from pathlib import Path

from fmnist_common import parse_version

log = logging.getLogger(__name__)


class ModelVersionNotFoundError(FileNotFoundError):
    """The model base path holds no ``<integer>/saved_model.pb`` version directory."""


def find_latest_version(base_path: str | Path) -> tuple[int, Path]:
    """The highest integer version directory under ``base_path`` (TF Serving's layout).

    Only directories named by digits only and holding ``saved_model.pb`` count; anything else
    (dot-prefixed staging dirs such as ``.staging-3-abcd``, ``tmp``, files) is ignored.

    Args:
        base_path: e.g. ``work/models/fashion-mnist`` holding ``1/``, ``2/``, ...

    Returns:
        ``(version, path)`` of the highest version.

    Raises:
        ModelVersionNotFoundError: ``base_path`` is missing or holds no valid version.
    """
    base = Path(base_path)
    if not base.is_dir():
        raise ModelVersionNotFoundError(f"model base path {str(base)!r} is not a directory")
    versions = []
    for entry in base.iterdir():
        version = parse_version(entry.name)
        if version is None or not entry.is_dir():
            continue
        if not (entry / "saved_model.pb").is_file():
            log.warning("ignoring %s: no saved_model.pb", entry)
            continue
        versions.append((version, entry))
    if not versions:
        raise ModelVersionNotFoundError(
            f"no version directory <integer>/saved_model.pb under {str(base)!r}; "
            "publish a model first (make demo / training.select)"
        )
    return max(versions)
