"""Version discovery: a serving base path (TF Serving's layout) and the published models.

Selection publishes version ``N`` as ``<models-dir>/N/``, a TF Serving base path that holds
exactly that one version (``<models-dir>/N/N/saved_model.pb``) beside its selection record
(``<models-dir>/N/selection.json``). An InferenceService names the version it serves in its
``storageUri`` (``pvc://<claim>/models/fashion-mnist/N``): KServe mounts that directory at
/mnt/models and the model server loads the one version it finds there, so a version that git
does not name never answers (docs/gitops.md, "Promotion, canary and rollback").

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


def published_versions(models_dir: str | Path) -> dict[int, Path]:
    """The versions selection published under ``models_dir``: ``{N: <models_dir>/N}``.

    A version counts when ``<models_dir>/N/N/saved_model.pb`` exists (``N`` the same integer,
    digits only). Empty directories under a version's name (the kubelet makes one for a
    ``storageUri`` that names a version not published yet), staging directories and anything
    else are left out.

    Args:
        models_dir: e.g. ``work/models/fashion-mnist`` (a missing directory holds none).

    Returns:
        Each published version's TF Serving base path, by version.
    """
    base = Path(models_dir)
    found = {}
    for entry in base.iterdir() if base.is_dir() else ():
        version = parse_version(entry.name)
        if version is not None and (entry / entry.name / "saved_model.pb").is_file():
            found[version] = entry
    return found


def latest_published(models_dir: str | Path) -> tuple[int, Path]:
    """The highest version selection published under ``models_dir`` (see
    :func:`published_versions`): ``(version, base path)``, the base path to give the model server
    (``--model_base_path``), as the InferenceService's ``storageUri`` names one version.

    Raises:
        ModelVersionNotFoundError: nothing published there.
    """
    versions = published_versions(models_dir)
    if not versions:
        raise ModelVersionNotFoundError(
            f"no published version <N>/<N>/saved_model.pb under {str(models_dir)!r}; "
            "publish a model first (make demo / training.select)"
        )
    version = max(versions)
    return version, versions[version]


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
            f"no version directory <integer>/saved_model.pb under {str(base)!r}: the model "
            "version this server was given is not published there (an InferenceService's "
            "storageUri naming a version that is not on the volume; publish it first: make demo "
            "/ training.select, or promote one that is: scripts/promote.sh)"
        )
    return max(versions)
