"""Reading a checkpoint's safetensors (one file or sharded with an index) into fused layer weights."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from tqdm import tqdm

from treespec.shared.model.config import QKV_BIAS_FAMILIES, ModelConfig
from treespec.shared.model.dual_layout import HeadWeight, Weight
from treespec.shared.model.errors import ModelLoadError
from treespec.shared.model.moe import MoeConfig

# Linear weights are stored transposed, [in, out] contiguous, and applied as x @ w: for the few rows
# of a decode or verify step, MKL's kernels are up to twice as fast on this layout as on HF's [out, in].
# On CPU in float32 the loader then repacks them: into the own kernel's panels where it builds, else
# for oneDNN, or keeps both layouts (linear.py).


@dataclass
class AttentionWeights:
    qkv: Weight  # [hidden, q_size + 2 * kv_size]: q, k and v projections fused into one matmul
    qkv_bias: torch.Tensor | None  # [q_size + 2 * kv_size] (Qwen2)
    o: Weight  # [q_size, hidden]
    o_bias: torch.Tensor | None  # [hidden] (Llama/Mistral with attention_bias; Qwen2 has none)
    q_norm: torch.Tensor | None  # [head_dim] (Qwen3, Gemma 3); [q_size] over all heads (OLMo 2)
    k_norm: torch.Tensor | None  # [head_dim]; [kv_size] (OLMo 2)


@dataclass
class MlpWeights:
    gate_up: Weight  # [hidden, 2 * intermediate]: gate and up fused
    gate_up_bias: torch.Tensor | None
    down: Weight  # [intermediate, hidden]
    down_bias: torch.Tensor | None

    def matmuls(self) -> tuple[Weight, ...]:
        return (self.gate_up, self.down)

    def map_matmuls(self, fn: Callable[[Weight], Weight]) -> None:
        self.gate_up = fn(self.gate_up)
        self.down = fn(self.down)


@dataclass
class ExpertWeights:
    """A sparse mixture-of-experts block (moe.py): the router and each expert's MLP."""

    router: torch.Tensor  # [hidden, num_experts], dense
    experts: list[MlpWeights]
    shared: MlpWeights | None = None  # Qwen2-MoE's expert every token takes
    shared_gate: torch.Tensor | None = None  # [hidden, 1], dense: its sigmoid gate

    def all_experts(self) -> list[MlpWeights]:
        return [*self.experts, *([self.shared] if self.shared is not None else [])]

    def matmuls(self) -> tuple[Weight, ...]:
        return tuple(w for expert in self.all_experts() for w in expert.matmuls())

    def map_matmuls(self, fn: Callable[[Weight], Weight]) -> None:
        for expert in self.all_experts():
            expert.map_matmuls(fn)


@dataclass
class LayerWeights:
    input_norm: torch.Tensor | None  # [hidden]: before the attention (None: none, OLMo 2)
    post_attention_norm: torch.Tensor | None  # [hidden]: before the MLP, HF's Llama name (None: none)
    attn: AttentionWeights
    mlp: MlpWeights | ExpertWeights
    # After each block, on its output before it joins the residual stream (Gemma 3, OLMo 2).
    attn_out_norm: torch.Tensor | None = None
    mlp_out_norm: torch.Tensor | None = None

    def norms(self) -> tuple[torch.Tensor, ...]:
        """The layer's RMSNorm weights over the hidden size."""
        every = (self.input_norm, self.post_attention_norm, self.attn_out_norm, self.mlp_out_norm)
        return tuple(n for n in every if n is not None)

    def matmuls(self) -> tuple[Weight, ...]:
        """The layer's matmul weights (its biases, norms and a router aside)."""
        return (self.attn.qkv, self.attn.o, *self.mlp.matmuls())

    def map_matmuls(self, fn: Callable[[Weight], Weight]) -> None:
        """Replace each matmul weight by fn(weight), in place, one after the other."""
        self.attn.qkv = fn(self.attn.qkv)
        self.attn.o = fn(self.attn.o)
        self.mlp.map_matmuls(fn)


