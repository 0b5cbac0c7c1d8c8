"""Run the ML layer's Pulumi program (``program.py``) for one environment: ``up``, ``preview``
or ``destroy``, through Pulumi's Automation API, offline. ``scripts/pulumi.sh`` runs this.

What runs, and why (docs/gitops.md, "Pulumi"):
- the CLI and the Kubernetes provider are built from their Go modules by ``scripts/tools.sh``
  (recipes ``pulumi`` and ``pulumi-kubernetes``; no registry ships them): the CLI is given to
  the Automation API by path, the provider is linked into a private ``PULUMI_HOME`` as the
  plugin of exactly the version the Python SDK asks for (``resource-kubernetes-v<version>``),
  and plugin downloads are off;
- the program is inline: the CLI runs with ``--client`` and talks to this process, so no
  Python language host (``pulumi-language-python``, not served here) is needed;
- the state is a ``file://`` backend (default ``$XDG_STATE_HOME/fashion-mnist-gitops/pulumi``),
  its secrets under ``PULUMI_CONFIG_PASSPHRASE``; ``PULUMI_BACKEND_URL`` selects another, its
  credentials from the environment (``PULUMI_ACCESS_TOKEN``, the cloud's own): the private
  ``PULUMI_HOME`` holds no ``pulumi login``;
- the provider talks to the cluster of ``KUBECONFIG`` (else ``~/.kube/config``), server-side
  apply, its field manager ``pulumi-kubernetes-<random>``.

An object of the overlay that is live but not in the stack's state (applied by kubectl,
``scripts/deploy.sh`` or Argo CD) is a conflict: ``up`` and ``preview`` stop and name it with
its field managers; the provider's server-side apply would otherwise adopt it silently.
Every error is one line that names what to fix; nothing is written before the checks pass.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import program

STACK_TYPES = ("pulumi:pulumi:Stack", "pulumi:providers:kubernetes")


class SetupError(Exception):
    """What stops a run before Pulumi starts; its message is the one line shown."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    """``ACTION ENV [--train] [-p name=value ...] [--refresh]``; exits 2 on a bad argument."""
    p = argparse.ArgumentParser(
        prog="scripts/pulumi.sh",
        description='Deploy an overlay\'s ML layer with Pulumi (docs/gitops.md, "Pulumi").',
    )
    p.add_argument("action", choices=("up", "preview", "destroy"))
    envs = sorted(d.name for d in (program.REPO_ROOT / "overlays").iterdir() if d.is_dir())
    p.add_argument("environment", help=f"an overlay: {' | '.join(envs)}")
    p.add_argument("--train", action="store_true",
                   help="with up/preview: also submit a training run (a Workflow of the "
                        "pipeline's WorkflowTemplate), exported as trainingRun: each up --train "
                        "replaces the last run with a new one")  # fmt: skip
    p.add_argument("-p", dest="params", action="append", default=[], metavar="NAME=VALUE",
                   help="a parameter of that run (needs --train)")  # fmt: skip
    p.add_argument(
        "--refresh",
        action="store_true",
        help="read the live objects first (e.g. the InferenceService's URL)",
    )
    args = p.parse_args(argv)
    if args.params and not args.train:
        p.error("-p needs --train")
    if args.train and args.action == "destroy":
        p.error("--train is for up and preview (destroy deletes the run with the rest)")
    for item in args.params:
        if "=" not in item or item.startswith("="):
            p.error(f"-p needs name=value, got {item!r}")
    return args


def pins() -> dict[str, str]:
    """``KEY=VALUE`` lines of versions.env (the one place the versions are set)."""
    out = {}
    for line in (program.REPO_ROOT / "versions.env").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def tool_dir(tool: str) -> Path:
    """The cache entry of a built recipe (``scripts/tools.sh --bin-dir`` minus ``/bin``).

    Raises:
        SetupError: not built, with the command that builds it.
    """
    proc = subprocess.run(
        [str(program.REPO_ROOT / "scripts" / "tools.sh"), "--bin-dir", tool],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SetupError(
            f"Pulumi's {tool} is not built: run scripts/tools.sh pulumi pulumi-kubernetes"
        )
    return Path(proc.stdout.strip()).parent


def check_sdk(versions: dict[str, str]) -> str:
    """The provider version both sides agree on, without a leading v.

    Raises:
        SetupError: the installed Python SDK ``pulumi-kubernetes`` is not the provider's
            release pinned in versions.env (its plugin would not be found, or would not match).
    """
    want = versions["PULUMI_KUBERNETES_VERSION"].removeprefix("v")
    try:
        have = importlib.metadata.version("pulumi-kubernetes")
    except importlib.metadata.PackageNotFoundError:
        have = "none"
    if have != want:
        raise SetupError(
            f"the Python SDK pulumi-kubernetes is {have}, the provider is {want} (versions.env "
            "PULUMI_KUBERNETES_VERSION): install the pins of pyproject.toml (make venv)"
        )
    return want


def pulumi_home(state_dir: Path, provider_bin: Path, version: str) -> Path:
    """A private PULUMI_HOME whose only plugin is the provider built here, installed as Pulumi
    installs one (``plugins/resource-kubernetes-v<version>/``); returns its path."""
    home = state_dir / "home"
    plugin = home / "plugins" / f"resource-kubernetes-v{version}"
    plugin.mkdir(parents=True, exist_ok=True)
    link = plugin / "pulumi-resource-kubernetes"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(provider_bin)
    return home


def kubeconfig_path() -> Path:
    """The first file of ``KUBECONFIG``, else ``~/.kube/config``.

    Raises:
        SetupError: the file does not exist.
    """
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    path = Path(first or Path.home() / ".kube" / "config").expanduser()
    if not path.is_file():
        raise SetupError(f"no kubeconfig at {path}: set KUBECONFIG to your cluster's")
    return path.resolve()


def check_cluster(kubectl: str, kubeconfig: Path) -> None:
    """Raises SetupError unless the kubeconfig's cluster answers within 10 s."""
    proc = subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), "--request-timeout=10s",
         "get", "--raw", "/version"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no answer"])[-1]
        raise SetupError(f"the cluster of {kubeconfig} does not answer ({why}): fix KUBECONFIG")


