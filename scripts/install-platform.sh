#!/usr/bin/env bash
# Install the platform layer in dependency order: cert-manager -> Knative Serving -> Knative's
# settings (base/platform/knative-config; its config-domain checked equal to KServe's
# ingressDomain) -> Traefik, its ingress (base/platform/traefik) -> KServe (+ runtimes) ->
# Kubeflow training operator -> Argo Workflows: the kustomizations Argo CD's platform
# Applications sync (argocd/apps/common/platform-apps.yaml), but serving-core's. Each
# part goes in three steps, so it is safe on a fresh cluster: (1) its CRDs, waited for until
# Established; (2) its other objects (ConfigMaps included), retried while a webhook does not
# answer yet, then its Deployments (controllers and webhooks) waited for until rolled out
# (`kubectl rollout status`: every replica of the current template updated and available, so
# that a re-run with a new image that cannot start fails too, with the old pods still serving);
# (3) its custom resources, retried the same way.
# Idempotent: server-side apply everywhere, re-running changes nothing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
KSERVE_VERSION="$(pinned_version KSERVE_VERSION)"
TRAINING_OPERATOR_VERSION="$(pinned_version TRAINING_OPERATOR_VERSION)"
ARGO_WORKFLOWS_VERSION="$(pinned_version ARGO_WORKFLOWS_VERSION)"
CERT_MANAGER_VERSION="$(pinned_version CERT_MANAGER_VERSION)"
if wants_help "${1:-}"; then
  cat <<USAGE
usage: scripts/install-platform.sh [--render DIR]
Installs cert-manager ${CERT_MANAGER_VERSION}, Knative Serving ${KNATIVE_SERVING_VERSION} with
Traefik ${TRAEFIK_VERSION} as its ingress, KServe ${KSERVE_VERSION}, the Kubeflow training operator
${TRAINING_OPERATOR_VERSION} and Argo Workflows ${ARGO_WORKFLOWS_VERSION} into the cluster of the
current kubectl context (KUBECONFIG is honoured), and waits for them. Re-running is safe.
  --render DIR  only render what would be applied, into DIR/<part>/{all,crds,objects,deploys,crs}.yaml
                (no cluster needed)
