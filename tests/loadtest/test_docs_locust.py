"""The Locust command of docs/load-testing.md, run for real against a local model server.

Only what must change on this machine is overridden (appended, so Locust's parser takes the
later value): the target (``--host`` = a model server on 127.0.0.1, no Host header), a free web
port, stage lengths of a few seconds and the report paths. Everything else, the web UI kept on
for the observer in particular, is the documented command as written.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request

from docs_commands import ROOT, all_commands


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _documented_locust_commands():
    return [c for c in all_commands() if c.program == ".venv/bin/locust"]


def test_docs_show_a_locust_command_that_keeps_the_web_ui():
    commands = _documented_locust_commands()
    assert commands, "docs/load-testing.md shows the Locust command"
    for cmd in commands:
        assert "--headless" not in cmd.words, (
            f"{cmd.source}:{cmd.line}: --headless turns off /stats/requests (the observer reads it)"
        )


def test_documented_locust_command_runs(shared_server, payload_file, tmp_path):
    cmd = _documented_locust_commands()[0]
    web_port = _free_port()
    argv = [
        str(ROOT / cmd.program),
        *cmd.words[1:],
        "--host", shared_server.url, "--host-header", "",
        "--web-port", str(web_port), "--web-host", "127.0.0.1",
        "--peak-users", "2", "--ramp-up-s", "2", "--hold-s", "6", "--ramp-down-s", "1",
        "--idle-s", "1", "--autoquit", "2", "--payload-file", str(payload_file),
        "--csv", str(tmp_path / "locust"), "--html", str(tmp_path / "locust.html"),
    ]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    stats = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                url = f"http://127.0.0.1:{web_port}/stats/requests"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    body = json.load(resp)
                if body.get("user_count", 0) > 0:
                    stats = body
            except OSError:
                pass
            time.sleep(0.5)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out.decode()[-2000:]
    assert stats is not None, "the observer's endpoint /stats/requests never showed users"
    rows = (tmp_path / "locust_stats.csv").read_text().splitlines()
    assert any("/v1/models/[name]:predict" in row for row in rows), rows
