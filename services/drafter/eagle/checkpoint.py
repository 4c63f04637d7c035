"""Read and write EAGLE heads in the public on-disk formats (config.json + model.safetensors or
pytorch_model.bin), checking that a head fits its target."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from treespec.drafter.eagle.head import EagleHead
from treespec.drafter.eagle.head_config import (
    ARCHITECTURES,
    GENERIC_ARCHITECTURES,
    EagleFormat,
    EagleHeadConfig,
    HeadConfigError,
)
from treespec.drafter.eagle.target_features import default_aux_layer_ids
from treespec.shared.drafting.features import FeatureSpec

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# Tensors some public heads carry that treespec takes from the target instead.
IGNORED_TENSORS = ("embed_tokens.weight",)


@dataclass(frozen=True)
class TargetShape:
    """What a head must fit."""

    hidden_size: int
    vocab_size: int
    num_layers: int


def load_head(path: Path, target: TargetShape) -> EagleHead:
    path = Path(path)
    raw = read_head_config(path)
    tensors = _read_tensors(path)
    fmt = _format(raw, tensors, path)
    config = EagleHeadConfig.from_dict(
        raw,
        fmt,
        fc_bias="fc.bias" in tensors,
        attention_bias=any(name.endswith("q_proj.bias") for name in tensors),
    )
    _check_fits(config, target, path)
    head = EagleHead(config)
    _load_state(head, tensors, path)
    return head


def save_head(head: EagleHead, path: Path, dtype: torch.dtype = torch.bfloat16) -> None:
    """config.json and model.safetensors, as the public checkpoints name them (floats in `dtype`)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {
        name: (t.detach().to(dtype) if t.is_floating_point() else t.detach()).cpu().contiguous()
        for name, t in head.state_dict().items()
    }
    tmp = path / "model.safetensors.tmp"
    save_file(state, str(tmp), metadata={"format": "pt"})
    tmp.replace(path / "model.safetensors")
    (path / "config.json").write_text(json.dumps(head.config.to_dict(), indent=2) + "\n")


def feature_spec(config: EagleHeadConfig, target: TargetShape) -> FeatureSpec:
    """The target features this head reads."""
    if not config.is_eagle3:
        return FeatureSpec(target.hidden_size)
    return FeatureSpec(target.hidden_size, config.aux_layer_ids or default_aux_layer_ids(target.num_layers))


def read_head_config(path: Path) -> dict:
    file = path / "config.json"
    if not file.is_file():
        raise HeadConfigError(
            f"{path}: no config.json (an EAGLE head directory holds config.json and weights)"
        )
    try:
        raw = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HeadConfigError(f"{file}: not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise HeadConfigError(f"{file}: not a JSON object")
    return raw


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        file = path / name
        if file.is_file():
            if name.endswith(".safetensors"):
                tensors = load_file(str(file))
            else:
                tensors = torch.load(file, map_location="cpu", weights_only=True)
            return {_strip(k): v for k, v in tensors.items()}
    raise HeadConfigError(f"{path}: no {' or '.join(WEIGHT_FILES)}")


def _strip(name: str) -> str:
    return name[len("model.") :] if name.startswith("model.") else name


def _format(raw: dict, tensors: dict[str, torch.Tensor], path: Path) -> EagleFormat:
    names = raw.get("architectures") or []
    for arch in names:
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    if any(arch in GENERIC_ARCHITECTURES for arch in names) or not names:
        if any(k.startswith("midlayer.") for k in tensors):
            return EagleFormat.EAGLE3
        if any(k.startswith("layers.0.") for k in tensors):
            return EagleFormat.EAGLE
    known = ", ".join([*ARCHITECTURES, *GENERIC_ARCHITECTURES])
    raise HeadConfigError(f"{path}: not an EAGLE head (architectures {names}; expected one of {known})")


def _check_fits(c: EagleHeadConfig, target: TargetShape, path: Path) -> None:
    problems = []
    if c.target_hidden_size != target.hidden_size:
        problems.append(
            f"it reads target features of width {c.target_hidden_size}, the target's is {target.hidden_size}"
        )
    if not c.is_eagle3 and c.hidden_size != target.hidden_size:
        problems.append(f"its hidden size {c.hidden_size} is not the target's {target.hidden_size}")
    if c.vocab_size != target.vocab_size:
        problems.append(f"its vocabulary has {c.vocab_size} tokens, the target's {target.vocab_size}")
    # Output of layer id = the residual entering id + 1 (-1: the embeddings); the last layer's output
    # is never published (as in SGLang), and each id counts once.
    bad = [i for i in c.aux_layer_ids if not -1 <= i < target.num_layers - 1]
    if bad:
        problems.append(
            f"aux layer ids {bad} are outside -1..{target.num_layers - 2} "
            f"(the target has {target.num_layers} layers)"
        )
    if len(set(c.aux_layer_ids)) != len(c.aux_layer_ids):
        problems.append(f"aux layer ids {list(c.aux_layer_ids)} repeat a layer")
    if problems:
        raise HeadConfigError(f"{path}: the head does not fit the target: " + "; ".join(problems))


def _load_state(head: EagleHead, tensors: dict[str, torch.Tensor], path: Path) -> None:
    expected = head.state_dict()
    state = {k: v for k, v in tensors.items() if k not in IGNORED_TENSORS}
    if head.config.is_eagle3 and "d2t" not in state:
        if head.config.draft_vocab_size != head.config.vocab_size:
            raise HeadConfigError(f"{path}: draft_vocab_size is reduced but there is no d2t tensor")
        state["d2t"] = expected["d2t"]
        state["t2d"] = expected["t2d"]
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise HeadConfigError(
            f"{path}: tensors do not match the format: missing {missing}, unexpected {unexpected}"
        )
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            want = tuple(expected[name].shape)
            raise HeadConfigError(
                f"{path}: {name} has shape {tuple(tensor.shape)}, the config implies {want}"
            )
    converted = {k: v.to(expected[k].dtype) for k, v in state.items()}
    head.load_state_dict(converted)
