"""The pipeline's opt-in write-back (the WorkflowTemplate's ``write-back`` script, issue 50
item 2): run by bash here as Argo runs it (its ``source``, its container's environment), with
the Secret's keys as files, against a bare git repository holding the overlays' environment
files (a ``file://`` URL: git's own transport; the e2e pushes through the run's git server and
Argo CD syncs the commit, tests/e2e/test_argocd.py).

Not here: the SSH and HTTPS transports themselves (git's); the credential helper is checked by
asking git for the credentials it would send.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from git_repo import git

REPO = Path(__file__).resolve().parents[2]
WFT = REPO / "base" / "ml" / "pipeline" / "workflowtemplate.yaml"
ENV_FILE = "overlays/local-k3d/environment.yaml"


def template() -> dict:
    (wft,) = [d for d in yaml.safe_load_all(WFT.read_text()) if d]
    (t,) = [t for t in wft["spec"]["templates"] if t["name"] == "write-back"]
    return t


@pytest.fixture
def remote(tmp_path) -> Path:
    """A bare repository (the forge) whose main holds the overlays, committed."""
    work = tmp_path / "work"
    shutil.copytree(REPO / "overlays", work / "overlays")
    git(work.parent, "init", "-q", "-b", "main", str(work))
    git(work, "add", ".")
    git(work, "commit", "-qm", "initial")
    bare = tmp_path / "forge.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    return bare


def secret(tmp_path: Path, **keys: str) -> Path:
    d = tmp_path / "secret"
    d.mkdir(exist_ok=True)
    for k, v in keys.items():
        (d / k).write_text(v)
    return d


def write_back(tmp_path: Path, secret_dir: Path, version: str) -> subprocess.CompletedProcess:
    """The step as Argo runs it: bash with the script's source, its env (HOME an empty
    directory, as the template's emptyDir), the workflow parameters substituted."""
    t = template()
    home = tmp_path / f"home-{len(list(tmp_path.glob('home-*')))}"
    home.mkdir()
    env = {e["name"]: e["value"] for e in t["script"]["env"]}
    assert env["VERSION"] == "{{inputs.parameters.version}}" and env["SECRET_DIR"] == "/secret"
    env.update(VERSION=version, RUN="fashion-mnist-pipeline-x7k2p", SECRET_NAME="wb",
               SECRET_DIR=str(secret_dir), HOME=str(home))  # fmt: skip
    keep = {k: os.environ[k] for k in ("PATH", "LANG") if k in os.environ}
    return subprocess.run(
        t["script"]["command"], input=t["script"]["source"], env={**keep, **env},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def served(bare: Path) -> tuple[str, str]:
    data = yaml.safe_load(git(bare, "show", f"main:{ENV_FILE}"))["data"]
    return data["model-version"], data["canary-traffic-percent"]


def subjects(bare: Path) -> list[str]:
    return git(bare, "log", "--format=%s", "main").splitlines()


def test_a_published_version_is_pushed_as_a_promotion_commit(tmp_path, remote):
    s = secret(tmp_path, url=f"file://{remote}", path=ENV_FILE)
    proc = write_back(tmp_path, s, "2")
    assert proc.returncode == 0, proc.stderr
    assert "pushed local-k3d model-version 2" in proc.stdout
    assert served(remote) == ("2", "100")
    assert subjects(remote) == [
        "promote local-k3d: serve model version 2 (was 1; written back by workflow "
        "fashion-mnist-pipeline-x7k2p)",
        "initial",
    ]
    assert git(remote, "show", "--name-only", "--format=", "main").split() == [ENV_FILE]
    # the same version again: nothing to push
    proc = write_back(tmp_path, s, "2")
    assert proc.returncode == 0 and "names version 2 already" in proc.stdout, proc.stderr
    assert len(subjects(remote)) == 2


def test_a_running_canary_and_bad_input_are_refused_and_push_nothing(tmp_path, remote):
    work = tmp_path / "edit"
    git(tmp_path, "clone", "-q", str(remote), str(work))
    text = (work / ENV_FILE).read_text()
    (work / ENV_FILE).write_text(
        text.replace('canary-traffic-percent: "100"', 'canary-traffic-percent: "20"')
    )
    git(work, "commit", "-qam", "canary")
    git(work, "push", "-q", "origin", "main")
    good = {"url": f"file://{remote}", "path": ENV_FILE}
    proc = write_back(tmp_path, secret(tmp_path, **good), "3")
    assert proc.returncode == 1 and "a canary runs (version 1 at 20 %)" in proc.stderr
    for i, (version, keys, why) in enumerate(
        [
            ("1e+06", good, "'1e+06' is no published version"),
            ("", good, "'' is no published version"),
            ("3", {"url": good["url"]}, "the Secret wb has no 'path'"),
            ("3", {}, "the Secret wb has no 'url' (is it in this namespace?)"),  # none mounted
            ("3", {**good, "path": "../x/environment.yaml"}, "is not overlays/<env>/environment"),
            ("3", {**good, "sshPrivateKey": "key"}, "sshPrivateKey needs sshKnownHosts"),
            ("3", {**good, "branch": "nowhere"}, "nowhere"),
        ]
    ):
        d = tmp_path / f"secret-{i}"
        d.mkdir()
        for k, v in keys.items():
            (d / k).write_text(v)
        proc = write_back(tmp_path, d, version)
        assert proc.returncode != 0 and why in proc.stderr, (version, keys, proc.stderr)
    assert subjects(remote) == ["canary", "initial"]


def edit_remote(tmp_path: Path, remote: Path, old: str, new: str) -> None:
    """Another commit on the forge's main: ``old`` replaced by ``new`` in the environment."""
    work = tmp_path / f"edit-{len(list(tmp_path.glob('edit-*')))}"
    git(tmp_path, "clone", "-q", str(remote), str(work))
    text = (work / ENV_FILE).read_text()
    assert old in text
    (work / ENV_FILE).write_text(text.replace(old, new))
    git(work, "commit", "-qam", f"{old} -> {new}")
    git(work, "push", "-q", "origin", "main")


def test_only_a_newer_version_is_written_and_an_aborted_canary_is_ended(tmp_path, remote):
    """Forward only: git naming version 7 (a promotion) refuses a write-back of 2, and of
    10 against 9 compares as numbers; after a canary's --abort (share 0), the written version
    gets every request (100), as promote.sh VERSION gives it."""
    s = secret(tmp_path, url=f"file://{remote}", path=ENV_FILE)
    edit_remote(tmp_path, remote, 'model-version: "1"', 'model-version: "7"')
    proc = write_back(tmp_path, s, "2")
    assert proc.returncode == 1 and "names version 7, newer than 2" in proc.stderr
    assert served(remote) == ("7", "100")
    edit_remote(tmp_path, remote, 'model-version: "7"', 'model-version: "9"')
    edit_remote(tmp_path, remote, 'canary-traffic-percent: "100"', 'canary-traffic-percent: "0"')
    proc = write_back(tmp_path, s, "10")
    assert proc.returncode == 0, proc.stderr
    assert served(remote) == ("10", "100")
    assert subjects(remote)[0].startswith("promote local-k3d: serve model version 10 (was 9;")


def test_a_refused_push_is_fetched_and_retried(tmp_path, remote):
    """A push that loses (here: the forge refuses the first one, as it would a push behind
    another's commit) is fetched again and retried."""
    hook = remote / "hooks" / "pre-receive"
    count = tmp_path / "pushes"
    hook.write_text(f"#!/bin/sh\necho x >> {count}\n[ $(wc -l < {count}) -gt 1 ]\n")
    hook.chmod(0o755)
    proc = write_back(tmp_path, secret(tmp_path, url=f"file://{remote}", path=ENV_FILE), "4")
    assert proc.returncode == 0, proc.stderr
    assert "push 1 refused" in proc.stderr and served(remote) == ("4", "100")
    assert len(count.read_text().split()) == 2


def test_https_credentials_come_from_the_secret_when_git_asks(tmp_path, remote):
    s = secret(tmp_path, url=f"file://{remote}", path=ENV_FILE, username="bot",
               password="token-123")  # fmt: skip
    proc = write_back(tmp_path, s, "2")
    assert proc.returncode == 0, proc.stderr
    (home,) = tmp_path.glob("home-*")
    asked = subprocess.run(
        ["git", "credential", "fill"], input="protocol=https\nhost=git.example.com\n\n",
        env={"PATH": os.environ["PATH"], "HOME": str(home), "SECRET_DIR": str(s),
             "GIT_TERMINAL_PROMPT": "0"},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert "username=bot" in asked.stdout and "password=token-123" in asked.stdout, asked
    assert "token-123" not in (home / ".gitconfig").read_text()


def test_a_push_refused_then_a_failed_fetch_fails_the_step(tmp_path, remote):
    """The forge refuses the push and cannot be fetched again: the step fails (it must not
    read its own unpushed commit as git's and report the version written)."""
    link = tmp_path / "forge-link.git"
    link.symlink_to(remote)
    hook = remote / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\nrm -f {link}\nexit 1\n")
    hook.chmod(0o755)
    proc = write_back(tmp_path, secret(tmp_path, url=f"file://{link}", path=ENV_FILE), "5")
    assert proc.returncode == 1 and "fetching main again failed" in proc.stderr, proc.stderr
    assert served(remote) == ("1", "100")
