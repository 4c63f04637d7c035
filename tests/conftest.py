"""Test-wide settings: the repo's models folder (as `make test` sets it) and no hub access."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("TREESPEC_MODELS_DIR", str(REPO / "models"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
