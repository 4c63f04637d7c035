"""Limits of the wire contract that both sides check (protos/treespec/v1)."""

MAX_TOP_LOGPROBS = 20  # SamplingParams.logprobs: alternatives per token at most (OpenAI's and vLLM's limit)
MAX_BAD_WORDS = 256  # SamplingParams.bad_words: token sequences at most (a word's two spellings count two)
MAX_BAD_WORD_TOKENS = 64  # tokens in one bad word's sequence at most
MAX_PREDICTION_TOKENS = 32768  # GenerateRequest.prediction_token_ids: a predicted output's tokens at most
