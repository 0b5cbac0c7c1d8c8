"""scripts/promote.sh: a promotion, a canary and its end are commits of one environment value,
made only for a version that selection published (issue 50 items 2 and 3).

Each test runs the script in a git clone of this repository's scripts and overlays, against a
models directory laid out as selection publishes (``<N>/<N>/saved_model.pb`` beside
``<N>/selection.json``); the cluster form reads the same files through a pod and runs in the
e2e (tests/e2e/test_argocd.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from git_repo import GIT_ENV, git

REPO = Path(__file__).resolve().parents[2]
ENV_FILE = "overlays/local-k3d/environment.yaml"


@pytest.fixture
def clone(tmp_path) -> Path:
    """A git repository holding this one's scripts, versions.env and overlays, committed."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("scripts", "overlays"):
        shutil.copytree(REPO / name, root / name)
    shutil.copy(REPO / "versions.env", root)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    return root


@pytest.fixture
def models(tmp_path) -> Path:
    """Versions 1-3 published (records and SavedModel files), 7 only an empty directory (what
    the kubelet makes for a storageUri ahead of its run), 8 a SavedModel without a record."""
    root = tmp_path / "models" / "fashion-mnist"
    for v in (1, 2, 3):
        (root / str(v) / str(v)).mkdir(parents=True)
        (root / str(v) / str(v) / "saved_model.pb").write_bytes(b"pb")
        record = {"version": v, "model": "cnn", "accuracy": 0.9}
        (root / str(v) / "selection.json").write_text(json.dumps(record))
    (root / "7").mkdir()
    (root / "8" / "8").mkdir(parents=True)
    (root / "8" / "8" / "saved_model.pb").write_bytes(b"pb")
    return root


def promote(clone: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **GIT_ENV, "KUBECONFIG": str(clone / "no-cluster")}
    return subprocess.run(
        ["bash", str(clone / "scripts" / "promote.sh"), *args],
        cwd=clone, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def values(clone: Path) -> tuple[str, str]:
    data = yaml.safe_load((clone / ENV_FILE).read_text())["data"]
    return data["model-version"], data["canary-traffic-percent"]


def commits(clone: Path) -> list[str]:
    return git(clone, "log", "--format=%s").splitlines()


def test_a_promotion_is_one_commit_of_the_environment_value(clone, models):
    proc = promote(clone, "local-k3d", "2", "--models-dir", str(models))
    assert proc.returncode == 0, proc.stderr
    assert values(clone) == ("2", "100")
    assert commits(clone)[0] == "promote local-k3d: serve model version 2 (was 1)"
    assert git(clone, "show", "--name-only", "--format=", "HEAD").split() == [ENV_FILE]
    assert "passed selection" in proc.stderr and "next: git push" in proc.stderr
    # every comment and other value of the file kept: the diff is the one line
    diff = git(clone, "diff", "HEAD~", "HEAD", "-U0", "--", ENV_FILE)
    assert [x for x in diff.splitlines() if x[:1] in "+-" and x[:3] not in ("+++", "---")] == [
        '-  model-version: "1"', '+  model-version: "2"'
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        ("5", "version 5 is not published"),  # nothing there
        ("7", "version 7 is not published"),  # an empty directory
        ("8", "version 8 has no readable selection record"),  # not published by selection
        ("v2", "ASCII digits, 1 to"),
        ("0", "ASCII digits, 1 to"),
        ("9223372036854775808", "ASCII digits, 1 to"),
    ],
)
def test_a_version_that_selection_did_not_publish_is_refused(clone, models, version, reason):
    proc = promote(clone, "local-k3d", version, "--models-dir", str(models))
    assert proc.returncode == 1 and reason in proc.stderr, proc.stderr
    assert values(clone) == ("1", "100") and commits(clone) == ["initial"]


def test_canary_then_finish(clone, models):
    proc = promote(clone, "local-k3d", "3", "--canary", "20", "--models-dir", str(models))
    assert proc.returncode == 0, proc.stderr
    assert values(clone) == ("3", "20")
    assert commits(clone)[0] == "promote local-k3d: canary of model version 3 at 20 % (the rest: 1)"
    refused = promote(clone, "local-k3d", "2", "--models-dir", str(models))
    assert refused.returncode == 1 and "--finish or --abort it first" in refused.stderr
    proc = promote(clone, "local-k3d", "--finish")
    assert proc.returncode == 0, proc.stderr
    assert values(clone) == ("3", "100")
    again = promote(clone, "local-k3d", "--finish")
    assert again.returncode == 1 and "no canary running" in again.stderr


