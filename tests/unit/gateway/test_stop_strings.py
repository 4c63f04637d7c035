"""Stop strings: cut at the first one, hold back what could start one, even across pieces; SGLang's stop
regexes alike."""

from __future__ import annotations

import pytest

from treespec.gateway.stop_strings import MAX_HELD_CHARS, StopCheck, StopStringMatcher, stop_pattern_problem


def _feed(stops: list[str], pieces: list[str]) -> tuple[str, bool]:
    matcher = StopStringMatcher(stops)
    sent = []
    for piece in pieces:
        check = matcher.push(piece)
        sent.append(check.text)
        if check.stopped:
            return "".join(sent), True
    return "".join(sent) + matcher.flush(), False


def test_no_stop_strings_passes_everything_at_once() -> None:
    matcher = StopStringMatcher([])
    assert matcher.push("hello").text == "hello"
    assert matcher.flush() == ""


def test_cuts_before_the_stop_string_in_one_piece() -> None:
    assert _feed(["END"], ["abc END def"]) == ("abc ", True)


def test_stop_string_split_across_pieces() -> None:
    assert _feed(["</answer>"], ["The answer is 4</", "ans", "wer> and more"]) == ("The answer is 4", True)


def test_held_text_is_not_sent_until_decided() -> None:
    matcher = StopStringMatcher(["STOP"])
    assert matcher.push("go ST").text == "go "  # "ST" could begin STOP
    assert matcher.push("ART").text == "START"  # it did not
    assert matcher.push("S").text == ""
    check = matcher.push("TOP!")
    assert (check.text, check.stopped) == ("", True)


def test_released_at_the_end_when_no_stop_follows() -> None:
    assert _feed(["\n\n"], ["line one", "\n"]) == ("line one\n", False)


def test_earliest_of_several_stop_strings_wins() -> None:
    assert _feed(["world", "lo"], ["hello world"]) == ("hel", True)


def test_overlapping_prefixes_keep_the_longest_possible_start() -> None:
    # "aab" must be found although the text first looks like "aa" + something else.
    assert _feed(["aab"], ["a", "a", "a", "b", "c"]) == ("a", True)


def test_nothing_after_stopping() -> None:
    matcher = StopStringMatcher(["x"])
    assert matcher.push("ax").stopped
    check = matcher.push("more")
    assert (check.text, check.stopped) == ("", True)


@pytest.mark.parametrize("stop", ["é", "世界", "🎉"])
def test_multibyte_stop_strings(stop: str) -> None:
    assert _feed([stop], ["caf", f"x{stop}", "tail"]) == ("cafx", True)


def test_empty_stop_strings_are_ignored() -> None:
    assert _feed(["", "Z"], ["abc"]) == ("abc", False)


def test_unarmed_text_passes_whole_and_then_stops_count() -> None:
    """Before min_tokens: no stop, nothing held back (vLLM checks stop strings from then on)."""
    matcher = StopStringMatcher(["END"])
    assert matcher.push("a E", armed=False) == StopCheck("a E", False)
    assert matcher.push("ND b END c", armed=False) == StopCheck("ND b END c", False)
    assert matcher.push(" then E") == StopCheck(" then ", False)
    assert matcher.push("ND") == StopCheck("", True, "END")


def test_the_stop_string_may_be_kept() -> None:
    """vLLM's include_stop_str_in_output: the text ends with the stop string found."""
    matcher = StopStringMatcher(["END", "b"], include_stop=True)
    assert matcher.push("a E") == StopCheck("a ", False)
    assert matcher.push("ND b") == StopCheck("END", True, "END")  # the earliest stop, kept
    kept = StopStringMatcher(["ND", "END"], include_stop=True)
    assert kept.push("xEND y") == StopCheck("xEND", True, "END")  # "END" starts first, though listed second


def _feed_patterns(
    patterns: list[str], pieces: list[str], include: bool = False
) -> tuple[list[str], StopCheck]:
    """What each piece let through, and the last check."""
    matcher = StopStringMatcher([], include, patterns)
    sent, check = [], StopCheck("", False)
    for piece in pieces:
        check = matcher.push(piece)
        sent.append(check.text)
        if check.stopped:
            break
    return sent, check


def test_a_stop_regex_cuts_where_its_match_starts_even_across_pieces() -> None:
    """SGLang's stop_regex: nothing of the match is sent (or all of it, kept); text a match could
    still start in waits for the next piece."""
    sent, check = _feed_patterns([r"Answer: \d+\."], ["So. Answ", "er: 4", "2. More"])
    assert sent == ["So. ", "", ""] and check.stopped and check.matched == r"Answer: \d+\."
    sent, check = _feed_patterns([r"Answer: \d+\."], ["So. Answ", "er: 4", "2. More"], include=True)
    assert "".join(sent) == "So. Answer: 42." and check.stopped
    sent, check = _feed_patterns([r"\d{3}-\d{4}"], ["call 55", "5-12", " or later"])
    assert "".join(sent) == "call 555-12 or later" and not check.stopped  # never a whole number


def test_stop_regexes_and_strings_stop_at_the_earliest() -> None:
    matcher = StopStringMatcher(["END"], False, [r"\n{2,}"])
    check = matcher.push("one\n\ntwo END")
    assert (check.text, check.stopped, check.matched) == ("one", True, r"\n{2,}")
    matcher = StopStringMatcher(["END"], False, [r"\n{2,}"])
    assert matcher.push("one END\n\n").matched == "END"


def test_a_stop_regex_sees_the_text_sent_before_it() -> None:
    """Word boundaries and look-behinds read the end of the text already sent."""
    sent, check = _feed_patterns([r"\bEND\b"], ["the LEGEND", " says END."])
    assert sent == ["the LEGEND", " says "] and check.stopped
    sent, check = _feed_patterns([r"(?<=: )no\b"], ["answer: ", "now", " and: no."])
    assert "".join(sent) == "answer: now and: " and check.stopped


def test_a_pattern_that_could_hold_everything_holds_a_bounded_tail() -> None:
    """`<<.*>>` could match however much follows `<<`: at most MAX_HELD_CHARS wait, then the match's
    start goes and the rest flows; nothing is lost."""
    matcher = StopStringMatcher([], False, [r"<<.*>>"])
    pieces = ["<<"] + ["x" * 100] * 99
    given = sent = most_held = 0
    for piece in pieces:
        given += len(piece)
        sent += len(matcher.push(piece).text)
        most_held = max(most_held, given - sent)
    assert most_held == MAX_HELD_CHARS
    assert sent + len(matcher.flush()) == given and given - sent < 100


def test_stop_regexes_that_cannot_serve_are_refused() -> None:
    assert stop_pattern_problem(r"Answer: \d+") is None
    assert "empty string" in (stop_pattern_problem(r"\d*") or "")
    assert "not a regular expression" in (stop_pattern_problem("(unclosed") or "")
    assert "at most" in (stop_pattern_problem("a" * 2000) or "")
