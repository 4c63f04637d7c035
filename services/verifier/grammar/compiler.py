"""Constraints -> grammars over the target's vocabulary, with xgrammar (vLLM's and SGLang's default
backend). The tokenizer is read from the model directory once, on the first constrained request;
compiled grammars are cached by xgrammar, so a schema sent again costs nothing. Compiling may take
milliseconds to seconds for a large schema: the verifier server does it off its event loop."""

from __future__ import annotations

import json
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Any

from treespec.verifier.grammar.constraint import ConstraintKind, OutputConstraint
from treespec.verifier.request import InvalidRequestError


class GrammarCompiler:
    def __init__(self, model_path: Path, vocab_size: int, stop_token_ids: Collection[int]) -> None:
        self.model_path = Path(model_path)
        self.vocab_size = vocab_size
        self.stop_token_ids = sorted(stop_token_ids)
        self._compiler: Any = None  # xgrammar.GrammarCompiler, made on first use
        self._token_bytes: list[bytes] | None = None  # read with it
        self._lock = threading.Lock()

    def compile(self, constraint: OutputConstraint) -> Any:
        """An xgrammar CompiledGrammar; InvalidRequestError for a spec that does not compile."""
        compiler = self._xgrammar_compiler()
        try:
            return _compile(compiler, constraint)
        except (RuntimeError, ValueError, TypeError) as exc:
            raise InvalidRequestError(f"invalid {constraint.kind.value}: {_first_line(exc)}") from None

    def token_bytes(self) -> list[bytes]:
        """Each token id's bytes, as the grammars read them (for reasoning_gate.py)."""
        self._xgrammar_compiler()
        assert self._token_bytes is not None
        return self._token_bytes

    def _xgrammar_compiler(self) -> Any:
        with self._lock:
            if self._compiler is None:
                self._compiler = self._load()
            return self._compiler

    def _load(self) -> Any:
        import transformers

        try:
            import xgrammar
        except ImportError:
            raise InvalidRequestError(
                "structured output needs xgrammar on the verifier: pip install xgrammar"
            ) from None

        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(self.model_path)
        except (OSError, ValueError) as exc:
            raise InvalidRequestError(
                f"structured output needs the model's tokenizer, which did not load: {exc}"
            ) from None
        info = xgrammar.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=self.vocab_size, stop_token_ids=self.stop_token_ids
        )
        self._token_bytes = list(info.decoded_vocab)
        return xgrammar.GrammarCompiler(info)


# JSON may hold any whitespace between its tokens, but at most this many characters in a row: a
# small model left free tends to loop on newlines once its answer is done.
MAX_JSON_WHITESPACE = 8


def _compile(compiler: Any, constraint: OutputConstraint) -> Any:
    kind = constraint.kind
    if kind is ConstraintKind.JSON_OBJECT:
        return _json(compiler, '{"type": "object"}')
    if kind is ConstraintKind.JSON_SCHEMA:
        try:
            json.loads(constraint.spec)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the schema is not JSON ({exc})") from None
        return _json(compiler, constraint.spec)
    if kind is ConstraintKind.REGEX:
        return compiler.compile_regex(constraint.spec)
    if kind is ConstraintKind.CHOICE:
        return compiler.compile_grammar(choice_grammar(constraint.choices))
    return compiler.compile_grammar(constraint.spec)


def _json(compiler: Any, schema: str) -> Any:
    return compiler.compile_json_schema(schema, any_whitespace=True, max_whitespace_cnt=MAX_JSON_WHITESPACE)


def choice_grammar(choices: tuple[str, ...]) -> str:
    """An EBNF grammar matching exactly one of `choices` (JSON string literals escape any text)."""
    if not choices:
        raise ValueError("the choice list is empty")
    if any(not c for c in choices):
        raise ValueError("a choice is empty")
    return "root ::= " + " | ".join(json.dumps(c) for c in choices)


def _first_line(exc: Exception) -> str:
    """xgrammar's messages start with a source location in brackets; keep what a user can act on."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if text.startswith("[") and "] " in text:
        text = text.split("] ", 1)[1]
    return text.split(": ", 1)[1] if text.startswith("/") and ": " in text else text
