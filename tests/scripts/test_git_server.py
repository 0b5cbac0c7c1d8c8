"""tests/e2e/git_server.py, the e2e's git server, on loopback: clone and push over git's smart
HTTP protocol through ``git http-backend``, the post-receive hook's GitHub push event (its
HMAC-SHA256 signature and the fields Argo CD reads), and the requests it refuses."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import git_server  # noqa: E402 (the e2e's module, by path)
from git_server import GitServer, Webhook, git  # noqa: E402

SECRET = "s3cret"
AUTHOR = ["-c", "user.name=t", "-c", "user.email=t@example.com"]


class _Receiver(BaseHTTPRequestHandler):
    """A webhook receiver: records (signature valid, event) and answers 200 or 401."""

    got: list = []

    def do_POST(self):  # noqa: N802 (http.server's API)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        mac = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        ok = hmac.compare_digest(self.headers.get("X-Hub-Signature-256", ""), mac)
        self.got.append((ok, self.headers.get("X-GitHub-Event"), json.loads(body)))
        self.send_response(200 if ok else 401)
        self.end_headers()
        self.wfile.write(b"ok" if ok else b"Unauthorized")

    def log_message(self, *args):
        pass


@pytest.fixture
def served(tmp_path):
    _Receiver.got = []
    receiver = HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    (tmp_path / "repos").mkdir()
    server = GitServer(tmp_path / "repos", "127.0.0.1").start()
    url = f"http://127.0.0.1:{receiver.server_address[1]}/api/webhook"
    server.create("repo", Webhook(url, SECRET))
    yield server, tmp_path
    server.stop()
    receiver.shutdown()


def _commit(work: Path, name: str, text: str) -> str:
    (work / name).write_text(text)
    git("add", "-A", cwd=work)
    git(*AUTHOR, "commit", "-qm", name, cwd=work)
    return git("rev-parse", "HEAD", cwd=work).strip()


def _push(work: Path, *refspec: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "push", "origin", *(refspec or ("HEAD:main",))], cwd=work,
                          capture_output=True, text=True, check=False)  # fmt: skip


def test_a_push_is_served_and_announced_as_github_does(served):
    server, tmp = served
    work = tmp / "work"
    git("clone", "-q", server.url("repo"), str(work))
    first = _commit(work, "a.txt", "1")
    assert _push(work).returncode == 0
    _commit(work, "b.txt", "2")
    second = _commit(work, "a.txt", "changed")
    proc = _push(work)
    assert proc.returncode == 0, proc.stderr
    assert "webhook refs/heads/main: 200 ok" in proc.stderr  # the hook's reply, to the pusher
    git("clone", "-q", server.url("repo"), str(tmp / "again"))
    assert (tmp / "again" / "a.txt").read_text() == "changed"
    (ok, event, payload) = _Receiver.got[-1]
    assert ok and event == "push"
    assert payload["ref"] == "refs/heads/main" and payload["before"] == first
    assert payload["after"] == second
    assert payload["repository"]["html_url"] == server.web_url("repo")
    assert payload["repository"]["default_branch"] == "main"
    assert payload["commits"][0]["added"] == ["b.txt"]
    assert payload["commits"][0]["modified"] == ["a.txt"]


def test_a_wrong_secret_is_what_the_receiver_refuses(served):
    server, tmp = served
    server.webhooks["repo"] = Webhook(server.webhooks["repo"].url, "wrong")
    work = tmp / "work"
    git("clone", "-q", server.url("repo"), str(work))
    _commit(work, "a.txt", "1")
    proc = _push(work)
    assert proc.returncode == 0  # the push itself is kept
    assert "webhook refs/heads/main: 401 Unauthorized" in proc.stderr
    assert _Receiver.got[-1][0] is False


def test_a_branch_deleted_and_a_url_without_dot_git_are_announced(served):
    server, tmp = served
    work = tmp / "work"
    git("clone", "-q", server.url("repo").removesuffix(".git"), str(work))
    _commit(work, "a.txt", "1")
    assert "webhook refs/heads/main: 200" in _push(work).stderr
    assert _push(work, "HEAD:refs/heads/other").returncode == 0
    proc = _push(work, ":refs/heads/other")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (ok, _, payload) = _Receiver.got[-1]
    assert ok and payload["deleted"] is True and payload["after"] == git_server.ZERO


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Transfer-Encoding": "chunked"}, 411),
        ({"Content-Length": "-5"}, 400),
        ({"Content-Length": "x"}, 400),
        ({"Content-Length": str(git_server.MAX_BODY + 1)}, 413),
    ],
)
def test_bodies_it_cannot_take_are_refused_with_a_reason(served, headers, status):
    server, _ = served
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.putrequest("POST", "/repo.git/git-receive-pack")
    for k, v in headers.items():
        conn.putheader(k, v)
    conn.endheaders()
    if "Transfer-Encoding" in headers:
        conn.send(b"0\r\n\r\n")
    resp = conn.getresponse()
    assert resp.status == status
    assert resp.read().strip()  # a reason, in words


def test_a_redirect_is_reported_never_followed():
    """A webhook URL that answers 302 (to another server) is reported as the 302, and nothing
    is sent to where it points: a delivery goes to the address it was given, or nowhere."""

    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's API)
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{other.server_address[1]}/x")
            self.end_headers()

        def log_message(self, *args):
            pass

    _Receiver.got = []
    other = HTTPServer(("127.0.0.1", 0), _Receiver)
    first = HTTPServer(("127.0.0.1", 0), Redirect)
    for s in (other, first):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    try:
        status, _ = git_server.send(f"http://127.0.0.1:{first.server_address[1]}/", SECRET, {})
    finally:
        for s in (other, first):
            s.shutdown()
    assert status == 302
    assert _Receiver.got == []
