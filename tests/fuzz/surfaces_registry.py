"""Fuzz surfaces over the registry's boundary (issue 12), registered into ``fabric.testing.fuzz.SURFACES``.

``registry_register``, ``registry_heartbeat``, ``registry_report`` and ``registry_apply`` drive
the pure ``Registry`` (``actors/registry.py``) over a real ``FabricStore`` in a temporary folder,
with a fake Ray node table (resources included, as real nodes join), fed what an adversary or a
broken probe could send: dicts and huge strings as node ids, non-iterable ``degraded``, reports
of tens of MB (built from shared references, so drawing them is cheap), tiers the node did not
join with (a CUDA GPU on a CPU-only node), unknown node ids, forged flap holds, malformed event
dicts, events built without validation. A clean refusal is a ``RegistrationError`` (or a
``TransitionError`` for an illegal status change); ``stored`` compares a dump of every table from
just before the call with one after it (and the change feed's number), so a refused message
that changed anything, or announced a change to followers, counts.

Every example starts from the same seeded store (two registered nodes), so one example's
success (a collection, a hold) never narrows what the next explores.
"""

from __future__ import annotations

import copy
import itertools
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from hypothesis import strategies as st

from actors.registry import Registry
from fabric.core.capabilities import NodeCapabilities
from fabric.core.errors import RegistrationError, TransitionError
from fabric.core.events import (NodeAdded, NodeCollected, NodeCordoned, NodeDegraded, NodeDrainRequested, NodeFlapHeld,
                                NodeFlapReleased, NodeLost, NodeRecovered, NodeUncordoned)
from fabric.core.health import ManualClock, RayNodeView
from fabric.core.lifecycle import NodeStatus
from fabric.store import FabricStore
from fabric.testing.fuzz import Surface, paths, register, with_value
from fuzz_values import HUGE_INTS, big_text, mutate, mutations, nasty_floats, values

CPU = "a" * 56  # registered; joined serving cpu_ffmpeg and relay
GPU = "b" * 56  # registered; joined serving gpu_cuda, cpu_ffmpeg and relay
NEW = "c" * 56  # alive in Ray, not registered yet
DEAD = "d" * 56  # dead in Ray
UNKNOWN = "e" * 56  # nobody knows it
IDS = [CPU, GPU, NEW, DEAD, UNKNOWN]
NAMES = {CPU: "box", GPU: "gpubox", NEW: "newbox", DEAD: "gone", UNKNOWN: "ghost"}
CUDA_GPU = {"vendor": "nvidia", "model": "NVIDIA GeForce RTX 4070", "discrete": True, "cuda": True, "vram_mib": 12282, "bus": "pcie"}
START = 1_000_000.0


class FakeRay:
    """Ray's node table for the registry: node id -> RayNodeView, with the tier resources."""

    def __init__(self) -> None:
        def row(node_id: str, tiers: tuple[str, ...], alive: bool = True) -> RayNodeView:
            return RayNodeView(node_id=node_id, alive=alive, labels={"fabric.io/tier": tiers[0], "fabric.io/name": NAMES[node_id]},
                               resources={"fabric.slots": 2.0, **{f"fabric.tier.{t}": 1.0 for t in tiers}})

        self.nodes = {CPU: row(CPU, ("cpu_ffmpeg", "relay")), GPU: row(GPU, ("gpu_cuda", "cpu_ffmpeg", "relay")),
                      NEW: row(NEW, ("cpu_ffmpeg", "relay")), DEAD: row(DEAD, ("cpu_ffmpeg", "relay"), alive=False)}

    def alive_node(self, node_id: Any) -> RayNodeView | None:
        n = self.nodes.get(node_id) if isinstance(node_id, str) else None
        return n if n is not None and n.alive else None

    def list_nodes(self) -> list[RayNodeView]:
        return list(self.nodes.values())


