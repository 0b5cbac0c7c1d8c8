"""Command-line client for the V1 predict API (local server, KServe TF runtime or ingress).

    python -m serving.client --url http://localhost:8080 --model-name fashion-mnist shoe.jpg
    python -m serving.client --url http://localhost:8080 \\
        --host fashion-mnist-predictor.fashion-mnist.example.com shoe.jpg      # through an ingress

Prints the top-3 classes with their probabilities for every image; exit 1 with one line on
stderr when a file cannot be read or the server refuses the request. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

from fmnist_common import CLASS_NAMES, MODEL_NAME, predict_body, predict_path
from fmnist_common.cli import ConfigError, run_cli


class PredictError(RuntimeError):
    """The server answered with an error status or an unexpected body."""


def predict(
    url: str,
    images: list[bytes],
    model_name: str = MODEL_NAME,
    host: str | None = None,
    timeout: float = 30.0,
) -> list[list[float]]:
    """POST encoded images to ``<url>/v1/models/<model_name>:predict``.

    Args:
        url: server base URL, e.g. ``http://localhost:8080``.
        images: encoded JPEG/PNG images.
        model_name: model name in the path.
        host: optional ``Host`` header (ingress gateway routing, e.g.
            ``fashion-mnist-predictor.fashion-mnist.example.com``).
        timeout: seconds.

    Returns:
        One list of 10 probabilities per image (order of :data:`CLASS_NAMES`).

    Raises:
        PredictError: HTTP error status (message from the server's ``{"error": ...}``) or a
            response without ``predictions`` of the right shape.
        urllib.error.URLError: connection problems.
    """
    endpoint = url.rstrip("/") + predict_path(model_name)
    data = json.dumps(predict_body(images)).encode()
    req = urllib.request.Request(endpoint, data=data, method="POST")
    req.add_header("Content-Type", "application/json")
    if host:
        req.add_header("Host", host)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        raise PredictError(f"HTTP {exc.code} from {endpoint}: {detail}") from exc
    preds = body.get("predictions") if isinstance(body, dict) else None
    if not isinstance(preds, list) or len(preds) != len(images):
        raise PredictError(f"unexpected response from {endpoint}: {str(body)[:300]}")
    for row in preds:
        if not isinstance(row, list) or len(row) != len(CLASS_NAMES):
            raise PredictError(f"prediction row of wrong shape: {str(row)[:200]}")
    return preds


def top_k(probabilities: list[float], k: int = 3) -> list[tuple[str, float]]:
    """The ``k`` most probable ``(class name, probability)`` pairs, most probable first."""
    order = sorted(range(len(probabilities)), key=lambda i: probabilities[i], reverse=True)
    return [(CLASS_NAMES[i], float(probabilities[i])) for i in order[:k]]


def build_parser() -> argparse.ArgumentParser:
    """Options: ``--url``, ``--model-name``, ``--host``, ``--top``, ``--timeout``, images."""
    parser = argparse.ArgumentParser(
        prog="python -m serving.client",
        description="Classify Fashion-MNIST images with the model server (V1 protocol).",
    )
    parser.add_argument("--url", default="http://localhost:8080", help="server base URL")
    parser.add_argument("--model-name", default=MODEL_NAME)
    parser.add_argument("--host", default=None, help="Host header (ingress gateway routing)")
    parser.add_argument("--top", type=int, default=3, help="classes to print per image")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds")
    parser.add_argument("images", nargs="+", type=Path, help="JPEG/PNG files")
    return parser


def main(args: argparse.Namespace) -> int:
    """Send the images in one request and print the top classes; returns 0.

    Raises:
        ConfigError: an image file cannot be read.
        PredictError, OSError: see :func:`predict` (connection problems, timeouts).
    """
    try:
        images = [p.read_bytes() for p in args.images]
    except OSError as exc:
        raise ConfigError(f"cannot read {exc.filename}: {exc.strerror}") from exc
    preds = predict(args.url, images, args.model_name, args.host, args.timeout)
    for path, probs in zip(args.images, preds, strict=True):
        ranked = ", ".join(f"{name} {p:.3f}" for name, p in top_k(probs, args.top))
        print(f"{path}: {ranked}")
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (``fmnist-predict``)."""
    return run_cli(main, build_parser(), (PredictError, OSError), argv)  # OSError: network


if __name__ == "__main__":
    sys.exit(cli())
