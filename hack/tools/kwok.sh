# shellcheck shell=bash
# kwok (simulated nodes and pod lifecycles) and kwokctl (starts the control plane from the
# local binaries: `kwokctl create cluster --runtime binary`). Recipe contract: scripts/tools.sh.
TOOL_VERSION_KEY=KWOK_VERSION
TOOL_MODULE=sigs.k8s.io/kwok
TOOL_PACKAGES=(sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl)
tool_ldflags() { echo "-X sigs.k8s.io/kwok/pkg/consts.Version=${MODULE_VERSION#v}"; }
