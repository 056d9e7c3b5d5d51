"""The real-MindSpeed layer drives the matrix's training probe (tests/matrix/train_probe.py): it goes on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "matrix"))
