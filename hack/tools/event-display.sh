# shellcheck shell=bash
# Knative Eventing's event_display (cmd/event_display), the program of the message-dumper
# image (base/ml/serving/message-dumper.yaml): it prints every CloudEvent it receives. Built
# into the real node's message-dumper image (scripts/e2e-images.sh), which receives the
# predictor's request log. Recipe contract: scripts/tools.sh.
TOOL_VERSION_KEY=EVENT_DISPLAY_VERSION
TOOL_MODULE=knative.dev/eventing
TOOL_PACKAGES=(knative.dev/eventing/cmd/event_display)
