# shellcheck shell=bash
# Argo CD: the one multi-call `argocd` binary that argocd/install's pods run (application
# controller, repo-server, server, applicationset controller, the CLI; it dispatches on argv[0]
# or ARGOCD_BINARY_NAME). Recipe contract: scripts/tools.sh.
#
# Built as upstream's Makefile builds it: CGO off, version fields of common/ stamped (its
# VERSION file has no "v"); the UI's embed compiles from the module's committed placeholder (the
# web UI page is empty; the API, the CLI and the webhook are whole).
#
# Upstream's go.mod replaces its nested module github.com/argoproj/argo-cd/gitops-engine with
# ./gitops-engine, which the v3 module zip does not hold. The Go module proxy refuses that
# module at v3.5.1's commit in every form (403); the one version it serves,
# GITOPS_ENGINE_SERVED below, has v3.5.1's tree except pkg/utils/kube/resource_ops.go (a
# panic-recovery fix in RBAC reconcile). The e2e uses it: docs/e2e-controllers.md.
TOOL_VERSION_KEY=ARGOCD_VERSION
TOOL_MODULE=github.com/argoproj/argo-cd/v3
TOOL_PACKAGES=(github.com/argoproj/argo-cd/v3/cmd)
TOOL_BINARIES=(cmd=argocd)
GITOPS_ENGINE_SERVED=v0.0.0-20260914071520-c9c369efcc5b
tool_local_replace() {
  [[ "$1" == github.com/argoproj/argo-cd/gitops-engine ]] \
    || { echo "argocd.sh: upstream has a local replace of $1 this recipe does not know" >&2; return 1; }
  echo "$GITOPS_ENGINE_SERVED"
}
tool_ldflags() {
  local p=github.com/argoproj/argo-cd/v3/common
  echo "-X $p.version=${MODULE_VERSION#v} -X $p.buildDate=$MODULE_TIME -X $p.gitTreeState=clean -X $p.gitCommit=$MODULE_VERSION"
}
