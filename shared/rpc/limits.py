"""Limits of the wire contract that both sides check (protos/treespec/v1)."""

MAX_TOP_LOGPROBS = 20  # SamplingParams.logprobs: alternatives per token at most (OpenAI's and vLLM's limit)
