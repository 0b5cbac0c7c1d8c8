"""``python -m validation``."""

import sys

from validation.main import main

sys.exit(main())
