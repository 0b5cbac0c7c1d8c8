"""The platform's controllers in the e2e: the pods of the pinned installs on the real node.

KServe (its three controller managers), the training-operator and Argo (workflow-controller,
argo-server) run as the pods of the Deployments that scripts/install-platform.sh applies, on
the real node: their namespaces (:data:`POD_NAMESPACES`) are created first with the real
node's placement annotations, their images are built here under the pinned names
(scripts/e2e-images.sh), and the e2e's kustomize layer (tests/e2e/platform-layer, the script's
PLATFORM_LAYER_DIR) changes two fields of KServe's managers: imagePullPolicy Always ->
IfNotPresent (no registry can be reached) and requests.cpu 100m -> 10m (the 2-core node).
Every webhook keeps upstream's ``clientConfig.service``: the API server calls the pods through
their Services.

cert-manager cannot run here (docs/e2e-controllers.md: the main packages of its programs are
Go modules that the module proxy does not serve), and install-platform.sh installs its CRDs
only. :class:`CertManagerStandIn` does the two things of cert-manager that KServe's install
needs: it issues the Secret of each Certificate, and injects its CA into the webhook
configurations and CRDs that ask for it (``cert-manager.io/inject-ca-from``), as cainjector
does. The training-operator's webhook certificate comes from its own rotator, as upstream.

The kwok nodes run no containers: the pods of the kwok-node tests are only simulated; see
docs/e2e-controllers.md.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import real_node
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from e2e_kube import versions_env

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The e2e's kustomize layer over the pinned installs (install-platform.sh PLATFORM_LAYER_DIR).
PLATFORM_LAYER = Path(__file__).resolve().parent / "platform-layer"


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


# --- certificates -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Certs:
    """A self-signed CA and a server certificate for 127.0.0.1 (+ DNS names), PEM bytes."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes


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


# --- cert-manager's part, stood in ------------------------------------------------------------

