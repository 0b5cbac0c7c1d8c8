"""The platform's controllers in the e2e: KServe's as a local process, the others as pods.

The training-operator and Argo (workflow-controller, argo-server) run as the pods of the
Deployments that scripts/install-platform.sh applies, on the real node: their namespaces
(:data:`POD_NAMESPACES`) are created first with the real node's placement annotations, and
their images are built here under the pinned names (scripts/e2e-images.sh). The operator's
webhook is served through its Service with the certificate of its own rotator.

KServe's controller manager (built by ``scripts/tools.sh``) still runs on this machine with a
kubeconfig holding **its own ServiceAccount's token**: its Deployment needs cert-manager's
certificate, and cert-manager is installed as CRDs only. Its webhook configurations are
re-pointed at ``https://127.0.0.1:<port>/<path>`` with a CA made here by a
:class:`WebhookWirer` (server-side apply under kubectl's field manager, so a re-apply swaps
``url`` back to ``service`` cleanly). Webhooks whose server is not run here are set to
``failurePolicy: Ignore`` with the reason in :data:`IGNORED_WEBHOOKS`.

The kwok nodes run no containers: the pods of the kwok-node tests are only simulated; see
docs/e2e-controllers.md.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import real_node
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = REPO_ROOT / "scripts" / "tools.sh"
#: Field manager of ``kubectl apply --server-side`` (the install script's applies).
KUBECTL_MANAGER = "kubectl"
#: Webhook configurations (kind, name) -> why they are set to failurePolicy Ignore: their
#: server is a controller this e2e does not run.
IGNORED_WEBHOOKS = {
    ("ValidatingWebhookConfiguration", "llminferenceservice.serving.kserve.io"): (
        "served by KServe's llmisvc-controller-manager (cmd/llmisvc), not run: the project"
        " uses no LLMInferenceService"
    ),
    ("ValidatingWebhookConfiguration", "llminferenceserviceconfig.serving.kserve.io"): (
        "served by KServe's llmisvc-controller-manager (cmd/llmisvc), not run: the project"
        " uses no LLMInferenceServiceConfig (kserve-cluster-resources ships some; they are"
        " accepted unvalidated)"
    ),
    ("MutatingWebhookConfiguration", "llminferenceservice.serving.kserve.io"): (
        "served by KServe's llmisvc-controller-manager (cmd/llmisvc), not run"
    ),
    ("ValidatingWebhookConfiguration", "localmodelcache.serving.kserve.io"): (
        "served by KServe's localmodel-controller-manager, not run: no LocalModelCache"
    ),
}


class ControllerError(RuntimeError):
    """A controller binary is missing, did not start, or a cluster call failed."""


def kubectl(kubeconfig: Path, *args: str, input: str | None = None, check: bool = True) -> str:
    """Run the venv's kubectl against ``kubeconfig``; stdout. Raises ControllerError on failure."""
    proc = subprocess.run(
        [kubectl_binary(), "--kubeconfig", str(kubeconfig), *args],
        input=input,
        capture_output=True,
        text=True,
        check=False,
    )
    if check and proc.returncode != 0:
        raise ControllerError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def kubectl_binary() -> str:
    """$KUBECTL (the kubectl 1.34 that ``make e2e`` exports) or the venv's kubectl."""
    return os.environ.get("KUBECTL") or str(REPO_ROOT / ".venv" / "bin" / "kubectl")


