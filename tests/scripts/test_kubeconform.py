"""scripts/kubeconform.sh and `make kubeconform`: the kubeconform `make validate` and `make test`
run is the pinned one (versions.env KUBECONFORM_VERSION), given (``KUBECONFORM``), cached or on
PATH, and only when none is found is it built, the one step that needs Go. Fakes print a
version the way kubeconform's ``-v`` does; PATH is stripped of Go to show it is not needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from validation.render import parse_versions_env
from validation.schemas import kubeconform_path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "kubeconform.sh"
PINNED = parse_versions_env(REPO / "versions.env")["KUBECONFORM_VERSION"]


def _fake(directory: Path, version: str) -> Path:
    """An executable ``kubeconform`` in ``directory`` whose ``-v`` prints ``version``."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / "kubeconform"
    exe.write_text(f'#!/bin/sh\n[ "$1" = -v ] && echo {version}\nexit 0\n')
    exe.chmod(0o755)
    return exe


def _path_without_go(*first: Path) -> str:
    """PATH with ``first`` in front and no directory that holds a ``go`` (nor a kubeconform)."""
    keep = [
        d for d in os.environ["PATH"].split(os.pathsep)
        if d and not (Path(d) / "go").exists() and not (Path(d) / "kubeconform").exists()
    ]  # fmt: skip
    return os.pathsep.join([*map(str, first), *keep])


def _run(argv: list[str], tmp_path: Path, path: str, **env: str) -> subprocess.CompletedProcess:
    """``argv`` with an empty tools cache (nothing built), PATH ``path`` and ``env``."""
    base = {k: v for k, v in os.environ.items() if k != "KUBECONFORM"}
    full = {**base, "FMNIST_TOOLS_CACHE": str(tmp_path / "cache"), "PATH": path, **env}
    return subprocess.run(argv, capture_output=True, text=True, env=full, cwd=REPO, timeout=120)


def test_a_given_kubeconform_of_the_pinned_version_needs_no_go(tmp_path):
    """``make kubeconform`` with KUBECONFORM set and no Go on PATH succeeds, and so does
    scripts/validate.sh with it (the kubeconform `make test` built or found)."""
    assert shutil.which("go", path=_path_without_go()) is None
    real = kubeconform_path(REPO)
    proc = _run(["make", "-s", "kubeconform"], tmp_path, _path_without_go(), KUBECONFORM=real)
    assert proc.returncode == 0, proc.stderr
    out = _run([str(SCRIPT)], tmp_path, _path_without_go(), KUBECONFORM=real)
    assert out.returncode == 0 and out.stdout.strip() == real, out.stderr
    # the validator through it, offline as `make test` runs it (MIRROR_DIR's schemas)
    check = _run(
        [str(REPO / "scripts" / "validate.sh"), "base/platform/knative-config"],
        tmp_path, _path_without_go(), KUBECONFORM=real,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("given", ["v0.0.1", ""])
def test_a_given_kubeconform_of_another_version_is_refused_naming_both(tmp_path, given):
    fake = _fake(tmp_path / "bin", given)
    proc = _run(["make", "-s", "kubeconform"], tmp_path, _path_without_go(), KUBECONFORM=str(fake))
    assert proc.returncode != 0
    assert f"KUBECONFORM={fake}" in proc.stderr and f"{PINNED} is pinned" in proc.stderr
    assert (given or "(no version from -v)") in proc.stderr
    proc = _run([str(SCRIPT)], tmp_path, _path_without_go(), KUBECONFORM=str(tmp_path))
    assert proc.returncode == 1 and "is not an executable file" in proc.stderr


def test_one_on_path_of_the_pinned_version_is_used_another_passed_over(tmp_path):
    good = _fake(tmp_path / "good", PINNED)
    proc = _run([str(SCRIPT), "--find"], tmp_path, _path_without_go(good.parent))
    assert proc.returncode == 0 and proc.stdout.strip() == str(good), proc.stderr
    old = _fake(tmp_path / "old", "v0.6.0")
    proc = _run([str(SCRIPT), "--find"], tmp_path, _path_without_go(old.parent))
    assert proc.returncode == 0 and proc.stdout == ""
    assert f"{old} is kubeconform 'v0.6.0', not the pinned {PINNED}: passed over" in proc.stderr


def test_with_none_found_and_no_go_it_says_what_to_set(tmp_path):
    proc = _run([str(SCRIPT)], tmp_path, _path_without_go())
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"no kubeconform {PINNED}" in proc.stderr and "and no Go to build one" in proc.stderr
    assert "set KUBECONFORM to the path of a kubeconform" in proc.stderr, proc.stderr
