"""Test-wide settings: no hub access (every model is local)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