def object_key(obj: dict) -> tuple[str, str, str]:
    """(group, kind, ``ns/name``) of an object, its version left out: a stack keeps owning an
    object whose apiVersion the overlay moves (the core group is written ``core``)."""
    group = obj["apiVersion"].rpartition("/")[0] or "core"
    return group, obj["kind"], program.logical_name(obj)


def _state_resources(deployment: dict) -> Iterator[tuple[tuple[str, str, str], dict]]:
    """(``object_key``, resource) of each Kubernetes object in a stack's exported state."""
    for r in deployment.get("resources") or []:
        if not r["type"].startswith("kubernetes:") or r["type"] in STACK_TYPES:
            continue
        _, group_version, kind = r["type"].split(":")
        yield (group_version.rpartition("/")[0], kind, r.get("id", "")), r


def owned_in_state(deployment: dict) -> dict[tuple[str, str, str], str]:
    """The Kubernetes objects a stack's exported state holds: ``object_key`` -> the uid of the
    object it created (``""`` when the state has none)."""
    return {
        key: ((r.get("outputs") or {}).get("metadata") or {}).get("uid", "")
        for key, r in _state_resources(deployment)
    }


def unretained(objects: list[dict], deployment: dict) -> list[str]:
    """``Kind ns/name`` of each object git keeps (``program.kept``) whose entry in the stack's
    state has no ``retainOnDelete``: ``destroy`` reads that from the state, not from the program
    (it runs no program: the CLI's ``--run-program`` is off, and the engine's delete step skips
    only ``old.RetainOnDelete``), so a stack last updated before git kept it would delete it."""
    kept = {object_key(o) for o in objects if program.kept(o)}
    return [
        f"{key[1]} {key[2]}"
        for key, r in _state_resources(deployment)
        if key in kept and not r.get("retainOnDelete")
    ]


def state_objects(deployment: dict) -> list[dict]:
    """The Kubernetes objects a stack's exported state holds, as ``apiVersion``, ``kind`` and
    ``metadata`` (name, namespace) from their outputs: what ``destroy`` would delete."""
    out = []
    for r in deployment.get("resources") or []:
        outputs = r.get("outputs") or {}
        if r["type"] in STACK_TYPES or not r["type"].startswith("kubernetes:"):
            continue
        if not outputs.get("apiVersion") or not (outputs.get("metadata") or {}).get("name"):
            continue
        meta = {k: v for k, v in outputs["metadata"].items() if k in ("name", "namespace")}
        out.append({"apiVersion": outputs["apiVersion"], "kind": outputs["kind"], "metadata": meta})
    return out


