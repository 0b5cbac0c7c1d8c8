"""scripts/k3d-up.sh and scripts/build-image.sh against fake `k3d`, `docker` and `kubectl`.

The fakes come first on PATH and record every call (argv) into a state dir; the fake k3d answers
`k3d version` and `k3d cluster list -o json` from that dir. build-image.sh renders the overlay
with the real .venv/bin/kubectl (kustomize, no cluster); k3d-up.sh's cluster calls go to the
fake kubectl. Expected values are read from versions.env and the rendered overlays.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from git_repo import git

from validation.pods import CONTENT_TAG

REPO = Path(__file__).resolve().parents[2]
REAL_KUBECTL = REPO / ".venv" / "bin" / "kubectl"
FAKE = """#!{python}
import json, pathlib, sys
state = pathlib.Path({state!r})
tool, args = pathlib.Path(sys.argv[0]).name, sys.argv[1:]
with open(state / "calls.jsonl", "a") as f:
    f.write(json.dumps([tool, *args]) + "\\n")
if tool == "k3d" and args[:1] == ["version"]:
    print("k3d version " + (state / "k3d-version").read_text())
    print("k3s version v1.31.5-k3s1 (default)")
elif tool == "k3d" and args[:2] == ["cluster", "list"]:
    names = json.loads((state / "clusters.json").read_text())
    # k3d prints json.Marshal output: compact, one line
    print(json.dumps([{{"name": n, "serversCount": 1}} for n in names], separators=(",", ":")))
elif tool == "docker" and (state / "docker-fails").read_text():
    sys.exit("docker: the build failed")
