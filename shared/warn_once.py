"""Log a warning once per key: for failures that would otherwise repeat at every engine step."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field


@dataclass
class WarnOnce:
    logger: logging.Logger
    _seen: set[str] = field(default_factory=set)

    def __call__(self, key: str, message: str) -> None:
        if key not in self._seen:
            self._seen.add(key)
            self.logger.warning(message)
