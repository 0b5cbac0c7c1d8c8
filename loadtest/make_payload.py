"""Write a V1 predict body built from real test images (for ``hey -D`` and ``curl -d @``).

python -m loadtest.make_payload --out input.json --count 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fmnist_common import predict_body
from fmnist_common.cli import positive_int, run_cli
from loadtest.payload import load_encoded_test_images


def build_parser() -> argparse.ArgumentParser:
    """Options: ``--out``, ``--count``, ``--offset``, ``--format``."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.make_payload", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("input.json"))
    parser.add_argument("--count", type=positive_int, default=1, help="instances in the body")
    parser.add_argument("--offset", type=int, default=0, help="first test image to use")
    parser.add_argument("--format", choices=("jpeg", "png"), default="jpeg")
    return parser


def main(args: argparse.Namespace) -> int:
    """Write the body; returns 0.

    Raises:
        FileNotFoundError: the dataset is not prepared (``$TFDS_DATA_DIR``).
    """
    images, labels = load_encoded_test_images(args.offset + args.count, args.format)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(predict_body(images[args.offset :])))
    shown = labels[args.offset :][:10]
    print(f"wrote {args.out}: {args.count} {args.format} test image(s), labels {shown}")
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point."""
    return run_cli(main, build_parser(), (FileNotFoundError,), argv)


if __name__ == "__main__":
    sys.exit(cli())
