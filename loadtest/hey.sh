#!/usr/bin/env bash
# Constant-concurrency load with hey against the V1 predict endpoint, using a real test image.
# Equivalent of:  hey -z 30s -c 5 -m POST -host <ISVC host> -D input.json <URL>
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: loadtest/hey.sh [options]

  --url URL          predict URL (default: http://localhost:8080/v1/models/fashion-mnist:predict)
  --host HOST        Host header for an ingress gateway, e.g.
                     fashion-mnist-predictor.fashion-mnist.example.com (default: none)
  -z, --duration D   how long to send requests (default: 30s)
  -c, --concurrency N  concurrent workers (default: 5)
  --count N          images per request (default: 1)
  --payload FILE     request body to write/use (default: input.json; regenerated unless --keep)
  --keep             reuse an existing --payload file
  -h, --help         this help

Runs from any directory; needs `hey` (apt-get install hey) and this checkout's .venv (or $PYTHON).
USAGE
}

URL="http://localhost:8080/v1/models/fashion-mnist:predict"
HOST_HEADER=""
DURATION="30s"
CONCURRENCY=5
COUNT=1
PAYLOAD="input.json"
KEEP=0
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --url) URL="$2"; shift 2 ;;
    --host) HOST_HEADER="$2"; shift 2 ;;
    -z|--duration) DURATION="$2"; shift 2 ;;
    -c|--concurrency) CONCURRENCY="$2"; shift 2 ;;
    --count) COUNT="$2"; shift 2 ;;
    --payload) PAYLOAD="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
  esac
done

if ! command -v hey >/dev/null 2>&1; then
  echo "hey is not installed (apt-get install -y hey)" >&2
  exit 2
fi
if [[ "$KEEP" -eq 0 || ! -s "$PAYLOAD" ]]; then
  "$PYTHON" -m loadtest.make_payload --out "$PAYLOAD" --count "$COUNT"
fi

args=(-z "$DURATION" -c "$CONCURRENCY" -m POST -T application/json -D "$PAYLOAD")
if [[ -n "$HOST_HEADER" ]]; then
  args+=(-host "$HOST_HEADER")
fi
exec hey "${args[@]}" "$URL"
