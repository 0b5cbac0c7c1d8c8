"""The e2e's git server: what GitHub or GitLab is to a user of this repository, inside the run.

It serves bare repositories over git's smart HTTP protocol through git's own CGI program,
``git http-backend`` (clone, fetch and push, as ``git`` and Argo CD's repo-server speak it), from a
thread of the test process, which runs in the run's network namespace: it listens on the real
node's address (real_node.NODE_IP), which the pods reach through the CNI bridge. A push runs
the repository's ``post-receive`` hook, which calls a webhook as GitHub does on a push: a
``push`` event (``X-GitHub-Event: push``; the payload fields Argo CD reads: ``ref``, ``before``,
``after``, ``repository.html_url``, ``repository.default_branch``, each commit's ``added``,
``modified`` and ``removed``), signed with the webhook's secret (``X-Hub-Signature-256``:
HMAC-SHA256 of the body, GitHub's scheme). Its reply goes back to the pusher as ``remote:``
lines, as Gitea's and GitLab's hooks do.

What differs from a forge: no authentication (anyone who reaches the address may push), one
webhook per repository, and request bodies must carry a Content-Length (git sends chunked
bodies only above ``http.postBuffer``, 1 MiB; such a push gets a 411 with that reason).

``python git_server.py post-receive`` is the hook itself (git runs it with the old and new
revision and the ref of each updated ref on stdin).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

#: The environment of ``git http-backend`` that the post-receive hook reads its webhook from.
HOOK_ENV = ("FMNIST_GIT_WEBHOOK_URL", "FMNIST_GIT_WEBHOOK_SECRET", "FMNIST_GIT_WEB_URL")
#: The CGI variables (RFC 3875) passed from a request to ``git http-backend``, besides HTTP_*;
#: nothing else of the test process's environment reaches it or its hook (no GIT_*, no proxy).
CGI_VARS = (
    "REQUEST_METHOD", "QUERY_STRING", "CONTENT_TYPE", "CONTENT_LENGTH", "PATH_INFO",
    "REMOTE_ADDR", "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL", "GATEWAY_INTERFACE",
)  # fmt: skip
#: The largest request body accepted (a push of this repository is a few MB).
MAX_BODY = 512 * 1024 * 1024
ZERO = "0" * 40


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        self.server.access_log.append(format % args)  # type: ignore[attr-defined]


@dataclass
class Webhook:
    """Where a repository's pushes are announced: ``url`` (e.g. Argo CD's ``/api/webhook``),
    ``secret`` (the HMAC key both sides hold; empty: unsigned)."""

    url: str
    secret: str


class GitServer:
    """``git http-backend`` over HTTP at ``http://HOST:PORT/<name>.git`` for the bare
    repositories under ``root``. Start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(self, root: Path, host: str, port: int = 0) -> None:
        self.root = root
        self.host = host
        self.port = port
        self.webhooks: dict[str, Webhook] = {}
        self.access_log: list[str] = []
        self._httpd: _Server | None = None

    def url(self, name: str) -> str:
        """The clone URL of repository ``name`` (``http://HOST:PORT/<name>.git``)."""
        return f"http://{self.host}:{self.port}/{name}.git"

    def web_url(self, name: str) -> str:
        """The repository's web page URL, as a forge's push event names it (no ``.git``)."""
        return f"http://{self.host}:{self.port}/{name}"

    def start(self) -> GitServer:
        """Listen (port 0: a free one, then in :attr:`port`) and serve from a daemon thread."""
        self._httpd = make_server(
            self.host, self.port, self._app, server_class=_Server, handler_class=_QuietHandler
        )
        self._httpd.access_log = self.access_log  # type: ignore[attr-defined]
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving (a push in flight is cut)."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def create(self, name: str, webhook: Webhook | None = None) -> Path:
        """A new bare repository ``<root>/<name>.git`` (default branch ``main``) that accepts
        pushes over HTTP, with the post-receive hook of this module; returns its path."""
        path = self.root / f"{name}.git"
        git("init", "--bare", "--quiet", "--initial-branch=main", str(path))
        git("-C", str(path), "config", "http.receivepack", "true")
        hook = path / "hooks" / "post-receive"
        hook.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" post-receive\n'
        )
        hook.chmod(0o755)
        if webhook is not None:
            self.webhooks[name] = webhook
        return path

    def _app(self, environ, start_response):
        def refuse(status: str, why: str):
            start_response(status, [("Content-Type", "text/plain")])
            return [why.encode() + b"\n"]

        if environ.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked":
            return refuse(
                "411 Length Required", "a Content-Length is needed (set http.postBuffer higher)"
            )
        raw = environ.get("CONTENT_LENGTH") or "0"
        if not raw.isdigit():
            return refuse(
                "400 Bad Request", f"Content-Length must be a number of bytes, got {raw!r}"
            )
        if int(raw) > MAX_BODY:
            return refuse("413 Content Too Large", f"a body of at most {MAX_BODY} bytes")
        body = environ["wsgi.input"].read(int(raw)) if int(raw) else b""
        env = {k: v for k, v in environ.items() if k in CGI_VARS or k.startswith("HTTP_")}
        env.update(
            PATH=os.environ.get("PATH", "/usr/bin:/bin"),
            GIT_PROJECT_ROOT=str(self.root),
            GIT_HTTP_EXPORT_ALL="1",
            REMOTE_USER="e2e",
        )
        # the repository's name: the path's first component, with or without ".git" (git
        # http-backend finds <name>.git for both)
        name = environ.get("PATH_INFO", "").lstrip("/").split("/")[0].removesuffix(".git")
        if hook := self.webhooks.get(name):
            env.update(
                FMNIST_GIT_WEBHOOK_URL=hook.url,
                FMNIST_GIT_WEBHOOK_SECRET=hook.secret,
                FMNIST_GIT_WEB_URL=self.web_url(name),
            )
        proc = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        head, _, out = proc.stdout.partition(b"\r\n\r\n")
        status, headers = "200 OK", []
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = value.strip()
            elif key:
                headers.append((key, value.strip()))
        if proc.returncode != 0 and not head:
            status, out = "500 Internal Server Error", proc.stderr
            headers = [("Content-Type", "text/plain")]
        start_response(status, headers)
        return [out]


