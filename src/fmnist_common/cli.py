"""The command-line convention every program of this project follows, and its one helper.

A program (``python -m <package>.<module>``, a console script, or ``python bench/<x>.py``) has:

1. ``build_parser() -> argparse.ArgumentParser``: every option, ``prog`` set to how it is run;
2. ``main(args: argparse.Namespace) -> int``: does the work and returns the exit code; callable
   from Python (tests, other programs) with a parsed namespace;
3. ``cli(argv: list[str] | None = None) -> int``: the console entry point, always
   ``return run_cli(main, build_parser(), <expected errors>, argv)``, and at the bottom
   ``if __name__ == "__main__": sys.exit(cli())``.

Exit codes:

* ``0``: success;
* ``1``: a configuration error (no published model, an unreadable file, a value argparse cannot
  check) or a run that failed cleanly (a pipeline stage, load-test thresholds). The program
  raises :class:`ConfigError` or one of the exception classes it passes to :func:`run_cli`,
  which prints it as **one line** on stderr, ``<prog>: error: <message>``, with no traceback.
  Any other exception is a bug and keeps its traceback;
* ``2``: a usage error found by argparse (its own message and exit code); value checks that
  need no I/O belong in the parser (``type=positive_int``), not in ``main``.

Logging: :func:`run_cli` calls :func:`configure_logging` once per process; modules only call
``logging.getLogger(__name__)``. Progress goes to logging (stderr); results meant for the reader
(tables, summaries, predictions) are printed to stdout. The model server
(``python -m serving.server``) keeps KServe's own logging configuration.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
from collections.abc import Callable, Sequence

PROJECT_LOGGERS = ("training", "serving", "fmnist_pipeline", "fmnist_common", "loadtest", "bench")
LOG_FORMAT = "%(asctime)s %(name)s %(message)s"


class ConfigError(Exception):
    """A problem the user fixes by changing the command or the environment (exit 1)."""


def configure_logging() -> None:
    """WARNING for everything (TensorFlow, absl, HTTP libraries), INFO for this project's
    loggers (:data:`PROJECT_LOGGERS`), one line per record on stderr. TensorFlow's own C++ log
    is set to warnings and errors (``TF_CPP_MIN_LOG_LEVEL=2`` unless set; it takes effect when
    TensorFlow loads, so programs import it inside ``main``, and child processes inherit it)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    for name in PROJECT_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)


def run_cli(
    main: Callable[[argparse.Namespace], object],
    parser: argparse.ArgumentParser,
    expected_errors: Sequence[type[BaseException]] = (),
    argv: list[str] | None = None,
) -> int:
    """Parse ``argv``, run ``main(args)`` and turn expected errors into one line and exit 1.

    Args:
        main: the module's ``main(args)``; its ``int`` result is the exit code (a result that
            is not an ``int``, e.g. ``None``, counts as success).
        parser: the module's parser (``parser.prog`` prefixes the error line).
        expected_errors: exception classes that mean "failed cleanly", besides
            :class:`ConfigError`.
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit code: ``main``'s, or 1 on an expected error. argparse exits 2 on bad usage.
    """
    configure_logging()
    exit_on_term_as_pid1()
    args = parser.parse_args(argv)
    try:
        code = main(args)
    except (ConfigError, *expected_errors) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        return 1
    return code if isinstance(code, int) else 0


def exit_on_term_as_pid1() -> bool:
    """As a container's PID 1 (``python -m ...`` with no init, as the pipeline's pods run),
    exit at once on SIGTERM with 143 (128 + 15, what a shell reports for a process SIGTERM
    killed). The kernel delivers no signal to a PID namespace's init that it has no handler
    for, so without this a deleted or evicted pod's program would keep running, and writing,
    for the whole termination grace period (30 s) beside the next attempt of its step
    (docs/training.md "Losing a pod"). Files are written through a temporary name and a
    rename, so an exit at any point leaves no half-written one. Anywhere else SIGTERM keeps
    its default (the process is killed by the signal) or the program's own handler.

    Returns:
        True when the handler was installed (this process is PID 1).
    """
    if os.getpid() != 1:
        return False
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))
    return True


def number(cast=float, low=None, high=None, *, low_open=False, high_open=False):
    """argparse ``type=`` factory for a finite number in a range, e.g.
    ``number(float, 0, 1, high_open=True)`` for ``[0, 1)`` or ``number(int, 0)`` for counts
    that may be 0.

    Returns:
        A function ``str -> cast`` that raises ``argparse.ArgumentTypeError`` (argparse: usage
        error, exit 2) for text that is not a finite ``cast`` (``nan``/``inf`` included) or
        lies outside the range.
    """
    lo = "(" if low_open or low is None else "["
    hi = ")" if high_open or high is None else "]"
    span = f"in {lo}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi}"
    if high is None and low is not None and not low_open:
        span = f"at least {low}"
    kind = "an integer" if cast is int else "a number"

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {kind}: {text!r}") from None
        below = low is not None and (value <= low if low_open else value < low)
        above = high is not None and (value >= high if high_open else value > high)
        if not math.isfinite(value) or below or above:
            raise argparse.ArgumentTypeError(f"must be {span}, got {text}")
        return value

    return parse


positive_int = number(int, 1)  # argparse ``type=`` for counts that must be at least 1


def options_argv(options: dict[str, object]) -> list[str]:
    """``{"--epochs": 3, "--out": Path("x")}`` -> ``["--epochs", "3", "--out", "x"]``: the
    command line of another program, built from a readable option table (values via ``str``)."""
    return [str(item) for option in options.items() for item in option]
