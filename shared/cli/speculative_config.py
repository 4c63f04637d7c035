"""vLLM's `--speculative-config JSON`, for `treespec serve` and `treespec verifier`: the same settings as
SGLang-style flags, so a vLLM command line works as it is.

The JSON is expanded into the flags it means before the command line is parsed (`expand`), so every
later step sees one way of saying it. vLLM drafts chains; treespec drafts trees, so
`num_speculative_tokens` (vLLM's draft length) becomes the tree's depth (`--speculative-num-steps`);
the tree's width and node budget keep treespec's defaults or the flags given, the budget raised to
that depth's chain where it is smaller. Keys that only tune vLLM's own machinery are ignored with a
warning; keys that would change the output (a lossy acceptance rule) or that name a method treespec
does not run are refused, as are unknown keys and a setting given both in the JSON and as its flag.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from treespec.shared.cli.arg_types import json_object
from treespec.shared.cli.speculation_flags import default_budget
from treespec.shared.model.config import SUPPORTED_ARCHITECTURES

FLAG = "--speculative-config"
FLAG_NAMES = (FLAG, "--speculative_config")  # vLLM takes either spelling
VERBS = ("serve", "verifier")
NODES_FLAG = "--speculative-num-draft-tokens"
WINDOW_FLAG = "--speculative-ngram-max-match-window-size"
BATCH_FLAG = "--speculative-disable-by-batch-size"
METHODS = {"ngram": "NGRAM", "eagle": "EAGLE", "eagle3": "EAGLE3", "draft_model": "STANDALONE"}
NGRAM_MODEL_NAMES = ("[ngram]", "ngram")  # vLLM's older way of asking for n-gram drafting
# Keys that tune vLLM's own execution (parallelism, quantization, batching): no effect here.
IGNORED_KEYS = frozenset(
    {
        "draft_tensor_parallel_size",
        "quantization",
        "max_model_len",
        "revision",
        "code_revision",
        "enforce_eager",
        "disable_padded_drafter_batch",
        "disable_logprobs",
        "disable_log_stats",
        "draft_load_config",
    }
)
LOSSLESS_ACCEPTANCE = "rejection_sampler"
HELP = (
    'vLLM\'s speculative settings as JSON, e.g. \'{"method": "eagle3", "model": DIR, '
    '"num_speculative_tokens": 5}\' or \'{"method": "ngram", "prompt_lookup_max": 4}\': method '
    "(ngram, eagle, eagle3, draft_model) -> --speculative-algorithm (draft_model: STANDALONE), "
    "model -> --speculative-draft-model-path, "
    "num_speculative_tokens -> --speculative-num-steps (the tree's depth), prompt_lookup_max/min -> "
    "--speculative-ngram-max/min-match-window-size, disable_by_batch_size -> "
    "--speculative-disable-by-batch-size"
)


class SpeculativeConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Expansion:
    """The flags a --speculative-config stands for, and the keys it ignored."""

    flags: list[str]
    ignored: list[str] = field(default_factory=list)


def add_speculative_config_argument(parser: argparse.ArgumentParser) -> None:
    """For --help: `treespec`'s main expands the flag before the parser sees it (`expand`)."""
    parser.add_argument(FLAG, "--speculative_config", metavar="JSON", help=HELP)


def expand(argv: Sequence[str], warn: Callable[[str], None]) -> list[str]:
    """`argv` with a serve or verifier command's --speculative-config replaced by its flags; `warn`
    hears about ignored keys. Raises SpeculativeConfigError for a config that cannot be honoured."""
    args = list(argv)
    verb = next((a for a in args if not a.startswith("-")), None)
    found = _find(args)
    if verb not in VERBS or found is None:
        return args
    start, end, value = found
    rest = args[:start] + args[end:]
    given = _given_flags(rest)
    expansion = translate(_parse(value), given)
    _check_no_overlap(expansion.flags, given)
    if expansion.ignored:
        warn(f"{FLAG}: ignored (no effect in treespec): {', '.join(expansion.ignored)}")
    return rest + expansion.flags


