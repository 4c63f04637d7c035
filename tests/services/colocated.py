"""A co-located drafter for tests: shared/launcher/colocated.py, with this checkout on the drafter
process's path so that test plugins (`tests.services....:Class`) load there too. For comparing a
co-located plugin with the same plugin in process:

    with colocated_drafter(model, "eagle", options, vocab_size, tmp_path) as co:
        engine = Engine(config, co.remote, model)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from treespec.shared.launcher import colocated
from treespec.shared.launcher.colocated import ColocatedDrafter
from treespec.shared.model.causal_lm import CausalLM

REPO_ROOT = Path(__file__).resolve().parents[2]

__all__ = ["REPO_ROOT", "ColocatedDrafter", "colocated_drafter"]


@contextmanager
def colocated_drafter(
    model: CausalLM,
    kind: str,
    options: dict[str, Any],
    vocab_size: int,
    workdir: Path,
    *,
    in_process: bool = False,
    deadline_s: float = 5.0,
    ready_timeout_s: float = 120.0,
) -> Iterator[ColocatedDrafter]:
    """Everything stopped on exit. `workdir` holds the socket and the drafter process's log."""
    path = os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    with colocated.colocated_drafter(
        model,
        kind,
        options,
        vocab_size,
        workdir,
        in_process=in_process,
        deadline_s=deadline_s,
        ready_timeout_s=ready_timeout_s,
        env={"PYTHONPATH": path},
    ) as co:
        yield co
