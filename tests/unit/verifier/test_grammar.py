"""Structured output's grammar state (xgrammar over the bundled model's tokenizer): a tree's rows get
the masks a sequential matcher gives after each row's path, committed tokens end the request where
the grammar ends, and specs that do not compile are refused with their reason."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import transformers

from treespec.kernels.allowed_tokens import mask_disallowed
from treespec.shared.model.store import models_dir, resolve_model_path
from treespec.v1 import verifier_pb2 as pb
from treespec.verifier.grammar.compiler import GrammarCompiler
from treespec.verifier.grammar.constraint import ConstraintKind, OutputConstraint
from treespec.verifier.grammar.matcher import GrammarState
from treespec.verifier.grammar.reasoning_gate import ReasoningGate
from treespec.verifier.request import InvalidRequestError
from treespec.verifier.server.convert import sampling_params

VOCAB = 49152
EOS = 2  # <|im_end|>
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


@pytest.fixture(scope="module")
def path() -> Path:
    return resolve_model_path(None, models_dir())


@pytest.fixture(scope="module")
def tokenizer(path: Path) -> transformers.PreTrainedTokenizerBase:
    return transformers.AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def compiler(path: Path) -> GrammarCompiler:
    return GrammarCompiler(path, VOCAB, [EOS])


def _state(compiler: GrammarCompiler, constraint: OutputConstraint) -> GrammarState:
    gate = None
    if constraint.starts_after:
        gate = ReasoningGate(constraint.starts_after.encode(), compiler.token_bytes())
    return GrammarState(compiler.compile(constraint), VOCAB, gate)


def _sequential_row(
    compiler: GrammarCompiler, constraint: OutputConstraint, path: list[int]
) -> torch.Tensor | None:
    """What a fresh matcher allows after `path`; None when it refuses the path."""
    state = _state(compiler, constraint)
    for token in path:
        if state.advance([token]) is not None:
            return None
    return state.allowed([0], [-1])[0]


def test_tree_rows_get_the_mask_after_their_path(
    compiler: GrammarCompiler, tokenizer: transformers.PreTrainedTokenizerBase
) -> None:
    constraint = OutputConstraint(ConstraintKind.JSON_SCHEMA, json.dumps(SCHEMA))
    committed = tokenizer.encode('{"name": "Al')
    valid = [*tokenizer.encode('ice", "age": 41}'), EOS]
    others = tokenizer.encode('ice" , "x": [1]} hello')
    _check_tree_rows(compiler, constraint, committed, valid, others)


def test_a_thinking_model_s_grammar_starts_after_its_reasoning(
    compiler: GrammarCompiler, tokenizer: transformers.PreTrainedTokenizerBase
) -> None:
    """With `starts_after`, rows on a path still reasoning allow everything and the grammar's rows
    start after the end marker, however the marker's bytes fall into tokens; per tree path too."""
    constraint = OutputConstraint(ConstraintKind.JSON_SCHEMA, json.dumps(SCHEMA), starts_after="</think>")
    state = _state(compiler, constraint)
    reasoning = tokenizer.encode("<think>\nThe name is Alice, the age 41.\n")
    assert state.advance(reasoning) is None and not state.terminated
    assert bool(state.allowed([reasoning[-1]], [-1]).all())  # still reasoning: any token
    end = tokenizer.encode("</think>")
    assert len(end) > 1  # SmolLM2 writes the marker in several tokens
    assert state.advance(end) is None
    row = state.allowed([end[-1]], [-1])[0]
    fresh = _state(compiler, OutputConstraint(ConstraintKind.JSON_SCHEMA, json.dumps(SCHEMA)))
    assert torch.equal(row, fresh.allowed([0], [-1])[0])  # the answer starts the grammar afresh
    answer = [*tokenizer.encode('{"name": "Alice", "age": 41}'), EOS]
    assert state.advance(answer) == len(answer) - 1 and state.terminated
    # Trees whose paths cross the marker, from a committed output that has begun it.
    valid = [*end[1:], *answer]
    others = tokenizer.encode("</thought> {} think > hello")
    assert _check_tree_rows(compiler, constraint, reasoning + end[:1], valid, others) > 6


def _check_tree_rows(
    compiler: GrammarCompiler,
    constraint: OutputConstraint,
    committed: list[int],
    valid: list[int],
    others: list[int],
) -> int:
    """Random trees after `committed`, mostly along `valid`: each reachable row gets what a sequential
    matcher allows after the row's path. -> how many rows the grammar constrained."""
    pool = sorted(set(valid + others))
    rng = random.Random(0)
    constrained = 0
    for _ in range(6):
        tokens, parents = [committed[-1]], [-1]
        for j in range(1, 14):
            parent = rng.randrange(j)
            # Mostly the valid continuation at the node's depth, sometimes another token.
            depth = _depth(parents, parent)
            tokens.append(valid[depth] if depth < len(valid) and rng.random() < 0.7 else rng.choice(pool))
            parents.append(parent)
        state = _state(compiler, constraint)
        assert state.advance(committed) is None
        rows = state.allowed(tokens, parents)
        reached = 0
        for j in range(len(tokens)):
            want = _sequential_row(compiler, constraint, committed + _path(tokens, parents, j))
            if want is None or bool(want.sum() == 0):
                assert bool(rows[j].all()), "an unreachable row constrains nothing"
            else:
                assert torch.equal(rows[j], want)
                reached += 1
                constrained += int(not bool(want.all()))
        assert reached > 1
        # The walk left the matcher where the committed tokens put it.
        assert torch.equal(state.allowed([committed[-1]], [-1])[0], rows[0])
    return constrained


