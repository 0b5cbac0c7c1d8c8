"""Pure logic of the Locust run (no Locust import, so tests can use it without gevent's
monkey-patching): the user-count stages and the pass/fail thresholds."""

from __future__ import annotations

import math


def stage_users(
    t: float, peak: int, ramp_up: float, hold: float, ramp_down: float, idle: float
) -> int | None:
    """Users wanted ``t`` seconds into the run; ``None`` once all stages are over.

    Ramp up linearly to ``peak`` (at least 1 user as soon as the run starts), hold, ramp down
    linearly to 0, then 0 users for ``idle`` seconds.
    """
    if t < ramp_up:
        return max(1, math.ceil(peak * t / ramp_up))
    t -= ramp_up
    if t < hold:
        return peak
    t -= hold
    if t < ramp_down:
        return max(0, math.ceil(peak * (1.0 - t / ramp_down)))
    t -= ramp_down
    if t < idle:
        return 0
    return None


def threshold_failures(stats_total, options) -> list[str]:
    """Threshold violations for the aggregated stats (empty list: passed).

    Args:
        stats_total: ``environment.stats.total`` (``num_requests``, ``fail_ratio``,
            ``get_response_time_percentile``, ``total_rps``).
        options: parsed options with ``max_failure_ratio``, ``max_p95_ms``, ``min_rps``.
    """
    problems = []
    if stats_total.num_requests == 0:
        return ["no requests were made"]
    if stats_total.fail_ratio > options.max_failure_ratio:
        problems.append(f"failure ratio {stats_total.fail_ratio:.4f} > {options.max_failure_ratio}")
    p95 = stats_total.get_response_time_percentile(0.95) or 0.0
    if p95 > options.max_p95_ms:
        problems.append(f"p95 latency {p95:.0f} ms > {options.max_p95_ms} ms")
    if stats_total.total_rps < options.min_rps:
        problems.append(f"throughput {stats_total.total_rps:.1f} req/s < {options.min_rps}")
    return problems