"""


def versions() -> dict[str, str]:
    out = {}
    for line in (REPO / "versions.env").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            out[key.strip()] = value.strip()
    return out


def rendered_image(overlay: str, root: Path = REPO) -> str:
    """The pipeline's `image` parameter as `kubectl kustomize overlays/OVERLAY` renders it."""
    out = subprocess.run(
        [str(REAL_KUBECTL), "kustomize", str(root / "overlays" / overlay)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    (wt,) = [d for d in yaml.safe_load_all(out) if d and d.get("kind") == "WorkflowTemplate"]
    (image,) = [p["value"] for p in wt["spec"]["arguments"]["parameters"] if p["name"] == "image"]
    return image


@pytest.fixture
def fakes(tmp_path):
    state, bin_dir = tmp_path / "state", tmp_path / "bin"
    state.mkdir()
    bin_dir.mkdir()
    for tool in ("k3d", "docker", "kubectl"):
        exe = bin_dir / tool
        exe.write_text(FAKE.format(python=sys.executable, state=str(state)))
        exe.chmod(0o755)

    def run(
        script,
        *args,
        k3d_version=None,
        clusters=(),
        kubectl=bin_dir / "kubectl",
        root=REPO,
        docker_fails=False,
    ):
        (state / "docker-fails").write_text("1" if docker_fails else "")
        (state / "k3d-version").write_text(k3d_version or versions()["K3D_VERSION"])
        (state / "clusters.json").write_text(json.dumps(list(clusters)))
        (state / "calls.jsonl").write_text("")
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "KUBECTL": str(kubectl),
            "CLUSTER_NAME": "fashion-mnist",
        }
        proc = subprocess.run(
            [str(root / "scripts" / script), *args],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        calls = [json.loads(c) for c in (state / "calls.jsonl").read_text().splitlines()]
        return proc, calls

    return run


def only(calls, *prefix):
    return [c for c in calls if c[: len(prefix)] == list(prefix)]


def flag_values(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


# --- k3d-up.sh ---


def test_k3d_up_creates_the_cluster_with_the_pinned_k3s_and_port_8080(fakes):
    proc, calls = fakes("k3d-up.sh")
    assert proc.returncode == 0, proc.stderr
    (create,) = only(calls, "k3d", "cluster", "create")
    assert create[3] == "fashion-mnist"
    assert flag_values(create, "--image") == [versions()["K3S_IMAGE"]]
    assert flag_values(create, "--port") == ["8080:80@loadbalancer"]
    assert flag_values(create, "--k3s-arg") == ["--disable=traefik@server:0"]
    assert flag_values(create, "--servers") == ["1"] and flag_values(create, "--agents") == ["0"]
    assert not only(calls, "k3d", "cluster", "start")
    assert ["kubectl", "config", "use-context", "k3d-fashion-mnist"] in calls


def test_k3d_up_reuses_an_existing_cluster(fakes):
    proc, calls = fakes("k3d-up.sh", clusters=["other", "fashion-mnist"])
    assert proc.returncode == 0, proc.stderr
    assert not only(calls, "k3d", "cluster", "create")
    assert only(calls, "k3d", "cluster", "start") == [["k3d", "cluster", "start", "fashion-mnist"]]


def test_k3d_up_creates_when_only_other_clusters_exist(fakes):
    proc, calls = fakes("k3d-up.sh", clusters=["fashion-mnist-old"])
    assert proc.returncode == 0, proc.stderr
    assert len(only(calls, "k3d", "cluster", "create")) == 1


def test_k3d_up_refuses_another_k3d_version(fakes):
    pinned = versions()["K3D_VERSION"]
    proc, calls = fakes("k3d-up.sh", k3d_version="v5.6.0")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "v5.6.0" in last and pinned in last
    assert calls == [["k3d", "version"]]  # nothing created, started or configured


# --- build-image.sh: run in a git clone (it commits the tag it builds) ---

KUST = "overlays/local-k3d/kustomization.yaml"


@pytest.fixture
def clone(tmp_path) -> Path:
    """A git repository with what build-image.sh reads: its scripts, the manifests it renders
    (base, overlays) and the image's build context (Dockerfile, pyproject.toml, src), committed."""
    root = tmp_path / "repo"
    root.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("scripts", "base", "overlays", "src"):
        shutil.copytree(REPO / name, root / name, ignore=ignore)
    for name in ("versions.env", "Dockerfile", "pyproject.toml", "README.md", ".gitignore"):
        shutil.copy(REPO / name, root / name)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    return root


def image_of(root: Path, overlay: str) -> str:
    return rendered_image(overlay, root)


def tag_of(root: Path) -> str:
    proc = subprocess.run(
        ["bash", str(root / "scripts" / "build-image.sh"), "--tag"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return proc.stdout.strip()


def build_args(argv):
    return dict(a.split("=", 1) for a in flag_values(argv, "--build-arg"))


def test_the_image_is_named_by_each_overlays_images_entry():
    """Both overlays render the pipeline's image from their kustomize images: entry (no
    other place names a tag), each with a content tag; their repositories differ."""
    for overlay in ("local-k3d", "gpu-cloud"):
        kust = yaml.safe_load((REPO / "overlays" / overlay / "kustomization.yaml").read_text())
        (entry,) = kust["images"]
        want = f"{entry.get('newName', entry['name'])}:{entry['newTag']}"
        assert rendered_image(overlay) == want
        assert CONTENT_TAG.fullmatch(entry["newTag"]), entry
    assert rendered_image("local-k3d") != rendered_image("gpu-cloud")


def test_the_tag_is_the_content_of_the_build_context(clone, tmp_path):
    """The same tree gives the same tag (another copy too); a change under src/ or to the
    Dockerfile gives another one; a change outside the build context (the README's too) does
    not."""
    tag = tag_of(clone)
    assert CONTENT_TAG.fullmatch(tag), tag
    copy = tmp_path / "copy"
    shutil.copytree(clone, copy, ignore=shutil.ignore_patterns(".git"))
    assert tag_of(copy) == tag
    (copy / "docs").mkdir()
    (copy / "docs" / "note.md").write_text("outside the image\n")
    (copy / "README.md").write_text((copy / "README.md").read_text() + "an edit\n")
    assert tag_of(copy) == tag  # the README too: the Dockerfile's is an empty stand-in
    (copy / "src" / "marker.txt").write_text("a change under src/\n")
    changed = tag_of(copy)
    assert CONTENT_TAG.fullmatch(changed) and changed != tag
    (copy / "src" / "marker.txt").unlink()
    (copy / "Dockerfile").write_text((copy / "Dockerfile").read_text() + "# more\n")
    assert tag_of(copy) not in (tag, changed)
    shutil.copy(clone / "Dockerfile", copy / "Dockerfile")
    assert tag_of(copy) == tag
    base = versions()["PYTHON_BASE_IMAGE"]
    text = (copy / "versions.env").read_text().replace(base, base.replace("-slim", "-bookworm"))
    (copy / "versions.env").write_text(text)
    assert tag_of(copy) != tag  # the base it is built FROM


def test_build_image_builds_imports_and_commits_the_content_tag(fakes, clone):
    """The images are built and imported under the content tag, then the overlay's images:
    entry names it in one commit of that one file."""
    tag, before = tag_of(clone), image_of(clone, "local-k3d")
    image = f"{before.rsplit(':', 1)[0]}:{tag}"
    if before == image:  # this checkout's overlay names its own content: make it older
        git(clone, "commit", "-qam", "older", "--allow-empty")
        (clone / KUST).write_text((clone / KUST).read_text().replace(tag, "src-000000000000"))
        git(clone, "commit", "-qam", "an older tag")
        before = image_of(clone, "local-k3d")
    proc, calls = fakes("build-image.sh", kubectl=REAL_KUBECTL, root=clone)
    assert proc.returncode == 0, proc.stderr
    builds = only(calls, "docker", "build")
    assert [flag_values(b, "-t") for b in builds] == [[image], [f"{image}-torch"]]
    assert all(b[-1] == str(clone) for b in builds)
    base = versions()["PYTHON_BASE_IMAGE"]
    assert [build_args(b) for b in builds] == [
        {"PYTHON_BASE_IMAGE": base, "EXTRAS": ""},
        {"PYTHON_BASE_IMAGE": base, "EXTRAS": "torch"},  # the PyTorchJob's image
    ]
    assert only(calls, "k3d") == [
        ["k3d", "image", "import", ref, "--cluster", "fashion-mnist"]
        for ref in (image, f"{image}-torch")
    ]
    assert not only(calls, "docker", "push")
    assert image_of(clone, "local-k3d") == image
    assert git(clone, "show", "--name-only", "--format=%s", "HEAD").split("\n")[:3] == [
        f"image local-k3d: {image} (was {before.rsplit(':', 1)[1]})",
        "",
        KUST,
    ]
    assert not git(clone, "status", "--porcelain")
    assert "git push" in proc.stderr
    # built again from the same tree: nothing to commit
    proc, calls = fakes("build-image.sh", kubectl=REAL_KUBECTL, root=clone)
    assert proc.returncode == 0 and "nothing to commit" in proc.stderr, proc.stderr
    assert git(clone, "log", "-1", "--format=%s").startswith("image local-k3d:")


def test_build_image_gpu_push_pushes_the_gpu_build_and_sets_gpu_cloud(fakes, clone):
    image = f"{image_of(clone, 'gpu-cloud').rsplit(':', 1)[0]}:{tag_of(clone)}"
    proc, calls = fakes("build-image.sh", "--gpu", "--push", kubectl=REAL_KUBECTL, root=clone)
    assert proc.returncode == 0, proc.stderr
    builds = only(calls, "docker", "build")
    assert [flag_values(b, "-t") for b in builds] == [[image], [f"{image}-torch"]]
    assert [build_args(b)["EXTRAS"] for b in builds] == ["gpu", "gpu,torch"]
    assert only(calls, "docker", "push") == [
        ["docker", "push", image],
        ["docker", "push", f"{image}-torch"],
    ]
    assert not only(calls, "k3d")
    assert image_of(clone, "gpu-cloud") == image


def test_build_image_refuses_uncommitted_code_and_a_failed_build_changes_nothing(fakes, clone):
    """The tag in git must name committed code: a change under src/ is refused before any
    build (--no-commit builds it and edits without committing); a failed build leaves the
    overlay as it was."""
    (clone / "src" / "marker.txt").write_text("uncommitted\n")
    head = git(clone, "rev-parse", "HEAD")
    proc, calls = fakes("build-image.sh", kubectl=REAL_KUBECTL, root=clone)
    assert proc.returncode == 1 and "commit these first" in proc.stderr and "src/" in proc.stderr
    assert not calls and git(clone, "rev-parse", "HEAD") == head
    git(clone, "add", "src")
    git(clone, "commit", "-qm", "a change under src/")
    head, kust = git(clone, "rev-parse", "HEAD"), (clone / KUST).read_text()
    proc, calls = fakes("build-image.sh", kubectl=REAL_KUBECTL, root=clone, docker_fails=True)
    assert proc.returncode != 0 and only(calls, "docker", "build") and not only(calls, "k3d")
    assert (clone / KUST).read_text() == kust and git(clone, "rev-parse", "HEAD") == head
    proc, _ = fakes("build-image.sh", "--no-commit", kubectl=REAL_KUBECTL, root=clone)
    assert proc.returncode == 0, proc.stderr
    assert image_of(clone, "local-k3d").endswith(f":{tag_of(clone)}")
    assert git(clone, "rev-parse", "HEAD") == head and git(clone, "status", "--porcelain")


@pytest.mark.parametrize("change", ["versions.env", "ignored", "detached", "overlay", "digest"])
def test_build_image_refuses_before_building(fakes, clone, change):
    """What would make the tag in git name something git does not hold is refused before any
    build: an uncommitted base image (versions.env, hashed into the tag), a file under src/
    that git ignores but docker would copy (.dockerignore drops only bytecode and egg-info),
    a detached HEAD (no branch to commit on)."""
    if change == "versions.env":
        with (clone / "versions.env").open("a") as f:
            f.write("PYTHON_BASE_IMAGE=python:3.11.15-slim\n")
        want = "versions.env"
    elif change == "ignored":
        (clone / "src" / ".ruff_cache").mkdir()
        (clone / "src" / ".ruff_cache" / "x").write_text("cache\n")
        assert not git(clone, "status", "--porcelain")  # git ignores it
        want = "src/.ruff_cache/x"
    elif change == "overlay":
        with (clone / KUST).open("a") as f:
            f.write("# an edit not committed\n")
        want = KUST
    elif change == "digest":
        text = (clone / KUST).read_text()
        (clone / KUST).write_text(text + f"    digest: sha256:{'a' * 64}\n")
        git(clone, "commit", "-qam", "pinned by digest")
        want = "needs a tag"
    else:
        git(clone, "checkout", "-q", "--detach")
        want = "detached HEAD"
    head = git(clone, "rev-parse", "HEAD")
    proc, calls = fakes("build-image.sh", kubectl=REAL_KUBECTL, root=clone)
    assert proc.returncode == 1 and want in proc.stderr, proc.stderr
    assert not calls and git(clone, "rev-parse", "HEAD") == head
    if change != "digest":
        proc, calls = fakes("build-image.sh", "--no-commit", kubectl=REAL_KUBECTL, root=clone)
        assert proc.returncode == 0 and only(calls, "docker", "build"), proc.stderr


@pytest.mark.parametrize("style", ["kustomize-edit", "flow", "two-entries", "named-twice"])
def test_build_image_sets_the_tag_of_the_one_entry_in_any_yaml_style(fakes, clone, style):
    """The images: entry as `kustomize edit set image` writes it (2-space indentation), in
    flow style, beside another image's entry (left as it was): its newTag is set, every
    other byte kept. Two entries for the pipeline's image: refused, the file unchanged."""
    entries = {
        "kustomize-edit": "images:\n- name: fashion-mnist/ml\n  newTag: src-000000000000\n",
        "flow": "images: [{name: fashion-mnist/ml, newTag: 'src-000000000000'}]  # flow\n",
        "two-entries": "images:\n  - newTag: '1.36'\n    name: busybox\n"
        "  - newTag: src-000000000000\n    name: fashion-mnist/ml\n",
        "named-twice": "images:\n  - {name: fashion-mnist/ml, newTag: src-000000000000}\n"
        "  - {name: fashion-mnist/ml, newTag: src-111111111111}\n",
    }
    text = (clone / KUST).read_text()
    text = text[: text.index("images:")] + entries[style]
    (clone / KUST).write_text(text)
    git(clone, "commit", "-qam", f"images: {style}")
    proc, _ = fakes("build-image.sh", "--set-only", kubectl=REAL_KUBECTL, root=clone)
    tag = tag_of(clone)
    if style == "named-twice":
        assert proc.returncode == 1 and "2 images: entries named fashion-mnist/ml" in proc.stderr
        assert (clone / KUST).read_text() == text and not git(clone, "status", "--porcelain")
        return
    assert proc.returncode == 0, proc.stderr
    assert (clone / KUST).read_text() == text.replace("src-000000000000", tag)
    assert image_of(clone, "local-k3d") == f"fashion-mnist/ml:{tag}"


def test_build_image_set_only_builds_nothing_and_commits_the_tag(fakes, clone):
    (clone / "src" / "marker.txt").write_text("built elsewhere\n")
    git(clone, "add", "src")
    git(clone, "commit", "-qm", "a change under src/")
    proc, calls = fakes("build-image.sh", "--set-only", kubectl=REAL_KUBECTL, root=clone)
    assert proc.returncode == 0, proc.stderr
    assert not only(calls, "docker") and not only(calls, "k3d")
    assert image_of(clone, "local-k3d").endswith(f":{tag_of(clone)}")
    assert not git(clone, "status", "--porcelain")
    git(clone, "checkout", "-q", "--detach")
    (clone / "src" / "marker.txt").write_text("again\n")
    git(clone, "commit", "-qam", "detached")
    proc, _ = fakes("build-image.sh", "--set-only", kubectl=REAL_KUBECTL, root=clone)
    assert proc.returncode == 1 and "detached HEAD" in proc.stderr
    assert not git(clone, "status", "--porcelain")


def test_the_pytorchjob_runs_the_torch_build_of_the_pipeline_image():
    """The name build-image.sh gives the PyTorch image is the one the PyTorchJob pulls."""
    wft = (REPO / "base/ml/pipeline/workflowtemplate.yaml").read_text()
    assert 'image: "{{workflow.parameters.image}}-torch"' in wft


@pytest.mark.parametrize("args", [["gpu-cloud"], ["--tag", "--gpu"], ["--set-only", "--push"]])
def test_build_image_refuses_bad_arguments(fakes, clone, args):
    # `build-image.sh gpu-cloud` is not a call: the environment is chosen by --gpu
    proc, calls = fakes("build-image.sh", *args, kubectl=REAL_KUBECTL, root=clone)
    assert proc.returncode == 1 and proc.stderr.startswith(("error:", "usage:")), proc.stderr
    assert "error:" in proc.stderr.splitlines()[-1]
    assert not calls and not git(clone, "status", "--porcelain")