def _managers(obj: dict) -> str:
    found = sorted({f["manager"] for f in obj["metadata"].get("managedFields") or []})
    return ", ".join(found) or "unknown"


def conflicts(
    objects: list[dict], live: list[dict], owned: dict[tuple[str, str, str], str]
) -> list[str]:
    """The objects of the overlay that are live but not this stack's, each
    ``Kind ns/name (managed by m1, m2)``: another tool applied them, or, with a uid other than
    the one the stack created (recreated by another tool, or another cluster), took them over."""
    found = []
    live_by_key = {object_key(o): o for o in live}
    for obj in objects:
        key = object_key(obj)
        if key not in live_by_key:
            continue
        other = live_by_key[key]
        name = f"{key[1]} {key[2]}"
        if key not in owned:
            found.append(f"{name} (managed by {_managers(other)})")
        elif owned[key] and other["metadata"].get("uid") != owned[key]:
            found.append(
                f"{name} (not the object this stack created; managed by {_managers(other)})"
            )
    return found


#: Argo CD's tracking annotation (its default tracking):
#: ``<app>:<group>/<kind>:<ns>/<name>``.
TRACKING_ID = "argocd.argoproj.io/tracking-id"


def adoptable(
    objects: list[dict], live: list[dict], owned: dict, applications: set[str] = frozenset()
) -> list[dict]:
    """The kept objects (``program.kept``: git's Delete=false, the PVC with every model version
    and its Namespace) that are live, kept there too, not in the stack's state and not tracked
    by an Argo CD Application that exists (``applications``: names, as ``<ns>_<name>`` too):
    data an earlier deployment left on purpose (``destroy``, a deleted Application). ``up``
    adopts them (the provider's server-side apply patches an existing object) instead of
    refusing them as another tool's; any other object of the overlay that is live, and a kept
    one that a live Application still syncs, still refuses the run."""
    live_by_key = {object_key(o): o for o in live}

    def left(obj: dict) -> bool:
        other = live_by_key.get(object_key(obj))
        if other is None or object_key(obj) in owned or not program.kept(other):
            return False
        notes = other["metadata"].get("annotations") or {}
        tracker = (notes.get(TRACKING_ID) or "").split(":")[0]
        return not tracker or tracker not in applications

    return [o for o in objects if program.kept(o) and left(o)]


def argocd_applications(kubectl: str, kubeconfig: Path) -> set[str]:
    """The Argo CD Applications of the cluster, as ``name`` and ``namespace_name`` (the forms a
    tracking id starts with); empty where Argo CD's CRD is not installed."""
    proc = subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), "get", "applications.argoproj.io",
         "--all-namespaces", "--ignore-not-found",
         "-o", "jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name}{\"\\n\"}{end}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        if "the server doesn't have a resource type" in proc.stderr:
            return set()
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise SetupError(f"reading Argo CD's Applications: {(lines or ['kubectl failed'])[-1]}")
    found = set()
    for line in proc.stdout.splitlines():
        if line.strip():
            ns, name = line.split()
            found |= {name, f"{ns}_{name}"}
    return found


def missing(objects: list[dict], live: list[dict], owned: dict) -> list[str]:
    """``Kind ns/name`` of the objects the stack's state holds that are not live (deleted out
    of band): Pulumi diffs against its state, so only a refresh sees them gone."""
    live_keys = {object_key(o) for o in live}
    return [f"{k[1]} {k[2]}" for k in map(object_key, objects) if k in owned and k not in live_keys]


def live_objects(kubectl: str, kubeconfig: Path, objects: list[dict]) -> list[dict]:
    """The live counterparts of ``objects`` (``kubectl get -f``; missing ones left out)."""
    proc = subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), "get", "--ignore-not-found",
         "--show-managed-fields", "-o", "json", "-f", "-"],
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        kinds = sorted(set(re.findall(r'no matches for kind "(\w+)"', proc.stderr)))
        if kinds:
            raise SetupError(f"the cluster has no {', '.join(kinds)} (the platform's CRDs): "
                             "run scripts/install-platform.sh first")  # fmt: skip
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise SetupError(f"reading the live objects: {(lines or ['kubectl failed'])[-1]}")
    return json.loads(proc.stdout)["items"] if proc.stdout.strip() else []  # always a List


def state_dir() -> Path:
    """Where the default ``file://`` backend and the private PULUMI_HOME live."""
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "fashion-mnist-gitops" / "pulumi"