@dataclass
class ModelWeights:
    embed: torch.Tensor | None  # [vocab, hidden]; None when tied: the embedding is lm_head's columns
    layers: list[LayerWeights]
    norm: torch.Tensor  # [hidden]
    lm_head: HeadWeight  # [hidden, vocab]: dense until the loader repacks it (linear.py)
    dtype: torch.dtype  # the activations' (the norms may be float32 where the model's is lower)

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [T] -> [T, hidden]."""
        if self.embed is None:
            assert isinstance(self.lm_head, torch.Tensor)  # repacking gives a tied embedding its own copy
            # Row-major, as every later op expects: a transposed view would carry its layout through
            # the residual stream and slow each matmul several times over.
            return self.lm_head.index_select(1, ids).t().contiguous()
        return self.embed[ids]


class TensorSource:
    """Name -> tensor over the checkpoint's safetensors files, opened lazily (mmap)."""

    def __init__(self, path: Path, stack: ExitStack) -> None:
        self._files = _weight_map(path)
        self._names = frozenset(self._files)
        self._stack = stack
        self._open: dict[Path, object] = {}

    def names(self) -> frozenset[str]:
        return self._names

    def get(self, name: str) -> torch.Tensor:
        file = self._files.get(name)
        if file is None:
            raise ModelLoadError(f"checkpoint has no tensor {name!r}")
        handle = self._open.get(file)
        if handle is None:
            handle = self._open[file] = self._stack.enter_context(_open_safetensors(file))
        try:
            return handle.get_tensor(name)  # type: ignore[attr-defined]
        except SafetensorError as exc:
            raise ModelLoadError(f"{file}: cannot read tensor {name!r} ({exc})") from exc


def load_weights(path: Path, config: ModelConfig, dtype: torch.dtype, device: torch.device) -> ModelWeights:
    with ExitStack() as stack:
        source = TensorSource(path, stack)
        prefix, head = _text_model_names(source.names())
        loader = _Loader(source, config, dtype, device, prefix)
        layers = [loader.layer(i) for i in _progress(config.num_layers, path)]
        shape = (config.vocab_size, config.hidden_size)
        embed: torch.Tensor | None = loader.tensor(prefix + "embed_tokens.weight", shape)
        if config.tie_word_embeddings or head not in source.names():
            assert embed is not None
            lm_head, embed = _transposed(embed), None
        else:
            lm_head = _transposed(loader.tensor(head, shape))
        norm = loader.norm(prefix + "norm.weight", (config.hidden_size,))
        return ModelWeights(embed=embed, layers=layers, norm=norm, lm_head=lm_head, dtype=dtype)


