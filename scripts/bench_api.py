#!/usr/bin/env python
"""Benchmark the operator API (issue 17): operator calls over gRPC against the same scheduler work
called directly with Ray, and the event log under a task burst with a WatchEvents stream open.

The fabric is a real ``LocalFabric`` (head on 127.0.0.2, two ``cpu-only-box`` nodes of 2 slots);
``fabric.up`` starts the ``fabric.operator`` actor, whose gRPC server this driver calls through the
checked-in stubs with the bearer token (``fabric api-token``'s).

- ``status``: ``Operator.Status`` over gRPC, one call at a time (``--calls`` of them): calls per
  second and p50/p99 latency. ``direct``: what the servicer does for one Status (the scheduler
  actor's ``metrics``, ``nodes``, ``job_statuses``, ``bundle_statuses``, at once) called directly
  with ``ray.get`` from this driver, in the same run, in turns with the gRPC calls (blocks of
  ``BLOCK``), so both see the same machine load. ``explain`` / ``direct_explain``: the same for
  ``Operator.Explain`` (``{"min_tier": "cpu_ffmpeg"}``) against ``scheduler.explain(Requirement)``.
- ``events``: while a burst of ``--tasks`` ``@adaptive.remote`` tasks runs (submit all, then
  ``ray.get``), a producer in this driver appends events to the fabric's log as fast as the
  scheduler takes them (``scheduler.record_event``, ``INFLIGHT`` calls in flight) and one stream,
  opened before the burst, reads them in its own process (as an operator's watcher would;
  ``--watcher-in-driver``: a thread of this driver): ``Inspect.WatchEventBatches``, each read of the
  log in one message, as ``fabric events --follow`` reads it (``--watcher-stream events``: the
  older ``Operator.WatchEvents``, one message per event; ``both``: each round runs a burst with each). ``events_per_s``: the events the
  watcher received during the burst per second of burst (``events_produced_per_s``: what the
  producer logged; ``events_missed``: seq gaps the watcher saw, events the bounded log dropped
  before it read them). The same burst runs without the watcher (the producer still running), in
  turns over ``--rounds``; ``burst_ratio_with_watcher`` = median tasks/s with the watcher / median
  without (goal >= 0.95: watching the log does not slow the fabric's work); with ``both``,
  ``burst_ratio_by_stream`` holds each stream's (``burst_ratio_with_watcher`` is the batches').

Usage: scripts/bench_api.py [--calls 500] [--tasks 10000] [--rounds 5] [--watcher-in-driver]
                            [--watcher-stream batches|events|both] [--json]
With ``--json`` the last line is one object: ``status_per_s``, ``status_p99_ms``, ``direct_per_s``,
``direct_p99_ms``, ``explain_per_s``, ``explain_p99_ms``, ``direct_explain_per_s``,
``direct_explain_p99_ms``, ``events_per_s``, ``events_produced_per_s``, ``events_missed``,
``burst_tasks_per_s_with_watcher``, ``burst_tasks_per_s_without``, ``burst_ratio_with_watcher``,
``watcher`` (where it ran), ``watcher_stream``, ``cpu_us_per_event`` (per stream: the CPU the
operator actor and the watcher's process spent during a burst per event streamed in it, read from
``/proc``; the watcher's only when it runs in its own process), ``operator_cpu_s_without`` (the
operator's CPU in a burst without a watcher) and the per-round figures. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402
import ray  # noqa: E402

from fabric import adaptive  # noqa: E402
from fabric.api import operator_pb2 as pb  # noqa: E402
from fabric.api import operator_pb2_grpc as pb_grpc  # noqa: E402
from fabric.api import inspect_pb2 as ipb  # noqa: E402
from fabric.api import inspect_pb2_grpc as ipb_grpc  # noqa: E402
from fabric.core.names import NAMESPACE, OPERATOR  # noqa: E402
from fabric.core.placement import Requirement  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

IP = "127.0.0.2"
PROFILES = ["cpu-only-box", "cpu-only-box"]
BLOCK = 50
"""Calls per turn when gRPC and direct calls alternate."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
INFLIGHT = 16
"""The producer's record_event calls in flight."""
EVENT_KIND = "bench_tick"
REQUIREMENT = {"min_tier": "cpu_ffmpeg"}
CALL_TIMEOUT_S = 30.0
STREAMS = ("batches", "events")
"""``batches``: ``Inspect.WatchEventBatches``; ``events``: ``Operator.WatchEvents``."""
WATCH_TOKEN_ENV = "FABRIC_BENCH_WATCH_TOKEN"
"""The watcher process's bearer token: in its environment, never on its command line."""
SETTINGS: dict[str, Any] = {
    "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 5.0, "drain_grace_s": 30.0, "monitor_interval_s": 0.25,
               "join_timeout_s": 90.0},
}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def tiny(x: int) -> int:
    return x