def workspace_env(home: Path, backend: str) -> dict[str, str]:
    """The environment of every CLI call: offline, the private home, no plugin downloads, no
    provider from PATH (only the one linked into ``home``)."""
    return {
        "PULUMI_HOME": str(home),
        "PULUMI_BACKEND_URL": backend,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
        # never force a server-side apply: a field another manager owns is a conflict, not ours
        "PULUMI_K8S_ENABLE_PATCH_FORCE": "false",
    }


DIAGNOSTIC = re.compile(r"^  (?P<type>[a-z][\w.-]*:\S+) \((?P<name>[^)]*)\):$")


def keep_salt(workspace, stack_name: str, deployment: dict) -> None:
    """Put the stack's passphrase salt (its checkpoint's ``secrets_providers``) back into
    Pulumi.<stack>.yaml when that file lost it (another machine, a cleaned folder): without it
    the CLI would make a new salt, accept any passphrase, and lock out the right one."""
    provider = deployment.get("secrets_providers") or {}
    salt = (provider.get("state") or {}).get("salt")
    if provider.get("type") != "passphrase" or not salt:
        return
    from pulumi.automation import StackSettings

    try:
        settings = workspace.stack_settings(stack_name)
    except FileNotFoundError:
        settings = StackSettings()
    if not settings.encryption_salt:
        settings.encryption_salt = salt
        workspace.save_stack_settings(stack_name, settings)


def one_line(text: str) -> str:
    """The line that says why a CLI call failed, from its output (``str`` of Pulumi's
    CommandError): the first resource error of its ``Diagnostics:``, as ``Kind name: reason``
    with how many more there are; else its last ``error:`` line."""
    if "passphrase" in text.lower() and ("incorrect" in text or "decrypt" in text):
        return ("the passphrase does not open this stack's secrets: set PULUMI_CONFIG_PASSPHRASE "
                "to the one it was created with")  # fmt: skip
    lines = text.splitlines()
    found, header = [], None
    for line in lines[lines.index("Diagnostics:") + 1 :] if "Diagnostics:" in lines else []:
        if m := DIAGNOSTIC.match(line):
            header = m
        elif (
            header
            and line.strip().startswith("error:")
            and not header["type"].startswith("pulumi:")
        ):
            why = re.sub(r'^resource "urn:[^"]*" ', "", line.strip().removeprefix("error:").strip())
            found.append(f"{header['type'].rpartition(':')[2]} {header['name']}: {why}")
    if found:
        more = f" (and {len(found) - 1} more above)" if len(found) > 1 else ""
        return found[0] + more
    errors = [ln.strip() for ln in lines if "error:" in ln]
    last = (errors or [ln.strip() for ln in lines if ln.strip()] or ["pulumi failed"])[-1]
    return re.sub(r"^((stdout|stderr|error):\s*)+", "", last)


