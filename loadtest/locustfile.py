"""Locust load test of the V1 predict endpoint (local server, KServe predictor or ingress).

Headless example (thresholds decide the exit code; CSV + HTML reports)::

    locust -f loadtest/locustfile.py --headless --host http://127.0.0.1:8080 \\
        --peak-users 5 --ramp-up-s 30 --hold-s 120 --ramp-down-s 30 --idle-s 120 \\
        --csv reports/locust --csv-full-history --html reports/locust.html

Through an ingress gateway: ``--host http://localhost:8081 --host-header
fashion-mnist-predictor.fashion-mnist.example.com`` (the InferenceService's URL host). Every
custom option also reads an environment variable (``LOCUST_PEAK_USERS``,
``LOCUST_HOST_HEADER``, ...; see ``--help``).

Users send one-image requests (``--instances``) built from real Fashion-MNIST test images
encoded as JPEG (loaded once per process through ``training.data``, or from
``--payload-file`` written by ``python -m loadtest.make_payload``), and check every response:
status 200, ``predictions`` of shape ``[n, 10]``, rows summing to 1 (an ``{"error": ...}`` body
is a failure even with status 200). Requests are named ``/v1/models/[name]:predict`` so stats
group by endpoint.

:class:`StagesShape` drives the user count: ramp up to ``--peak-users``, hold, ramp down to
zero, then stay idle, so that autoscaling out and back in is observable (see
``loadtest/observer.py``).
"""

from __future__ import annotations

import base64
import json
import logging
import random

from locust import FastHttpUser, LoadTestShape, between, constant, events, task

from fmnist_common import MODEL_NAME, predict_body, predict_path
from loadtest.payload import DEFAULT_IMAGE_COUNT, check_predict_response
from loadtest.shape import stage_users, threshold_failures

log = logging.getLogger("loadtest")
REQUEST_NAME = predict_path("[name]")
_IMAGES: list[bytes] = []


@events.init_command_line_parser.add_listener
def add_options(parser) -> None:
    """Custom options (each also settable through the environment variable shown)."""
    add = parser.add_argument
    add(
        "--model-name",
        default=MODEL_NAME,
        env_var="LOCUST_MODEL_NAME",
        help="model name in /v1/models/<name>:predict",
    )
    add(
        "--host-header",
        default="",
        env_var="LOCUST_HOST_HEADER",
        help="Host header behind an ingress: the URL's host, fashion-mnist-predictor.<ns>.<domain>",
    )
    add("--instances", type=int, default=1, env_var="LOCUST_INSTANCES", help="images per request")
    add(
        "--image-count",
        type=int,
        default=DEFAULT_IMAGE_COUNT,
        env_var="LOCUST_IMAGE_COUNT",
        help="test images loaded (cycled through)",
    )
    add(
        "--payload-file",
        default="",
        env_var="LOCUST_PAYLOAD_FILE",
        help="V1 body JSON to take images from instead of loading the dataset",
    )
    add(
        "--wait-ms",
        type=float,
        default=0.0,
        env_var="LOCUST_WAIT_MS",
        help="think time between a user's requests (0: back to back = concurrency)",
    )
    add("--peak-users", type=int, default=5, env_var="LOCUST_PEAK_USERS")
    add(
        "--shape-spawn-rate",
        type=float,
        default=5.0,
        env_var="LOCUST_SHAPE_SPAWN_RATE",
        help="users started/stopped per second",
    )
    add("--ramp-up-s", type=float, default=30.0, env_var="LOCUST_RAMP_UP_S")
    add("--hold-s", type=float, default=120.0, env_var="LOCUST_HOLD_S")
    add("--ramp-down-s", type=float, default=30.0, env_var="LOCUST_RAMP_DOWN_S")
    add(
        "--idle-s",
        type=float,
        default=60.0,
        env_var="LOCUST_IDLE_S",
        help="zero users at the end (scale-in window)",
    )
    add("--max-failure-ratio", type=float, default=0.01, env_var="LOCUST_MAX_FAILURE_RATIO")
    add("--max-p95-ms", type=float, default=1000.0, env_var="LOCUST_MAX_P95_MS")
    add(
        "--min-rps",
        type=float,
        default=1.0,
        env_var="LOCUST_MIN_RPS",
        help="minimum average requests/s over the run",
    )


