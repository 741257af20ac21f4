"""warmup replay's disk-cache listener (jitwatch.warmup.replay._DiskHits) when replays overlap:
two replays in two threads, entered A then B and left A then B, must leave Triton's
``knobs.compilation.listener`` as they found it, with no replay listener left in the chain."""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("triton")

from triton import knobs

from jitwatch.warmup.replay import _DiskHits


def _chain(listener: Any) -> list[Any]:
    """The listener and what it declares it wraps (``__wrapped__``), outermost first."""
    out = []
    while listener is not None and len(out) < 16:
        out.append(listener)
        listener = getattr(listener, "__wrapped__", None)
    return out


@pytest.mark.parametrize("order", ["fifo", "lifo"])
def test_overlapping_replays_restore_the_listener(order: str) -> None:
    """Replay A enters, replay B enters (wrapping A's listener), then A leaves first (fifo): A's
    exit found B's listener in the slot and left it; B's exit then restored the listener it had
    found, A's, which stayed in Triton's slot for good (called on every later compile of the
    process, holding A's state). Both orders must end on the listener before the replays."""
    calls: list[dict[str, Any]] = []

    def host_listener(*args: Any, **kwargs: Any) -> None:
        calls.append(kwargs)

    saved = knobs.compilation.listener
    knobs.compilation.listener = host_listener
    try:
        a, b = _DiskHits(on=True), _DiskHits(on=True)
        entered = threading.Barrier(2)
        leave_first = threading.Event()
        errors: list[BaseException] = []

        def run(hits: _DiskHits, first_to_leave: bool, enter_first: bool) -> None:
            try:
                if not enter_first:
                    entered.wait()
                with hits:
                    if enter_first:
                        entered.wait()
                        entered_b.wait()
                    else:
                        entered_b.wait()
                    if not first_to_leave:
                        leave_first.wait(10)
                if first_to_leave:
                    leave_first.set()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        entered_b = threading.Barrier(2)
        threads = [
            threading.Thread(target=run, args=(a, order == "fifo", True)),
            threading.Thread(target=run, args=(b, order == "lifo", False)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert not errors, errors
        assert knobs.compilation.listener is host_listener, _chain(knobs.compilation.listener)
        # and the host's listener is still called, once per call
        knobs.compilation.listener(cache_hit=True)
        assert calls == [{"cache_hit": True}]
    finally:
        knobs.compilation.listener = saved


def test_a_listener_set_on_top_during_a_replay_is_kept() -> None:
    """Someone (jitwatch's own install, a host) sets the slot while a replay runs: the replay's
    exit does not cut them out; their listener still reaches the one before the replay."""
    seen: list[str] = []

    def before(*args: Any, **kwargs: Any) -> None:
        seen.append("before")

    saved = knobs.compilation.listener
    knobs.compilation.listener = before
    try:
        with _DiskHits(on=True):
            under = knobs.compilation.listener

            def on_top(*args: Any, **kwargs: Any) -> None:
                seen.append("on_top")
                under(*args, **kwargs)

            knobs.compilation.listener = on_top
        assert knobs.compilation.listener is on_top
        on_top(cache_hit=False)
        assert seen == ["on_top", "before"]
    finally:
        knobs.compilation.listener = saved
