"""A service watches the launcher that started it (shared/launcher/parent_watch.py)."""

from __future__ import annotations

import os

from treespec.shared.launcher.parent_watch import PARENT_ENV, ParentWatch, child_env, watch_parent


def test_a_watch_calls_back_once_the_parent_is_gone() -> None:
    called: list[float] = []
    not_our_parent = os.getpid()  # our own pid is never our parent's
    ParentWatch(not_our_parent, poll_s=0.01, grace_s=7.0, on_orphan=called.append).start().join(5.0)
    assert called == [7.0]


def test_a_watch_stays_quiet_while_the_parent_lives() -> None:
    called: list[float] = []
    watch = ParentWatch(os.getppid(), poll_s=0.01, on_orphan=called.append).start()
    watch.join(0.3)
    assert called == []
    assert watch._thread is not None and watch._thread.is_alive()


def test_the_launcher_names_itself_for_its_children() -> None:
    assert child_env() == {PARENT_ENV: str(os.getpid())}


def test_the_name_is_taken_out_of_the_environment_so_grandchildren_do_not_inherit_it() -> None:
    environ = {PARENT_ENV: str(os.getppid()), "OTHER": "1"}
    assert watch_parent(environ) is not None
    assert environ == {"OTHER": "1"}


def test_no_name_or_a_bad_one_watches_nothing() -> None:
    assert watch_parent({}) is None
    environ = {PARENT_ENV: "not-a-pid"}
    assert watch_parent(environ) is None
    assert environ == {}