def tool_binary(name: str) -> Path:
    """Path of a binary built by ``scripts/tools.sh``; ControllerError naming the build command."""
    proc = subprocess.run(
        ["bash", str(TOOLS), "--bin", name], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise ControllerError(f"{name} is not built: run scripts/tools.sh ({proc.stderr.strip()})")
    return Path(proc.stdout.strip())


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- certificates -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Certs:
    """A self-signed CA and a server certificate for 127.0.0.1 (+ DNS names), PEM bytes."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    def write(self, certdir: Path) -> None:
        """Write ``tls.crt``/``tls.key`` (controller-runtime's webhook layout) to ``certdir``."""
        certdir.mkdir(parents=True, exist_ok=True)
        (certdir / "tls.crt").write_bytes(self.cert)
        (certdir / "tls.key").write_bytes(self.key)
        (certdir / "tls.key").chmod(0o600)


def make_certs(ca_name: str, dns_names: list[str]) -> Certs:
    """A CA named ``ca_name`` (also its DNS SAN, as cert-controller's rotator checks) and a
    server certificate valid for IP 127.0.0.1 and ``dns_names``, 2048-bit RSA, 1 year."""
    now = datetime.datetime.now(datetime.UTC)
    begin, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=365)

    def pem_key(k: rsa.RSAPrivateKey) -> bytes:
        return k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(begin)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                key_cert_sign=True,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    sans += [x509.DNSName(n) for n in dns_names]
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (dns_names or ["127.0.0.1"])[0])])
        )
        .issuer_name(ca_subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(begin)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Certs(
        ca.public_bytes(serialization.Encoding.PEM),
        pem_key(ca_key),
        cert.public_bytes(serialization.Encoding.PEM),
        pem_key(key),
    )


# --- ServiceAccount kubeconfigs -----------------------------------------------------------------


def sa_kubeconfig(admin: Path, namespace: str, sa: str, dest: Path, duration: str = "4h") -> Path:
    """Write ``dest``: a kubeconfig for ServiceAccount ``namespace/sa`` (a token from
    ``kubectl create token``), same cluster as ``admin``, default namespace ``namespace``."""
    token = kubectl(admin, "create", "token", sa, "-n", namespace, f"--duration={duration}").strip()
    raw = json.loads(
        kubectl(admin, "config", "view", "--raw", "--minify", "--flatten", "-o", "json")
    )
    cluster = raw["clusters"][0]["cluster"]
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": f"{namespace}-{sa}", "user": {"token": token}}],
        "contexts": [
            {
                "name": "sa",
                "context": {"cluster": "e2e", "user": f"{namespace}-{sa}", "namespace": namespace},
            }
        ],
        "current-context": "sa",
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(cfg))
    dest.chmod(0o600)
    return dest


# --- webhook wiring ----------------------------------------------------------------------------


@dataclass
class WebhookTarget:
    """Webhook configurations served by one local controller: port and CA."""

    port: int
    ca_cert: bytes
    configs: list[tuple[str, str]]  # (kind, name)


def _wired(obj: dict, target: WebhookTarget | None) -> dict | None:
    """The apply body that points ``obj``'s webhooks at ``target`` (or sets them to Ignore when
    ``target`` is None); None when ``obj`` already is so."""
    body = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {
            k: v for k, v in obj["metadata"].items() if k in ("name", "labels", "annotations") and v
        },
        "webhooks": [],
    }
    changed = False
    for w in obj.get("webhooks") or []:
        w = dict(w)
        cc = dict(w.get("clientConfig") or {})
        if target is None:
            changed |= w.get("failurePolicy") != "Ignore"
            w["failurePolicy"] = "Ignore"
        else:
            path = (cc.get("service") or {}).get("path") or _url_path(cc.get("url", ""))
            want = {
                "url": f"https://127.0.0.1:{target.port}{path}",
                "caBundle": base64.b64encode(target.ca_cert).decode(),
            }
            changed |= cc != want
            w["clientConfig"] = want
        body["webhooks"].append(w)
    return body if changed else None


def _url_path(url: str) -> str:
    return "/" + url.split("/", 3)[3] if url.count("/") >= 3 else "/"


