"""Local load test: the model server on a loopback port + a headless Locust run against it.

    python -m loadtest.local --work-dir work [--duration 20s] [--users 5]

Serves ``<work-dir>/models/fashion-mnist`` (what ``make demo`` publishes; exit 2 with "run make
demo first" when there is no version), runs ``loadtest/locustfile.py`` headless with its stages
squeezed into ``--duration``, writes ``<work-dir>/loadtest/`` (``locust_stats.csv``,
``locust_stats_history.csv``, ``locust_failures.csv``, ``report.html``, ``server.log``,
``payload.json``), stops the server and exits with Locust's code: 0 when the thresholds
(failure ratio, p95 latency, minimum requests/s) hold, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
DEMO_HINT = "run make demo first"


def parse_duration(text: str) -> float:
    """``"20s"``, ``"2m"``, ``"1m30s"``, ``"45"`` -> seconds.

    Raises:
        ValueError: unparseable or not positive.
    """
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    else:
        parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
        if not parts or not any(parts.groups()):
            raise ValueError(f"bad duration {text!r}; use e.g. 20s, 2m, 1m30s")
        h, m, s = (int(g or 0) for g in parts.groups())
        seconds = float(h * 3600 + m * 60 + s)
    if seconds <= 0:
        raise ValueError("duration must be positive")
    return seconds


def split_stages(duration: float) -> dict[str, float]:
    """Stage lengths in seconds for a run of ``duration``: 15% ramp up, 65% hold, 10% ramp
    down, 10% idle."""
    return {
        "ramp-up-s": round(0.15 * duration, 2),
        "hold-s": round(0.65 * duration, 2),
        "ramp-down-s": round(0.10 * duration, 2),
        "idle-s": round(0.10 * duration, 2),
    }


def read_aggregated(stats_csv: Path) -> dict:
    """The ``Aggregated`` row of Locust's ``*_stats.csv`` as a dict of strings."""
    with open(stats_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("Name") == "Aggregated":
                return row
    raise ValueError(f"no Aggregated row in {stats_csv}")


def build_parser() -> argparse.ArgumentParser:
    """Options: work dir, duration, users, thresholds, model name, Host header."""
    p = argparse.ArgumentParser(prog="python -m loadtest.local", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--work-dir", type=Path, default=Path("work"))
    p.add_argument("--model-name", default="fashion-mnist")
    p.add_argument("--duration", default="20s", help="whole run, all stages (e.g. 20s, 2m)")
    p.add_argument("--users", type=int, default=5, help="peak concurrent users")
    p.add_argument("--max-failure-ratio", type=float, default=0.01)
    p.add_argument("--max-p95-ms", type=float, default=1000.0)
    p.add_argument("--min-rps", type=float, default=5.0)
    p.add_argument("--host-header", default="", help="Host header sent with every request")
    p.add_argument("--image-count", type=int, default=300, help="test images to cycle through")
    return p


def main(args: argparse.Namespace) -> int:
    """Run the local load test; returns the exit code (0 pass, 1 thresholds, 2 no model)."""
    from serving.launch import LocalServer, ServerStartError
    from serving.versions import ModelVersionNotFoundError, find_latest_version

    base = args.work_dir / "models" / args.model_name
    try:
        version, _ = find_latest_version(base)
    except ModelVersionNotFoundError as exc:
        print(f"{exc}\n{DEMO_HINT}", file=sys.stderr)
        return 2
    duration = parse_duration(args.duration)
    out = args.work_dir / "loadtest"
    out.mkdir(parents=True, exist_ok=True)

    from loadtest.payload import load_encoded_test_images, predict_body

    payload = out / "payload.json"
    payload.write_text(json.dumps(predict_body(load_encoded_test_images(args.image_count)[0])))

    try:
        server = LocalServer(base, args.model_name, log_path=out / "server.log").start()
    except ServerStartError as exc:
        print(f"model server failed to start: {exc}", file=sys.stderr)
        return 1
    print(f"serving {args.model_name} version {version} at {server.url}", flush=True)
    stages = split_stages(duration)
    cmd = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
        "--host", server.url, "--model-name", args.model_name,
        "--payload-file", str(payload),
        "--peak-users", str(args.users), "--shape-spawn-rate", str(max(1, args.users)),
        *[f"--{k}={v}" for k, v in stages.items()],
        "--max-failure-ratio", str(args.max_failure_ratio),
        "--max-p95-ms", str(args.max_p95_ms), "--min-rps", str(args.min_rps),
        "--run-time", f"{int(duration) + 5}s", "--stop-timeout", "5",
        "--csv", str(out / "locust"), "--csv-full-history", "--html", str(out / "report.html"),
        "--only-summary", "--loglevel", "INFO",
    ]  # fmt: skip
    if args.host_header:
        cmd += ["--host-header", args.host_header]
    try:
        proc = subprocess.run(cmd, timeout=duration + 90)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        print("locust did not finish in time", file=sys.stderr)
        code = 1
    finally:
        server.stop()
    stats_csv = out / "locust_stats.csv"
    if stats_csv.exists():
        row = read_aggregated(stats_csv)
        print(
            f"{row['Request Count']} requests, {row['Failure Count']} failures, "
            f"{float(row['Requests/s']):.1f} req/s, p50 {row['50%']} ms, p95 {row['95%']} ms, "
            f"p99 {row['99%']} ms; reports in {out}"
        )
    print("load test", "PASSED" if code == 0 else f"FAILED (exit {code})")
    return code


def cli(argv: list[str] | None = None) -> int:
    """Console entry point."""
    return main(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(cli())
