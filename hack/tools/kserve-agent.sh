# shellcheck shell=bash
# KServe's agent (cmd/agent), the sidecar that KServe's pod mutator injects into a predictor
# with a `logger`: it proxies the predictor's port (9081) and sends each request and response
# to the logger URL as CloudEvents. Same module, version and replaces as the controller
# (hack/tools/kserve.sh); a separate recipe so the controller's cache entry is not rebuilt.
# Built into the real node's `kserve/agent` image (scripts/e2e-images.sh). Recipe contract:
# scripts/tools.sh.
# shellcheck disable=SC1091
source "$(dirname "${BASH_SOURCE[0]}")/kserve.sh"
TOOL_PACKAGES=(github.com/kserve/kserve/cmd/agent)
TOOL_BINARIES=(agent=kserve-agent)
