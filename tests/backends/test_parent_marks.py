"""Parent-compile marks (:func:`jitwatch.backends.base.enter_parent` / ``exit_parent``)."""

from __future__ import annotations

import threading

from jitwatch.backends.base import current_parent, enter_parent, exit_parent, parent_marks


def test_marks_closed_in_the_order_they_were_opened_leave_nothing_behind() -> None:
    """Two monitors' torch.compile backends both mark a Dynamo compile, and torch runs the end
    callbacks in the order the start callbacks ran: the first mark closes first. Restoring each
    mark's predecessor then put the first mark back for good, so every later compile of any backend
    on that thread read ``attrs.parent = torch_compile:0/0`` (found when a Triton test ran after the
    two-monitor torch.compile test in one process)."""
    first = enter_parent("torch_compile:0/0")
    second = enter_parent("torch_compile:0/0")
    assert current_parent() == "torch_compile:0/0"
    exit_parent(first)
    assert current_parent() == "torch_compile:0/0"  # the second is still open
    exit_parent(second)
    assert current_parent() is None and threading.get_ident() not in parent_marks


def test_nested_marks_and_out_of_order_exits() -> None:
    outer = enter_parent("torch_compile:aot")
    inner = enter_parent("torch_compile:1/0")
    assert current_parent() == "torch_compile:1/0"
    exit_parent(inner)
    assert current_parent() == "torch_compile:aot"
    inner = enter_parent("torch_compile:2/0")
    exit_parent(outer)  # the outer one first: the inner one is still the thread's parent
    assert current_parent() == "torch_compile:2/0"
    exit_parent(inner)
    exit_parent(inner)  # closed twice: nothing else is touched
    assert current_parent() is None and not parent_marks


def test_a_mark_closed_on_another_thread_is_this_threads_and_none_clears_the_thread() -> None:
    mark = enter_parent("torch_compile:3/0")
    done = threading.Thread(target=exit_parent, args=(mark,))
    done.start()
    done.join()
    assert current_parent() is None
    enter_parent("a")
    enter_parent("b")
    exit_parent(None)
    assert current_parent() is None and not parent_marks
