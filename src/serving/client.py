"""Command-line client for the V1 predict API (local server, KServe TF runtime or ingress).

    python -m serving.client --url http://localhost:8080 --model-name fashion-mnist shoe.jpg
    python -m serving.client --url http://localhost:8080 \\
        --host fashion-mnist.fashion-mnist.example.com shoe.jpg      # through an ingress

Prints the top-3 classes with their probabilities for every image. Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

from serving import DEFAULT_MODEL_NAME
from training.data import CLASS_NAMES  # plain constants: no TensorFlow import


class PredictError(RuntimeError):
    """The server answered with an error status or an unexpected body."""


def build_request_body(images: list[bytes]) -> dict:
    """V1 body ``{"instances": [{"b64": standard base64}, ...]}`` for encoded images."""
    return {"instances": [{"b64": base64.b64encode(img).decode("ascii")} for img in images]}


def predict(
    url: str,
    images: list[bytes],
    model_name: str = DEFAULT_MODEL_NAME,
    host: str | None = None,
    timeout: float = 30.0,
) -> list[list[float]]:
    """POST encoded images to ``<url>/v1/models/<model_name>:predict``.

    Args:
        url: server base URL, e.g. ``http://localhost:8080``.
        images: encoded JPEG/PNG images.
        model_name: model name in the path.
        host: optional ``Host`` header (ingress gateway routing, e.g.
            ``fashion-mnist.fashion-mnist.example.com``).
        timeout: seconds.

    Returns:
        One list of 10 probabilities per image (order of :data:`CLASS_NAMES`).

    Raises:
        PredictError: HTTP error status (message from the server's ``{"error": ...}``) or a
            response without ``predictions`` of the right shape.
        urllib.error.URLError: connection problems.
    """
    endpoint = f"{url.rstrip('/')}/v1/models/{model_name}:predict"
    data = json.dumps(build_request_body(images)).encode()
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
    parser.add_argument("--model-name", default=DEFAULT_MODEL_NAME)
    parser.add_argument("--host", default=None, help="Host header (ingress gateway routing)")
    parser.add_argument("--top", type=int, default=3, help="classes to print per image")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds")
    parser.add_argument("images", nargs="+", type=Path, help="JPEG/PNG files")
    return parser


def main(args: argparse.Namespace) -> int:
    """Send the images in one request and print the top classes; returns the exit code."""
    try:
        images = [p.read_bytes() for p in args.images]
    except OSError as exc:
        print(f"error: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        preds = predict(args.url, images, args.model_name, args.host, args.timeout)
    except (PredictError, urllib.error.URLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path, probs in zip(args.images, preds, strict=True):
        ranked = ", ".join(f"{name} {p:.3f}" for name, p in top_k(probs, args.top))
        print(f"{path}: {ranked}")
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (``fmnist-predict``)."""
    return main(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(cli())
