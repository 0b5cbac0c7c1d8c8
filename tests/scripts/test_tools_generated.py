"""scripts/tools.sh's recipe contract for files that upstream's `go generate` writes into its
tree and its module zip lacks (``TOOL_GENERATED`` + ``tool_generate_source``; the Pulumi
provider's embedded schema, hack/tools/pulumi-kubernetes.sh), and its ``--download`` (a
recipe's modules fetched ahead of its build, as .ci/run does beside the builds). Built for real
with the pinned Go, from a module served by a ``file://`` module proxy made here (no network)."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULE, VERSION = "example.com/gen", "v1.0.0"
DEP = "example.com/dep"  # a module the tool's module requires: only `go get` fetches it
FILES = {
    "go.mod": f"module {MODULE}\n\ngo 1.22\n\nrequire {DEP} {VERSION}\n",
    # the generator, as upstream keeps it: ignored by the build, run by `go generate`
    "cmd/hello/gen.go": (
        '//go:build ignore\n\npackage main\n\nimport "os"\n\n'
        'func main() {\n\tb, _ := os.ReadFile("template.txt")\n'
        '\tos.WriteFile("data.txt", append(b, []byte(" "+os.Getenv("VERSION"))...), 0o600)\n}\n'
    ),
    "cmd/hello/template.txt": "generated",
    # a library package of the module (what cert-manager's cmd/* import from its root module)
    "lib/lib.go": 'package lib\n\n// Name is what the main module prints.\nconst Name = "main"\n',
    "cmd/hello/main.go": (
        f'package main\n\nimport (\n\t_ "embed"\n\t"fmt"\n\n\t"{DEP}"\n)\n\n'
        "//go:embed data.txt\nvar data string\n\nfunc main() { fmt.Print(data + dep.Suffix) }\n"
    ),
}
DEP_FILES = {
    "go.mod": f"module {DEP}\n\ngo 1.22\n",
    "dep.go": 'package dep\n\n// Suffix is appended to the output.\nconst Suffix = ""\n',
}
RECIPE = f"""TOOL_VERSION_KEY=FAKE_VERSION
TOOL_MODULE={MODULE}
TOOL_PACKAGES=({MODULE}/cmd/hello)
TOOL_GENERATED=(cmd/hello/data.txt)
"""
GENERATE = (
    'tool_generate_source() { (cd src/cmd/hello && VERSION="$MODULE_VERSION" go run gen.go); }\n'
)


def proxy(root: Path) -> Path:
    """A file:// module proxy serving MODULE and DEP at VERSION."""
    for module, files in ((MODULE, FILES), (DEP, DEP_FILES)):
        d = root / "proxy" / module / "@v"
        d.mkdir(parents=True)
        (d / "list").write_text(f"{VERSION}\n")
        info = f'{{"Version":"{VERSION}","Time":"2026-01-01T00:00:00Z"}}'
        (d / f"{VERSION}.info").write_text(info)
        (d / f"{VERSION}.mod").write_text(files["go.mod"])
        with zipfile.ZipFile(d / f"{VERSION}.zip", "w") as z:
            for name, text in files.items():
                z.writestr(f"{module}@{VERSION}/{name}", text)
    return root / "proxy"


@pytest.fixture
def tree(tmp_path) -> Path:
    """scripts/tools.sh with its lib.sh and versions.env, and an empty hack/tools."""
    if not shutil.which("go"):
        # CI has Go (.ci/run checks it first): there these tests never skip
        why = "Go is not on PATH: scripts/tools.sh's build contract (the e2e's tools) is not tested"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}, and CI must test it (versions.env GO_VERSION)")
        pytest.skip(why)
    (tmp_path / "scripts").mkdir()
    for name in ("tools.sh", "lib.sh"):
        shutil.copy2(REPO / "scripts" / name, tmp_path / "scripts" / name)
    versions = (REPO / "versions.env").read_text() + f"FAKE_VERSION={VERSION}\n"
    (tmp_path / "versions.env").write_text(versions)
    (tmp_path / "hack" / "tools").mkdir(parents=True)
    proxy(tmp_path)
    return tmp_path


def build(tree: Path, recipe: str, *args: str, proxy_url: str = "") -> subprocess.CompletedProcess:
    """``tools.sh ARGS... fake`` (default: build it) with ``recipe`` as hack/tools/fake.sh,
    against the file:// proxy (or ``proxy_url``: ``off`` allows Go's module cache only)."""
    (tree / "hack" / "tools" / "fake.sh").write_text(recipe)
    env = {
        **os.environ,
        "FMNIST_TOOLS_CACHE": str(tree / "cache"),
        "GOPROXY": proxy_url or f"file://{tree / 'proxy'}",
        "GOSUMDB": "off",
        "GOFLAGS": "-buildvcs=false",
        "GOMODCACHE": str(tree / "gomod"),
        "TMPDIR": str(tree / "tmp"),
    }
    (tree / "tmp").mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", str(tree / "scripts" / "tools.sh"), *args, "fake"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip


def test_a_generated_file_is_made_by_the_recipe_and_embedded(tree):
    proc = build(tree, RECIPE + GENERATE)
    assert proc.returncode == 0, proc.stderr
    binary = next((tree / "cache").glob("fake-*/bin/hello"))
    assert subprocess.run([binary], capture_output=True, text=True).stdout == f"generated {VERSION}"