#: The annotation cainjector reads: inject the CA of Certificate NAMESPACE/NAME.
INJECT_CA_FROM = "cert-manager.io/inject-ca-from"
#: The annotation on each Secret the stand-in issues (so a reader knows where it came from).
ISSUED_BY = "e2e.fashion-mnist/issued-by"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class CertManagerStandIn(threading.Thread):
    """cert-manager's controller and cainjector, for what the pinned installs ask of them.

    Every ``interval`` seconds, for each Certificate (cert-manager.io/v1) of the cluster (none
    before the install has created cert-manager's CRDs):

    - when its Secret (``spec.secretName``) does not exist, create it as cert-manager does:
      type kubernetes.io/tls with ``tls.crt`` (a server certificate for ``spec.dnsNames``,
      :func:`make_certs`, 1 year), ``tls.key`` and ``ca.crt``, and cert-manager's annotations
      (``cert-manager.io/certificate-name``, ``issuer-name``, ...) plus :data:`ISSUED_BY`;
      then set the Certificate's status ``Ready=True``. A Secret of that name that is not
      the Certificate's (another ``certificate-name``, no ``ca.crt``) is left alone and
      reported, as cainjector refuses it (pkg/controller/cainjector/sources.go);
    - inject that Secret's ``ca.crt`` as ``caBundle`` into every webhook of the
      Validating/MutatingWebhookConfigurations, and the conversion webhook of the CRDs,
      annotated :data:`INJECT_CA_FROM` with its ``namespace/name`` (JSON patches that touch
      only ``caBundle``; ``clientConfig.service`` stays upstream's). CRDs are listed by their
      metadata only (the installs' CRDs are about 10 MB) and read when annotated.

    - set ``Ready=True`` on each selfSigned Issuer, as cert-manager does (:meth:`ready_issuers`).

    Each Certificate and each target is handled on its own: one that fails does not stop the
    others. ``errors`` holds the failures of the last pass, one per object (the tests assert
    it is empty). Not done: renewal, any issuer type's own semantics (the
    e2e's only Issuer is KServe's selfSigned one).
    """

    def __init__(self, admin: Path, interval: float = 1.0) -> None:
        super().__init__(daemon=True, name="cert-manager-stand-in")
        self.admin = admin
        self.interval = interval
        self.errors: list[str] = []
        #: ``namespace/certificate`` -> the CA (PEM) of its Secret, once issued or found
        self.cas: dict[str, bytes] = {}
        self._halt = threading.Event()
        self._apis = None
        #: CRD name -> (resourceVersion, CAs) when it was last read and set right
        self._crds_seen: dict[str, tuple] = {}

    def _clients(self):
        if self._apis is None:
            from kubernetes import client, config

            api = config.new_client_from_config(config_file=str(self.admin))
            self._apis = (
                client.CoreV1Api(api),
                client.CustomObjectsApi(api),
                client.AdmissionregistrationV1Api(api),
                client.ApiextensionsV1Api(api),
            )
        return self._apis

    def issue(self, cert: dict) -> bytes:
        """The CA (PEM) of ``cert``'s Secret, which is created first when missing. Raises
        ControllerError when a Secret of that name exists and is not ``cert``'s."""
        from kubernetes.client.exceptions import ApiException

        core, custom, _, _ = self._clients()
        meta, spec = cert["metadata"], cert["spec"]
        ns, name = meta["namespace"], meta["name"]
        try:
            secret = core.read_namespaced_secret(spec["secretName"], ns)
        except ApiException as e:
            if e.status != 404:
                raise
        else:
            owner = (secret.metadata.annotations or {}).get("cert-manager.io/certificate-name")
            if owner != name or "ca.crt" not in (secret.data or {}):
                raise ControllerError(
                    f"Secret {ns}/{spec['secretName']} is not Certificate {name}'s"
                    f" (certificate-name {owner!r}, keys {sorted(secret.data or {})})"
                )
            return base64.b64decode(secret.data["ca.crt"])
        certs = make_certs(f"{name}.{ns}.cert-manager-stand-in", spec.get("dnsNames") or [])
        issuer = spec.get("issuerRef") or {}
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": spec["secretName"],
                "namespace": ns,
                "annotations": {
                    "cert-manager.io/certificate-name": name,
                    "cert-manager.io/issuer-name": issuer.get("name", ""),
                    "cert-manager.io/issuer-kind": issuer.get("kind", "Issuer"),
                    "cert-manager.io/issuer-group": issuer.get("group", "cert-manager.io"),
                    "cert-manager.io/alt-names": ",".join(spec.get("dnsNames") or []),
                    ISSUED_BY: "cert-manager stand-in (tests/e2e/controllers.py)",
                },
            },
            "data": {
                "tls.crt": _b64(certs.cert),
                "tls.key": _b64(certs.key),
                "ca.crt": _b64(certs.ca_cert),
            },
        }
        core.create_namespaced_secret(ns, body)
        ready = _ready("Ready", "Certificate is up to date and has not expired", meta)
        # a dict: a merge patch (the client sends a list as a merge patch too, which fails)
        custom.patch_namespaced_custom_object_status(
            "cert-manager.io", "v1", ns, "certificates", name,
            {"status": {"conditions": [ready], "revision": 1}},
        )  # fmt: skip
        return certs.ca_cert

    def ready_issuers(self, problems: dict[str, str]) -> None:
        """Each selfSigned Issuer without ``Ready=True`` gets it, as cert-manager's issuer
        controller sets it (reason IsReady; the selfSigned issuer needs no setup), so that
        what reads an Issuer's health (Argo CD) sees it Ready. Other issuer types are left
        alone (none is installed here)."""
        from kubernetes.client.exceptions import ApiException

        _, custom, _, _ = self._clients()
        try:
            issuers = custom.list_cluster_custom_object("cert-manager.io", "v1", "issuers")
        except ApiException as e:
            if e.status != 404:
                raise
            return
        for issuer in issuers["items"]:
            meta = issuer["metadata"]
            conds = (issuer.get("status") or {}).get("conditions") or []
            if "selfSigned" not in issuer["spec"] or any(
                c["type"] == "Ready" and c["status"] == "True" for c in conds
            ):
                continue
            try:
                custom.patch_namespaced_custom_object_status(
                    "cert-manager.io", "v1", meta["namespace"], "issuers", meta["name"],
                    {"status": {"conditions": [_ready("IsReady", "", meta)]}},
                )  # fmt: skip
            except Exception as e:  # noqa: BLE001 - reported, the pass goes on
                problems[f"Issuer {meta['namespace']}/{meta['name']}"] = _why(e)

    def _annotated_crds(self) -> dict[str, str]:
        """Name -> resourceVersion of the CRDs annotated :data:`INJECT_CA_FROM`, from a
        metadata-only list."""
        _, _, _, ext = self._clients()
        api = ext.api_client
        request = api.param_serialize(
            "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            header_params={
                "Accept": "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
            },
            auth_settings=["BearerToken"],
        )  # fmt: skip
        resp = api.call_api(*request)
        resp.read()
        items = json.loads(resp.data)["items"]
        return {
            i["metadata"]["name"]: i["metadata"]["resourceVersion"]
            for i in items
            if INJECT_CA_FROM in (i["metadata"].get("annotations") or {})
        }

    def inject(self, problems: dict[str, str]) -> int:
        """One cainjector pass; number of objects patched. A target that fails goes to
        ``problems`` (by kind/name) and the pass goes on."""
        _, _, adm, ext = self._clients()
        n = 0
        for lister, patcher in (
            (adm.list_validating_webhook_configuration, adm.patch_validating_webhook_configuration),
            (adm.list_mutating_webhook_configuration, adm.patch_mutating_webhook_configuration),
        ):
            for o in lister().items:
                ca = self.cas.get((o.metadata.annotations or {}).get(INJECT_CA_FROM, ""))
                if ca is None:
                    continue
                ops = []
                for i, w in enumerate(o.webhooks or []):
                    if w.client_config.ca_bundle != _b64(ca):
                        ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": w.name})
                        path = f"/webhooks/{i}/clientConfig/caBundle"
                        ops.append({"op": "add", "path": path, "value": _b64(ca)})
                if ops:
                    try:
                        patcher(o.metadata.name, ops)
                        n += 1
                    except Exception as e:  # noqa: BLE001 - reported, the pass goes on
                        problems[f"webhook configuration {o.metadata.name}"] = _why(e)
        for name, version in self._annotated_crds().items():
            # a CRD is read (up to MBs) only when it or the CAs changed since it was last seen
            seen = (version, tuple(sorted(self.cas.items())))
            if self._crds_seen.get(name) == seen:
                continue
            try:
                crd = ext.read_custom_resource_definition(name)
                ca = self.cas.get(crd.metadata.annotations[INJECT_CA_FROM])
                conv = crd.spec.conversion
                webhook = conv is not None and conv.strategy == "Webhook"
                if ca is not None and webhook and conv.webhook.client_config.ca_bundle != _b64(ca):
                    path = "/spec/conversion/webhook/clientConfig/caBundle"
                    crd = ext.patch_custom_resource_definition(
                        name, [{"op": "add", "path": path, "value": _b64(ca)}]
                    )
                    n += 1
                self._crds_seen[name] = (crd.metadata.resource_version, seen[1])
            except Exception as e:  # noqa: BLE001 - reported, the pass goes on
                problems[f"CRD {name}"] = _why(e)
        return n

    def once(self) -> None:
        """Issue what is missing, then inject; ``errors`` becomes this pass's failures."""
        from kubernetes.client.exceptions import ApiException

        _, custom, _, _ = self._clients()
        problems: dict[str, str] = {}
        try:
            certs = custom.list_cluster_custom_object("cert-manager.io", "v1", "certificates")
        except ApiException as e:
            if e.status != 404:  # 404: cert-manager's CRDs are not installed yet
                raise
            certs = {"items": []}
        cas = {}
        for cert in certs["items"]:
            key = f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"
            try:
                cas[key] = self.issue(cert)
            except Exception as e:  # noqa: BLE001 - reported, the pass goes on
                problems[f"Certificate {key}"] = _why(e)
        self.cas = cas
        self.ready_issuers(problems)
        self.inject(problems)
        self.errors = [f"{what}: {why}" for what, why in sorted(problems.items())]

    def run(self) -> None:  # noqa: D102 (threading.Thread API)
        while not self._halt.is_set():
            try:
                self.once()
            except Exception as e:  # noqa: BLE001 - reported through .errors, never lost
                self.errors = [f"pass: {_why(e)}"]
            self._halt.wait(self.interval)

    def stop(self) -> None:
        """Stop (joins the thread)."""
        self._halt.set()
        self.join(timeout=10)


