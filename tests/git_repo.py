"""A git command for tests that make repositories of their own (scripts that commit:
promote.sh, build-image.sh, the pipeline's write-back), with a fixed author and committer."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
}  # fmt: skip


def git(cwd: Path, *args: str) -> str:
    """``git ARGS`` in ``cwd`` as the test author; its stdout. Raises CalledProcessError."""
    return subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV},
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