def translate(config: Mapping[str, Any], given: Mapping[str, str | None] | None = None) -> Expansion:
    """The flags for vLLM's keys (see the module's docstring); `given`: the other flags on the command
    line, with their values."""
    given = given or {}
    known = {"method", "model", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"}
    known |= {"acceptance_method", "speculative_token_tree", "disable_by_batch_size"} | IGNORED_KEYS
    unknown = sorted(set(config) - known)
    if unknown:
        raise SpeculativeConfigError(f"{FLAG}: unknown keys {', '.join(unknown)}")
    _check_lossless(config)
    method = _method(config)
    flags = ["--speculative-algorithm", METHODS[method]]
    model = config.get("model")
    if method == "ngram":
        flags += _ngram_flags(config)
    else:
        if any(k in config for k in ("prompt_lookup_max", "prompt_lookup_min")):
            raise SpeculativeConfigError(f"{FLAG}: prompt_lookup_max/min go with method ngram only")
        if model is not None:
            flags += ["--speculative-draft-model-path", str(model)]
        elif method == "draft_model":
            raise SpeculativeConfigError(
                f"{FLAG}: method draft_model needs a model (the draft model's folder)"
            )
    if config.get("num_speculative_tokens") is not None:
        flags += _depth_flags(_positive_int(config, "num_speculative_tokens"), method, config, given)
    if config.get("disable_by_batch_size") is not None:
        flags += [BATCH_FLAG, str(_positive_int(config, "disable_by_batch_size"))]
    ignored = sorted(k for k in config if k in IGNORED_KEYS)
    return Expansion(flags, ignored)


def _find(args: list[str]) -> tuple[int, int, str] | None:
    """(start, end, value) of the one --speculative-config in `args` (two are an error)."""
    hits = [i for i, a in enumerate(args) if a.split("=", 1)[0] in FLAG_NAMES]
    if not hits:
        return None
    if len(hits) > 1:
        raise SpeculativeConfigError(f"{FLAG} given {len(hits)} times")
    i = hits[0]
    if "=" in args[i]:
        return i, i + 1, args[i].split("=", 1)[1]
    if i + 1 >= len(args):
        raise SpeculativeConfigError(f"{FLAG} needs a JSON object")
    return i, i + 2, args[i + 1]


def _parse(value: str) -> dict[str, Any]:
    try:
        return json_object(value, FLAG)
    except ValueError as exc:
        raise SpeculativeConfigError(str(exc)) from exc


def _check_lossless(config: Mapping[str, Any]) -> None:
    acceptance = config.get("acceptance_method", LOSSLESS_ACCEPTANCE)
    if acceptance != LOSSLESS_ACCEPTANCE:
        raise SpeculativeConfigError(
            f"{FLAG}: acceptance_method {acceptance!r} changes the output; treespec verifies losslessly "
            f"({LOSSLESS_ACCEPTANCE!r})"
        )
    if config.get("speculative_token_tree") is not None:
        raise SpeculativeConfigError(
            f"{FLAG}: speculative_token_tree is not taken; treespec grows its trees per step within "
            "--speculative-num-steps, --speculative-eagle-topk and --speculative-num-draft-tokens"
        )


def _method(config: Mapping[str, Any]) -> str:
    """The method named, else vLLM's inference from the model: '[ngram]', an EAGLE head's folder, or
    a causal LM's (a separate draft model)."""
    method = config.get("method")
    model = config.get("model")
    if method is None and model is not None:
        method = "ngram" if str(model).lower() in NGRAM_MODEL_NAMES else _head_method(Path(str(model)))
    if method is None:
        raise SpeculativeConfigError(f"{FLAG}: give a method ({', '.join(METHODS)})")
    name = str(method).lower()
    if name not in METHODS:
        raise SpeculativeConfigError(
            f"{FLAG}: method {method!r} is not supported; treespec runs {', '.join(METHODS)}"
        )
    return name


def _head_method(model: Path) -> str:
    """eagle3 or eagle from the head's config.json architectures, else from its name as vLLM does;
    draft_model for a causal LM the forward pass runs."""
    try:
        architectures = json.loads((model / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        architectures = []
    if "LlamaForCausalLMEagle3" in architectures or "eagle3" in model.name.lower():
        return "eagle3"
    if "LlamaForCausalLMEagle" in architectures or "eagle" in model.name.lower():
        return "eagle"
    if any(a in SUPPORTED_ARCHITECTURES for a in architectures):
        return "draft_model"
    raise SpeculativeConfigError(
        f"{FLAG}: cannot tell the method of {model} (neither an EAGLE head nor a causal LM treespec "
        f"runs); give a method ({', '.join(METHODS)})"
    )


def _ngram_flags(config: Mapping[str, Any]) -> list[str]:
    model = config.get("model")
    if model is not None and str(model).lower() not in NGRAM_MODEL_NAMES:
        raise SpeculativeConfigError(f"{FLAG}: method ngram takes no model (got {model!r})")
    flags: list[str] = []
    for key, suffix in (("prompt_lookup_max", "max"), ("prompt_lookup_min", "min")):
        if config.get(key) is not None:
            flags += [f"--speculative-ngram-{suffix}-match-window-size", str(_positive_int(config, key))]
    return flags


def _depth_flags(
    steps: int, method: str, config: Mapping[str, Any], given: Mapping[str, str | None]
) -> list[str]:
    """The tree's depth, and a node budget that can reach it (vLLM drafts `steps` tokens in a chain)
    where the default one cannot and none is given."""
    flags = ["--speculative-num-steps", str(steps)]
    if NODES_FLAG in given or steps + 1 <= _default_nodes(method, config, given):
        return flags
    return [*flags, NODES_FLAG, str(steps + 1)]


def _default_nodes(method: str, config: Mapping[str, Any], given: Mapping[str, str | None]) -> int:
    """The node budget without the flag, as `default_budget` sets it (NGRAM's: its longest match
    window, from the JSON or the flag)."""
    window: int | None = None
    if config.get("prompt_lookup_max") is not None:
        window = _positive_int(config, "prompt_lookup_max")
    elif (flag := given.get(WINDOW_FLAG)) is not None and flag.isdigit() and int(flag) > 0:
        window = int(flag)
    options = {} if window is None else {"max_match_window_size": window}
    return default_budget(METHODS[method], options).num_draft_tokens


def _positive_int(config: Mapping[str, Any], key: str) -> int:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpeculativeConfigError(f"{FLAG}: {key} must be a positive integer, got {value!r}")
    return value


def _given_flags(args: Sequence[str]) -> dict[str, str | None]:
    """The long flags in `args` and the value after each (`--flag=value` or `--flag value`; None for
    a flag without one)."""
    given: dict[str, str | None] = {}
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg.partition("=")
        following = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        given[name] = value if eq else following
    return given


def _check_no_overlap(flags: list[str], given: Mapping[str, str | None]) -> None:
    both = sorted({f for f in flags if f.startswith("--")} & given.keys())
    if both:
        raise SpeculativeConfigError(f"{FLAG} and {', '.join(both)} both set the same thing; give one")
