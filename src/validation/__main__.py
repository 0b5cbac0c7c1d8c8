"""``python -m validation``."""

import sys

from validation.cli import main

sys.exit(main())