Env: UPSTREAM_MIRROR_DIR   read the release manifests from this offline mirror (e.g.
                           ../shared/upstream; make sets it from MIRROR_DIR). Knative Serving
                           is installed as CRDs only unless the mirror also holds its serving-core
                           (knative-serving-core-<version>.yaml; the e2e renders one from the
                           release's module); then Knative and Traefik are installed in full.
                           cert-manager, KServe, the training operator and Argo Workflows are
                           installed in full.
     PLATFORM_TIMEOUT      seconds to wait for each step, and for each Deployment's
                           rollout (default 300)
     PLATFORM_LAYER_DIR    a directory of kustomize layers, one per part: <part>/kustomization.yaml
                           with \`resources: [rendered.yaml]\` (the part as rendered) and the
                           patches a cluster needs over the pinned install (an air-gapped
                           cluster's imagePullPolicy, say). Parts: cert-manager, knative-crds,
                           knative (serving-core), traefik, knative-config, kserve,
                           kserve-runtimes, training-operator, argo-workflows. The e2e's:
                           tests/e2e/platform-layer
USAGE
  exit 0
fi
RENDER_ONLY=""
if [[ "${1:-}" == "--render" ]]; then
  [[ $# -eq 2 ]] || die "usage: --render DIR"
  RENDER_ONLY="$2"
  shift 2
fi
[[ $# -eq 0 ]] || die "unexpected argument $1 (see --help)"

MIRROR="${UPSTREAM_MIRROR_DIR:-}"
LAYER="${PLATFORM_LAYER_DIR:-}"
# the parts (render's NAME), in both modes; a layer's directories must name some of them
PARTS=(cert-manager knative-crds knative traefik knative-config kserve kserve-runtimes
  training-operator argo-workflows)
if [[ -n "${LAYER}" ]]; then
  [[ -d "${LAYER}" ]] || die "PLATFORM_LAYER_DIR=${LAYER} is not a directory"
  LAYER="$(cd "${LAYER}" && pwd)"
  for d in "${LAYER}"/*/; do
    [[ -f "${d}kustomization.yaml" ]] || continue
    d="$(basename "${d}")"
    [[ " ${PARTS[*]} " == *" ${d} "* ]] \
      || die "PLATFORM_LAYER_DIR=${LAYER}: ${d}/ is no part (parts: ${PARTS[*]})"
  done
fi
TIMEOUT="${PLATFORM_TIMEOUT:-300}"
[[ "${TIMEOUT}" =~ ^[0-9]+$ ]] || die "PLATFORM_TIMEOUT must be a number of seconds, got ${TIMEOUT}"
if [[ -n "${MIRROR}" ]]; then
  [[ -d "${MIRROR}" ]] || die "UPSTREAM_MIRROR_DIR=${MIRROR} is not a directory"
  MIRROR="$(cd "${MIRROR}" && pwd)"
fi
if [[ -n "${RENDER_ONLY}" ]]; then
  mkdir -p "${RENDER_ONLY}"
  WORK="$(cd "${RENDER_ONLY}" && pwd)"
else
  WORK="$(mktemp -d)"
  trap 'rm -rf "${WORK}"' EXIT
fi
GH=https://github.com
KN_URL="${GH}/knative/serving/releases/download/knative-${KNATIVE_SERVING_VERSION}"

k() { "${KUBECTL}" "$@"; }
# FIELD_MANAGER: the server-side apply owner, set by `install` per part (manager_of).
apply() { k apply --server-side --force-conflicts --field-manager="${FIELD_MANAGER:-kubectl}" "$@"; }

# manager_of NAME: the field manager a part is applied under. A part of base/platform is what an
# Argo CD Application syncs (argocd/apps/common/platform-apps.yaml): applied under Argo CD's own
# manager, argocd-controller (its ArgoCDSSAManager), so that once Argo CD adopts it, it is the one
# owner of those fields, and a field removed from git leaves the cluster (server-side apply drops
# a field only when no other manager holds it). Partial objects (Knative's settings over
# upstream's ConfigMaps) take only their own keys. Knative's release files: kubectl's manager.
manager_of() {
  if [[ -f "${REPO_ROOT}/base/platform/$1/kustomization.yaml" ]]; then echo argocd-controller; else echo kubectl; fi
}

# render NAME SOURCE: SOURCE (a kustomization dir of this repo, a URL or a file) rendered by
# kustomize into ${WORK}/NAME/all.yaml, then through the layer ${PLATFORM_LAYER_DIR}/NAME when
# there is one. In mirror mode the pinned remote resources of the kustomization are replaced by
# their mirror files (lib.sh: mirror_kustomization).
render() {
  local src="$2" out="${WORK}/$1"
  rm -rf "${out}"
  mkdir -p "${out}/k"
  if [[ -d "${src}" ]]; then
    UPSTREAM_MIRROR_DIR="${MIRROR}" mirror_kustomization "${src}" "${out}/k"
  else
    printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\n' \
      "$(if [[ -f "${src}" ]]; then cp "${src}" "${out}/k/src.yaml"; echo src.yaml; else echo "${src}"; fi)" \
      > "${out}/k/kustomization.yaml"
  fi
  k kustomize "${out}/k" > "${out}/all.yaml"
  if [[ -n "${LAYER}" && -f "${LAYER}/$1/kustomization.yaml" ]]; then
    through_layer "${LAYER}" "$1" "${out}/all.yaml" "${out}/layers"
  fi
  split_docs "${out}"
}

# ingress_domain FILE: KServe's ingressDomain in rendered manifests (the JSON of the `ingress`
# key of ConfigMap inferenceservice-config); Knative's config-domain must name the same.
ingress_domain() {
  local domain
  # kustomize output: one document per object, top-level keys at column 0, data keys at 2.
  domain="$(awk '
    function flush() { if (name == "inferenceservice-config" && kind == "ConfigMap") print found
                       name = kind = found = ""; block = 0 }
    /^---/ { flush(); next }
    /^kind: / { kind = $2 }
    /^  name: / && meta { name = $2 }
    /^[a-z]/ { meta = ($1 == "metadata:") }
    /^  [^ ]/ { block = ($1 == "ingress:") }
    block && /"ingressDomain"/ { v = $0; sub(/^[^:]*: *"/, "", v); sub(/".*/, "", v); found = v }
    END { flush() }
  ' "$1")"
  # a DNS-1123 subdomain of at least two labels (what Knative routes under)
  local label='[a-z0-9]([-a-z0-9]*[a-z0-9])?'
  [[ "${domain}" =~ ^${label}(\.${label})+$ && ${#domain} -le 253 ]] \
    || die "no ingressDomain in KServe's inferenceservice-config ($1): got '${domain}' (need a DNS-1123 subdomain such as example.com)"
  printf '%s\n' "${domain}"
}

# knative_domains FILE: the domains Knative's config-domain in rendered manifests serves every
# route under (its data keys with an empty selector, one per line; upstream's `_example` and
# selector domains, such as a cluster-local one, are not). kustomize output: top-level keys at
# column 0, data keys at 2, an empty value as "".
knative_domains() {
  awk '
    function flush() { if (name == "config-domain" && kind == "ConfigMap") printf "%s", found
                       name = kind = found = ""; data = 0 }
    /^---/ { flush(); next }
    /^kind: / { kind = $2 }
    /^  name: / && meta { name = $2 }
    /^[a-z]/ { meta = ($1 == "metadata:"); data = ($1 == "data:"); next }
    data && /^  [^ ]/ {
      k = $0; sub(/^  /, "", k); v = k
      sub(/: .*$|:$/, "", k); gsub(/"/, "", k)
      if (index(v, ": ")) { sub(/^[^:]*: */, "", v) } else { v = "" }
      if (k != "_example" && (v == "" || v == "\"\"" || v == "\x27\x27")) found = found k "\n"
    }
    END { flush() }
  ' "$1"
}

# split_docs DIR: DIR/all.yaml -> crds.yaml (CustomResourceDefinitions), crs.yaml (objects of
# custom kinds: API groups with a dot that are not *.k8s.io), objects.yaml (everything else)
# and deploys.yaml (the Deployments among them). cert-manager's kinds (Issuer, Certificate) go
# with the objects: cert-manager is installed first, and a part's Deployments mount the
# Secrets its Certificates make (KServe's webhook certificates), so they must exist before the
# wait for those Deployments. kustomize output: "---" separated documents with top-level keys
# at column 0.
split_docs() {
  awk -v dir="$1" '
    function flush(   f, i) {
      if (n == 0) return
      if (kind == "CustomResourceDefinition") f = "crds"
      else if (group == "cert-manager.io") f = "objects"
      else if (group ~ /\./ && group !~ /\.k8s\.io$/) f = "crs"
      else f = "objects"
      print "---" >> (dir "/" f ".yaml")
      for (i = 0; i < n; i++) print lines[i] >> (dir "/" f ".yaml")
      if (kind == "Deployment") {
        print "---" >> (dir "/deploys.yaml")
        for (i = 0; i < n; i++) print lines[i] >> (dir "/deploys.yaml")
      }
      n = 0; kind = ""; group = ""
    }
    /^---/ { flush(); next }
    /^kind: / { kind = $2 }
    /^apiVersion: / { group = ($2 ~ /\//) ? substr($2, 1, index($2, "/") - 1) : "" }
    { lines[n++] = $0 }
    END { flush() }
  ' "$1/all.yaml"
}

# retry CMD...: run CMD until it succeeds; retried only while the API server cannot reach a
# webhook yet (its Deployment is Available before its server answers), up to TIMEOUT seconds.
retry() {
  local deadline=$((SECONDS + TIMEOUT)) err="${WORK}/retry.err"
  until "$@" 2>"${err}"; do
    if ! grep -qE 'failed calling webhook|no endpoints available|connection refused' "${err}" \
      || ((SECONDS >= deadline)); then
      cat "${err}" >&2
      return 1
    fi
    log "a webhook is not answering yet; retrying"
    sleep 2
  done
  cat "${err}" >&2
}

# not_available FILE: after a failed wait, what is not ready: each Deployment of FILE that is
# not Available, and the pods of its namespace with their containers' waiting reasons
# (ErrImagePull, CrashLoopBackOff, ...), so a timeout names what to look at.
not_available() {
  local ns
  log "not rolled out within ${TIMEOUT}s (PLATFORM_TIMEOUT, per Deployment):"
  k get -f "$1" -o wide >&2 || true
  for ns in $(awk '/^metadata:/ {m = 1; next} /^[a-z]/ {m = 0} m && /^  namespace:/ {print $2}' "$1" | sort -u); do
    pods_report "${ns}"
  done
}

# pods_report NS: the pods of NS with their phase, node and containers' waiting reasons.
pods_report() {
  log "pods in $1:"
  k get pods -n "$1" -o 'custom-columns=POD:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName,WAITING:.status.containerStatuses[*].state.waiting.reason,MESSAGE:.status.containerStatuses[*].state.waiting.message' >&2 || true
}

# install NAME: the three steps for ${WORK}/NAME (rendered by `render`), under manager_of NAME.
install() {
  local d="${WORK}/$1" FIELD_MANAGER
  FIELD_MANAGER="$(manager_of "$1")"
  [[ -z "${RENDER_ONLY}" ]] || return 0
  if [[ -s "${d}/crds.yaml" ]]; then
    apply -f "${d}/crds.yaml"
    k wait --for=condition=Established -f "${d}/crds.yaml" --timeout="${TIMEOUT}s"
  fi
  if [[ -s "${d}/objects.yaml" ]]; then retry apply -f "${d}/objects.yaml"; fi
  if [[ -s "${d}/deploys.yaml" ]] \
    && ! k rollout status -f "${d}/deploys.yaml" --timeout="${TIMEOUT}s" >&2; then
    not_available "${d}/deploys.yaml"
    return 1
  fi
  if [[ -s "${d}/crs.yaml" ]]; then retry apply -f "${d}/crs.yaml"; fi
}

# cert_manager_ready: what a user of cert-manager waits for before asking it for a certificate
# (upstream's startupapicheck, `cmctl check api`): cainjector has injected the webhook's CA into
# its webhook configurations, and the webhook answers (a server-side dry run of an Issuer, which
# goes through it, is accepted: in `default`, which no one labels
# cert-manager.io/disable-validation as older guides had users label cert-manager's namespace).
# Until TIMEOUT, then it names what is not ready.
cert_manager_ready() {
  [[ -z "${RENDER_ONLY}" ]] || return 0
  local deadline=$((SECONDS + TIMEOUT)) err="${WORK}/cert-manager.err" ca=""
  local issuer='{"apiVersion":"cert-manager.io/v1","kind":"Issuer","metadata":{"name":"install-check","namespace":"default"},"spec":{"selfSigned":{}}}'
  while :; do
    ca="$(k get validatingwebhookconfiguration cert-manager-webhook \
      -o jsonpath='{.webhooks[0].clientConfig.caBundle}' 2>"${err}")" || ca=""
    if [[ -n "${ca}" ]] && k create --dry-run=server -f - <<<"${issuer}" >/dev/null 2>"${err}"; then
      log "cert-manager: its webhook's CA injected by cainjector, the webhook answers"
      return 0
    fi
    if ((SECONDS >= deadline)); then
      if [[ -z "${ca}" ]]; then
        log "cert-manager not ready within ${TIMEOUT}s: cainjector has not injected a CA into ValidatingWebhookConfiguration cert-manager-webhook"
      else
        log "cert-manager not ready within ${TIMEOUT}s: its webhook does not accept an Issuer: $(tail -n 3 "${err}")"
      fi
      pods_report cert-manager
      return 1
    fi
    sleep 2
  done
}

if [[ -n "${MIRROR}" ]]; then
  PYTHON="${PYTHON:-${REPO_ROOT}/.venv/bin/python}"
  [[ -x "${PYTHON}" ]] || PYTHON="$(command -v python3)" || die "mirror mode needs python3 with PyYAML"
  log "offline: release manifests from ${MIRROR}"
fi
if [[ -n "${RENDER_ONLY}" ]]; then
  log "rendering only, into ${WORK}"
else
  log "cluster: $(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
fi
# A cluster an earlier version of this script set up runs Kourier as Knative's ingress: Traefik
# replaces it, and both cannot share the node's port 80 (k3d's load balancer) nor the routes'
# KIngresses (their status keeps Kourier's addresses). Refused, saying what to do, before any
# change: the cluster keeps working as it is.
if [[ -z "${RENDER_ONLY}" ]]; then kubectl_for_cluster; fi
if [[ -z "${RENDER_ONLY}" ]] && k get namespace kourier-system >/dev/null 2>&1; then
  die "this cluster runs Kourier (namespace kourier-system), which Traefik replaces as Knative's ingress: recreate the cluster (k3d cluster delete; scripts/k3d-up.sh), or remove Kourier and let Knative remake each KIngress as docs/gitops.md (\"Reaching the model\") says, then re-run"
fi

# Before any change: Knative's domain must be KServe's ingressDomain (both rendered here).
render kserve "${REPO_ROOT}/base/platform/kserve"
INGRESS_DOMAIN="$(ingress_domain "${WORK}/kserve/all.yaml")"
render knative-config "${REPO_ROOT}/base/platform/knative-config"
KNATIVE_DOMAINS="$(knative_domains "${WORK}/knative-config/all.yaml")"
[[ "${KNATIVE_DOMAINS}" == "${INGRESS_DOMAIN}" ]] \
  || die "Knative's config-domain (base/platform/knative-config/config-domain.yaml) serves routes under '${KNATIVE_DOMAINS//$'\n'/ }', KServe's ingressDomain (base/platform/kserve/patches/inferenceservice-config-ingress.yaml) is '${INGRESS_DOMAIN}': set both to the cluster's domain"
log "cert-manager ${CERT_MANAGER_VERSION}"
render cert-manager "${REPO_ROOT}/base/platform/cert-manager"
install cert-manager
cert_manager_ready

KN_CRDS="${KN_URL}/serving-crds.yaml" KN_CORE="${KN_URL}/serving-core.yaml"
if [[ -n "${MIRROR}" ]]; then
  KN_CRDS="${MIRROR}/knative-serving-crds-${KNATIVE_SERVING_VERSION}.yaml"
  KN_CORE="${MIRROR}/knative-serving-core-${KNATIVE_SERVING_VERSION}.yaml"
  [[ -f "${KN_CORE}" ]] || KN_CORE=""
fi
log "Knative Serving ${KNATIVE_SERVING_VERSION}: CRDs"
render knative-crds "${KN_CRDS}"
install knative-crds
if [[ -n "${KN_CORE}" ]]; then
  log "Knative Serving ${KNATIVE_SERVING_VERSION}: serving-core"
  render knative "${KN_CORE}"
  install knative
else
  log "Knative Serving ${KNATIVE_SERVING_VERSION}: CRDs only, no Traefik (mirror mode: the mirror holds no knative-serving-core-${KNATIVE_SERVING_VERSION}.yaml)"
fi
# Knative's settings (base/platform/knative-config, rendered above), in both modes. Knative's
# webhook validates these ConfigMaps (failurePolicy Fail): applied once its Deployment is
# Available, retried until it answers; applied server-side, they keep upstream's other keys.
log "Knative settings: Traefik ingress, pod-spec features, scale to zero, domain ${INGRESS_DOMAIN} (KServe's ingressDomain)"
install knative-config
if [[ -n "${KN_CORE}" ]]; then
  log "Traefik ${TRAEFIK_VERSION}: Knative's ingress"
  render traefik "${REPO_ROOT}/base/platform/traefik"
  install traefik
fi

log "KServe ${KSERVE_VERSION}"
install kserve
# The ClusterServingRuntimes go through KServe's validating webhooks (served by the controller
# just waited for): custom resources only, so step (3) retries them until the webhook answers.
render kserve-runtimes "${REPO_ROOT}/base/platform/kserve-runtimes"
install kserve-runtimes

log "Kubeflow training operator ${TRAINING_OPERATOR_VERSION} (server-side: large CRDs)"
render training-operator "${REPO_ROOT}/base/platform/training-operator"
install training-operator

log "Argo Workflows ${ARGO_WORKFLOWS_VERSION}"
render argo-workflows "${REPO_ROOT}/base/platform/argo-workflows"
install argo-workflows
if [[ -n "${RENDER_ONLY}" ]]; then log "rendered into ${WORK}"; else log "platform ready"; fi
