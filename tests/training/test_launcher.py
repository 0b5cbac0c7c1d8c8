"""The local launcher: TF_CONFIG (TFJob) or MASTER_ADDR/.../RANK (PyTorchJob) per replica,
prefixed logs, fail-fast."""

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from training.launcher import LaunchError, cluster_spec, launch, replica_envs
from training.pytorchjob import DistEnvError, parse_dist_env

HERE = Path(__file__).parent


def _launch(args, **kw):
    out = io.StringIO()
    env = {"PYTHONPATH": str(HERE)}
    seconds = launch(args, module="fake_replica", env=env, out=out, **kw)
    return seconds, out.getvalue()


def test_cluster_specs():
    workers = cluster_spec(3)
    assert list(workers) == ["worker"] and len(workers["worker"]) == 3
    assert all(a.startswith("127.0.0.1:") for a in workers["worker"])
    assert len(set(workers["worker"])) == 3
    chief = cluster_spec(3, with_chief=True)
    assert len(chief["chief"]) == 1 and len(chief["worker"]) == 2
    with pytest.raises(ValueError):
        cluster_spec(1, with_chief=True)
    with pytest.raises(ValueError):
        cluster_spec(0)


def test_every_replica_gets_its_tf_config_and_a_log_prefix():
    _, out = _launch(["--x", "1"], num_workers=2, with_chief=True, name="demo")
    assert "[demo/chief-0] replica chief-0 up, pid=" in out
    assert "args=['--x', '1']" in out
    assert "[demo/worker-0] replica worker-0 up" in out


def test_fails_fast_and_names_the_failed_replica():
    t0 = time.perf_counter()
    with pytest.raises(LaunchError) as err:
        _launch(["--fail"], num_workers=3, name="cnn")
    assert time.perf_counter() - t0 < 60, "the other replicas (sleeping 300 s) were not stopped"
    msg = str(err.value)
    assert "replica worker-1 exited with code 3" in msg
    assert "simulated crash in worker 1" in msg


def test_pytorchjob_replicas_get_the_operators_environment():
    """training-operator v1.9.4: the Master is rank 0, Worker i is rank i + 1, WORLD_SIZE counts
    every replica, all point at the Master's one port."""
    envs = replica_envs("pytorchjob", 3)
    assert [name for name, _ in envs] == ["master-0", "worker-0", "worker-1"]
    parsed = [parse_dist_env(env) for _, env in envs]
    assert [(e.rank, e.world_size) for e in parsed] == [(0, 3), (1, 3), (2, 3)]
    assert {(e.master_addr, e.master_port) for e in parsed} == {
        ("127.0.0.1", parsed[0].master_port)
    }
    for bad in [{"num_workers": 0}, {"num_workers": 2, "with_chief": True}]:
        with pytest.raises(ValueError):
            replica_envs("pytorchjob", **bad)
    with pytest.raises(ValueError, match="unknown job"):
        replica_envs("mpijob", 2)


def test_pytorchjob_fails_fast_and_names_the_failed_rank():
    out = io.StringIO()
    env = {"PYTHONPATH": str(HERE)}
    _ = launch(
        ["--x"], num_workers=2, job="pytorchjob", module="fake_torch_replica", env=env, out=out
    )
    assert "[train/master-0] rank 0 of 2 up, master 127.0.0.1:" in out.getvalue()
    assert "[train/worker-0] rank 1 of 2 up" in out.getvalue()
    t0 = time.perf_counter()
    with pytest.raises(LaunchError, match="replica worker-1 exited with code 3"):
        launch(["--fail"], 3, job="pytorchjob", module="fake_torch_replica", env=env, out=out)
    assert time.perf_counter() - t0 < 60, "the other replicas (sleeping 300 s) were not stopped"


def test_a_missing_pytorchjob_environment_names_the_worker_only_case():
    with pytest.raises(DistEnvError, match="Worker-only job gets none") as err:
        parse_dist_env({})
    assert str(err.value).startswith("MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK are not set")
    assert "\n" not in str(err.value)


def test_launcher_cli_exit_code(capsys):
    from training.launcher import cli

    rc = cli(["--num-workers", "2", "--name", "x", "--", "--x"])
    # real training module with a bad flag: argparse exits 2 in every replica
    assert rc == 1
    assert "exited with code 2" in capsys.readouterr().err


def test_sigterm_to_the_launcher_stops_every_replica():
    code = (
        "import sys; from training.launcher import launch; "
        "launch(['--sleep'], num_workers=2, module='fake_replica', "
        f"env={{'PYTHONPATH': {str(HERE)!r}}})"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    pids = []
    deadline = time.monotonic() + 60
    while len(pids) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "pid=" in line:
            pids.append(int(line.split("pid=")[1].split(",")[0]))
    assert len(pids) == 2, "replicas did not start"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) != 0
    time.sleep(0.5)
    alive = [pid for pid in pids if _alive(pid)]
    assert alive == [], f"replicas {alive} outlived the launcher"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its dead parent's init) counts as stopped
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-3", "soon"])
def test_a_timeout_that_never_or_always_fires_is_a_usage_error(value, capsys):
    from training.launcher import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--timeout", value, "--", "--model-type", "cnn"])
    assert exc.value.code == 2
    assert "--timeout" in capsys.readouterr().err
    assert build_parser().parse_args(["--timeout", "2.5"]).timeout == 2.5


def test_each_replica_gets_its_share_of_the_cores_for_tf_and_torch(tmp_path, monkeypatch):
    """TF_NUM_INTRAOP_THREADS and OMP_NUM_THREADS (torch's) are the launcher's threads per
    replica unless the caller sets them."""
    (tmp_path / "print_threads.py").write_text(
        "import os\nprint('threads', os.environ['TF_NUM_INTRAOP_THREADS'], "
        "os.environ['OMP_NUM_THREADS'])\n"
    )
    monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    want = str(max(1, (os.cpu_count() or 1) // 2))
    for job in ("tfjob", "pytorchjob"):
        out = io.StringIO()
        env = {"PYTHONPATH": str(tmp_path)}
        launch([], 2, module="print_threads", env=env, out=out, job=job)
        lines = [line.split()[-2:] for line in out.getvalue().splitlines() if " threads " in line]
        assert len(lines) == 2 and all(pair == [want, want] for pair in lines), out.getvalue()
    # the caller's env= and the outer environment win over the defaults; PYTHONUNBUFFERED too
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "5")
    monkeypatch.setenv("PYTHONUNBUFFERED", "")
    (tmp_path / "print_threads.py").write_text(
        "import os\nprint('threads', os.environ['TF_NUM_INTRAOP_THREADS'], "
        "os.environ['OMP_NUM_THREADS'], repr(os.environ['PYTHONUNBUFFERED']))\n"
    )
    out = io.StringIO()
    launch([], 2, module="print_threads", env={**env, "OMP_NUM_THREADS": "3"}, out=out)
    lines = [line.split()[-3:] for line in out.getvalue().splitlines() if " threads " in line]
    assert lines == [["5", "3", "''"]] * 2, out.getvalue()