def _ready(reason: str, message: str, meta: dict) -> dict:
    """cert-manager's ``Ready=True`` condition for an object of metadata ``meta``."""
    return {
        "type": "Ready",
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "observedGeneration": meta.get("generation", 1),
    }


def _why(e: BaseException) -> str:
    """An exception in one line: an ApiException's status and body (its repr is its class
    only), else its repr."""
    if getattr(e, "status", None) is not None and hasattr(e, "body"):
        return f"{type(e).__name__} {e.status} {e.body or e.reason}"[:2000]
    return repr(e)[:2000]


#: Namespaces of the platform whose controllers run as the pods of the pinned install on the
#: real node (their Deployments as base/platform renders them; the images are local builds
#: under the pinned names, scripts/e2e-images.sh) -> those Deployments.
POD_NAMESPACES = {
    "kserve": (
        "kserve-controller-manager",
        "kserve-localmodel-controller-manager",
        "llmisvc-controller-manager",
    ),
    "kubeflow": ("training-operator",),
    "argo": ("workflow-controller", "argo-server"),
}
#: Knative Serving and its ingress, run as pods when the tier ``serving`` runs
#: (:func:`serverless`); else install-platform.sh installs Knative's CRDs only.
SERVERLESS_NAMESPACES = {
    "knative-serving": ("controller", "webhook", "activator", "autoscaler"),
    "traefik": ("traefik",),
}