def git(*args: str, cwd: Path | None = None, env: dict | None = None) -> str:
    """Run git; its stdout. Raises RuntimeError with git's stderr when it fails."""
    proc = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True,
        env={**os.environ, **(env or {})}, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


# --- the post-receive hook -----------------------------------------------------------------------


def push_event(web_url: str, old: str, new: str, ref: str, repo: Path) -> dict:
    """GitHub's ``push`` event for one updated ref (the fields Argo CD's webhook handler reads);
    the changed paths from ``git diff --name-status old new`` (every file of ``new`` when the
    ref is new; none, with ``deleted: true``, when it was deleted)."""
    repository = {"html_url": web_url, "default_branch": "main", "name": Path(web_url).name}
    if new == ZERO:
        return {"ref": ref, "before": old, "after": new, "deleted": True,
                "repository": repository, "commits": []}  # fmt: skip
    empty_tree = git("-C", str(repo), "hash-object", "-t", "tree", "/dev/null").strip()
    base = old if old != ZERO else empty_tree
    changed = {"added": [], "modified": [], "removed": []}
    out = git("-C", str(repo), "diff", "--no-renames", "--name-status", base, new)
    for line in out.splitlines():
        status, _, path = line.partition("\t")
        key = {"A": "added", "D": "removed"}.get(status[:1], "modified")
        changed[key].append(path)
    return {
        "ref": ref,
        "before": old,
        "after": new,
        "repository": repository,
        "commits": [{"id": new, **changed}],
        "head_commit": {"id": new, **changed},
    }


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError with the redirect's own status


def send(url: str, secret: str, event: dict) -> tuple[int, str]:
    """POST ``event`` to ``url`` as GitHub does (signed when ``secret``); (status, body). The
    receiver's certificate is not verified: Argo CD's is self-signed (GitHub's "SSL
    verification: disabled" setting)."""
    body = json.dumps(event).encode()
    headers = {"Content-Type": "application/json", "X-GitHub-Event": "push"}
    if secret:
        mac = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        headers["X-Hub-Signature-256"] = f"sha256={mac}"
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    # a redirect is answered as it is, never followed (as GitHub's deliveries do): urllib would
    # follow it to any address, as a GET, and report the last answer
    opener = urllib.request.build_opener(_NoRedirect, urllib.request.HTTPSHandler(context=ctx))
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return 0, str(e)


def post_receive(stdin: str, env: dict[str, str], repo: Path) -> list[str]:
    """The hook: for each ``old new ref`` line, the push event sent to the webhook in ``env``
    (:data:`HOOK_ENV`); one line per delivery, ``webhook <ref>: <status> <reply>``."""
    url, secret, web_url = (env.get(k, "") for k in HOOK_ENV)
    if not url:
        return ["webhook: none configured"]
    lines = []
    for line in stdin.splitlines():
        old, new, ref = line.split()
        status, reply = send(url, secret, push_event(web_url, old, new, ref, repo))
        lines.append(f"webhook {ref}: {status} {reply.strip()[:200]}")
    return lines


if __name__ == "__main__" and sys.argv[1:] == ["post-receive"]:
    for out in post_receive(sys.stdin.read(), dict(os.environ), Path.cwd()):
        print(out)