class WebhookWirer(threading.Thread):
    """Keeps webhook configurations pointed at local controllers (see the module docstring).

    Polls every ``interval`` seconds; re-wires a configuration that the install script has just
    re-applied from upstream. ``errors`` collects failures (the tests assert it is empty).
    """

    def __init__(self, admin: Path, interval: float = 1.0) -> None:
        super().__init__(daemon=True, name="webhook-wirer")
        self.admin = admin
        self.interval = interval
        self.targets: dict[tuple[str, str], WebhookTarget | None] = dict.fromkeys(IGNORED_WEBHOOKS)
        self.errors: list[str] = []
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._api = None

    def add(self, target: WebhookTarget) -> None:
        """Wire ``target.configs`` from now on."""
        with self._lock:
            for c in target.configs:
                self.targets[c] = target

    def _live(self, kind: str) -> dict[str, dict]:
        """The live webhook configurations of ``kind`` by name (kubernetes client: cheaper
        than a kubectl process per poll)."""
        if self._api is None:
            from kubernetes import client, config

            api = client.AdmissionregistrationV1Api(
                config.new_client_from_config(config_file=str(self.admin))
            )
            self._api = api
        lister = (
            self._api.list_validating_webhook_configuration
            if kind == "ValidatingWebhookConfiguration"
            else self._api.list_mutating_webhook_configuration
        )
        items = self._api.api_client.sanitize_for_serialization(lister().items)
        out = {}
        for o in items:
            o["apiVersion"], o["kind"] = "admissionregistration.k8s.io/v1", kind
            out[o["metadata"]["name"]] = o
        return out

    def wire_once(self) -> int:
        """One pass; number of configurations changed."""
        with self._lock:
            items = list(self.targets.items())
        n = 0
        for kinds in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            names = [name for (kind, name), _ in items if kind == kinds]
            if not names:
                continue
            live = self._live(kinds)
            for name in names:
                if name not in live:
                    continue
                body = _wired(live[name], self.targets[(kinds, name)])
                if body is None:
                    continue
                proc = subprocess.run(
                    [
                        kubectl_binary(),
                        "--kubeconfig",
                        str(self.admin),
                        "apply",
                        "--server-side",
                        "--force-conflicts",
                        f"--field-manager={KUBECTL_MANAGER}",
                        "-f",
                        "-",
                    ],
                    input=json.dumps(body),
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if proc.returncode != 0:
                    self.errors.append(f"{kinds}/{name}: {proc.stderr.strip()}")
                else:
                    n += 1
        return n

    def run(self) -> None:  # noqa: D102 (threading.Thread API)
        while not self._halt.is_set():
            try:
                self.wire_once()
            except Exception as e:  # noqa: BLE001 - reported through .errors, never lost
                self.errors.append(repr(e))
            self._halt.wait(self.interval)

    def stop(self) -> None:
        """Stop polling (joins the thread)."""
        self._halt.set()
        self.join(timeout=10)


# --- processes ---------------------------------------------------------------------------------


@dataclass
class Controller:
    """One controller process (its own process group) and its log file."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    health_url: str | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def start(self) -> None:
        """Start the process in a new session (process group) with output to ``log``."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 40) -> str:
        """The last ``n`` lines of the log (for failure messages)."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 120) -> None:
        """Wait until ``health_url`` answers 200 (or, without one, 2 s alive); raises
        ControllerError with the log tail when the process exits or time runs out."""
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise ControllerError(f"{self.name} exited:\n{self.tail()}")
            if self.health_url is None:
                time.sleep(2)
                if self.alive():
                    return
                continue
            try:
                with urllib.request.urlopen(self.health_url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise ControllerError(f"{self.name} not ready after {timeout}s:\n{self.tail()}")

    def stop(self) -> None:
        """SIGTERM the whole process group, SIGKILL it after 10 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = os.getpgid(self.proc.pid)
        os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(timeout=10)


TO_WEBHOOK = ("ValidatingWebhookConfiguration", "validator.training-operator.kubeflow.org")
#: Namespaces of the platform whose controllers run as the pods of the pinned install on the
#: real node (their Deployments as base/platform renders them; the images are local builds
#: under the pinned names, scripts/e2e-images.sh) -> those Deployments.
POD_NAMESPACES = {
    "kubeflow": ("training-operator",),
    "argo": ("workflow-controller", "argo-server"),
}
KSERVE_WEBHOOKS = [
    ("MutatingWebhookConfiguration", "inferenceservice.serving.kserve.io"),
    ("ValidatingWebhookConfiguration", "clusterservingruntime.serving.kserve.io"),
    ("ValidatingWebhookConfiguration", "inferencegraph.serving.kserve.io"),
    ("ValidatingWebhookConfiguration", "inferenceservice.serving.kserve.io"),
    ("ValidatingWebhookConfiguration", "servingruntime.serving.kserve.io"),
    ("ValidatingWebhookConfiguration", "trainedmodel.serving.kserve.io"),
]


def wait_for(kubeconfig: Path, what: list[str], timeout: float = 300) -> None:
    """Wait until every ``kind/name -n ns`` in ``what`` exists (``kubectl get`` succeeds)."""
    deadline = time.monotonic() + timeout
    pending = list(what)
    while pending:
        pending = [w for w in pending if kubectl(kubeconfig, "get", *w.split(), check=False) == ""]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise ControllerError(f"not created within {timeout}s: {pending}")
        time.sleep(1)


def kserve(admin: Path, workdir: Path, wirer: WebhookWirer) -> Controller:
    """KServe v0.20.0's controller manager as ServiceAccount kserve/kserve-controller-manager.

    Its webhook server (controller-runtime) reads ``tls.crt``/``tls.key`` from
    ``$TMPDIR/k8s-webhook-server/serving-certs``: TMPDIR points into ``workdir``, where
    certificates made here are written (upstream gets them from cert-manager, which the e2e
    does not run). Not started (caller's job).
    """
    wait_for(
        admin,
        ["sa/kserve-controller-manager -n kserve", "configmap/inferenceservice-config -n kserve"],
    )
    certs = make_certs("kserve-e2e-ca", ["kserve-webhook-server-service.kserve.svc"])
    tmp = workdir / "kserve-tmp"
    certs.write(tmp / "k8s-webhook-server" / "serving-certs")
    kc = sa_kubeconfig(admin, "kserve", "kserve-controller-manager", workdir / "kserve.kubeconfig")
    port, probe, metrics = free_port(), free_port(), free_port()
    wirer.add(WebhookTarget(port, certs.ca_cert, KSERVE_WEBHOOKS))
    return Controller(
        "kserve-controller-manager",
        [
            str(tool_binary("kserve-manager")),
            f"--kubeconfig={kc}",
            f"--webhook-port={port}",
            f"--health-probe-addr=127.0.0.1:{probe}",
            f"--metrics-addr=127.0.0.1:{metrics}",
            "--leader-elect=false",
        ],
        {"POD_NAMESPACE": "kserve", "KUBECONFIG": str(kc), "TMPDIR": str(tmp)},
        workdir / "kserve.log",
        health_url=f"http://127.0.0.1:{probe}/readyz",
    )


# --- the platform of a test session ------------------------------------------------------------


@dataclass
class Platform:
    """The platform installed by scripts/install-platform.sh plus its running controllers."""

    admin: Path
    workdir: Path
    install_log: str
    install_seconds: float
    wirer: WebhookWirer
    controllers: dict[str, Controller]

    def check_alive(self) -> None:
        """Raise ControllerError (with the log tail) when a controller process has exited or
        a controller pod of :data:`POD_NAMESPACES` is not Running and Ready on the real node."""
        for c in self.controllers.values():
            if not c.alive():
                raise ControllerError(f"{c.name} is not running:\n{c.tail()}")
        if bad := unready_platform_pods(self.admin):
            raise ControllerError(f"platform pods not Running and Ready: {bad}")

    def stop(self) -> None:
        """Stop the controllers (process groups) and the webhook wirer."""
        for c in self.controllers.values():
            c.stop()
        self.wirer.stop()


def install_env(admin: Path | None = None) -> dict[str, str]:
    """Environment for ``scripts/install-platform.sh``: offline mirror mode, the e2e kubectl,
    and (when given) the admin kubeconfig as KUBECONFIG."""
    env = {
        **os.environ,
        "UPSTREAM_MIRROR_DIR": str(mirror_dir()),
        "KUBECTL": kubectl_binary(),
        "PYTHON": str(REPO_ROOT / ".venv" / "bin" / "python"),
    }
    if admin is not None:
        env["KUBECONFIG"] = str(admin)
    return env


def run_install(admin: Path) -> subprocess.Popen:
    """Start ``scripts/install-platform.sh`` against ``admin`` in offline mirror mode (output
    piped: stdout and stderr together)."""
    return subprocess.Popen(
        ["bash", str(REPO_ROOT / "scripts" / "install-platform.sh")],
        env=install_env(admin),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def mirror_dir() -> Path:
    """The offline upstream mirror: $UPSTREAM_MIRROR_DIR, else ../shared/upstream."""
    env = os.environ.get("UPSTREAM_MIRROR_DIR")
    path = Path(env) if env else REPO_ROOT.parent / "shared" / "upstream"
    if not path.is_dir():
        raise ControllerError(f"no upstream mirror at {path}: set MIRROR_DIR=../shared")
    return path


def place_on_real_node(admin: Path) -> None:
    """Create the namespaces of :data:`POD_NAMESPACES` with the real node's placement
    annotations (real_node.placement_annotations; server-side apply under a field manager of
    the e2e's own, so the install's apply of the same Namespace keeps them). Without a real
    node the controllers run nowhere: real_node.node_name fails (or skips, in a cluster
    started with FMNIST_E2E_REAL_NODE=0)."""
    real_node.node_name()
    for ns in POD_NAMESPACES:
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "annotations": real_node.placement_annotations()},
        }
        kubectl(
            admin, "apply", "--server-side", "--field-manager=e2e-placement", "-f", "-",
            input=json.dumps(body),
        )  # fmt: skip