def serverless() -> bool:
    """Whether Knative Serving and Traefik run in this e2e: the tier ``serving`` is not in
    $E2E_SKIP_TIERS (scripts/e2e-tiers.sh: its tools and images are then built)."""
    return "serving" not in os.environ.get("E2E_SKIP_TIERS", "").split()


def pod_namespaces() -> dict[str, tuple[str, ...]]:
    """The namespaces whose controllers run as pods on the real node -> their Deployments:
    :data:`POD_NAMESPACES`, with :data:`SERVERLESS_NAMESPACES` when :func:`serverless`."""
    return {**POD_NAMESPACES, **(SERVERLESS_NAMESPACES if serverless() else {})}


# --- the platform of a test session ------------------------------------------------------------


@dataclass
class Platform:
    """The platform installed by scripts/install-platform.sh, and cert-manager's stand-in."""

    admin: Path
    workdir: Path
    install_log: str
    install_seconds: float
    certs: CertManagerStandIn

    def check_alive(self) -> None:
        """Raise ControllerError when a controller pod of :func:`pod_namespaces` is not
        Running and Ready on the real node, or the stand-in has failed."""
        if bad := unready_platform_pods(self.admin):
            raise ControllerError(f"platform pods not Running and Ready: {bad}")
        if self.certs.errors:
            raise ControllerError(f"cert-manager stand-in: {self.certs.errors[-3:]}")

    def stop(self) -> None:
        """Stop the stand-in (the pods go with the cluster)."""
        self.certs.stop()


