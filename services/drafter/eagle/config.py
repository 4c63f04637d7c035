"""The EAGLE drafter's settings (plugin options; the CLI maps SGLang's flags onto them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treespec.drafter.eagle.head_config import EagleFormat
from treespec.drafter.eagle.packed_matmul import MatmulDtype
from treespec.drafter.ngram.config import NgramConfig
from treespec.shared.drafting.options import config_from_options

# The head trained for the bundled SmolLM2-135M-Instruct with `treespec train-eagle`, shipped in the
# package (services/drafter/eagle/heads/); used when no draft path is given.
SHIPPED_HEADS_DIR = Path(__file__).resolve().parent / "heads"
SHIPPED_HEADS = {EagleFormat.EAGLE3: SHIPPED_HEADS_DIR / "SmolLM2-135M-Instruct-eagle3"}


@dataclass(frozen=True)
class EagleConfig:
    draft_path: str | None = None  # the head's folder; None: the shipped head for the format
    token_map: str | None = None  # FR-Spec: a .pt list / 1-D tensor of hot target ids (EAGLE-2 heads)
    ring_capacity: int = 16384  # feature rows the verifier's ring holds
    draft_probs: bool = True  # return sibling probabilities (siblings ordered as a draw from them)
    seed: int = 0  # the sibling-order draws
    # Leave out nodes whose draft path probability is lower: each costs a verify row (and a head row
    # when expanded) for little chance of acceptance. 0 keeps SGLang's fixed-size trees.
    min_path_prob: float = 0.0
    # A head step's cost in target decode steps. The tree grows another level only while the tokens
    # the children it would add are expected to add, less their verify rows, reach this cost
    # (shared/drafting/child_odds.py). None: the weights a head step multiplies by over the target's
    # (both steps are bound by reading their weights); 0: always `num_steps` levels, as SGLang does.
    level_cost: float | None = None
    # The dtype of the head's weights when it drafts on a CPU (packed_matmul.py): `auto` takes int8
    # where the panel kernel builds, else bfloat16 where oneDNN multiplies it natively.
    matmul_dtype: MatmulDtype = MatmulDtype.AUTO
    # Also draft from n-gram matches (the request's own history and the n-gram memory) and merge
    # their trees with the head's (merged/drafter.py): None: the head alone; else the n-gram drafter's
    # options (NgramConfig fields, {} for its defaults).
    ngram: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.ring_capacity < 64:
            raise ValueError("ring_capacity must be at least 64")
        if not 0.0 <= self.min_path_prob < 1.0:
            raise ValueError("min_path_prob must lie in [0, 1)")
        if self.level_cost is not None and not 0.0 <= self.level_cost < 1.0:
            raise ValueError("level_cost must lie in [0, 1)")
        choices = [d.value for d in MatmulDtype]
        if str(self.matmul_dtype) not in choices:
            raise ValueError(f"matmul_dtype must be one of {choices}, got {self.matmul_dtype!r}")
        object.__setattr__(self, "matmul_dtype", MatmulDtype(str(self.matmul_dtype)))
        if self.ngram is not None:
            if not isinstance(self.ngram, dict):
                raise ValueError(f"ngram must be a dict of n-gram options, got {self.ngram!r}")
            NgramConfig.from_options(self.ngram)

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> EagleConfig:
        return config_from_options(cls, options, "EAGLE")

    def check_path(self, fmt: EagleFormat) -> None:
        """Raise ValueError unless the head's folder holds a config.json that reads as JSON: a command
        checks this before it starts anything."""
        from treespec.drafter.eagle.checkpoint import read_head_config

        read_head_config(self.head_path(fmt))

    def head_path(self, fmt: EagleFormat) -> Path:
        if self.draft_path:
            return Path(self.draft_path).expanduser()
        shipped = SHIPPED_HEADS.get(fmt)
        if shipped is None or not (shipped / "config.json").is_file():
            raise ValueError(f"no head is shipped for {fmt.value}: pass --speculative-draft-model-path")
        return shipped
