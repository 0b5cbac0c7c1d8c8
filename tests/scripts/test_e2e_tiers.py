"""scripts/e2e-tiers.sh: which tools, images and tests each e2e tier owns, what E2E_SKIP_TIERS
leaves out, and `plan`, the choice a cold .ci/run makes against its budget.

Run against an empty tools cache (FMNIST_TOOLS_CACHE), where "built" is faked the way
scripts/tools.sh marks an entry complete (``bin/.complete``); nothing is built.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIERS = REPO / "scripts" / "e2e-tiers.sh"
SERVING_TOOLS = {"kserve-agent", "metrics-server", "event-display", "knative-serving", "traefik"}
GITOPS_TOOLS = {"argocd", "kustomize"}
PULUMI_TOOLS = {"pulumi", "pulumi-kubernetes"}
LATER_TOOLS = GITOPS_TOOLS | PULUMI_TOOLS  # the tiers after serving
TIER_TOOLS = SERVING_TOOLS | LATER_TOOLS
SERVING_IGNORED = [
    "--ignore=tests/e2e/test_real_serving.py",
    "--ignore=tests/e2e/test_serverless.py",
]


def run(*args: str, cache: Path, skip: str = "", timeout: int = 120):
    env = {**os.environ, "FMNIST_TOOLS_CACHE": str(cache), "E2E_SKIP_TIERS": skip}
    return subprocess.run(
        ["bash", str(TIERS), *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def lines(proc) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def recipes() -> set[str]:
    return {p.stem for p in (REPO / "hack" / "tools").glob("*.sh")}


def entries(cache: Path, tools: set[str]) -> list[Path]:
    """The cache entries (``DIR/bin``) that tools.sh --list names for ``tools``."""
    listing = subprocess.run(
        ["bash", str(REPO / "scripts" / "tools.sh"), "--list"], capture_output=True, text=True,
        env={**os.environ, "FMNIST_TOOLS_CACHE": str(cache)}, check=True,
    ).stdout  # fmt: skip
    out = []
    for line in listing.splitlines():  # "TOOL VERSION DIR STATE", DIR may hold spaces
        tool, _version, rest = line.split(" ", 2)
        if tool in tools:
            out.append(Path(rest.rsplit(" ", 1)[0]) / "bin")
    return out


def mark_built(cache: Path, tools: set[str]) -> None:
    """Fake tools.sh's complete cache entry (``DIR/bin/.complete``) for ``tools``."""
    for bin_dir in entries(cache, tools):
        bin_dir.mkdir(parents=True, exist_ok=True)
        (bin_dir / ".complete").touch()


def fake_build(cache: Path, seconds: int, builds: bool = True) -> subprocess.Popen:
    """A stand-in for the tiers' tools build: after ``seconds``, it marks every tier's tools
    built (as tools.sh does, before it exits) when ``builds``, then ends."""
    marks = " ".join(f"{d}/.complete" for d in entries(cache, TIER_TOOLS)) if builds else ""
    script = f"sleep {seconds}; for m in {marks}; do mkdir -p $(dirname $m); touch $m; done"
    return subprocess.Popen(["bash", "-c", script])


