"""Make the repository's packages importable when the project is not pip-installed into the venv
(the Makefile installs it editable; a bare `.venv/bin/pytest` on a fresh checkout does not)."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
