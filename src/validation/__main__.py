"""``python -m validation``."""

from validation.main import main

raise SystemExit(main())
