"""The standalone draft model's settings (plugin options; the CLI maps SGLang's flags onto them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treespec.shared.drafting.options import config_from_options

DTYPES = ("auto", "float32", "bfloat16", "float16")  # LoadOptions' (importing the loader loads torch)


@dataclass(frozen=True)
class StandaloneConfig:
    # The draft model's folder: a Hugging Face causal LM of the Llama family that shares the target's
    # tokenizer (SGLang's --speculative-draft-model-path; vLLM's speculative_config.model).
    draft_path: str | None = None
    # Tokens of K/V the draft model's paged cache holds across all requests; a request that does not
    # fit is decoded without drafts until others finish.
    kv_tokens: int = 32_768  # the verifier's default pool
    page_size: int = 16
    device: str = "cpu"
    dtype: str = "auto"  # float32 on CPU, bfloat16 on GPU, as the target's
    # Prompt tokens the draft model reads per drafting step and request: a long prompt is read over a
    # few steps (decoded without drafts meanwhile) rather than stalling one step of the whole batch.
    prefill_chunk: int = 512
    draft_probs: bool = True  # return sibling probabilities (siblings ordered as a draw from them)
    seed: int = 0  # the sibling-order draws
    # As the EAGLE drafter's (eagle/config.py): leave out nodes whose draft path probability is lower,
    # and grow another level only while the children it would add are expected to pay for their verify
    # rows and for `level_cost` (shared/drafting/child_odds.py). None: the draft model's weights per step
    # over the target's; 0: every level.
    min_path_prob: float = 0.0
    level_cost: float | None = None
    # Keep the draft K/V of prompt prefixes for later requests (the verifier's prefix caching, which
    # --disable-prefix-caching turns off for both).
    prefix_caching: bool = True

    def __post_init__(self) -> None:
        if not self.draft_path:
            raise ValueError(
                "STANDALONE drafts with a model of its own: pass --speculative-draft-model-path DIR"
            )
        if self.page_size < 1 or self.kv_tokens < self.page_size:
            raise ValueError("need 1 <= page_size <= kv_tokens")
        if self.prefill_chunk < 1:
            raise ValueError("prefill_chunk must be at least 1")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not 0.0 <= self.min_path_prob < 1.0:
            raise ValueError("min_path_prob must lie in [0, 1)")
        if self.level_cost is not None and not 0.0 <= self.level_cost < 1.0:
            raise ValueError("level_cost must lie in [0, 1)")

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> StandaloneConfig:
        return config_from_options(cls, options, "STANDALONE")

    @property
    def path(self) -> Path:
        assert self.draft_path is not None
        return Path(self.draft_path).expanduser()

    def check_path(self) -> None:
        """Raise ValueError unless the draft model's folder holds a config.json: a command checks
        this before it starts anything."""
        if not (self.path / "config.json").is_file():
            raise ValueError(f"no draft model in {self.path} (no config.json)")

    @property
    def num_blocks(self) -> int:
        return self.kv_tokens // self.page_size
