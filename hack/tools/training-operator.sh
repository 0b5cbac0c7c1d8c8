# shellcheck shell=bash
# Kubeflow training-operator (TFJob controller + its validating webhook), run by the e2e as a
# local process under its own ServiceAccount (tests/e2e/controllers.py). Upstream's go.mod
# at v1.9.4 has no replace directives. Recipe contract: scripts/tools.sh.
TOOL_VERSION_KEY=TRAINING_OPERATOR_VERSION
TOOL_MODULE=github.com/kubeflow/training-operator
TOOL_PACKAGES=(github.com/kubeflow/training-operator/cmd/training-operator.v1)
TOOL_BINARIES=(training-operator.v1=training-operator)
