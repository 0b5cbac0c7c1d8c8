# shellcheck shell=bash
# kustomize: the binary Argo CD's repo-server renders kustomizations with (it runs `kustomize
# build`, not kubectl's embedded copy), at the version ARGOCD_VERSION's image ships
# (ARGOCD_KUSTOMIZE_VERSION, upstream's hack/tool-versions.sh). Recipe contract: scripts/tools.sh.
TOOL_VERSION_KEY=ARGOCD_KUSTOMIZE_VERSION
TOOL_MODULE=sigs.k8s.io/kustomize/kustomize/v5
TOOL_PACKAGES=(sigs.k8s.io/kustomize/kustomize/v5)
tool_ldflags() {
  local p=sigs.k8s.io/kustomize/api/provenance
  echo "-X $p.version=$MODULE_VERSION -X $p.buildDate=$MODULE_TIME"
}