@dataclass
class _Loader:
    source: TensorSource
    config: ModelConfig
    dtype: torch.dtype
    device: torch.device
    prefix: str = "model."  # where the text model's tensors are (_text_model_names)

    @functools.cached_property
    def halves_order(self) -> torch.Tensor:
        """The q/k/v rows' order that makes interleaved rotary pairs halves (_rotary_halves_order)."""
        return _rotary_halves_order(self.config)

    def tensor(self, name: str, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> torch.Tensor:
        t = self.source.get(name)
        if tuple(t.shape) != shape:
            raise ModelLoadError(f"tensor {name!r} has shape {tuple(t.shape)}, config implies {shape}")
        return t.to(device=self.device, dtype=dtype or self.dtype).contiguous()

    def norm(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        """An RMSNorm weight. Gemma's scale by 1 + w: the offset added once here, in float32 whatever
        the model's dtype (so that no bfloat16 rounding of 1 + w comes in; CausalLM._norm then norms
        in float32, as transformers does for Gemma)."""
        if not self.config.norm_offset:
            return self.tensor(name, shape)
        return self.tensor(name, shape, torch.float32) + self.config.norm_offset

    def qk_norm(self, name: str, heads: int) -> torch.Tensor:
        """A q or k norm: one weight per head dim shared by the heads (Qwen3, Gemma 3), over all heads'
        dims at once (OLMo), or one per head (Cohere's [heads, head_dim]), its dims reordered as the
        projection's rows are where the rotary pairs are interleaved."""
        c = self.config
        if c.qk_norm_over_heads:
            return self.norm(name, (heads * c.head_dim,))
        shape = (heads, c.head_dim) if c.family == "cohere" else (c.head_dim,)
        weight = self.norm(name, shape)
        return weight[..., self.halves_order[: c.head_dim]] if c.rope_interleaved else weight

    def optional(self, name: str, shape: tuple[int, ...], present: bool) -> torch.Tensor | None:
        return self.tensor(name, shape) if present else None

    def layer(self, i: int) -> LayerWeights:
        c, p = self.config, f"{self.prefix}layers.{i}."
        h = c.hidden_size
        names = c.layer_norms

        def norm(name: str | None) -> torch.Tensor | None:
            return None if name is None else self.norm(f"{p}{name}.weight", (h,))

        layer = LayerWeights(
            input_norm=norm(names.before_attention),
            post_attention_norm=norm(names.before_mlp),
            attn=self.attention(p + "self_attn."),
            mlp=self.experts(p, c.moe)
            if c.moe is not None and i in c.moe.sparse_layers
            else self.mlp(p + "mlp."),
            attn_out_norm=norm(names.after_attention),
            mlp_out_norm=norm(names.after_mlp),
        )
        _fold_multipliers(layer, c)
        return layer

    def attention(self, p: str) -> AttentionWeights:
        c = self.config
        h, sizes = c.hidden_size, (c.q_size, c.kv_size, c.kv_size)
        names = ("q_proj", "k_proj", "v_proj")
        rows = self.halves_order if c.rope_interleaved else slice(None)
        qkv = _transposed(
            (
                self.tensor(f"{p}qkv_proj.weight", (sum(sizes), h))  # fused in the checkpoint (Phi-3)
                if f"{p}qkv_proj.weight" in self.source.names()
                else torch.cat(
                    [self.tensor(f"{p}{n}.weight", (s, h)) for n, s in zip(names, sizes, strict=True)]
                )
            )[rows]
        )
        bias = None
        if c.attention_bias:
            bias = torch.cat([self.tensor(f"{p}{n}.bias", (s,)) for n, s in zip(names, sizes, strict=True)])[
                rows
            ]
        return AttentionWeights(
            qkv=qkv,
            qkv_bias=bias,
            o=_transposed(self.tensor(p + "o_proj.weight", (h, c.q_size))),
            o_bias=self.optional(
                p + "o_proj.bias", (h,), c.attention_bias and c.family not in QKV_BIAS_FAMILIES
            ),
            q_norm=self.qk_norm(p + "q_norm.weight", c.num_heads) if c.qk_norm else None,
            k_norm=self.qk_norm(p + "k_norm.weight", c.num_kv_heads) if c.qk_norm else None,
        )

    def experts(self, p: str, moe: MoeConfig) -> ExpertWeights:
        n, h = moe.names, self.config.hidden_size
        block = p + n.block
        names = (n.gate, n.up, n.down)
        shared = moe.shared_intermediate_size
        return ExpertWeights(
            router=_transposed(self.tensor(block + "gate.weight", (moe.num_experts, h))),
            experts=[
                self.mlp(f"{block}experts.{e}.", moe.expert_intermediate_size, names)
                for e in range(moe.num_experts)
            ],
            shared=self.mlp(f"{block}shared_expert.", shared, names) if shared else None,
            shared_gate=_transposed(self.tensor(block + "shared_expert_gate.weight", (1, h)))
            if shared
            else None,
        )

    def mlp(
        self,
        p: str,
        size: int | None = None,
        names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj"),
    ) -> MlpWeights:
        """A SwiGLU MLP of `size` (default: the model's intermediate size) whose projections are `names`."""
        c = self.config
        h, i = c.hidden_size, size or c.intermediate_size
        gate, up, down = names
        gate_up = _transposed(
            self.tensor(f"{p}gate_up_proj.weight", (2 * i, h))  # fused in the checkpoint (Phi-3)
            if f"{p}gate_up_proj.weight" in self.source.names()
            else torch.cat([self.tensor(f"{p}{gate}.weight", (i, h)), self.tensor(f"{p}{up}.weight", (i, h))])
        )
        gate_up_bias = down_bias = None
        if c.mlp_bias:
            gate_up_bias = torch.cat(
                [self.tensor(f"{p}{gate}.bias", (i,)), self.tensor(f"{p}{up}.bias", (i,))]
            )
            down_bias = self.tensor(f"{p}{down}.bias", (h,))
        return MlpWeights(
            gate_up=gate_up,
            gate_up_bias=gate_up_bias,
            down=_transposed(self.tensor(f"{p}{down}.weight", (h, i))),
            down_bias=down_bias,
        )


# Where checkpoints keep the text model (its layers, embedding and norm) and its lm_head: causal LMs;
# vision-language ones as their makers and transformers 5 save them, and as transformers 4.52-4.57 did.
_TEXT_MODEL_NAMES = (
    ("model.", "lm_head.weight"),
    ("language_model.model.", "language_model.lm_head.weight"),
    ("model.language_model.", "lm_head.weight"),
)


def _text_model_names(names: frozenset[str]) -> tuple[str, str]:
    for prefix, head in _TEXT_MODEL_NAMES:
        if prefix + "embed_tokens.weight" in names:
            return prefix, head
    return _TEXT_MODEL_NAMES[0]  # the missing embedding is then named as the error


def _rotary_halves_order(config: ModelConfig) -> torch.Tensor:
    """The q/k/v projection's rows reordered so that each q and k head's interleaved rotary pairs
    (0, 1), (2, 3)... become (0, d/2), (1, d/2 + 1)... over its d rotated dims: the usual rotation
    then computes the interleaved one, and q.k is the same sum in another order. v keeps its rows."""
    d, head = config.rotary_dim, config.head_dim
    within = [*range(0, d, 2), *range(1, d, 2), *range(d, head)]
    qk_heads = config.num_heads + config.num_kv_heads
    order = [h * head + j for h in range(qk_heads) for j in within]
    return torch.tensor(order + list(range(qk_heads * head, qk_heads * head + config.kv_size)))


def _fold_multipliers(layer: LayerWeights, config: ModelConfig) -> None:
    """Granite's and Gemma's attention scale and Granite's residual multiplier, folded into the weights
    (in place, before any repacking): the queries scaled so that the usual 1/sqrt(head_dim) gives the
    model's attention scale (by the q norm where there is one, which would undo a scaled projection),
    the blocks' output projections by the residual multiplier."""
    m, attn, mlp = config.multipliers, layer.attn, layer.mlp
    if m.attention is not None:
        q_scale = m.attention * math.sqrt(config.head_dim)
        if attn.q_norm is not None:
            attn.q_norm *= q_scale
        else:
            assert isinstance(attn.qkv, torch.Tensor)
            attn.qkv[:, : config.q_size] *= q_scale
            if attn.qkv_bias is not None:
                attn.qkv_bias[: config.q_size] *= q_scale
    if m.residual != 1.0:
        assert isinstance(attn.o, torch.Tensor) and isinstance(mlp, MlpWeights)
        assert isinstance(mlp.down, torch.Tensor)
        for tensor in (attn.o, attn.o_bias, mlp.down, mlp.down_bias):
            if tensor is not None:
                tensor *= m.residual


def _transposed(weight: torch.Tensor) -> torch.Tensor:
    """HF's [out, in] -> [in, out] contiguous."""
    return weight.t().contiguous()


def _weight_map(path: Path) -> dict[str, Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            mapping = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as exc:
            raise ModelLoadError(f"{index}: not a valid safetensors index ({exc})") from exc
        missing = sorted({f for f in mapping.values() if not (path / f).is_file()})
        if missing:
            raise ModelLoadError(f"{path}: shard(s) named in the index are missing: {', '.join(missing)}")
        return {name: path / file for name, file in mapping.items()}
    single = path / "model.safetensors"
    if single.is_file():
        with _open_safetensors(single) as handle:
            return dict.fromkeys(handle.keys(), single)
    hint = (
        " (pytorch_model.bin found: convert it to safetensors)"
        if (path / "pytorch_model.bin").exists()
        else ""
    )
    raise ModelLoadError(f"{path}: no model.safetensors or model.safetensors.index.json{hint}")


def _open_safetensors(file: Path) -> Any:
    try:
        return safe_open(str(file), framework="pt")
    except (SafetensorError, OSError) as exc:
        raise ModelLoadError(f"{file}: corrupt or unreadable safetensors file ({exc})") from exc


def _progress(num_layers: int, path: Path) -> Iterator[int]:
    yield from tqdm(range(num_layers), desc=f"loading {path.name}", unit="layer", leave=False)