def test_abort_goes_back_to_the_version_before_the_canary(clone, models):
    """The version before the canary with a share of 0 (KServe's rollback: every request at once
    to the revision that served before), found from the commit that started the canary, however
    many commits came after it (an unrelated one, a hand edit of the canary's version, a
    whitespace change of the line)."""
    assert promote(clone, "local-k3d", "2", "--models-dir", str(models)).returncode == 0
    proc = promote(clone, "local-k3d", "3", "--canary", "5", "--models-dir", str(models))
    assert proc.returncode == 0, proc.stderr
    (clone / "README").write_text("a later commit that does not touch the environment")
    env = clone / ENV_FILE
    env.write_text(env.read_text().replace('model-version: "3"', 'model-version: "1"'))
    git(clone, "add", "README", ENV_FILE)
    git(clone, "commit", "-q", "-m", "unrelated, and a hand edit of the canary's version")
    env.write_text(
        env.read_text().replace('canary-traffic-percent: "5"', 'canary-traffic-percent: "5" ')
    )
    git(clone, "commit", "-q", "-am", "whitespace")
    proc = promote(clone, "local-k3d", "--abort")
    assert proc.returncode == 0, proc.stderr
    assert values(clone) == ("2", "0")
    assert commits(clone)[0] == "promote local-k3d: abort the canary of model version 1, back to 2"
    again = promote(clone, "local-k3d", "--abort")
    assert (
        again.returncode == 1 and "no canary running (canary-traffic-percent is 0)" in again.stderr
    )
    assert promote(clone, "local-k3d", "2", "--models-dir", str(models)).returncode == 0  # as is
    assert commits(clone)[0].startswith("promote local-k3d: abort")
    proc = promote(clone, "local-k3d", "3", "--models-dir", str(models))  # on from the rollback
    assert proc.returncode == 0, proc.stderr
    assert values(clone) == ("3", "100")


def test_abort_without_a_canary_start_in_history_is_refused(clone, models):
    env = clone / ENV_FILE
    env.write_text(
        env.read_text().replace('canary-traffic-percent: "100"', 'canary-traffic-percent: "30"')
    )
    git(clone, "commit", "-q", "-am", "a canary by hand, version unchanged")
    proc = promote(clone, "local-k3d", "--abort")
    assert proc.returncode == 1 and "is no other version than 1" in proc.stderr, proc.stderr
    assert values(clone) == ("1", "30")


def test_a_detached_head_is_refused_and_the_file_left_as_it_was(clone, models):
    git(clone, "checkout", "-q", "--detach")
    proc = promote(clone, "local-k3d", "2", "--models-dir", str(models))
    assert proc.returncode == 1 and "detached HEAD" in proc.stderr
    assert values(clone) == ("1", "100") and commits(clone) == ["initial"]


def test_a_revert_of_the_promotion_commit_is_the_rollback(clone, models):
    assert promote(clone, "local-k3d", "2", "--models-dir", str(models)).returncode == 0
    assert promote(clone, "local-k3d", "3", "--models-dir", str(models)).returncode == 0
    git(clone, "revert", "--no-edit", "HEAD")
    assert values(clone) == ("2", "100")


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["1", "--models-dir", "x"], "already serves version 1"),
        (["1", "--canary", "20"], "a canary needs another version"),
        (["001", "--models-dir", "x"], "already serves version 1"),
        (["2", "--canary", "100"], "a whole percent from 1 to 99"),
        (["2", "--canary", "0"], "a whole percent from 1 to 99"),
        (["--finish", "--canary", "5"], "--canary goes with a VERSION, not --finish"),
        (["--abort", "--models-dir", "x"], "--models-dir goes with a VERSION or --list"),
        (["--frobnicate"], "unknown option --frobnicate"),
        (["2", "--list"], "one of VERSION, --finish, --abort, --list (got promote and --list)"),
        (["--no-commit"], "VERSION (or --finish, --abort, --list) is required"),
    ],
)
def test_usage_errors_change_nothing(clone, args, reason):
    proc = promote(clone, "local-k3d", *args)
    assert reason in proc.stderr, proc.stderr
    assert proc.returncode == (0 if "already" in reason else 1)
    assert values(clone) == ("1", "100") and commits(clone) == ["initial"]


