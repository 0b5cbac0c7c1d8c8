# shellcheck shell=bash
# runc, the OCI runtime containerd's shim calls. cgo is required (libcontainer/nsenter is C);
# the seccomp tag links Debian's libseccomp (apt: libseccomp-dev, installed by .ci/run), without
# which runc refuses every pod with seccompProfile RuntimeDefault (restricted Pod Security).
# Upstream's Makefile: -tags "seccomp urfave_cli_no_docs", -X main.version. Recipe contract:
# scripts/tools.sh.
TOOL_VERSION_KEY=RUNC_VERSION
TOOL_MODULE=github.com/opencontainers/runc
TOOL_PACKAGES=(github.com/opencontainers/runc)
TOOL_CGO_ENABLED=1
TOOL_TAGS=seccomp,urfave_cli_no_docs
tool_ldflags() { echo "-X main.version=${MODULE_VERSION#v}"; }
