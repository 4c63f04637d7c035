"""LongRoPE (Phi-3.5, Phi-4-mini): positions below the original context rotate with the short
factors, later ones with the long factors, as transformers does decoding a sequence past that length."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import transformers

from tests.unit.model.paged import PagedDriver, Seq
from tests.unit.model.test_forward_vs_hf import TINY, rel_err
from treespec.shared.model.loader import load_model

ORIGINAL = 32  # the original context; the model is served up to 256


def _checkpoint(path: Path) -> transformers.PreTrainedModel:
    rotated = 8  # of head_dim 16: partial_rotary_factor 0.5
    config = transformers.Phi3Config(
        **TINY,
        original_max_position_embeddings=ORIGINAL,
        rope_parameters={
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "original_max_position_embeddings": ORIGINAL,
            "short_factor": [1.0 + 0.1 * i for i in range(rotated // 2)],
            "long_factor": [2.0 + 3.0 * i for i in range(rotated // 2)],
        },
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    model.save_pretrained(path)
    return model


def test_decoding_past_the_original_context_equals_transformers(tmp_path: Path) -> None:
    hf = _checkpoint(tmp_path)
    ids = torch.randint(0, TINY["vocab_size"], (48,), generator=torch.Generator().manual_seed(3))
    prompt = 20
    with torch.no_grad():  # HF: the prompt at once, then a token at a time (its cache)
        out = hf(ids[None, :prompt], use_cache=True)
        want = [out.logits[0, -1]]
        cache = out.past_key_values
        for i in range(prompt, len(ids)):
            out = hf(ids[None, i : i + 1], cache=cache, use_cache=True)
            cache = out.past_key_values
            want.append(out.logits[0, -1])
    driver, seq = PagedDriver(load_model(tmp_path)), Seq()
    got = [driver.forward([(seq, ids[:prompt], None)])[0][-1]]
    got += [driver.forward([(seq, ids[i : i + 1], None)])[0][-1] for i in range(prompt, len(ids))]
    for position, (a, b) in enumerate(zip(got, want, strict=True), start=prompt - 1):
        assert rel_err(a, b) < 1e-4, position
    # The long factors matter: rotating every position with the short ones (what a single table from
    # transformers' init gives) misses HF's last steps.
    short_path = tmp_path / "short-only"
    shutil.copytree(tmp_path, short_path, ignore=shutil.ignore_patterns("short-only"))
    config = json.loads((short_path / "config.json").read_text())
    config["rope_parameters"]["long_factor"] = config["rope_parameters"]["short_factor"]
    (short_path / "config.json").write_text(json.dumps(config))
    driver, seq = PagedDriver(load_model(short_path)), Seq()
    driver.forward([(seq, ids[:-1], None)])
    assert rel_err(driver.forward([(seq, ids[-1:], None)])[0][-1], want[-1]) > 1e-3
