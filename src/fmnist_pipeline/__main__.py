"""``python -m fmnist_pipeline``: see :mod:`fmnist_pipeline.run`."""

import sys

from fmnist_pipeline.run import cli

sys.exit(cli())
