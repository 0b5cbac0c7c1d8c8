"""Start ``python -m serving.server`` as a subprocess on a free loopback port (the local
pipeline, local load tests, benchmarks, tests).

    with LocalServer("work/models/fashion-mnist/1", log_path="work/reports/server.log") as server:
        predictions = serving.client.predict(server.url, images)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from fmnist_common import LOOPBACK, MODEL_NAME, free_ports, model_path, predict_path


class ServerStartError(RuntimeError):
    """The server process exited or did not become ready in time."""


class LocalServer:
    """The model server as a child process bound to 127.0.0.1.

    Args:
        model_base_path: directory with ``<version>/saved_model.pb``.
        model_name: model name in the URL.
        port: TCP port (default: a free one).
        extra_args: more ``serving.server`` options, e.g. ``["--max_batch_size", "16"]``.
        log_path: file for the server's stdout/stderr (default: discarded).
        ready_timeout: seconds to wait for ``GET /v1/models/<name>`` to answer 200.
    """

    def __init__(
        self,
        model_base_path: str | Path,
        model_name: str = MODEL_NAME,
        port: int | None = None,
        extra_args: list[str] | None = None,
        log_path: str | Path | None = None,
        ready_timeout: float = 90.0,
    ):
        self.model_base_path = Path(model_base_path)
        self.model_name = model_name
        self.port = port or free_ports(1)[0]
        self.extra_args = list(extra_args or [])
        self.log_path = Path(log_path) if log_path else None
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123``."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def predict_url(self) -> str:
        """``<url>/v1/models/<name>:predict``."""
        return self.url + predict_path(self.model_name)

    def command(self) -> list[str]:
        """The server's command line."""
        return [
            sys.executable,
            "-m",
            "serving.server",
            "--model_name",
            self.model_name,
            "--model_base_path",
            str(self.model_base_path),
            "--http_port",
            str(self.port),
            "--http_host",
            LOOPBACK,
            "--enable_grpc",
            "false",
            *self.extra_args,
        ]

    def start(self) -> LocalServer:
        """Start the process and wait until the model is ready.

        Raises:
            ServerStartError: the process exited (its exit code and log tail in the message) or
                was not ready within ``ready_timeout`` seconds.
        """
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "wb")  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(
            self.command(),
            stdout=self._log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + self.ready_timeout
        ready_url = self.url + model_path(self.model_name)
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                self.stop()
                raise ServerStartError(f"model server exited with code {code}{self._last_line()}")
            try:
                with urllib.request.urlopen(ready_url, timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.25)
        self.stop()
        raise ServerStartError(
            f"model server not ready after {self.ready_timeout:.0f} s{self._last_line()}"
        )

    def _last_line(self) -> str:
        """``"; last log line: ... (log: <path>)"``, or ``""`` without a log file."""
        if not self.log_path or not self.log_path.exists():
            return ""
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        last = lines[-1][:300] if lines else "(empty)"
        return f"; last log line: {last} (log: {self.log_path})"

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (graceful), then SIGKILL after ``timeout`` s; returns the exit code."""
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
            code = self.proc.returncode
        if self._log:
            self._log.close()
            self._log = None
        return code

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