def test_the_core_and_the_tiers_split_every_recipe_image_and_module(tmp_path):
    every = set(lines(run("tools", cache=tmp_path)))
    core = set(lines(run("tools", "--core", cache=tmp_path)))
    assert every == recipes()
    assert every - core == TIER_TOOLS
    images = subprocess.run(
        ["bash", str(REPO / "scripts" / "e2e-images.sh"), "--names"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert set(lines(run("images", cache=tmp_path))) == set(images)
    core_images = set(lines(run("images", "--core", cache=tmp_path)))
    tier_images = {"agent", "event_display", "traefik", "argocd", "redis", "ml_next"}
    assert set(images) - core_images == tier_images | {
        f"knative_{n}" for n in ("controller", "webhook", "activator", "autoscaler", "queue")
    }
    for arg in lines(run("pytest-args", cache=tmp_path, skip="serving")):
        assert (REPO / arg.removeprefix("--ignore=")).is_file(), arg


def test_a_skipped_tier_leaves_out_its_tools_images_and_tests_and_says_so(tmp_path):
    assert not SERVING_TOOLS & set(lines(run("tools", cache=tmp_path, skip="serving")))
    images = set(lines(run("images", cache=tmp_path, skip="serving")))
    assert "agent" not in images and "pause" in images and "ml" in images
    assert lines(run("pytest-args", cache=tmp_path, skip="pulumi serving")) == [
        *SERVING_IGNORED,
        "--ignore=tests/e2e/test_argocd.py",
        "--ignore=tests/e2e/test_pulumi.py",
    ]  # (in the tiers' order; gitops needs serving: below)
    assert lines(run("pytest-args", cache=tmp_path)) == []
    report = run("report", cache=tmp_path, skip="serving")
    assert report.returncode == 0
    assert "SKIPPED tier serving" in report.stderr and "test_real_serving.py" in report.stderr
    assert "To run it: make e2e without E2E_SKIP_TIERS" in report.stderr
    assert run("report", cache=tmp_path).stderr == ""


@pytest.mark.parametrize("command", ["tools", "images", "pytest-args", "report"])
def test_an_unknown_tier_is_refused_naming_it(tmp_path, command):
    proc = run(command, cache=tmp_path, skip="serving gitopz")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "no tier named 'gitopz' (have: serving" in proc.stderr


def test_plan_skips_a_tier_not_built_in_time_and_says_why(tmp_path):
    proc = run("plan", str(int(time.time()) + 60), cache=tmp_path)
    assert lines(proc) == ["serving", "gitops", "pulumi"]
    assert "SKIPPING tier serving" in proc.stderr and "kserve-agent" in proc.stderr
    assert "SKIPPING tier gitops: it needs tier serving, skipped" in proc.stderr
    assert "SKIPPING tier pulumi" in proc.stderr and "pulumi-kubernetes" in proc.stderr
    assert "left of the budget" in proc.stderr


def test_a_tier_whose_needed_tier_is_skipped_is_skipped_and_says_why(tmp_path):
    """gitops needs serving (Argo CD syncs Traefik and Knative's settings): skipping serving by
    hand, or in plan, skips gitops with its tools and tests, naming serving; pulumi stays."""
    proc = run("pytest-args", cache=tmp_path, skip="serving")
    assert lines(proc) == [*SERVING_IGNORED, "--ignore=tests/e2e/test_argocd.py"]
    report = run("report", cache=tmp_path, skip="serving").stderr
    assert "SKIPPED tier serving (E2E_SKIP_TIERS)" in report
    assert "SKIPPED tier gitops (it needs tier serving, skipped)" in report
    tools = set(lines(run("tools", cache=tmp_path, skip="serving")))
    assert not (SERVING_TOOLS | GITOPS_TOOLS) & tools and tools >= PULUMI_TOOLS
    mark_built(tmp_path, GITOPS_TOOLS | PULUMI_TOOLS)
    proc = run("plan", str(int(time.time()) + 60), cache=tmp_path)
    assert lines(proc) == ["serving", "gitops"]
    assert "SKIPPING tier gitops: it needs tier serving, skipped" in proc.stderr


def test_plan_skips_only_the_tier_that_is_not_built(tmp_path):
    mark_built(tmp_path, SERVING_TOOLS)
    proc = run("plan", str(int(time.time()) + 60), cache=tmp_path)
    assert lines(proc) == ["gitops", "pulumi"]
    assert "SKIPPING tier serving" not in proc.stderr


def test_plan_runs_a_built_tier_whatever_the_time_left(tmp_path):
    cache = tmp_path / "a tools cache"  # (a path with a space: tools.sh --list's last field)
    mark_built(cache, TIER_TOOLS)
    proc = run("plan", str(int(time.time()) - 10), cache=cache)
    assert lines(proc) == [] and proc.stderr == ""


def test_plan_waits_for_a_build_that_ends_in_time(tmp_path):
    """The build marks the tier's tools built after 2 s, while the budget has hours left."""
    build = fake_build(tmp_path, 2)
    try:
        proc = run("plan", str(int(time.time()) + 10_000), str(build.pid), cache=tmp_path)
        assert lines(proc) == [] and "SKIPPING" not in proc.stderr, proc.stderr
        assert build.poll() is not None  # it waited for the build
    finally:
        build.kill()


def test_plan_skips_a_tier_whose_build_ended_without_it_and_says_so(tmp_path):
    build = fake_build(tmp_path, 1, builds=False)
    build.wait()
    proc = run("plan", str(int(time.time()) + 10_000), str(build.pid), cache=tmp_path)
    assert lines(proc) == ["serving", "gitops", "pulumi"]
    assert "their build" in proc.stderr and "has ended" in proc.stderr, proc.stderr


def test_plan_does_not_wait_for_a_build_past_the_budget(tmp_path):
    """A build still running when the core's e2e needs the rest of the budget is left behind."""
    build = fake_build(tmp_path, 300)
    try:
        proc = run("plan", str(int(time.time()) + 600), str(build.pid), cache=tmp_path, timeout=60)
        assert lines(proc) == ["serving", "gitops", "pulumi"]
        assert "left of the budget" in proc.stderr, proc.stderr
        assert build.poll() is None  # still building: plan did not wait for it
    finally:
        build.kill()


def test_plan_does_not_wait_for_a_tier_whose_tools_build_after_a_skipped_one(tmp_path):
    """The build is still on serving's tools when serving does not fit the budget: pulumi, whose
    tools build after them (.ci/run builds tier by tier), is skipped at once, though the budget
    would fit pulumi's tests for minutes (the cold run of 2026-12-07 waited 11 min for it)."""
    core, pulumi = (
        int(lines(run("seconds", part, cache=tmp_path))[0]) for part in ("core", "pulumi")
    )
    build = fake_build(tmp_path, 300)
    try:
        deadline = int(time.time()) + core + pulumi + 240  # serving's tests would not fit
        proc = run("plan", str(deadline), str(build.pid), cache=tmp_path, timeout=60)
        assert lines(proc) == ["serving", "gitops", "pulumi"]
        (why,) = [ln for ln in proc.stderr.splitlines() if "SKIPPING tier pulumi" in ln]
        assert "they build after tier serving's" in why, proc.stderr
        assert build.poll() is None  # still building: plan did not wait for it
    finally:
        build.kill()


def test_skip_tiers_are_words_each_checked_once(tmp_path):
    proc = run("pytest-args", cache=tmp_path, skip=" pulumi  pulumi ")
    assert lines(proc) == ["--ignore=tests/e2e/test_pulumi.py"]
    proc = run("pytest-args", cache=tmp_path, skip=" serving  serving ")  # (gitops needs it)
    assert lines(proc) == [*SERVING_IGNORED, "--ignore=tests/e2e/test_argocd.py"]
    proc = run("report", cache=tmp_path, skip="*")
    assert proc.returncode == 1 and "no tier named '*'" in proc.stderr


BAD_ARGS = [["plan"], ["plan", "soon"], ["plan", "0123"], ["plan", "1", "x"], ["plan", "9", "1"]]


@pytest.mark.parametrize("args", [*BAD_ARGS, ["nope"]])
def test_bad_arguments_are_refused(tmp_path, args):
    proc = run(*args, cache=tmp_path)
    assert proc.returncode == 1 and "e2e-tiers.sh:" in proc.stderr


def test_plan_keeps_time_only_for_the_tiers_that_will_run(tmp_path):
    """Waiting for serving's tools, `plan` keeps the time of the core, serving and of the later
    tiers only when they are built (they will run): with gitops and pulumi built, a budget that
    fits the core and serving but not them too is not waited on (serving is skipped for the
    budget); with them not built it is waited on until the build ends (serving is skipped for
    that), and each later tier is then judged in its turn. Told apart by plan's reasons, not by
    the clock (a loaded machine runs plan's own checks slowly)."""
    core, serving = (
        int(lines(run("seconds", part, cache=tmp_path))[0]) for part in ("core", "serving")
    )
    skipped, why = {}, {}
    for later_built in (True, False):
        cache = tmp_path / str(later_built)
        if later_built:
            mark_built(cache, LATER_TOOLS)
        build = subprocess.Popen(["sleep", "3"])  # builds nothing
        # reaped as soon as it ends (a zombie would still answer `kill -0`)
        threading.Thread(target=build.wait, daemon=True).start()
        try:
            deadline = int(time.time()) + core + serving + 120  # room for serving alone
            proc = run("plan", str(deadline), str(build.pid), cache=cache, timeout=100)
            skipped[later_built] = lines(proc)
            why[later_built] = next(
                ln for ln in proc.stderr.splitlines() if "SKIPPING tier serving" in ln
            )
        finally:
            build.kill()
    # (gitops needs serving: skipped with it, built or not)
    assert skipped == {True: ["serving", "gitops"], False: ["serving", "gitops", "pulumi"]}, skipped
    assert "left of the budget" in why[True], why  # not waited on
    assert "has ended" in why[False], why  # waited on until the build ended


def test_plan_keeps_the_seconds_measured_on_this_kind_of_cpu(tmp_path):
    """Each kind of CPU has its measured seconds (the slower one more); the kind comes from
    /proc/cpuinfo or E2E_CPU, and plan names it in its reason; a kind without measurements is
    refused, naming the kinds that have them."""
    seconds = {}
    for cpu in ("intel", "amd"):
        env = {**os.environ, "FMNIST_TOOLS_CACHE": str(tmp_path), "E2E_CPU": cpu}
        got = {
            part: subprocess.run(
                ["bash", str(TIERS), "seconds", part],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            ).stdout.split()  # fmt: skip
            for part in ("core", "test", "serving", "gitops", "pulumi")
        }
        assert {kind for _, kind in got.values()} == {cpu}
        seconds[cpu] = {part: int(n) for part, (n, _) in got.items()}
        proc = subprocess.run(
            ["bash", str(TIERS), "plan", str(int(time.time()) + 60)], capture_output=True,
            text=True, env=env, timeout=120,
        )  # fmt: skip
        assert f"measured on CPUs of the kind {cpu}" in proc.stderr, proc.stderr
        assert f"({seconds[cpu]['core']} s the core's" in proc.stderr, proc.stderr
    assert all(seconds["amd"][p] > seconds["intel"][p] for p in seconds["amd"]), seconds
    env = {**os.environ, "FMNIST_TOOLS_CACHE": str(tmp_path), "E2E_CPU": "sparc"}
    proc = subprocess.run(["bash", str(TIERS), "seconds"], capture_output=True, text=True, env=env)
    assert proc.returncode == 1 and "no seconds for a CPU 'sparc'" in proc.stderr, proc.stderr
