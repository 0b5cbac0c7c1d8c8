# shellcheck shell=bash
# The CNI reference plugins the real node's pod network uses (scripts/e2e-node.sh: bridge +
# host-local IPAM, portmap, loopback). Recipe contract: scripts/tools.sh.
TOOL_VERSION_KEY=CNI_PLUGINS_VERSION
TOOL_MODULE=github.com/containernetworking/plugins
TOOL_PACKAGES=(
  github.com/containernetworking/plugins/plugins/main/bridge
  github.com/containernetworking/plugins/plugins/main/loopback
  github.com/containernetworking/plugins/plugins/ipam/host-local
  github.com/containernetworking/plugins/plugins/meta/portmap
)