def run(args: argparse.Namespace) -> int:
    """Check the setup, then up/preview/destroy; prints the Pulumi run and a summary line
    ``<action>: {"create": N, ...}`` (JSON), then ``outputs: {...}`` for up."""
    from pulumi import automation as auto

    versions = pins()
    objects = program.render(args.environment, os.environ.get("KUBECTL", "kubectl"))
    training = dict(p.split("=", 1) for p in args.params) if args.train else None
    # each `up --train` asks for a new run: its time marks the Workflow (program.SUBMISSION)
    submission = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    if training is not None:
        program.training_workflow(objects, training)  # its ValueError before anything runs
    provider_version = check_sdk(versions)
    cli = tool_dir("pulumi")
    provider = tool_dir("pulumi-kubernetes") / "bin" / "pulumi-resource-kubernetes"
    backend = os.environ.get("PULUMI_BACKEND_URL") or f"file://{state_dir() / 'state'}"
    passphrase = ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE")
    if backend.startswith("file://") and not any(os.environ.get(k) for k in passphrase):
        raise SetupError("set PULUMI_CONFIG_PASSPHRASE: it guards the stack's secrets in the "
                         "local state (any for a new stack, then the same)")  # fmt: skip
    kubeconfig = kubeconfig_path()
    kubectl = os.environ.get("KUBECTL", "kubectl")
    check_cluster(kubectl, kubeconfig)
    if backend.startswith("file://"):
        Path(backend.removeprefix("file://")).expanduser().mkdir(parents=True, exist_ok=True)
    home = pulumi_home(state_dir(), provider, provider_version)
    # the project's folder keeps Pulumi.<stack>.yaml, whose encryptionsalt checks the passphrase:
    # one per backend (another backend's stack of the same name has its own salt)
    work_dir = state_dir() / "project" / hashlib.sha256(backend.encode()).hexdigest()[:12]
    work_dir.mkdir(parents=True, exist_ok=True)

    def pulumi_program() -> None:
        import pulumi_kubernetes as k8s

        cluster = k8s.Provider("cluster", kubeconfig=str(kubeconfig), enable_server_side_apply=True)
        program.ml_layer(objects, cluster, training, submission)

    workspace = auto.LocalWorkspace(
        work_dir=str(work_dir),
        pulumi_home=str(home),
        program=pulumi_program,
        env_vars=workspace_env(home, backend),
        secrets_provider="passphrase" if backend.startswith("file://") else None,
        project_settings=auto.ProjectSettings(
            name=program.PROJECT, runtime="python", backend=auto.ProjectBackend(url=backend)
        ),
        pulumi_command=auto.PulumiCommand(root=str(cli)),
    )
    try:
        stack = auto.Stack.select(args.environment, workspace)
    except auto.StackNotFoundError:
        if args.action == "destroy":
            raise SetupError(
                f"no stack {args.environment} in {backend}: nothing to destroy"
            ) from None
        stack = None  # made below, once the checks pass: a refused run writes no state
    deployment = (stack.export_stack().deployment or {}) if stack else {}
    owned = owned_in_state(deployment)
    if args.action == "destroy":  # what the state holds: is each still the object it created?
        created = state_objects(deployment)
        if forgotten := unretained(objects, deployment):
            raise SetupError(
                f"{', '.join(forgotten)}: git keeps them (Delete=false), but the stack's state, "
                "written by an up before that, would delete them (destroy reads the state): run "
                f"scripts/pulumi.sh up {args.environment} first, then destroy"
            )
        taken = conflicts(created, live_objects(kubectl, kubeconfig, created), owned)
        if taken:
            raise SetupError(
                f"{'; '.join(taken)}: destroy would delete another tool's object of the same "
                "name; delete it yourself or remove it from the state (pulumi state delete)"
            )
    else:
        live = live_objects(kubectl, kubeconfig, objects)
        adopted = adoptable(objects, live, owned, argocd_applications(kubectl, kubeconfig))
        taken = conflicts([o for o in objects if o not in adopted], live, owned)
        if taken:
            raise SetupError(
                f"{len(taken)} object(s) of overlays/{args.environment} exist and are not this "
                f"stack's: {'; '.join(taken)}. Pulumi would take them over silently: delete them "
                "(kubectl delete -k overlays/<env>, or the Argo CD Application) or keep deploying "
                "with the tool that owns them"
            )
        if adopted and args.action == "up":
            names = ", ".join(f"{k[1]} {k[2]}" for k in map(object_key, adopted))
            print(f"adopting {names}: kept by an earlier deployment (Delete=false)")
        gone = missing(objects, live, owned)
        if gone and not args.refresh:
            raise SetupError(
                f"{'; '.join(gone)}: in the stack's state but not live (deleted out of band?); "
                "Pulumi compares with its state, so run with --refresh to read the cluster first"
            )
    if stack is None:
        stack = auto.Stack.create(args.environment, workspace)
    else:
        keep_salt(workspace, args.environment, deployment)
    common = {"on_output": print, "color": "never"}
    if args.action == "up":
        result = stack.up(refresh=args.refresh, **common)
        print(f"up: {json.dumps(result.summary.resource_changes or {}, sort_keys=True)}")
        values = {k: v.value for k, v in result.outputs.items()}
        print(f"outputs: {json.dumps(values, sort_keys=True)}")
    elif args.action == "preview":
        result = stack.preview(refresh=args.refresh, **common)
        print(f"preview: {json.dumps(result.change_summary, sort_keys=True)}")
    else:
        result = stack.destroy(refresh=args.refresh, **common)
        print(f"destroy: {json.dumps(result.summary.resource_changes or {}, sort_keys=True)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of scripts/pulumi.sh; exit 0 on success, 1 with one ``error:`` line."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(args)
    except (SetupError, ValueError, RuntimeError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
    except Exception as err:  # Pulumi's CommandError and kin: the CLI's own reason
        if type(err).__module__.startswith("pulumi"):
            print(f"error: {one_line(str(err))}", file=sys.stderr)
        else:
            raise
    return 1


if __name__ == "__main__":
    sys.exit(main())
