"""Local load test: the model server on a loopback port + a headless Locust run against it.

    python -m loadtest.local --work-dir work [--duration 20s] [--users 5]

Serves the highest version ``make demo`` published under ``<work-dir>/models/fashion-mnist`` (its
base path ``<N>/``, :func:`serving.versions.latest_published`; exit 1 with one line
ending in "run make demo first" when there is no version), runs ``loadtest/locustfile.py``
headless with its stages squeezed into ``--duration``, writes ``<work-dir>/loadtest/``
(``locust_stats.csv``, ``locust_stats_history.csv``, ``locust_failures.csv``,
``locust_exceptions.csv``, ``report.html``, ``server.log``, ``payload.json``), stops the
server and exits with Locust's code: 0 when the thresholds (failure ratio, p95 latency, minimum
requests/s) hold, 1 otherwise. Runs from any directory.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

from fmnist_common import MODEL_NAME, predict_body
from fmnist_common.cli import ConfigError, options_argv, positive_int, run_cli

LOCUSTFILE = Path(__file__).with_name("locustfile.py")


def parse_duration(text: str) -> float:
    """``"20s"``, ``"2m"``, ``"1m30s"``, ``"45"`` -> seconds.

    Raises:
        ValueError: unparseable or not positive (argparse turns it into a usage error).
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
    p = argparse.ArgumentParser(
        prog="python -m loadtest.local",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--work-dir", type=Path, default=Path("work"))
    p.add_argument("--model-name", default=MODEL_NAME)
    p.add_argument(
        "--duration",
        type=parse_duration,
        default="20s",
        help="whole run, all stages (e.g. 20s, 2m)",
    )
    p.add_argument("--users", type=positive_int, default=5, help="peak concurrent users")
    p.add_argument("--max-failure-ratio", type=float, default=0.01)
    p.add_argument("--max-p95-ms", type=float, default=1000.0)
    p.add_argument("--min-rps", type=float, default=5.0)
    p.add_argument("--host-header", default="", help="Host header sent with every request")
    p.add_argument(
        "--image-count", type=positive_int, default=300, help="test images to cycle through"
    )
    return p


def locust_command(args: argparse.Namespace, url: str, payload: Path, out: Path) -> list[str]:
    """The headless Locust command line for a run of ``args.duration`` seconds against ``url``."""
    options = {
        "--host": url,
        "--model-name": args.model_name,
        "--payload-file": payload,
        "--peak-users": args.users,
        "--shape-spawn-rate": args.users,
        **{f"--{stage}": seconds for stage, seconds in split_stages(args.duration).items()},
        "--max-failure-ratio": args.max_failure_ratio,
        "--max-p95-ms": args.max_p95_ms,
        "--min-rps": args.min_rps,
        "--run-time": f"{int(args.duration) + 5}s",  # a backstop: the shape ends the run
        "--stop-timeout": 5,
        "--csv": out / "locust",
        "--html": out / "report.html",
        "--loglevel": "INFO",
    }
    if args.host_header:
        options["--host-header"] = args.host_header
    flags = ["--headless", "--csv-full-history", "--only-summary"]
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *flags]
    return command + options_argv(options)


def main(args: argparse.Namespace) -> int:
    """Run the local load test; returns Locust's exit code (0 thresholds held, 1 not).

    Raises:
        ConfigError: no published model under ``<work-dir>/models/<model-name>``.
        ServerStartError: the model server did not become ready.
    """
    from loadtest.payload import load_encoded_test_images
    from serving.launch import LocalServer
    from serving.versions import ModelVersionNotFoundError, latest_published

    try:
        version, base = latest_published(args.work_dir / "models" / args.model_name)
    except ModelVersionNotFoundError as exc:
        raise ConfigError(f"{exc}; run make demo first") from exc
    out = args.work_dir / "loadtest"
    out.mkdir(parents=True, exist_ok=True)
    payload = out / "payload.json"
    payload.write_text(json.dumps(predict_body(load_encoded_test_images(args.image_count)[0])))

    with LocalServer(base, args.model_name, log_path=out / "server.log") as server:
        print(f"serving {args.model_name} version {version} at {server.url}", flush=True)
        try:
            code = subprocess.run(
                locust_command(args, server.url, payload, out), timeout=args.duration + 90
            ).returncode
        except subprocess.TimeoutExpired:
            print("locust did not finish in time", file=sys.stderr)
            code = 1
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
    """Console entry point (``make loadtest-local``)."""
    from serving.launch import ServerStartError

    return run_cli(main, build_parser(), (ServerStartError,), argv)


if __name__ == "__main__":
    sys.exit(cli())
