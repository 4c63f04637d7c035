from treespec.gateway.responses_api.lru_map import LruMap


def test_the_least_recently_used_goes_first() -> None:
    entries: LruMap[int] = LruMap(2)
    entries.put("a", 1)
    entries.put("b", 2)
    assert entries.get("a") == 1  # a is now the most recently used
    entries.put("c", 3)
    assert (entries.get("a"), entries.get("b"), entries.get("c")) == (1, None, 3)
    assert len(entries) == 2


def test_a_rewrite_refreshes_and_a_pop_removes() -> None:
    entries: LruMap[str] = LruMap(2)
    entries.put("a", "x")
    entries.put("b", "y")
    entries.put("a", "z")
    entries.put("c", "w")
    assert (entries.get("a"), entries.get("b")) == ("z", None)
    assert entries.pop("a") == "z"
    assert entries.pop("a") is None
    assert len(entries) == 1


def test_capacity_zero_keeps_nothing() -> None:
    entries: LruMap[int] = LruMap(0)
    entries.put("a", 1)
    assert entries.get("a") is None
    assert len(entries) == 0
