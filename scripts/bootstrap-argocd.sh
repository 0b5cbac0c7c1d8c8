#!/usr/bin/env bash
# Install Argo CD (pinned, with our health checks) and hand the environment to GitOps: only the
# projects and the root app are applied here; the root app syncs argocd/apps/<env> from git,
# whose sync waves order the platform apps before the ML overlay.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ARGOCD_VERSION="$(pinned_version ARGOCD_VERSION)"
BOOTSTRAP_SELECTOR="fashion-mnist.example.com/bootstrap=true"
if wants_help "${1:-}" || [[ $# -ne 1 ]]; then
  cat <<USAGE
usage: scripts/bootstrap-argocd.sh <env>      env: local-k3d | gpu-cloud
Installs Argo CD ${ARGOCD_VERSION} (argocd/install, server-side), then applies the AppProjects
and the root Application of argocd/apps/<env> (label ${BOOTSTRAP_SELECTOR}).
Argo CD then syncs from the repository set in argocd/apps/common/repository.yaml: set it to
your fork and push first (docs/gitops.md). Idempotent. The one prerequisite not managed by
Argo CD: Knative Serving's serving-core (scripts/install-platform.sh installs it, with the rest
of the platform, which Argo CD then adopts: cert-manager, Knative's settings, Traefik, the
operators).
Env: UPSTREAM_MIRROR_DIR   offline: Argo CD's install manifest from this mirror (../shared/upstream).
     ARGOCD_LAYER_DIR      a kustomize layer over the rendered install: its kustomization.yaml
                           names \`rendered.yaml\` (argocd/install as rendered) and patches what
                           a cluster needs over the pinned install (an air-gapped cluster's
                           imagePullPolicy, say). The e2e's: tests/e2e/argocd-layer
     ARGOCD_TIMEOUT        seconds to wait for each rollout (default 300)
USAGE
  wants_help "${1:-}" && exit 0
  exit 2
fi
need "${KUBECTL}"
kubectl_for_cluster
APPS="${REPO_ROOT}/argocd/apps/$(environment "$1")"
[[ -f "${APPS}/kustomization.yaml" ]] || die "no Argo CD applications for '$1' (argocd/apps/$1)"
# docs/gitops.md step 1, checked before any change: Argo CD would sync from the placeholder
REPO_URL="$("${KUBECTL}" kustomize "${APPS}" | "${PYTHON}" -c '
import sys
import yaml
for doc in yaml.safe_load_all(sys.stdin):
    if doc and doc.get("kind") == "Application" and doc["metadata"]["name"] == "root":
        print(doc["spec"]["source"]["repoURL"])
')"
[[ -n "${REPO_URL}" ]] || die "argocd/apps/$1 renders no root Application"
# (the placeholder in any of git's URL forms: https://, http://, ssh://git@, git@github.com:)
if [[ "${REPO_URL}" =~ github\.com[:/]+example/ ]]; then
  die "argocd/apps/common/repository.yaml still names the placeholder ${REPO_URL}: set url to your fork, commit and push first (docs/gitops.md, GitOps flow, step 1)"
fi
# ... and pushed: Argo CD reads it from git (the root app syncs its own manifest from there, so an
# unpushed URL would be replaced by the placeholder at the first sync)
if upstream="$(git -C "${REPO_ROOT}" rev-parse --abbrev-ref --symbolic-full-name '@{upstream}' 2>/dev/null)"; then
  git -C "${REPO_ROOT}" diff --quiet "${upstream}" -- argocd/apps/common/repository.yaml \
    || die "argocd/apps/common/repository.yaml differs from ${upstream}: commit and push it first (Argo CD reads it from git)"
fi
WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT
TIMEOUT="$(seconds ARGOCD_TIMEOUT "${ARGOCD_TIMEOUT:-300}")"
LAYER="${ARGOCD_LAYER_DIR:-}"
if [[ -n "${LAYER}" ]]; then
  [[ -f "${LAYER}/kustomization.yaml" ]] || die "ARGOCD_LAYER_DIR=${LAYER} has no kustomization.yaml"
fi
mirror_kustomization "${REPO_ROOT}/argocd/install" "${WORK}/install"
"${KUBECTL}" kustomize "${WORK}/install" > "${WORK}/install.yaml"
if [[ -n "${LAYER}" ]]; then through_layer "${LAYER}" . "${WORK}/install.yaml" "${WORK}/layer"; fi
# What the components read only at start, through their env (configMapKeyRef): argocd-cmd-params-cm
# (e.g. argocd/install's server-side diff) and argocd-cm's reconciliation timeouts. Their hash is
# stamped on every pod template (Helm's checksum-annotation pattern), so when an upgrade, a patch
# or a layer changes them, the same apply that changes them rolls the components; a run that
# fails half-way rolls them on the next run, and a first install rolls nothing twice.
"${PYTHON}" - "${WORK}/install.yaml" <<'PY'
import hashlib
import json
import sys

import yaml

path = sys.argv[1]
# libyaml's parser where PyYAML has it (the install is 2 MB of CRDs: seconds faster)
loader, dumper = getattr(yaml, "CSafeLoader", yaml.SafeLoader), getattr(yaml, "CSafeDumper", yaml.SafeDumper)
with open(path) as f:
    docs = [d for d in yaml.load_all(f, Loader=loader) if d]


def data(name):
    return next((d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"
                 and d["metadata"]["name"] == name), {})


timeouts = ("timeout.reconciliation", "timeout.reconciliation.jitter")
read_at_start = {"argocd-cmd-params-cm": data("argocd-cmd-params-cm"),
                 "argocd-cm": {k: v for k, v in data("argocd-cm").items() if k in timeouts}}
digest = hashlib.sha256(json.dumps(read_at_start, sort_keys=True).encode()).hexdigest()[:16]
for d in docs:
    if d["kind"] in ("Deployment", "StatefulSet"):
        meta = d["spec"]["template"].setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}),
                               "fashion-mnist.example.com/settings-hash": digest}
with open(path, "w") as f:
    yaml.dump_all(docs, f, Dumper=dumper, sort_keys=False)
PY
"${KUBECTL}" apply --server-side --force-conflicts -f "${WORK}/install.yaml"
"${KUBECTL}" -n argocd rollout status deploy --timeout="${TIMEOUT}s"
"${KUBECTL}" -n argocd rollout status statefulset/argocd-application-controller --timeout="${TIMEOUT}s"
"${KUBECTL}" apply --server-side -k "${APPS}" -l "${BOOTSTRAP_SELECTOR}"
log "Argo CD syncs $1 from ${REPO_URL}"
log "watch: kubectl -n argocd get applications"
