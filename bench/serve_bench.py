"""Model server benchmark: HTTP requests/s and p50/p99 latency of one-image V1 predict requests at
concurrency 1, 5 and 16, next to the in-process throughput of the same SavedModel signature
called directly with one image (the ceiling).

    python bench/serve_bench.py [--model-base-path work/models/fashion-mnist] [--duration 8]

Needs a published model (``make demo`` first; the default is ``work/models/fashion-mnist`` of
this checkout, whatever the current directory). Load comes from ``hey`` when installed (else a
small asyncio/httpx client), on loopback only. Writes ``bench/results/serve_bench.json`` and
``bench/results/serve_bench.md``. Not a timed test: run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fmnist_common import MODEL_NAME, predict_body
from fmnist_common.cli import ConfigError, run_cli
from serving.launch import ServerStartError

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
log = logging.getLogger("bench")
RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_MODEL_BASE = Path(__file__).resolve().parents[1] / "work" / "models" / MODEL_NAME


def percentile(values: list[float], q: float) -> float:
    """``q``-quantile (0..1) by nearest rank of ``values`` (seconds in, seconds out)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def in_process(version_dir: Path, image: bytes, seconds: float) -> dict:
    """Call ``serving_default`` with one image back to back for ``seconds``.

    Returns:
        ``{"img_per_s", "p50_ms", "p99_ms", "calls"}``.
    """
    import tensorflow as tf

    fn = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    x = tf.constant([image])
    for _ in range(20):
        fn(image_bytes=x)["probabilities"].numpy()
    lat = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        fn(image_bytes=x)["probabilities"].numpy()
        lat.append(time.perf_counter() - t)
    total = sum(lat)
    return {
        "img_per_s": len(lat) / total,
        "p50_ms": percentile(lat, 0.5) * 1e3,
        "p99_ms": percentile(lat, 0.99) * 1e3,
        "calls": len(lat),
    }


def run_hey(url: str, payload: Path, concurrency: int, seconds: float) -> dict:
    """``hey -z <seconds>s -c <concurrency>`` and its parsed summary."""
    cmd = ["hey", "-z", f"{seconds}s", "-c", str(concurrency), "-m", "POST"]
    cmd += ["-T", "application/json", "-D", str(payload), url]
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=seconds + 60, check=True
    ).stdout

    def grab(pattern):
        m = re.search(pattern, out)
        return float(m.group(1)) if m else float("nan")

    codes = {int(c): int(n) for c, n in re.findall(r"\[(\d{3})\]\s+(\d+) responses", out)}
    return {
        "req_per_s": grab(r"Requests/sec:\s+([\d.]+)"),
        "p50_ms": grab(r"50%+ in ([\d.]+) secs") * 1e3,
        "p99_ms": grab(r"99%+ in ([\d.]+) secs") * 1e3,
        "status_codes": codes,
        "tool": "hey",
    }


def run_httpx(url: str, body: bytes, concurrency: int, seconds: float) -> dict:
    """Closed-loop asyncio/httpx client: ``concurrency`` workers posting back to back."""
    import httpx

    async def main():
        lat, codes = [], {}
        end = time.perf_counter() + seconds
        limits = httpx.Limits(max_connections=concurrency)
        headers = {"content-type": "application/json"}
        async with httpx.AsyncClient(limits=limits, timeout=30) as client:

            async def worker():
                while time.perf_counter() < end:
                    t = time.perf_counter()
                    r = await client.post(url, content=body, headers=headers)
                    lat.append(time.perf_counter() - t)
                    codes[r.status_code] = codes.get(r.status_code, 0) + 1

            t0 = time.perf_counter()
            await asyncio.gather(*[worker() for _ in range(concurrency)])
            return lat, codes, time.perf_counter() - t0

    lat, codes, wall = asyncio.run(main())
    return {
        "req_per_s": len(lat) / wall,
        "p50_ms": percentile(lat, 0.5) * 1e3,
        "p99_ms": percentile(lat, 0.99) * 1e3,
        "status_codes": codes,
        "tool": "httpx",
    }


def find_model(base: Path) -> tuple[Path, Path]:
    """``(version directory, base path)`` the server will serve: ``base`` is a TF Serving base
    path (its highest version) or the models directory that selection publishes to (its
    highest published version's base path, :func:`serving.versions.latest_published`).

    Raises:
        ConfigError: no published version under ``base`` (run ``make demo`` first).
    """
    from serving.versions import ModelVersionNotFoundError, find_latest_version, published_versions

    try:
        if versions := published_versions(base):  # one listing of the models directory
            base = versions[max(versions)]
        return find_latest_version(base)[1], base
    except ModelVersionNotFoundError as exc:
        raise ConfigError(f"{exc}; run make demo first or pass --model-base-path") from exc


