"""Write a V1 predict body built from real test images (for ``hey -D`` and ``curl -d @``).

python -m loadtest.make_payload --out input.json --count 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from loadtest.payload import load_encoded_test_images, predict_body


def build_parser() -> argparse.ArgumentParser:
    """Options: ``--out``, ``--count``, ``--offset``, ``--format``."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.make_payload", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("input.json"))
    parser.add_argument("--count", type=int, default=1, help="instances in the body")
    parser.add_argument("--offset", type=int, default=0, help="first test image to use")
    parser.add_argument("--format", choices=("jpeg", "png"), default="jpeg")
    return parser


def main(args: argparse.Namespace) -> int:
    """Write the body; returns 0 (2 when ``--count`` < 1)."""
    if args.count < 1:
        print("--count must be >= 1", file=sys.stderr)
        return 2
    images, labels = load_encoded_test_images(args.offset + args.count, args.format)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(predict_body(images[args.offset :])))
    print(f"wrote {args.out}: {args.count} {args.format} test image(s), labels "
          f"{labels[args.offset :][:10]}")  # fmt: skip
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point."""
    return main(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(cli())
