"""Fuzz surface: what the scheduler accepts (issue 12). The ``SchedulerActor`` reads every
message with ``fabric.core.scheduling.messages`` and hands it to ``SchedulerCore``; this drives the
same two steps over a live core (a small fleet), with hostile arguments to every entry point:
a refusal is ``MessageError`` / ``RequirementError`` and leaves the core as it was, and the core's
``validate_state`` holds after every message."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from fabric.core.scheduling import messages as msg
from fabric.core.capabilities import GpuInfo, Limitations, NodeCapabilities
from fabric.core.errors import CapacityError, MessageError, RequirementError
from fabric.core.placement import NodeRecord, Requirement
from fabric.core.scheduling import SchedulerCore
from fabric.testing.fuzz import Surface, register

from fuzz_values import HUGE_INTS, Hostile, big_list, big_text, nasty_floats, values


def _caps(name: str, cuda: bool) -> NodeCapabilities:
    gpus = [GpuInfo(vendor="nvidia", model="NVIDIA GeForce RTX 4070", vram_mib=12282, discrete=True, cuda=True)] if cuda else []
    return NodeCapabilities(name=name, cpu_logical=4, cpu_physical=4, cpu_usable=4, memory_mib=8192, gpus=gpus,
                            limitations=Limitations(max_concurrent_tasks=2))


class _Clock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


_CORE: dict[str, SchedulerCore] = {}


def _fresh() -> SchedulerCore:
    core = SchedulerCore(clock=_Clock())
    core.node_joined(NodeRecord(node_id="a" * 56, name="gpu", capabilities=_caps("gpu", True)))
    core.node_joined(NodeRecord(node_id="b" * 56, name="cpu", capabilities=_caps("cpu", False)))
    core.lease("existing", Requirement(min_tier="cpu_ffmpeg"), want=1)
    return core


GOOD_REQ = Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg")
hostile = st.one_of(values, HUGE_INTS, nasty_floats, big_text(200, 5000), big_list(100, 5000), st.builds(Hostile))


def mostly(valid: st.SearchStrategy, bad: st.SearchStrategy = hostile) -> st.SearchStrategy:
    """Usually a valid value, sometimes a hostile one: a message with one bad field gets past the
    others, so refusals are tried deep inside a call, not only at its first argument."""
    return st.integers(0, 9).flatmap(lambda k: valid if k < 8 else bad)  # one_of would weigh the two alike


valid_ids = st.sampled_from(["c1", "existing", "a" * 56, "b" * 56])
ids = mostly(valid_ids, st.one_of(hostile, st.just(""), st.just("x" * 500), st.text(max_size=20)))
counts = mostly(st.integers(0, 8), st.one_of(hostile, st.integers(-5, -1), st.integers(1025, 10**6)))
reqs = st.one_of(st.just(GOOD_REQ), st.just(Requirement(min_tier="relay", pool="nope")),
                 st.just(Requirement(min_tier="gpu_cuda", fallback=False, num_gpus=1)), hostile)
keys = st.one_of(valid_ids, st.text(max_size=20), st.integers(), st.floats(), st.just("x" * 500))
holdings = mostly(st.one_of(st.none(), st.dictionaries(valid_ids, st.integers(0, 4), max_size=3)),
                  st.one_of(hostile, st.dictionaries(keys, counts, max_size=5)))
id_lists = mostly(st.sampled_from([None, [], ["existing"], ["existing", "c1"], ["b" * 56]]),
                  st.one_of(hostile, st.lists(ids, max_size=5)))

CALLS = st.one_of(
    st.tuples(st.just("lease"), st.tuples(ids, reqs, holdings, counts, id_lists)),
    st.tuples(st.just("report"), st.tuples(counts, counts)),
    st.tuples(st.just("release"), st.tuples(st.one_of(st.lists(counts, max_size=5), hostile))),
    st.tuples(st.just("end_lease"), st.tuples(ids)),
    st.tuples(st.just("select"), st.tuples(reqs)),
    st.tuples(st.just("timeout"), st.tuples(st.one_of(nasty_floats, hostile, st.none()))),
)


def _state(core: SchedulerCore) -> Any:
    return (dict(core.counters), core.leases.ids(), sorted(core.allocations), core.queue_depth,
            sorted((r.node_id, r.running) for r in core.fleet.records()))


_LAST: dict[str, Any] = {}


def _dispatch(core: SchedulerCore, kind: str, args: tuple) -> Any:
    """What the actor's method does: read the message, then call the core."""
    if kind == "lease":
        return core.grant_lease(*msg.read_lease_request(*args))
    if kind == "report":
        return core.report_calls(*msg.read_call_report(*args))
    if kind == "release":
        return core.release(msg.read_allocations(*args))
    if kind == "end_lease":
        return core.end_lease(msg.read_id("lease_id", *args))
    if kind == "select":
        return core.select_worker(msg.read_requirement(*args))
    return msg.read_timeout("timeout_s", *args)


def _call(example: tuple[str, tuple]) -> Any:
    core = _CORE["core"] = _fresh()  # each message meets the same state: a refusal must leave it so
    _LAST["before"], _LAST["error"] = copy.deepcopy(_state(core)), None
    try:
        return _dispatch(core, *example)
    except BaseException as exc:
        _LAST["error"] = exc
        raise
    finally:
        core.validate_state()  # accepted or refused, the core stays consistent (an AssertionError is a crash)


def _stored(example: tuple[str, tuple]) -> bool:
    """A refused message (``MessageError``, or a requirement naming an unknown pool) must leave the
    core exactly as it was. A ``CapacityError`` is an answer (no node serves a hard requirement),
    not a refusal of the input."""
    if isinstance(_LAST.get("error"), CapacityError):
        return False
    return _state(_CORE["core"]) != _LAST["before"]


register(Surface(
    name="scheduler_messages",
    strategy=CALLS,
    call=_call,
    typed=(MessageError, RequirementError, CapacityError),
    stored=_stored,
    description="SchedulerActor's entry points (lease, report_calls, release, end_lease, select_worker) with hostile arguments",
))
