"""The deferred queue on its own: priority then FIFO, one pass skips a class once one of it fails,
deadlines expire in arrival order, a re-queued id replaces its entry, and its invariants hold."""

from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.core.placement import Requirement
from fabric.core.scheduling.queue import DeferredQueue

A = Requirement(min_tier="cpu_ffmpeg")
B = Requirement(min_tier="gpu_cuda", fallback=False)


def push(q, rid, req=A, priority=0, deadline=100.0, now=0.0):
    return q.push(rid, req, None, priority=priority, deadline=deadline, now=now)


def by_class(q):
    return q.requirement.class_key


def test_a_pass_goes_by_priority_then_arrival():
    q = DeferredQueue()
    for rid, prio in (("a", 0), ("b", 5), ("c", 0), ("d", 5)):
        push(q, rid, priority=prio)
    assert [r.request_id for r in q] == ["b", "d", "a", "c"]
    placed = q.place_waiting(lambda r: True, by_class)
    assert [r.request_id for r in placed] == ["b", "d", "a", "c"] and len(q) == 0
    assert q.problems() == []


def test_once_one_of_a_class_fails_the_rest_of_it_is_skipped():
    q = DeferredQueue()
    push(q, "a1", A), push(q, "b1", B), push(q, "a2", A), push(q, "b2", B)
    tried = []

    def try_place(r):
        tried.append(r.request_id)
        return r.requirement is B

    placed = q.place_waiting(try_place, by_class)
    assert tried == ["a1", "b1", "b2"]  # a2 is not tried: a1 of its class failed in this pass
    assert [r.request_id for r in placed] == ["b1", "b2"]
    assert [r.request_id for r in q] == ["a1", "a2"] and q.problems() == []


def test_deadlines_expire_in_arrival_order():
    q = DeferredQueue()
    push(q, "late", deadline=50), push(q, "early", deadline=10), push(q, "never", deadline=1e9)
    assert q.expire(9.9) == []
    assert [r.request_id for r in q.expire(50)] == ["late", "early"]
    assert [r.request_id for r in q] == ["never"] and q.problems() == []


def test_requeueing_an_id_replaces_it_and_cancel_forgets_it():
    q = DeferredQueue()
    push(q, "x", priority=0)
    push(q, "y")
    push(q, "x", priority=9)
    assert len(q) == 2 and [r.request_id for r in q] == ["x", "y"] and q.get("x").priority == 9
    assert q.problems() == []
    assert q.cancel("x") and not q.cancel("x") and "x" not in q
    assert q.cancel("y") and q._heap == []  # nothing live: the marked entries go too


def test_problems_name_a_broken_queue():
    q = DeferredQueue()
    push(q, "x")
    q._live["x"].cancelled = True
    assert any("marked cancelled" in p for p in q.problems())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["push", "cancel", "expire", "pass"]), st.integers(0, 5),
                          st.integers(-2, 2), st.booleans()), max_size=40))
def test_any_sequence_keeps_the_queue_consistent(ops):
    q = DeferredQueue()
    now = 0.0
    for op, n, prio, ok in ops:
        now += 1
        if op == "push":
            push(q, f"r{n}", A if ok else B, priority=prio, deadline=now + n, now=now)
        elif op == "cancel":
            q.cancel(f"r{n}")
        elif op == "expire":
            assert all(r.deadline <= now for r in q.expire(now))
        else:
            q.place_waiting(lambda r, ok=ok: ok, by_class)
        assert q.problems() == []
        order = [r.sort_key for r in q]
        assert order == sorted(order)