def test_a_recipe_that_lists_generated_files_without_a_generator_is_refused(tree):
    proc = build(tree, RECIPE)
    assert proc.returncode == 1
    assert "TOOL_GENERATED is set and the recipe has no tool_generate_source" in proc.stderr
    assert not list((tree / "cache").glob("fake-*/bin"))  # no cache entry


def test_a_generator_that_does_not_make_a_listed_file_fails_the_build(tree):
    proc = build(tree, RECIPE + "tool_generate_source() { :; }\n")
    assert proc.returncode == 1
    assert "tool_generate_source did not make src/cmd/hello/data.txt" in proc.stderr
    assert not list((tree / "cache").glob("fake-*/bin"))


def test_download_fetches_what_the_build_needs_and_builds_nothing(tree):
    proc = build(tree, RECIPE + GENERATE, "--download")
    assert proc.returncode == 0, proc.stderr
    assert f"fake {VERSION}: modules downloaded in" in proc.stderr, proc.stderr
    assert not list((tree / "cache").glob("fake-*"))  # no cache entry
    assert not list((tree / "tmp").iterdir())  # its work directory gone
    for module in (MODULE, DEP):  # the dependency too (`go get`, not only the module's zip)
        assert (tree / "gomod" / "cache" / "download" / module / "@v" / f"{VERSION}.zip").is_file()
    # the build after it needs no proxy: everything came from the download
    proc = build(tree, RECIPE + GENERATE, proxy_url="off")
    assert proc.returncode == 0, proc.stderr
    assert next((tree / "cache").glob("fake-*/bin/hello")).is_file()


def test_a_failed_download_is_logged_and_left_to_the_build(tree):
    bad = RECIPE.replace(f"TOOL_MODULE={MODULE}", "TOOL_MODULE=example.com/nosuch")
    proc = build(tree, bad + GENERATE, "--download")
    assert proc.returncode == 0, proc.stderr  # the prefetch never fails a run by itself
    assert f"fake {VERSION}: download failed (its build will say why):" in proc.stderr
    assert not list((tree / "tmp").iterdir())
    proc = build(tree, bad + GENERATE)
    assert proc.returncode == 1 and "build failed" in proc.stderr, proc.stderr


# --- TOOL_MAIN_MODULES: main modules no proxy can serve (cert-manager's cmd/*) -----------------

MAIN_PATH = f"{MODULE}/hello-binary"  # a path that does not match its folder, as cert-manager's
MAIN_FILES = {
    "go.mod": (
        f"module {MAIN_PATH}\n\ngo 1.22\n\nreplace {MODULE} => ../../\n\n"
        f"require {MODULE} v0.0.0-00010101000000-000000000000\n"
    ),
    "main.go": (
        f'package main\n\nimport (\n\t"fmt"\n\n\t"{DEP}"\n\t"{MODULE}/lib"\n)\n\n'
        "func main() { fmt.Print(lib.Name + dep.Suffix) }\n"
    ),
}
MAIN_RECIPE = f"""TOOL_VERSION_KEY=FAKE_VERSION
TOOL_MODULE={MODULE}
TOOL_MAIN_MODULES=({MAIN_PATH}=cmd/hello)
TOOL_PACKAGES=({MAIN_PATH})
TOOL_BINARIES=(hello-binary=hello)
"""


def main_source(tree: Path) -> str:
    """A tool_main_source that lays out upstream's cmd/hello from a folder of ``tree``."""
    src = tree / "upstream" / "cmd" / "hello"
    src.mkdir(parents=True)
    for name, text in MAIN_FILES.items():
        (src / name).write_text(text)
    return f'tool_main_source() {{ cp -r "{tree / "upstream" / "cmd"}" "$1/"; }}\n'


def test_a_main_module_no_proxy_serves_builds_against_the_served_module(tree):
    """The main module's replace of TOOL_MODULE (``../../``) becomes TOOL_MODULE at the pinned
    version from the proxy (its requirement DEP with it), and the binary is built and named."""
    proc = build(tree, MAIN_RECIPE + main_source(tree))
    assert proc.returncode == 0, proc.stderr
    binary = next((tree / "cache").glob("fake-*/bin/hello"))
    # (with the main module's requirement of TOOL_MODULE left at its zero version, `go get`
    # cannot resolve it: the build fails)
    assert subprocess.run([binary], capture_output=True, text=True).stdout == "main"


def test_main_modules_without_a_source_or_with_another_path_are_refused(tree):
    proc = build(tree, MAIN_RECIPE)
    assert proc.returncode == 1
    assert "TOOL_MAIN_MODULES is set and the recipe has no tool_main_source" in proc.stderr
    wrong = MAIN_RECIPE.replace(f"TOOL_MAIN_MODULES=({MAIN_PATH}=", "TOOL_MAIN_MODULES=(x.com/y=")
    proc = build(tree, wrong + main_source(tree))
    assert proc.returncode == 1
    assert "main/cmd/hello/go.mod is not module x.com/y" in proc.stderr, proc.stderr
    assert not list((tree / "cache").glob("fake-*/bin"))