def write_results(result: dict, results_dir: Path) -> None:
    """``<results_dir>/serve_bench.json`` and the markdown table ``serve_bench.md``."""
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "serve_bench.json").write_text(json.dumps(result, indent=2))
    ip = result["in_process"]
    lines = [
        f"Model server benchmark ({result['date']}, {result['machine']}, load: "
        f"{result['http'][0]['tool']}, {result['duration_s']} s per level, one 28x28 JPEG per "
        "request, loopback)",
        "",
        "| mode | concurrency | req/s (img/s) | p50 ms | p99 ms | % of in-process | non-200 |",
        "|---|---|---|---|---|---|---|",
        f"| in-process `serving_default`, 1 image/call | 1 | {ip['img_per_s']:.0f} | "
        f"{ip['p50_ms']:.2f} | {ip['p99_ms']:.2f} | 100% | - |",
    ]
    for h in result["http"]:
        bad = sum(n for c, n in h["status_codes"].items() if int(c) != 200)
        lines.append(
            f"| HTTP V1 predict | {h['concurrency']} | {h['req_per_s']:.0f} | {h['p50_ms']:.1f} | "
            f"{h['p99_ms']:.1f} | {100 * h['req_per_s'] / ip['img_per_s']:.0f}% | {bad} |"
        )
    c5 = next(h for h in result["http"] if h["concurrency"] == 5)
    ratio = c5["req_per_s"] / ip["img_per_s"]
    lines += [
        "",
        f"Target at concurrency 5: >= 60% of in-process and p99 <= 50 ms -> "
        f"{100 * ratio:.0f}% and {c5['p99_ms']:.1f} ms: "
        f"{'met' if ratio >= 0.6 and c5['p99_ms'] <= 50 else 'NOT met'}.",
        f"Server options: `{' '.join(result['server_args']) or '(defaults)'}`; micro-batch sizes "
        "seen are not exported by the server (design: docs/serving.md).",
    ]
    (results_dir / "serve_bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def build_parser() -> argparse.ArgumentParser:
    """Options: model base path, seconds per level, concurrency levels, extra server args."""
    p = argparse.ArgumentParser(prog="bench/serve_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model-base-path", type=Path, default=DEFAULT_MODEL_BASE)
    p.add_argument("--duration", type=float, default=8.0, help="seconds per measurement")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 5, 16])
    p.add_argument("--server-arg", action="append", default=[], help="extra serving.server arg")
    p.add_argument("--results-dir", type=Path, default=RESULTS, help="default: bench/results")
    return p


def main(args: argparse.Namespace) -> int:
    """Run the benchmark and write the results; returns 0.

    Raises:
        ConfigError: no published model under ``--model-base-path``.
    """
    from serving.launch import LocalServer
    from training.data import encode_images, load_numpy

    version_dir, base = find_model(args.model_base_path)
    images, _ = load_numpy("test", limit=1)
    jpeg = encode_images(images, "jpeg")[0]
    body = json.dumps(predict_body([jpeg])).encode()
    payload = Path(tempfile.mkdtemp(prefix="serve-bench-")) / "input.json"
    payload.write_bytes(body)

    http = []
    with LocalServer(base, extra_args=args.server_arg) as server:
        for c in args.concurrency:
            if shutil.which("hey"):
                r = run_hey(server.predict_url, payload, c, args.duration)
            else:
                r = run_httpx(server.predict_url, body, c, args.duration)
            r["concurrency"] = c
            http.append(r)
            log.info(
                "c=%d: %.0f req/s p50 %.1f ms p99 %.1f ms %s",
                c,
                r["req_per_s"],
                r["p50_ms"],
                r["p99_ms"],
                r["status_codes"],
            )
    # in-process after the server stopped, so both get the machine to themselves
    ip = in_process(version_dir, jpeg, args.duration)
    log.info("in-process: %.0f img/s", ip["img_per_s"])
    write_results(
        {
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Python "
            f"{platform.python_version()}",
            "duration_s": args.duration,
            "model": str(version_dir),
            "server_args": args.server_arg,
            "in_process": ip,
            "http": http,
            "median_http_p50_ms": statistics.median(h["p50_ms"] for h in http),
        },
        args.results_dir,
    )
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (``python bench/serve_bench.py``)."""
    return run_cli(main, build_parser(), (ServerStartError,), argv)


if __name__ == "__main__":
    sys.exit(cli())