def _depth(parents: list[int], node: int) -> int:
    depth = 0
    while parents[node] != -1:
        node, depth = parents[node], depth + 1
    return depth


def _path(tokens: list[int], parents: list[int], node: int) -> list[int]:
    """The drafted tokens from the root's first child down to `node` (the root is committed)."""
    out: list[int] = []
    while parents[node] != -1:
        out.append(tokens[node])
        node = parents[node]
    return out[::-1]


def test_the_output_ends_where_the_grammar_does(
    compiler: GrammarCompiler, tokenizer: transformers.PreTrainedTokenizerBase
) -> None:
    constraint = OutputConstraint(ConstraintKind.CHOICE, choices=("yes", "no"))
    state = _state(compiler, constraint)
    yes = tokenizer.encode("yes")
    assert state.advance(yes) is None and not state.terminated
    row = state.allowed([yes[-1]], [-1])[0]
    assert row.nonzero().flatten().tolist() == [EOS]  # only the end is left
    assert state.advance([EOS, 5, 6]) == 0 and state.terminated
    # A token off the grammar ends the output there too (it never comes from a masked row).
    other = _state(compiler, constraint)
    assert other.advance(tokenizer.encode("maybe")) == 0


@pytest.mark.parametrize(
    "choices", [("plain", 'with "quotes"', "two\nlines", "back\\slash", "ünïcødé ☃"), ("a", "ab", "abc")]
)
def test_choices_match_exactly(
    compiler: GrammarCompiler, tokenizer: transformers.PreTrainedTokenizerBase, choices: tuple[str, ...]
) -> None:
    constraint = OutputConstraint(ConstraintKind.CHOICE, choices=choices)
    for choice in choices:
        state = _state(compiler, constraint)
        ids = tokenizer.encode(choice)
        assert state.advance([*ids, EOS]) == len(ids), choice
    assert _state(compiler, constraint).advance([*tokenizer.encode("none of them"), EOS]) is not None


@pytest.mark.parametrize(
    ("constraint", "reason"),
    [
        (
            OutputConstraint(ConstraintKind.JSON_SCHEMA, "{not json"),
            "invalid json_schema: the schema is not JSON",
        ),
        (OutputConstraint(ConstraintKind.JSON_SCHEMA, '{"type": "nonsense"}'), 'Unsupported type "nonsense"'),
        (OutputConstraint(ConstraintKind.REGEX, "[a-"), "invalid regex"),
        (OutputConstraint(ConstraintKind.GRAMMAR, "root ::= missing"), 'Rule "missing" is not defined'),
        (OutputConstraint(ConstraintKind.CHOICE, choices=()), "the choice list is empty"),
        (OutputConstraint(ConstraintKind.CHOICE, choices=("a", "")), "a choice is empty"),
    ],
)
def test_specs_that_do_not_compile_are_refused(
    compiler: GrammarCompiler, constraint: OutputConstraint, reason: str
) -> None:
    with pytest.raises(InvalidRequestError, match=reason.replace("(", r"\(")) as caught:
        compiler.compile(constraint)
    assert "\n" not in str(caught.value)


def test_a_model_without_a_tokenizer_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequestError, match="needs the model's tokenizer"):
        GrammarCompiler(tmp_path, VOCAB, [EOS]).compile(OutputConstraint(ConstraintKind.JSON_OBJECT))


def test_masking_keeps_allowed_logits_and_lets_the_grammar_win() -> None:
    raw = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    adjusted = raw.clone()
    adjusted[1, 2] = float("-inf")  # min_tokens holds back token 2 on row 1
    allowed = torch.tensor([[True, False, True], [False, False, True]])
    out = mask_disallowed(adjusted, allowed, raw)
    inf = float("-inf")
    assert out.tolist() == [[1.0, inf, 3.0], [inf, inf, 3.0]]  # row 1: only the grammar's end is left


@pytest.mark.parametrize(
    ("msg", "want"),
    [
        (
            pb.OutputConstraint(json_schema='{"type": "string"}'),
            OutputConstraint(ConstraintKind.JSON_SCHEMA, '{"type": "string"}'),
        ),
        (pb.OutputConstraint(json_object=True), OutputConstraint(ConstraintKind.JSON_OBJECT)),
        (pb.OutputConstraint(json_object=False), None),
        (pb.OutputConstraint(), None),
        (pb.OutputConstraint(regex="a+"), OutputConstraint(ConstraintKind.REGEX, "a+")),
        (
            pb.OutputConstraint(choice=pb.ChoiceList(choices=["x", "y"])),
            OutputConstraint(ConstraintKind.CHOICE, choices=("x", "y")),
        ),
        (
            pb.OutputConstraint(grammar='root ::= "a"'),
            OutputConstraint(ConstraintKind.GRAMMAR, 'root ::= "a"'),
        ),
        (
            pb.OutputConstraint(json_object=True, starts_after="</think>"),
            OutputConstraint(ConstraintKind.JSON_OBJECT, starts_after="</think>"),
        ),
    ],
)
def test_the_wire_s_constraints(msg: pb.OutputConstraint, want: OutputConstraint | None) -> None:
    assert sampling_params(pb.SamplingParams(constraint=msg)).constraint == want
    assert sampling_params(pb.SamplingParams()).constraint is None
