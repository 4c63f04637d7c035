"""Stop strings: cut at the first one, hold back what could start one, even across pieces."""

from __future__ import annotations

import pytest

from treespec.gateway.stop_strings import StopCheck, StopStringMatcher


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