def install_env(admin: Path | None = None) -> dict[str, str]:
    """Environment for ``scripts/install-platform.sh``: offline mirror mode, the e2e kubectl,
    the e2e's layer (:data:`PLATFORM_LAYER`) and (when given) the admin kubeconfig as
    KUBECONFIG."""
    env = {
        **os.environ,
        "UPSTREAM_MIRROR_DIR": str(mirror_dir()),
        "KUBECTL": kubectl_binary(),
        "PYTHON": str(REPO_ROOT / ".venv" / "bin" / "python"),
        "PLATFORM_LAYER_DIR": str(PLATFORM_LAYER),
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


def shared_mirror_dir() -> Path:
    """The offline upstream mirror: $UPSTREAM_MIRROR_DIR, else ../shared/upstream."""
    env = os.environ.get("UPSTREAM_MIRROR_DIR")
    path = Path(env) if env else REPO_ROOT.parent / "shared" / "upstream"
    if not path.is_dir():
        raise ControllerError(
            f"no upstream mirror at {path}: set MIRROR_DIR (absolute, or relative to the clone)"
        )
    return path


def mirror_dir() -> Path:
    """The mirror install-platform.sh reads: :func:`shared_mirror_dir`, plus, when
    :func:`serverless`, Knative Serving's serving-core (:func:`knative_serving_core`), which
    ../shared does not mirror: a directory of links beside the e2e's cluster
    ($FMNIST_E2E_DIR, else a temp dir), made once per process."""
    if not serverless():
        return shared_mirror_dir()
    if _MIRROR.get("dir") is None:
        import tempfile

        base = os.environ.get("FMNIST_E2E_DIR") or None
        out = Path(tempfile.mkdtemp(prefix="mirror.", dir=base))
        for f in shared_mirror_dir().iterdir():
            (out / f.name).symlink_to(f.resolve())
        version = versions_env()["KNATIVE_SERVING_VERSION"]
        (out / f"knative-serving-core-{version}.yaml").write_text(knative_serving_core())
        _MIRROR["dir"] = out
    return _MIRROR["dir"]


_MIRROR: dict[str, Path | None] = {"dir": None}


#: Files of knative/serving's config/core that are symlinks into its vendor/ (so not in the
#: module zip, which holds no links), as upstream's tree has them -> (module, file there); the
#: module's version is the one serving's go.mod requires.
KNATIVE_CORE_LINKS = {
    "configmaps/network.yaml": ("knative.dev/networking", "config/config-network.yaml"),
    "300-resources/certificate.yaml": ("knative.dev/networking", "config/certificate.yaml"),
    "300-resources/domain-claim.yaml": ("knative.dev/networking", "config/domain-claim.yaml"),
    "300-resources/ingress.yaml": ("knative.dev/networking", "config/ingress.yaml"),
    "300-resources/serverlessservice.yaml": (
        "knative.dev/networking",
        "config/serverlessservice.yaml",
    ),
    "300-resources/image.yaml": ("knative.dev/caching", "config/image.yaml"),
}


def knative_serving_core() -> str:
    """Knative Serving's serving-core.yaml for versions.env's KNATIVE_SERVING_VERSION, rendered as
    the release renders it from the module's config/core (``ko resolve -R -f config/core``, the
    ``app.kubernetes.io/version: devel`` labels set to the release), except the images: each
    ``ko://knative.dev/serving/cmd/NAME`` becomes the local build scripts/e2e-images.sh names
    ``knative_NAME`` (``ko.local/...``, as ``ko resolve --local`` names it), where the release has
    gcr.io digests that no rebuild can match. The files upstream links from vendor/
    (:data:`KNATIVE_CORE_LINKS`) are read from the modules serving's go.mod requires. The module
    is the one hack/tools/knative-serving.sh
    builds (its version from ``scripts/tools.sh --list``). Raises ControllerError when the module
    cannot be had, or a ``ko://`` reference has no image."""
    listing = _run(["bash", str(REPO_ROOT / "scripts" / "tools.sh"), "--list"])
    (module_version,) = [
        ln.split()[1] for ln in listing.splitlines() if ln.split()[:1] == ["knative-serving"]
    ]
    info = json.loads(
        _run(["go", "mod", "download", "-json", f"knative.dev/serving@{module_version}"])
    )
    images = {}
    for line in _run(["bash", str(REPO_ROOT / "scripts" / "e2e-images.sh"), "--list"]).splitlines():
        name, ref = line.split()[:2]
        if name.startswith("knative_"):
            images[f"ko://knative.dev/serving/cmd/{name.removeprefix('knative_')}"] = ref
    release = versions_env()["KNATIVE_SERVING_VERSION"].removeprefix("v")
    requires = dict(
        re.findall(r"^\s*(knative\.dev/\S+) (v\S+)$", Path(info["GoMod"]).read_text(), re.M)
    )
    files = sorted((Path(info["Dir"]) / "config" / "core").rglob("*.yaml"))
    for module, rel in KNATIVE_CORE_LINKS.values():
        dep = json.loads(_run(["go", "mod", "download", "-json", f"{module}@{requires[module]}"]))
        files.append(Path(dep["Dir"]) / rel)
    docs = []
    for path in files:
        text = path.read_text().replace(
            "app.kubernetes.io/version: devel", f'app.kubernetes.io/version: "{release}"'
        )
        for ko, ref in images.items():
            text = text.replace(ko, ref)
        if "ko://" in text:
            raise ControllerError(
                f"{path}: a ko:// image without a local build: {text[text.index('ko://') :][:80]}"
            )
        docs.append(text)
    return "\n---\n".join(docs)


def _run(argv: list[str]) -> str:
    """stdout of the repository's script ``argv`` (offline: the shared mirror); raises
    ControllerError with its stderr when it fails."""
    env = {**os.environ, "UPSTREAM_MIRROR_DIR": str(shared_mirror_dir())}
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO_ROOT, env=env)
    if proc.returncode != 0:
        raise ControllerError(f"{' '.join(argv)}: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def place_on_real_node(admin: Path, namespaces: tuple[str, ...] = ()) -> None:
    """Create ``namespaces`` (default: those of :func:`pod_namespaces`) with the real node's
    placement annotations (real_node.placement_annotations; server-side apply under a field
    manager of the e2e's own, so the install's apply of the same Namespace keeps them). Without
    a real node the controllers run nowhere: real_node.node_name fails (or skips, in a cluster
    started with FMNIST_E2E_REAL_NODE=0)."""
    real_node.node_name()
    for ns in namespaces or tuple(pod_namespaces()):
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
    for ns, deployments in pod_namespaces().items():
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
    """Install the platform with scripts/install-platform.sh (offline), as on k3d: the
    namespaces of :data:`POD_NAMESPACES` are placed on the real node first, and cert-manager's
    stand-in runs beside the script, so the script's own Deployments run every controller as
    a pod and the script waits for them. Returns once the script exited 0; on any failure
    stops the stand-in and raises ControllerError with the script's output."""
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (e.g. a CI timeout) -> KeyboardInterrupt, so pytest runs the teardown
        signal.signal(signal.SIGTERM, _interrupt)
    place_on_real_node(admin)
    certs = CertManagerStandIn(admin)
    certs.start()
    t0 = time.monotonic()
    proc = run_install(admin)
    try:
        out, _ = proc.communicate(timeout=timeout)
        (workdir / "install-platform.log").write_text(out)  # kept with the cluster's logs
        if proc.returncode != 0:
            raise ControllerError(
                f"install-platform.sh exited {proc.returncode}:\n{out}"
                f"\ncert-manager stand-in errors: {certs.errors[-3:]}"
            )
        return Platform(admin, workdir, out, time.monotonic() - t0, certs)
    except BaseException:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        certs.stop()
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
    """Drop one user of the session's platform; the last one stops what it started."""
    _SESSION["users"] = int(_SESSION["users"]) - 1  # type: ignore[call-overload]
    if _SESSION["users"] <= 0 and _SESSION["platform"] is not None:  # type: ignore[operator]
        _SESSION["platform"].stop()  # type: ignore[union-attr]
        _SESSION["platform"] = None


# --- helpers for the tests that run the project's workloads ------------------------------------


def volume_name(pvc: dict, namespace: str) -> str:
    """The PersistentVolume that :func:`provide_volume` makes for ``namespace``/``pvc``."""
    return f"e2e-{namespace}-{pvc['metadata']['name']}"[:63]


def ensure_storage_class(admin: Path, pvc: dict) -> str:
    """The StorageClass of the project's PVC as k3s has it (local-path: rancher.io/local-path,
    WaitForFirstConsumer; no provisioner runs here), made if missing; its name."""
    sc = pvc["spec"].get("storageClassName") or "standard"
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": sc},
        "provisioner": "rancher.io/local-path",
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }
    if not kubectl(admin, "get", "storageclass", sc, "--ignore-not-found", "-o", "name"):
        kubectl(admin, "apply", "-f", "-", input=json.dumps(storage_class))
    return sc


def provide_volume(admin: Path, pvc: dict, namespace: str, host_path: Path | None = None) -> None:
    """Make the project's PVC bindable on the kwok cluster: its StorageClass (k3s' local-path:
    rancher.io/local-path, WaitForFirstConsumer; no provisioner runs here) and a PersistentVolume
    pre-bound to ``namespace``/``pvc`` (hostPath: never mounted on a kwok node; mounted for real
    by the real node's kubelet, at ``host_path``, which the caller prepares: real_node.py), so
    the real PV controller binds the claim and the scheduler places the pods that mount it."""
    spec = pvc["spec"]
    sc = ensure_storage_class(admin, pvc)
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name(pvc, namespace)},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec["accessModes"],
            "storageClassName": sc,
            "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": str(host_path or f"/tmp/e2e-pv/{namespace}")},
            "claimRef": {"namespace": namespace, "name": pvc["metadata"]["name"]},
        },
    }
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