def test_help_anywhere(clone):
    for args in (["--help"], ["local-k3d", "--help"], ["local-k3d", "2", "-h"]):
        proc = promote(clone, *args)
        assert proc.returncode == 0 and "usage: scripts/promote.sh" in proc.stdout, args


def test_an_unknown_environment_and_an_edited_file_are_refused(clone, models):
    proc = promote(clone, "staging", "2", "--models-dir", str(models))
    assert proc.returncode == 1 and "no environment 'staging'" in proc.stderr
    env = clone / ENV_FILE
    env.write_text(env.read_text() + "  # an edit not committed\n")
    proc = promote(clone, "local-k3d", "2", "--models-dir", str(models))
    assert proc.returncode == 1 and "differs from git's HEAD" in proc.stderr
    assert commits(clone) == ["initial"]


def test_without_a_models_dir_the_cluster_is_asked_and_its_absence_named(clone):
    proc = promote(clone, "local-k3d", "2")
    assert proc.returncode == 1, proc.stderr
    assert values(clone) == ("1", "100") and commits(clone) == ["initial"]
    assert "refused" in proc.stderr or "kubectl" in proc.stderr, proc.stderr


def test_list_shows_each_published_version_and_the_one_git_names(clone, models):
    """``--list``: one row per version selection published (not the empty directory 7, and 8
    without its record shown with dashes), the version of ``model-version`` marked, its canary
    share too; listing needs no clean environment file and changes nothing."""
    proc = promote(clone, "local-k3d", "--models-dir", str(models), "--list")  # any order
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    assert header.split("\t")[:3] == ["VERSION", "MODEL", "ACCURACY"]
    table = {r.split("\t")[0]: r.split("\t") for r in rows}
    assert sorted(table, key=int) == ["1", "2", "3", "8"]
    assert table["1"][1:3] == ["cnn", "0.9000"] and table["1"][-1] == "model-version"
    assert table["2"][-1] == "" and table["8"][1:3] == ["-", "-"]
    assert (
        promote(clone, "local-k3d", "3", "--canary", "20", "--models-dir", str(models)).returncode
        == 0
    )
    (clone / ENV_FILE).write_text((clone / ENV_FILE).read_text() + "# not committed\n")
    table = {
        r.split("\t")[0]: r.split("\t")
        for r in promote(
            clone, "local-k3d", "--list", "--models-dir", str(models)
        ).stdout.splitlines()
    }
    assert table["3"][-1] == "model-version (canary at 20 %)"
    assert table["1"][-1] == "before the canary (80 %)" and table["2"][-1] == ""


def test_list_refuses_a_missing_directory_and_names_what_cannot_be_served(clone, models, tmp_path):
    """``--list`` of a directory that does not exist is an error, not an empty table; a version
    with a leading zero (no storageUri can name it) and the layout before ``<N>/<N>/`` are left
    out with a note; a record of other types (a string run_id, an integer accuracy) still
    lists."""
    proc = promote(clone, "local-k3d", "--list", "--models-dir", str(tmp_path / "nowhere"))
    assert proc.returncode == 1 and "no models directory" in proc.stderr, proc.stderr
    (models / "05" / "05").mkdir(parents=True)
    (models / "05" / "05" / "saved_model.pb").write_bytes(b"pb")
    (models / "4").mkdir()
    (models / "4" / "saved_model.pb").write_bytes(b"pb")
    (models / "2" / "selection.json").write_text(json.dumps({"run_id": "w", "accuracy": 1}))
    proc = promote(clone, "local-k3d", "--list", "--models-dir", str(models))
    assert proc.returncode == 0, proc.stderr
    table = {r.split("\t")[0]: r.split("\t") for r in proc.stdout.splitlines()[1:]}
    assert sorted(table, key=int) == ["1", "2", "3", "8"]
    assert table["2"][1:3] == ["-", "1.0000"] and table["2"][4] == "w"
    assert "05/ is no version a storageUri can name" in proc.stderr
    assert "4/ holds the layout before <N>/<N>/" in proc.stderr
