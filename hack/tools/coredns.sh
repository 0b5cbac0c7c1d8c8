# shellcheck shell=bash
# CoreDNS, the real node's cluster DNS (scripts/e2e-node.sh runs it as a process in the run's
# network namespace; its `kubernetes` plugin watches the e2e API server). Recipe contract:
# scripts/tools.sh.
TOOL_VERSION_KEY=COREDNS_VERSION
TOOL_MODULE=github.com/coredns/coredns
TOOL_PACKAGES=(github.com/coredns/coredns)
