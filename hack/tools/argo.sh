# shellcheck shell=bash
# Argo Workflows: the workflow-controller and argo (argocli: `argo server`) that the e2e runs as
# the pods of the pinned install, and argoexec (the executor of the pipeline's pods).
# Recipe contract: scripts/tools.sh.
#
# cmd/argo embeds the UI (ui/embed.go: //go:embed dist/app), which the module zip does not
# contain. It is built the way upstream's Makefile builds it without STATIC_FILES (a dev build:
# `mkdir -p ui/dist/app; touch ui/dist/app/index.html`): the API server and CLI are whole, the
# UI's page is empty.
#
# ARGO_WORKFLOWS_VERSION (v4.1.2, what the manifests install) is NOT served by the Go module
# proxy: `go mod download github.com/argoproj/argo-workflows/v4@v4.1.2` answers
# "403 Forbidden: This module version is not available" and `go list -m -versions` lists
# v4.0.5 only. The e2e therefore builds the nearest served release, ARGO_WORKFLOWS_E2E_VERSION,
# for the tests only (docs/e2e-controllers.md); the manifests keep v4.1.2.
TOOL_VERSION_KEY=ARGO_WORKFLOWS_E2E_VERSION
TOOL_MODULE=github.com/argoproj/argo-workflows/v4
TOOL_PACKAGES=(
  github.com/argoproj/argo-workflows/v4/cmd/workflow-controller
  github.com/argoproj/argo-workflows/v4/cmd/argoexec
  github.com/argoproj/argo-workflows/v4/cmd/argo
)
# argoexec needs osspecific/signal_linux.go, which upstream keeps as a symlink to
# signal_darwin.go and the module zip therefore lacks.
TOOL_SOURCE_LINKS=(workflow/executor/osspecific/signal_linux.go=signal_darwin.go)
TOOL_SOURCE_FILES=(ui/dist/app/index.html)
tool_ldflags() { echo "-X github.com/argoproj/argo-workflows/v4.version=$MODULE_VERSION"; }
