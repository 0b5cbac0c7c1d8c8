"""``loadtest`` importable from any directory.

The load-test tools live in ``loadtest/`` at the repository root (beside ``bench/``), but the
editable install puts only ``src/`` on the import path. This package therefore takes its
modules from that folder, so ``python -m loadtest.local`` and ``locust -f <checkout>/loadtest/
locustfile.py`` work whatever the current directory. (From the repository root, Python finds
``loadtest/`` itself first: the same files.)
"""

from pathlib import Path

__path__ = [str(Path(__file__).resolve().parents[2] / "loadtest")]
