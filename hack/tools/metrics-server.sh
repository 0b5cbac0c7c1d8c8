# shellcheck shell=bash
# metrics-server, the resource metrics API (metrics.k8s.io) that the HPA KServe creates in
# Standard mode reads; run by the e2e as a process in the run's network namespace, registered
# through an APIService (scripts/e2e-node.sh). Recipe contract: scripts/tools.sh.
TOOL_VERSION_KEY=METRICS_SERVER_VERSION
TOOL_MODULE=sigs.k8s.io/metrics-server
TOOL_PACKAGES=(sigs.k8s.io/metrics-server/cmd/metrics-server)
