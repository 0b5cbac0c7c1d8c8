"""Leftovers of killed runs (selection's .staging-* copies, workers' workertemp_* scratch) are
removed by the next run, and only when provably stale: real processes are killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from training import select, train
from training.leftovers import make_owned_dir, release_dir, remove_stale_dirs
from training.tf_config import TaskInfo

HERE = Path(__file__).parent


def _start(*args: str) -> tuple[subprocess.Popen, Path]:
    """Start leftover_maker.py; returns the process and the directory it made."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "leftover_maker.py"), *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line, f"leftover_maker exited with {proc.wait()}"
    return proc, Path(line.split(" ", 1)[1].strip())


def _kill9(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.fixture
def candidate(tmp_path) -> Path:
    path = tmp_path / "candidates" / "cnn"
    (path / "variables").mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(b"pb")
    (path / "variables" / "variables.index").write_bytes(b"ix")
    return path


def test_selections_killed_while_copying_leave_nothing_behind(candidate, tmp_path):
    base = tmp_path / "models" / "fashion-mnist"
    killed = [_start("select", str(candidate), str(base)) for _ in range(3)]
    live, live_dir = _start("select", str(candidate), str(base))
    try:
        for proc, staging in killed:
            assert staging.name.startswith(".staging-1-") and staging.is_dir()
            _kill9(proc)
        version, target = select.publish(candidate, base)
        assert (version, target) == (1, base / "1")
        assert sorted(p.name for p in target.iterdir()) == ["1", "selection.json"]
        assert sorted(p.name for p in (target / "1").iterdir()) == ["saved_model.pb", "variables"]
        assert target.stat().st_mode & 0o777 == candidate.stat().st_mode & 0o777  # not 0o700
        assert not any(staging.exists() for _, staging in killed)
        assert live_dir.is_dir(), "a running selection's copy was removed"
    finally:
        _kill9(live)
    assert select.publish(candidate, base)[0] == 2
    assert sorted(p.name for p in base.iterdir()) == ["1", "2"]


def test_scratch_of_workers_killed_with_sigkill_is_removed(tmp_path, monkeypatch):
    killed = [_start("worker", str(tmp_path)) for _ in range(2)]
    live, live_dir = _start("worker", str(tmp_path))
    try:
        for proc, scratch in killed:
            assert scratch.name.startswith("workertemp_worker_1_") and scratch.parent == tmp_path
            _kill9(proc)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        task = TaskInfo({"worker": ["a:1", "b:1"]}, "worker", 1)
        args = train.build_parser().parse_args(
            ["--model-type", "cnn", "--saved-model-dir", "x", "--checkpoint-dir", "y"]
        )
        mine = train.run_dirs(args, task)["scratch"]
        assert not any(scratch.exists() for _, scratch in killed)
        assert live_dir.is_dir() and mine.is_dir()
        assert sorted(tmp_path.iterdir()) == sorted([live_dir, mine])
        release_dir(mine)
    finally:
        _kill9(live)


def test_keras_temp_dirs_of_this_replica_killed_mid_save_are_removed(tmp_path, monkeypatch):
    """tf-keras has a non-chief write each epoch's checkpoint and backup to
    ``workertemp_<task index>`` beside the chief's, then removes it: a replica killed between
    the two left it on the shared volume. The re-created replica of that index removes its own,
    and nothing of the chief's or of another replica."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "local"))
    (tmp_path / "local").mkdir()
    args = train.build_parser().parse_args(
        ["--model-type", "cnn", "--saved-model-dir", "x", "--checkpoint-dir", str(tmp_path)]
    )
    ckpt = train.checkpoint_dir(args)
    for sub in ("epoch-001/workertemp_1", "backup/workertemp_1", "epoch-001/workertemp_2"):
        (ckpt / sub / "weights.index").parent.mkdir(parents=True)
        (ckpt / sub / "weights.index").write_bytes(b"")
    (ckpt / "epoch-001" / "weights.index").write_bytes(b"")  # the chief's
    (ckpt / "backup" / "chief").mkdir()
    task = TaskInfo({"worker": ["a:1", "b:1", "c:1"]}, "worker", 1)
    release_dir(train.run_dirs(args, task)["scratch"])
    assert sorted(p.relative_to(ckpt).as_posix() for p in ckpt.glob("*/*")) == [
        "backup/chief",
        "epoch-001/weights.index",
        "epoch-001/workertemp_2",
    ]


def test_staging_of_a_chief_killed_while_exporting_is_removed(tmp_path, monkeypatch):
    from training import export

    candidates = tmp_path / "candidates"
    killed = [_start("chief", str(candidates)) for _ in range(2)]
    for proc, staging in killed:
        assert staging.name.startswith(".staging-cnn-") and staging.parent == candidates
        _kill9(proc)

    def fake_export(model, export_dir, **_):
        Path(export_dir, "saved_model.pb").write_bytes(b"complete")

    monkeypatch.setattr(export, "export_saved_model", fake_export)
    out = train.export_candidate(None, candidates / "cnn", TaskInfo(), candidates, False)
    assert out == candidates / "cnn" and sorted(p.name for p in candidates.iterdir()) == ["cnn"]
    assert sorted(p.name for p in out.iterdir()) == ["saved_model.pb"]  # no lock file inside
    assert out.stat().st_mode & 0o777 == 0o777 & ~_umask()  # as mkdir makes it, not 0700


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_only_provably_stale_directories_are_removed(tmp_path):
    unlocked = tmp_path / "workertemp_old_format"  # no lock file: cannot tell, keep it
    unlocked.mkdir()
    mine = make_owned_dir(tmp_path, "workertemp_")  # held by this live process
    plain_file = tmp_path / "workertemp_file"
    plain_file.write_text("x")
    assert remove_stale_dirs(tmp_path, "workertemp_*") == []
    assert unlocked.is_dir() and mine.is_dir() and plain_file.is_file()
    release_dir(mine, remove_lock_file=False)  # as if this process had died
    assert remove_stale_dirs(tmp_path, "workertemp_*") == [mine]
    assert remove_stale_dirs(tmp_path / "missing", "x*") == []


def test_a_candidate_appears_with_its_history_or_not_at_all(tmp_path, monkeypatch):
    """The chief writes training_history.json into the staging directory: a failure while
    writing it (here a history JSON cannot hold) publishes nothing and leaves no staging
    directory (without its lock file no later run could prove it stale); a success publishes
    both."""
    from training import export

    def fake_export(model, export_dir, **_):
        Path(export_dir, "saved_model.pb").write_bytes(b"complete")

    monkeypatch.setattr(export, "export_saved_model", fake_export)
    candidates = tmp_path / "candidates"
    with pytest.raises(TypeError):
        train.export_candidate(
            None, candidates / "cnn", TaskInfo(), candidates, False, {"bad": object()}
        )
    assert list(candidates.iterdir()) == []  # no candidate, and no staging left behind
    out = train.export_candidate(None, candidates / "cnn", TaskInfo(), candidates, False, {"a": 1})
    assert sorted(p.name for p in out.iterdir()) == ["saved_model.pb", train.HISTORY_FILE]
    assert json.loads((out / train.HISTORY_FILE).read_text()) == {"a": 1}
