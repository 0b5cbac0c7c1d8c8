# shellcheck shell=bash
# Argo Workflows workflow-controller, run by the e2e under its own ServiceAccount argo/argo, and
# argoexec.
# Recipe contract: scripts/tools.sh.
#
# The argo CLI (cmd/argo, for `argo lint --offline`) does not build from the module: it embeds
# the UI (ui/embed.go: //go:embed dist/app), which the module zip does not contain ("pattern
# dist/app: no matching files found"); upstream's Makefile builds the UI with yarn first.
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
)
# argoexec (the executor of Argo's pods; the e2e runs it for the pipeline's resource steps,
# tests/e2e/argo_executor.py) needs osspecific/signal_linux.go, which upstream keeps as a
# symlink to signal_darwin.go and the module zip therefore lacks.
TOOL_SOURCE_LINKS=(workflow/executor/osspecific/signal_linux.go=signal_darwin.go)
tool_ldflags() { echo "-X github.com/argoproj/argo-workflows/v4.version=$MODULE_VERSION"; }