def unready_platform_pods(admin: Path) -> list[str]:
    """``namespace/pod: why`` for each pod of the Deployments of :data:`POD_NAMESPACES` that is
    not Running and Ready on the real node (a Deployment without pods is named too)."""
    bad = []
    node = real_node.node_name()
    for ns, deployments in POD_NAMESPACES.items():
        for d in deployments:
            deploy = json.loads(kubectl(admin, "get", "deployment", d, "-n", ns, "-o", "json"))
            labels = deploy["spec"]["selector"]["matchLabels"]
            selector = ",".join(f"{k}={v}" for k, v in labels.items())
            got = kubectl(admin, "get", "pods", "-n", ns, "-l", selector, "-o", "json")
            mine = json.loads(got)["items"]
            if not mine:
                bad.append(f"{ns}/{d}: no pod")
            for pod in mine:
                st = pod.get("status") or {}
                ready = any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in st.get("conditions") or []
                )
                where = (pod.get("spec") or {}).get("nodeName")
                if st.get("phase") != "Running" or not ready or where != node:
                    waiting = [
                        (c.get("state") or {}).get("waiting", {}).get("reason", "")
                        for c in st.get("containerStatuses") or []
                    ]
                    bad.append(
                        f"{ns}/{pod['metadata']['name']}: {st.get('phase')} ready={ready}"
                        f" node={where} {' '.join(w for w in waiting if w)}".rstrip()
                    )
    return bad


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def start_platform(admin: Path, workdir: Path, timeout: float = 900) -> Platform:
    """Install the platform with scripts/install-platform.sh (offline). The namespaces of
    :data:`POD_NAMESPACES` are placed on the real node first, so the script's own Deployments
    run the training-operator and Argo as pods, and the script waits for them as on k3d.
    KServe's controller is still started here as a process as soon as the script has created
    its ServiceAccount (it must answer its webhooks before the script applies the
    ClusterServingRuntimes). Returns once the script exited 0 and every controller is ready;
    on any failure stops what it started and raises ControllerError with the script output and
    controller log tails."""
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (e.g. a CI timeout) -> KeyboardInterrupt, so pytest runs the teardown that
        # stops the controllers instead of leaving them behind
        signal.signal(signal.SIGTERM, _interrupt)
    place_on_real_node(admin)
    wirer = WebhookWirer(admin)
    wirer.start()
    t0 = time.monotonic()
    proc = run_install(admin)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    reader.start()
    started: dict[str, Controller] = {}
    try:
        for name, make in (("kserve", lambda: kserve(admin, workdir, wirer)),):
            try:
                c = make()
            except ControllerError as e:
                raise ControllerError(f"{e}\ninstall-platform.sh output:\n{''.join(out)}") from e
            c.start()
            started[name] = c
            c.wait_ready()
        rc = proc.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
        reader.join(timeout=5)
        if rc != 0:
            raise ControllerError(f"install-platform.sh exited {rc}:\n{''.join(out)}")
        return Platform(admin, workdir, "".join(out), time.monotonic() - t0, wirer, started)
    except BaseException:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for c in started.values():
            c.stop()
        wirer.stop()
        raise