# -- operator calls ----------------------------------------------------------------------------------------
class Calls:
    def __init__(self, address: str, token: str, scheduler: Any) -> None:
        self.address, self.token = address, token
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.OperatorStub(self.channel)
        self.meta = [("authorization", f"Bearer {token}")]
        self.s = scheduler
        self.req = Requirement(**REQUIREMENT)
        self.req_json = json.dumps(REQUIREMENT)
        self.operator_pid: int | None = None

    def grpc_status(self) -> None:
        self.stub.Status(pb.StatusRequest(), metadata=self.meta, timeout=CALL_TIMEOUT_S)

    def direct_status(self) -> None:
        s = self.s
        ray.get([s.metrics.remote(), s.nodes.remote(), s.job_statuses.remote(), s.bundle_statuses.remote()],
                timeout=CALL_TIMEOUT_S)

    def grpc_explain(self) -> None:
        self.stub.Explain(pb.ExplainRequest(requirement_json=self.req_json), metadata=self.meta, timeout=CALL_TIMEOUT_S)

    def direct_explain(self) -> None:
        ray.get(self.s.explain.remote(self.req, None, False), timeout=CALL_TIMEOUT_S)


def timed_in_turns(kinds: dict[str, Callable[[], None]], calls: int) -> dict[str, dict[str, float]]:
    """``calls`` calls of each kind, one at a time, the kinds taking turns in blocks of ``BLOCK``
    (the order turning every block); per kind: calls per second (calls / the time spent in them)
    and p50/p99 latency in ms."""
    lat: dict[str, list[float]] = {k: [] for k in kinds}
    names = list(kinds)
    done, turn = 0, 0
    while done < calls:
        n = min(BLOCK, calls - done)
        order = names[turn % len(names):] + names[:turn % len(names)]
        for k in order:
            fn = kinds[k]
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                lat[k].append((time.perf_counter() - t0) * 1000)
        done += n
        turn += 1
    return {k: {"per_s": len(v) / (sum(v) / 1000), "p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99)} for k, v in lat.items()}


# -- events under a burst ----------------------------------------------------------------------------------
class Producer(threading.Thread):
    """Appends events to the fabric's log as fast as the scheduler takes them, until stopped."""

    def __init__(self, scheduler: Any) -> None:
        super().__init__(daemon=True)
        self.s = scheduler
        self.stopping = threading.Event()
        self.done: list[float] = []  # completion times
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            pending: list = []
            i = 0
            while not self.stopping.is_set():
                while len(pending) < INFLIGHT:
                    pending.append(self.s.record_event.remote(EVENT_KIND, {"i": i}))
                    i += 1
                ready, pending = ray.wait(pending, num_returns=1, timeout=CALL_TIMEOUT_S)
                ray.get(ready)
                now = time.monotonic()
                self.done.extend(now for _ in ready)
            ray.get(pending, timeout=CALL_TIMEOUT_S)
            now = time.monotonic()
            self.done.extend(now for _ in pending)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc

    def stop(self) -> None:
        self.stopping.set()
        self.join(CALL_TIMEOUT_S * 2)


class Watcher:
    """One stream (``stream``: ``STREAMS``) of ``EVENT_KIND`` from ``since``, read by its own process (as an
    operator's ``fabric events --follow`` or a dashboard would be, not a thread of the driver that
    submits the burst): each event's seq and arrival time (``time.monotonic``, one clock for the
    machine), read back from the file the process writes. ``in_driver``: a thread of this process
    instead (``--watcher-in-driver``)."""

    def __init__(self, address: str, token: str, since: int, *, in_driver: bool = False, stream: str = "batches") -> None:
        self.file = Path(tempfile.mkstemp(prefix="bench-api-watch-", suffix=".txt")[1])
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.proc: subprocess.Popen | None = None
        self.call: Any = None
        if in_driver:
            channel, self.call = open_watch(address, token, since, stream)
            self.thread = threading.Thread(target=self._in_driver, args=(channel,), daemon=True)
        else:
            self.proc = subprocess.Popen([sys.executable, __file__, "--watch-child", address, str(since), str(self.file), stream],
                                         env={**os.environ, WATCH_TOKEN_ENV: token}, stderr=subprocess.PIPE)

    def start(self) -> None:
        if self.thread is not None:
            self.thread.start()

    def _in_driver(self, channel: grpc.Channel) -> None:
        try:
            watch_to_file(channel, self.call, self.file)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc

    def _read(self) -> list[tuple[int, int, float]]:
        rows = []
        for line in self.file.read_text().splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and line.endswith("}"):
                rows.append((int(parts[0]), int(json.loads(parts[2] or "{}").get("i", -1)), float(parts[1])))
        if self.proc is not None and self.proc.poll() not in (None, 0, -signal.SIGTERM) and self.error is None:
            self.error = RuntimeError(f"the watcher process ended ({self.proc.returncode}): "
                                      f"{(self.proc.stderr.read() if self.proc.stderr else b'').decode()[-500:]}")
        return rows

    @property
    def got(self) -> list[tuple[int, float]]:
        return [(seq, t) for seq, _, t in self._read()]

    @property
    def ticks(self) -> set[int]:
        return {i for _, i, _ in self._read()}

    def stop(self) -> None:
        if self.call is not None:
            self.call.cancel()
        if self.thread is not None:
            self.thread.join(10)
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            if self.proc.returncode not in (0, -signal.SIGTERM) and self.error is None:
                self.error = RuntimeError(f"the watcher process ended ({self.proc.returncode})")

    def close(self) -> None:
        self.file.unlink(missing_ok=True)


def open_watch(address: str, token: str, since: int, stream: str = "batches") -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(address)
    request = pb.WatchEventsRequest(since=since, kinds=[EVENT_KIND])
    meta = [("authorization", f"Bearer {token}")]
    if stream == "events":
        return channel, pb_grpc.OperatorStub(channel).WatchEvents(request, metadata=meta)
    return channel, ipb_grpc.InspectStub(channel).WatchEventBatches(request, metadata=meta)


def watch_to_file(channel: grpc.Channel, call: Any, path: Path) -> None:
    """Write each streamed event into ``path`` as one ``seq monotonic data_json`` line, until the
    stream ends (an ``EventBatch``'s events share the time it arrived)."""
    with open(path, "a", buffering=1) as out:
        try:
            for message in call:  # parsed after, not on the stream's time
                now = f"{time.monotonic():.6f}"
                if isinstance(message, ipb.EventBatch):
                    out.write("".join(f"{ev.seq} {now} {ev.data_json}\n" for ev in message.events))
                else:
                    out.write(f"{message.seq} {now} {message.data_json}\n")
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.CANCELLED:
                raise
        finally:
            channel.close()


def newest_seq(scheduler: Any) -> int:
    newest = ray.get(scheduler.events.remote(0, None, -1), timeout=CALL_TIMEOUT_S)
    return int(newest[-1]["seq"]) if newest else 0


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0, *, fail: bool = True) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            if fail:
                raise RuntimeError(f"timed out waiting for {what}")
            return False
        time.sleep(0.01)
    return True


def cpu_s(pid: int | None) -> float | None:
    """The CPU seconds (user + system) process ``pid`` has used, from ``/proc``; None where it cannot be read."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def burst_round(fn: Any, tasks: int, scheduler: Any, calls: Calls, watch: bool, in_driver: bool = False,
                stream: str = "batches") -> dict[str, Any]:
    """One burst with the producer running, with or without a watcher reading ``stream``; the CPU
    the operator actor and the watcher's process used during the burst (``/proc``)."""
    watcher = Watcher(calls.address, calls.token, newest_seq(scheduler), in_driver=in_driver, stream=stream) if watch else None
    if watcher:
        watcher.start()
    producer = Producer(scheduler)
    producer.start()
    if watcher:
        wait_for(lambda: bool(watcher.got) or watcher.error is not None, "the watcher's first event")
    else:
        wait_for(lambda: bool(producer.done) or producer.error is not None, "the producer's first event")
    watcher_pid = watcher.proc.pid if watcher and watcher.proc else None
    cpu0 = (cpu_s(calls.operator_pid), cpu_s(watcher_pid))
    t0 = time.monotonic()
    refs = [fn.remote(i) for i in range(tasks)]
    out = ray.get(refs)
    t1 = time.monotonic()
    cpu1 = (cpu_s(calls.operator_pid), cpu_s(watcher_pid))
    producer.stop()
    if out != list(range(tasks)):
        raise RuntimeError("the burst lost or mixed up results")
    for err in (producer.error, watcher.error if watcher else None):
        if err is not None:
            raise RuntimeError(f"{type(err).__name__}: {err}")
    row: dict[str, Any] = {"watcher": watch, "tasks_per_s": tasks / (t1 - t0), "burst_s": t1 - t0,
                           "events_produced_per_s": sum(t0 <= t <= t1 for t in producer.done) / (t1 - t0)}
    used = [b - a if a is not None and b is not None else None for a, b in zip(cpu0, cpu1)]
    row["operator_cpu_s"] = used[0]
    if watcher:
        row["stream"] = stream
        produced = len(producer.done)
        wait_for(lambda: len(watcher.ticks) >= produced, "the watcher to catch up", timeout_s=30, fail=False)
        watcher.stop()
        got, ticks = watcher.got, watcher.ticks
        watcher.close()
        if watcher.error is not None:
            raise RuntimeError(f"the watcher: {watcher.error}")
        seqs = [s for s, _ in got]
        row["events_per_s"] = sum(t0 <= t <= t1 for _, t in got) / (t1 - t0)
        row["events_missed"] = len(set(range(produced)) - ticks)  # logged, never streamed
        row["events_out_of_order"] = sum(b <= a for a, b in zip(seqs, seqs[1:]))
        streamed = sum(t0 <= t <= t1 for _, t in got)
        row["watcher_cpu_s"] = used[1]
        for who, spent in (("operator", used[0]), ("watcher", used[1])):
            row[f"{who}_cpu_us_per_event"] = spent / streamed * 1e6 if spent is not None and streamed else None
    return row


# -- main --------------------------------------------------------------------------------------------------
def operator_endpoint(lf: LocalFabric) -> tuple[Any, str, str]:
    def actor() -> Any:
        try:
            return ray.get_actor(OPERATOR, namespace=NAMESPACE)
        except ValueError:
            return None

    op = lf.wait_until(actor, "the operator actor", timeout_s=60)
    return op, ray.get(op.address.remote(), timeout=60)["grpc"], ray.get(op.token.remote(), timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="operator calls of each kind (default 500)")
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks per burst (default 10000)")
    parser.add_argument("--rounds", type=int, default=5, help="bursts with and without the watcher, each (default 5)")
    parser.add_argument("--json", action="store_true", help="print a final JSON object")
    parser.add_argument("--watcher-in-driver", action="store_true",
                        help="read the event stream in a thread of this driver (default: its own process)")
    parser.add_argument("--watcher-stream", choices=(*STREAMS, "both"), default="batches",
                        help="what the watcher reads: batches (Inspect.WatchEventBatches, default), events "
                             "(Operator.WatchEvents, one message per event) or both (each round: one burst with each)")
    parser.add_argument("--watch-child", nargs=4, metavar=("ADDRESS", "SINCE", "FILE", "STREAM"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.watch_child:  # the watcher process (Watcher): stream until terminated
        address, since, path, stream = args.watch_child
        watch_to_file(*open_watch(address, os.environ[WATCH_TOKEN_ENV], int(since), stream), Path(path))
        return 0
    streams = list(STREAMS) if args.watcher_stream == "both" else [args.watcher_stream]
    if args.calls < 1 or args.tasks < 1 or args.rounds < 1:
        parser.error("--calls, --tasks and --rounds must be positive")

    say(f"starting a fabric: {len(PROFILES)} x cpu-only-box")
    with LocalFabric(PROFILES, settings=SETTINGS, max_slots=2, timeout_s=120, node_ip_address=IP) as lf:
        op, address, token = operator_endpoint(lf)
        scheduler = lf._scheduler()
        calls = Calls(address, token, scheduler)
        calls.operator_pid = int(ray.get(op.pid.remote(), timeout=60))
        say(f"operator API at {address}")
        for fn in (calls.grpc_status, calls.direct_status, calls.grpc_explain, calls.direct_explain):
            for _ in range(20):  # warm: channels, workers, the scheduler's first answers
                fn()
        say(f"status and explain: {args.calls} calls each, gRPC and direct in turns")
        figures = timed_in_turns({"status": calls.grpc_status, "direct": calls.direct_status,
                                  "explain": calls.grpc_explain, "direct_explain": calls.direct_explain}, args.calls)
        for k, v in figures.items():
            say(f"  {k:<15} {v['per_s']:8.1f} calls/s   p50 {v['p50_ms']:7.2f} ms   p99 {v['p99_ms']:7.2f} ms")

        fn = adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg")(tiny)
        say("warming up: one burst with the producer and the watcher, not counted")
        for stream in streams:  # workers, leases, each stream's path
            burst_round(fn, min(args.tasks, 2000), scheduler, calls, True, args.watcher_in_driver, stream)
        rows: list[dict[str, Any]] = []
        kinds: list[str | None] = [None, *streams]  # None: no watcher
        for r in range(args.rounds):
            for kind in (kinds if r % 2 == 0 else kinds[::-1]):
                watch = kind is not None
                row = burst_round(fn, args.tasks, scheduler, calls, watch, args.watcher_in_driver, kind or "batches")
                rows.append(row)
                extra = f"   events {row['events_per_s']:8.1f}/s (missed {row['events_missed']})" if watch else ""
                say(f"  round {r + 1} burst {f'with {kind} watcher' if watch else 'without watcher'}: "
                    f"{row['tasks_per_s']:8.1f} tasks/s   produced {row['events_produced_per_s']:8.1f} events/s{extra}")
        calls.channel.close()

    main_stream = streams[0]
    with_w = [x["tasks_per_s"] for x in rows if x["watcher"] and x["stream"] == main_stream]
    without = [x["tasks_per_s"] for x in rows if not x["watcher"]]
    watched = [x for x in rows if x["watcher"]]
    result: dict[str, Any] = {
        "status_per_s": figures["status"]["per_s"], "status_p50_ms": figures["status"]["p50_ms"],
        "status_p99_ms": figures["status"]["p99_ms"],
        "direct_per_s": figures["direct"]["per_s"], "direct_p50_ms": figures["direct"]["p50_ms"],
        "direct_p99_ms": figures["direct"]["p99_ms"],
        "explain_per_s": figures["explain"]["per_s"], "explain_p50_ms": figures["explain"]["p50_ms"],
        "explain_p99_ms": figures["explain"]["p99_ms"],
        "direct_explain_per_s": figures["direct_explain"]["per_s"], "direct_explain_p99_ms": figures["direct_explain"]["p99_ms"],
        "events_per_s": statistics.median(x["events_per_s"] for x in watched if x["stream"] == main_stream),
        "events_produced_per_s": statistics.median(x["events_produced_per_s"] for x in rows),
        "events_missed": sum(x["events_missed"] for x in watched),
        "events_out_of_order": sum(x["events_out_of_order"] for x in watched),
        "burst_tasks_per_s_with_watcher": statistics.median(with_w),
        "burst_tasks_per_s_without": statistics.median(without),
        "burst_ratio_with_watcher": statistics.median(with_w) / statistics.median(without),
        "tasks": args.tasks, "calls": args.calls, "rounds": args.rounds, "per_round": rows,
        "watcher": "driver thread" if args.watcher_in_driver else "own process", "watcher_stream": main_stream,
    }
    def median_of(key: str, rows_: list[dict[str, Any]]) -> float | None:
        found = [x[key] for x in rows_ if x.get(key) is not None]
        return statistics.median(found) if found else None

    result["operator_cpu_s_without"] = median_of("operator_cpu_s", [x for x in rows if not x["watcher"]])
    result["cpu_us_per_event"] = {k: {who: median_of(f"{who}_cpu_us_per_event", [x for x in watched if x["stream"] == k])
                                      for who in ("operator", "watcher")} for k in streams}
    if len(streams) > 1:
        result["burst_ratio_by_stream"] = {
            k: statistics.median(x["tasks_per_s"] for x in watched if x["stream"] == k) / statistics.median(without)
            for k in streams}
    print(f"status over gRPC: {result['status_per_s']:.1f} calls/s, p99 {result['status_p99_ms']:.2f} ms; "
          f"direct: {result['direct_per_s']:.1f} calls/s, p99 {result['direct_p99_ms']:.2f} ms")
    print(f"explain over gRPC: {result['explain_per_s']:.1f} calls/s, p99 {result['explain_p99_ms']:.2f} ms; "
          f"direct: {result['direct_explain_per_s']:.1f} calls/s, p99 {result['direct_explain_p99_ms']:.2f} ms")
    print(f"events watched during a {args.tasks}-task burst: {result['events_per_s']:.1f}/s "
          f"(produced {result['events_produced_per_s']:.1f}/s, missed {result['events_missed']})")
    print(f"burst with watcher / without: {result['burst_tasks_per_s_with_watcher']:.1f} / "
          f"{result['burst_tasks_per_s_without']:.1f} tasks/s = {result['burst_ratio_with_watcher']:.3f} (goal >= 0.95; "
          f"the watcher reads {main_stream})")
    for k, ratio in result.get("burst_ratio_by_stream", {}).items():
        print(f"  with a {k} watcher: {ratio:.3f}")

    def us(v: float | None) -> str:
        return "?" if v is None else f"{v:.0f}"

    for k, cpu in result["cpu_us_per_event"].items():
        print(f"CPU per event streamed ({k}): operator actor {us(cpu['operator'])} us, watcher process {us(cpu['watcher'])} us "
              f"(the operator without a watcher: {result['operator_cpu_s_without'] or 0:.2f} s a burst)")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