def load_images(options) -> list[bytes]:
    """The encoded test images, from ``--payload-file`` or the dataset (once per process)."""
    if not _IMAGES:
        if options.payload_file:
            with open(options.payload_file) as f:
                body = json.load(f)
            _IMAGES.extend(base64.b64decode(inst["b64"]) for inst in body["instances"])
        else:
            from loadtest.payload import load_encoded_test_images

            _IMAGES.extend(load_encoded_test_images(options.image_count, "jpeg")[0])
        log.info("loaded %d test images", len(_IMAGES))
    return _IMAGES


@events.init.add_listener
def on_init(environment, **_kwargs) -> None:
    """Load the images before any user starts (not on a distributed master)."""
    from locust.runners import MasterRunner

    if environment.parsed_options is not None and not isinstance(environment.runner, MasterRunner):
        load_images(environment.parsed_options)


class PredictUser(FastHttpUser):
    """Sends V1 predict requests back to back (or with ``--wait-ms`` think time)."""

    wait_time = constant(0)

    def on_start(self) -> None:
        opts = self.environment.parsed_options
        if opts.wait_ms > 0:
            w = opts.wait_ms / 1000.0
            self.wait_time = between(0.5 * w, 1.5 * w).__get__(self)
        self.path = predict_path(opts.model_name)
        self.headers = {"Content-Type": "application/json"}
        if opts.host_header:
            self.headers["Host"] = opts.host_header
        self.n = max(1, opts.instances)
        images = load_images(opts)
        self.bodies = [
            json.dumps(predict_body(images[i : i + self.n])).encode()
            for i in range(0, len(images) - self.n + 1, self.n)
        ]
        random.shuffle(self.bodies)
        self.i = 0

    @task
    def predict(self) -> None:
        body = self.bodies[self.i % len(self.bodies)]
        self.i += 1
        with self.client.post(
            self.path, data=body, headers=self.headers, name=REQUEST_NAME, catch_response=True
        ) as resp:
            try:
                payload = json.loads(resp.content or b"null")
            except ValueError:
                resp.failure(f"HTTP {resp.status_code}, body is not JSON: {resp.text[:100]!r}")
                return
            reason = check_predict_response(resp.status_code, payload, self.n)
            if reason:
                resp.failure(reason)
            else:
                resp.success()


class StagesShape(LoadTestShape):
    """Ramp up, hold, ramp down to zero, idle (lengths/peak from the custom options)."""

    def tick(self):
        opts = self.runner.environment.parsed_options
        stages = (opts.ramp_up_s, opts.hold_s, opts.ramp_down_s, opts.idle_s)
        users = stage_users(self.get_run_time(), opts.peak_users, *stages)
        return None if users is None else (users, opts.shape_spawn_rate)


@events.quitting.add_listener
def apply_thresholds(environment, **_kwargs) -> None:
    """Set the process exit code from the thresholds (1 on any violation)."""
    if environment.parsed_options is None:
        return
    problems = threshold_failures(environment.stats.total, environment.parsed_options)
    total = environment.stats.total
    summary = (
        f"{total.num_requests} requests, {total.num_failures} failures, "
        f"{total.total_rps:.1f} req/s, p50 {total.get_response_time_percentile(0.5)} ms, "
        f"p95 {total.get_response_time_percentile(0.95)} ms"
    )
    if problems:
        log.error("thresholds FAILED (%s): %s", summary, "; ".join(problems))
        environment.process_exit_code = 1
    else:
        log.info("thresholds passed: %s", summary)
        if not environment.process_exit_code:
            environment.process_exit_code = 0
