"""Fashion-MNIST training side: ingestion, multi-worker training, export and model selection.

Every module is importable and has a ``build_parser()`` / ``main(args)`` / ``cli()`` triple where
it is a command-line program, following the Kubeflow TFJob examples. Keras here is tf-keras
(Keras 2): Keras 3's ``fit()`` does not run under ``MultiWorkerMirroredStrategy`` with
TensorFlow 2.21 (see README, "Why tf-keras").
"""

import os

# tensorflow-datasets and TensorFlow pick Keras 2 when this is set; must happen before
# TensorFlow is imported anywhere in the process.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def configure_logging() -> None:
    """INFO for this project's loggers; WARNING for TensorFlow/absl (per-step INFO chatter)."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("training").setLevel(logging.INFO)


def run_cli(main, parser, expected_errors: tuple, argv=None) -> int:
    """Shared console entry point: parse ``argv``, run ``main(args)``, map errors to exit 1.

    Args:
        main: the module's ``main(args)``.
        parser: its ``argparse.ArgumentParser``.
        expected_errors: exception classes that mean "failed cleanly": logged as one line
            (no traceback) and turned into exit code 1; anything else propagates.
        argv: arguments (default ``sys.argv[1:]``).

    Returns:
        0 on success, 1 on an expected error.
    """
    import logging

    configure_logging()
    try:
        main(parser.parse_args(argv))
    except expected_errors as exc:
        logging.getLogger("training").error("%s", exc)
        return 1
    return 0