_SESSION: dict[str, object] = {"platform": None, "users": 0, "error": None}


def acquire_platform(admin: Path, workdir: Path) -> Platform:
    """The session's platform, installed and started on first use (shared by test modules);
    pair each call with :func:`release_platform`. A failed start is raised again to every
    later caller instead of being retried."""
    if _SESSION["error"] is not None:
        raise ControllerError(f"platform start failed earlier: {_SESSION['error']}")
    if _SESSION["platform"] is None:
        try:
            _SESSION["platform"] = start_platform(admin, workdir)
        except ControllerError as e:
            _SESSION["error"] = e
            raise
    _SESSION["users"] = int(_SESSION["users"]) + 1  # type: ignore[call-overload]
    return _SESSION["platform"]  # type: ignore[return-value]


def release_platform() -> None:
    """Drop one user of the session's platform; the last one stops the controllers."""
    _SESSION["users"] = int(_SESSION["users"]) - 1  # type: ignore[call-overload]
    if _SESSION["users"] <= 0 and _SESSION["platform"] is not None:  # type: ignore[operator]
        _SESSION["platform"].stop()  # type: ignore[union-attr]
        _SESSION["platform"] = None


# --- helpers for the tests that run the project's workloads ------------------------------------


def provide_volume(admin: Path, pvc: dict, namespace: str, host_path: Path | None = None) -> None:
    """Make the project's PVC bindable on the kwok cluster: its StorageClass (k3s' local-path:
    rancher.io/local-path, WaitForFirstConsumer; no provisioner runs here) and a PersistentVolume
    pre-bound to ``namespace``/``pvc`` (hostPath: never mounted on a kwok node; mounted for real
    by the real node's kubelet, at ``host_path``, which the caller prepares: real_node.py), so
    the real PV controller binds the claim and the scheduler places the pods that mount it."""
    spec = pvc["spec"]
    sc = spec.get("storageClassName") or "standard"
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": sc},
        "provisioner": "rancher.io/local-path",
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"e2e-{namespace}-{pvc['metadata']['name']}"[:63]},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec["accessModes"],
            "storageClassName": sc,
            "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": str(host_path or f"/tmp/e2e-pv/{namespace}")},
            "claimRef": {"namespace": namespace, "name": pvc["metadata"]["name"]},
        },
    }
    if not kubectl(admin, "get", "storageclass", sc, "--ignore-not-found", "-o", "name"):
        kubectl(admin, "apply", "-f", "-", input=json.dumps(storage_class))
    kubectl(admin, "apply", "-f", "-", input=json.dumps(pv))
    # Only the declared fields: a claim read back from the server carries its resourceVersion,
    # and the PV controller may bind it (a write) between that read and this apply, which would
    # then fail with a Conflict (seen in CI).
    meta = pvc["metadata"]
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": meta["name"],
            "namespace": namespace,
            **({"labels": meta["labels"]} if meta.get("labels") else {}),
        },
        "spec": {k: spec[k] for k in ("accessModes", "resources", "storageClassName") if k in spec},
    }
    kubectl(admin, "apply", "-f", "-", input=json.dumps(claim))