def caps(node_id: str = CPU, **kw: Any) -> dict[str, Any]:
    fields: dict[str, Any] = dict(name=NAMES[node_id], cpu_logical=4, cpu_physical=2, cpu_usable=4, memory_mib=8192,
                                  limitations={"max_concurrent_tasks": 2, "notes": ["a note"]},
                                  ffmpeg={"listed": ["libx264", "h264_nvenc"], "working": ["libx264"]})
    if node_id == GPU:
        fields["gpus"] = [CUDA_GPU]
    fields.update(kw)
    return NodeCapabilities(**fields).model_dump(mode="json")


class _Env:
    """One temporary folder per surface run; a fresh seeded store per example."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self.counter = itertools.count()
        self.registry: Registry | None = None
        self.before: Any = None

    def setup(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="fuzz-registry-"))

    def teardown(self) -> None:
        self._close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def _close(self) -> None:
        if self.registry is not None:
            store = self.registry.store
            store.close()
            for suffix in ("", "-wal", "-shm"):
                Path(str(store.path) + suffix).unlink(missing_ok=True)
            self.registry = None

    def fresh(self) -> Registry:
        """A new store holding CPU and GPU registered (GPU flap-held, CPU degraded), on a new file."""
        self._close()
        if self.folder is None:  # run outside run_surface (a plain call): make the folder now
            self.setup()
        assert self.folder is not None
        clock = ManualClock(START)
        reg = Registry(FabricStore(self.folder / f"ex-{next(self.counter)}.db"), FakeRay(), clock=clock)
        reg.register(CPU, caps(CPU), utilization={"cpu_percent": 10})
        reg.register(GPU, caps(GPU))
        reg.report(CPU, caps(CPU), ["ffmpeg encoder stopped: h264_nvenc"])
        reg.apply([NodeFlapHeld(node_id=GPU, name="gpubox", at=START, stimulus_id="seed", until=START + 600, toggles=3)])
        clock.advance(1.0)
        self.registry = reg
        return reg

    def call(self, method: Callable[[Registry], Any]) -> Any:
        reg = self.fresh()
        self.before = (reg.store.dump(), reg.log.seq)
        return method(reg)

    def stored(self, _input: Any) -> bool:
        """True when the refused call changed any row of any table, or numbered a change in the feed."""
        assert self.registry is not None
        return (self.registry.store.dump(), self.registry.log.seq) != self.before


# -- what to send ---------------------------------------------------------------------------------------
def _either(good: Any, bad: Any) -> Any:
    """``good`` about half the time, else one of ``bad``'s branches. Two hypothesis habits would
    starve ``good``: ``one_of`` flattens ``bad``'s branches beside it (a map distributes over them
    too), one chance in ~15, so a coin is drawn first; and it steers away from choices it has
    fully explored, so an unused integer keeps a small finite ``good`` (five ids) from running out."""
    good = st.tuples(good, st.integers()).map(lambda t: t[0])
    return st.booleans().flatmap(lambda coin: good if coin else bad)


_known_ids = st.sampled_from(IDS)
node_ids = _either(_known_ids, st.one_of(
    st.sampled_from(IDS).map(str.upper), st.sampled_from(IDS).map(lambda s: s[:-1]),
    st.sampled_from(IDS).map(lambda s: {"node_id": s}), st.sampled_from(IDS).map(lambda s: [s]),
    st.text(max_size=60), big_text(1000, 30_000_000), values,
))
"""Half Ray node ids (known, alive-unregistered, dead, unknown), half near misses and anything."""


def _huge_caps(t: tuple[str, int, int]) -> dict[str, Any]:
    """Capabilities of ``mb`` MB serialized whose every string and list is within its own bound."""
    node_id, mb, width = t
    codecs = ["h" * width] * 1000
    return {**caps(node_id), "gpus": [dict(CUDA_GPU, index=i, encoders=codecs) for i in range(max(1, mb * 1000 // width))]}


WRONG_TYPES = (1.5, 3, -1, True, None, "h264", "", [1.0], [[1]], [None], {"a": 1}, [{"a": 1}], math.nan)
"""Values of the wrong shape for some field or other: a number where a list or a string goes, a
string where a list goes, a list of numbers or lists where a list of names goes, a dict, None."""


def wrong_type(doc: Any) -> st.SearchStrategy[Any]:
    """``doc`` with one field, any of them at any depth, holding a value of the wrong type."""
    return st.tuples(st.sampled_from(paths(doc)), st.sampled_from(WRONG_TYPES)).map(lambda t: with_value(doc, *t))


_good_caps = st.sampled_from([CPU, GPU, NEW]).map(caps)
capabilities = _either(_good_caps, st.one_of(
    st.sampled_from([CPU, GPU, NEW]).flatmap(lambda n: wrong_type(caps(n))),  # a wrong type in any field
    st.sampled_from([CPU, NEW]).map(lambda n: caps(n, gpus=[CUDA_GPU])),  # a CUDA GPU on a CPU-only node
    st.sampled_from([GPU]).map(lambda n: caps(n, gpus=[])),  # a demotion: fine
    st.tuples(st.sampled_from([CPU, GPU, NEW]), mutations(values)).map(lambda t: mutate(copy.deepcopy(caps(t[0])), t[1])),
    st.tuples(st.sampled_from([CPU, GPU, NEW]), st.integers(1, 40), st.sampled_from([100, 1000])).map(_huge_caps),
    st.tuples(st.sampled_from([CPU, NEW]), st.integers(65, 2000)).map(lambda t: {**caps(t[0]), "gpus": [CUDA_GPU] * t[1]}),
    st.sampled_from([CPU, GPU]).map(lambda n: {**caps(n), "name": "impostor"}),
    values,
))

_good_util = st.one_of(st.none(), st.just({"cpu_percent": 12.5, "memory_percent": 40.0}),
                       st.just({"cpu_percent": 1.0, "gpus": [{"index": 0, "gpu_percent": 50.0, "encoder_percent": None}]}))
utilizations = _either(_good_util, st.one_of(
    st.sampled_from([{"cpu_percent": 12.5, "memory_percent": 40.0},
                     {"cpu_percent": 1.0, "gpus": [{"index": 0, "gpu_percent": 50.0, "encoder_percent": None}]}]).flatmap(wrong_type),
    st.fixed_dictionaries({"cpu_percent": st.one_of(nasty_floats, st.text(max_size=5), HUGE_INTS)}),
    st.fixed_dictionaries({"gpus": st.lists(st.fixed_dictionaries({}, optional={
        "index": st.one_of(st.integers(-5, 5), HUGE_INTS), "gpu_percent": nasty_floats, "memory_used_mib": st.integers(),
        "encoder_percent": nasty_floats}), max_size=80)}),
    st.tuples(st.just({"cpu_percent": 1.0, "gpus": [{"index": 0}]}), mutations(values)).map(lambda t: mutate(copy.deepcopy(t[0]), t[1])),
    values,
))

degraded_lists = _either(st.lists(st.text(max_size=30), max_size=5), st.one_of(
    st.just(()), st.integers(), st.none(), st.text(max_size=20),
    st.integers(60, 5000).map(lambda n: ["gpu vanished: X"] * n), big_text(100, 50_000).map(lambda s: [s]),
    st.lists(values, max_size=3), st.builds(lambda: (r for r in ["a generator"])), values,
))


def _event(t: tuple[str, str, float, float]) -> Any:
    kind, node_id, at, until = t
    base = dict(node_id=node_id, name=NAMES.get(node_id, "x"), at=at, stimulus_id="fuzz")
    return {
        "added": lambda: NodeAdded(**base),
        "lost": lambda: NodeLost(**base, reason="x"),
        "recovered": lambda: NodeRecovered(**base, status=NodeStatus.ACTIVE, reason="back"),
        "recovered_dead": lambda: NodeRecovered(**base, status=NodeStatus.DEAD, reason="forged"),
        "degraded": lambda: NodeDegraded(**base, reasons=("gpu vanished: X",)),
        "held": lambda: NodeFlapHeld(**base, until=until, toggles=3),
        "held_forged": lambda: NodeFlapHeld(**{**base, "name": "box"}, until=until, toggles=3),
        "released": lambda: NodeFlapReleased(**base),
        "collected": lambda: NodeCollected(**base, lost_for_s=1.0),
        "cordoned": lambda: NodeCordoned(**base),
        "uncordoned": lambda: NodeUncordoned(**base, reason="fuzz"),
        "drain": lambda: NodeDrainRequested(**base),
        "drain_forged": lambda: NodeDrainRequested.model_construct(**base, status=NodeStatus.ACTIVE, reason="forged",
                                                                   kind="node_drain_requested"),
    }[kind]()


event_models = st.tuples(
    st.sampled_from(["added", "lost", "recovered", "recovered_dead", "degraded", "held", "held_forged", "released", "collected",
                     "cordoned", "uncordoned", "drain", "drain_forged"]),
    st.sampled_from(IDS), st.sampled_from([START, START + 1, 0.0]),
    st.sampled_from([START + 600, START + 1e6, START - 5, START + 86_400]),
).map(_event)
event_dicts = st.one_of(
    event_models.map(lambda e: e.model_dump(mode="json")).flatmap(wrong_type),  # a wrong type in any field
    event_models.map(lambda e: e.model_dump()),
    event_models.map(lambda e: e.model_dump(mode="json")),
    st.tuples(event_models, mutations(values)).map(lambda t: mutate(t[0].model_dump(), t[1])),
    st.dictionaries(st.sampled_from(["kind", "node_id", "name", "at", "stimulus_id", "until", "status", "reasons", "reason"]), values, max_size=6),
)
unvalidated = st.tuples(st.sampled_from(IDS), st.one_of(nasty_floats, HUGE_INTS, st.text(max_size=5))).map(
    lambda t: NodeLost.model_construct(node_id=t[0], name="box", at=t[1], stimulus_id="s", reason="x", status=NodeStatus.OFFLINE,
                                       ray_dead=False))
event_batches = st.one_of(
    st.lists(st.one_of(event_models, event_dicts, unvalidated, values), max_size=8),
    st.lists(event_models, max_size=8),
    st.integers(10_001, 12_000).map(lambda n: [{"kind": "node_lost"}] * n),
    values,
)

# -- the surfaces ----------------------------------------------------------------------------------------
TYPED = (RegistrationError, TransitionError)

_register_env = _Env()
register(Surface(
    name="registry_register", strategy=st.tuples(node_ids, capabilities, utilizations),
    call=lambda t: _register_env.call(lambda reg: reg.register(t[0], t[1], utilization=t[2])),
    typed=TYPED, stored=_register_env.stored, setup=_register_env.setup, teardown=_register_env.teardown,
    description="Registry.register: node ids of every shape, mutated/huge/out-of-tier capabilities, hostile utilisation",
))

_heartbeat_env = _Env()
register(Surface(
    name="registry_heartbeat", strategy=st.tuples(node_ids, utilizations),
    call=lambda t: _heartbeat_env.call(lambda reg: reg.heartbeat(t[0], t[1])),
    typed=TYPED, stored=_heartbeat_env.stored, setup=_heartbeat_env.setup, teardown=_heartbeat_env.teardown,
    description="Registry.heartbeat: node ids of every shape, NaN/huge/negative utilisation",
))

_report_env = _Env()
register(Surface(
    name="registry_report", strategy=st.tuples(node_ids, capabilities, degraded_lists, utilizations),
    call=lambda t: _report_env.call(lambda reg: reg.report(t[0], t[1], t[2], t[3])),
    typed=TYPED, stored=_report_env.stored, setup=_report_env.setup, teardown=_report_env.teardown,
    description="Registry.report: non-iterable/huge degraded lists, 1-40 MB reports, tiers the node did not join with",
))

_apply_env = _Env()
register(Surface(
    name="registry_apply", strategy=event_batches,
    call=lambda batch: _apply_env.call(lambda reg: reg.apply(batch)),
    typed=TYPED, stored=_apply_env.stored, setup=_apply_env.setup, teardown=_apply_env.teardown,
    description="Registry.apply: unknown node ids, forged flap holds and drains, malformed event dicts, unvalidated models, huge batches",
))

__all__ = ["FakeRay", "caps", "capabilities", "degraded_lists", "event_batches", "node_ids", "utilizations"]
