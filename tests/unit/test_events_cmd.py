"""``fabric events`` (issue 17) over a fake handle, no Ray: registered with its options; the newest
``--limit`` events by default, those after ``--since`` otherwise, ``--kind`` passed to the log;
one line per event in 80 columns (seq, time, kind, a summary of the data) or one JSON object per
line; ``--follow`` prints what comes next, once each, and says once that a read failed; refused
arguments exit 2, a fabric that is not up exits 1."""

from __future__ import annotations

import io
import json

from fabric.cli import build_parser
from fabric.cli.events_cmd import events_with, format_event, summary

AT = 1_700_000_000.0


class Handle:
    def __init__(self, events, fail=None):
        self.log, self.calls, self.fail = list(events), [], fail

    def events(self, since=0, kinds=None, limit=1000):
        self.calls.append((since, kinds, limit))
        if self.fail is not None:
            raise self.fail
        found = [e for e in self.log if e["seq"] > since and (not kinds or e["kind"] in kinds)]
        return found[:limit] if limit > 0 else found[limit:]


def ev(seq, kind, **data):
    return {"seq": seq, "kind": kind, "at": AT + seq, "stimulus_id": f"s-{seq}", "data": data}


LOG = [ev(1, "node_joined", node_id="f" * 56, name="ws-1", tier="cpu_ffmpeg", pool="default", cause="registered"),
       ev(2, "job_state", job_id="encode-1", **{"from": "pending", "to": "starting"}, reason=""),
       ev(3, "node_changed", node_id="a" * 56, name=None, fields={"cordoned": True, "flap_held": True}, cause="x" * 200),
       ev(4, "node_lost", node_id="f" * 56, name="ws-1", cause="ray: node dead")]


def run(argv, handle, **kw):
    args = build_parser().parse_args(["events", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = events_with(handle, args, out=out, err=err, sleep=lambda s: None, **kw)
    return code, out.getvalue(), err.getvalue()


def test_registered_with_its_options():
    args = build_parser().parse_args(["events", "--since", "5", "--kind", "a", "--kind", "b", "--follow", "--json"])
    assert (args.since, args.kind, args.follow, args.json, args.limit, args.address) == (5, ["a", "b"], True, True, 50, "auto")
    assert args.func.__name__ == "_run"


def test_the_newest_events_as_80_column_lines():
    h = Handle(LOG)
    code, out, _ = run(["--limit", "3"], h)
    assert code == 0 and h.calls == [(0, None, -3)]
    lines = out.splitlines()
    assert [int(line.split()[0]) for line in lines] == [2, 3, 4] and all(len(line) <= 80 for line in lines)
    assert "job_state" in lines[0] and "pending->starting" in lines[0] and "job_id=encode-1" in lines[0]
    assert lines[1].endswith("...") and "node=aaaaaaaaaaaa" in lines[1] and "fields=cordoned,flap_" in lines[1]  # cut at 80
    assert "name=ws-1" in lines[2] and "node=" not in lines[2] and "cause=ray: node dead" in lines[2]


def test_since_kinds_and_json():
    h = Handle(LOG)
    code, out, _ = run(["--since", "1", "--kind", "node_lost", "--kind", "node_joined", "--json"], h)
    assert code == 0 and h.calls == [(1, ["node_lost", "node_joined"], 50)]
    assert [json.loads(line) for line in out.splitlines()] == [LOG[3]]
    code, out, _ = run(["--since", "9"], Handle(LOG))
    assert code == 0 and out.strip() == "(no events)"


def test_follow_prints_what_comes_once_each_and_a_failed_read_once():
    h = Handle(LOG[:2])
    reads = iter([LOG[2:3], RuntimeError("restarting"), RuntimeError("restarting"), [], LOG[3:]])
    orig = h.events

    def events(since=0, kinds=None, limit=1000):
        if not h.calls:
            return orig(since, kinds, limit)
        h.calls.append((since, kinds, limit))
        r = next(reads)
        if isinstance(r, Exception):
            raise r
        return [e for e in r if e["seq"] > since]

    h.events = events
    code, out, err = run(["--follow"], h, follows=5)
    assert code == 0 and [int(line.split()[0]) for line in out.splitlines()] == [1, 2, 3, 4]
    assert [c[0] for c in h.calls[1:]] == [2, 3, 3, 3, 3]  # each poll asks after the last one printed
    assert err.count("restarting") == 1


def test_refused_arguments_and_no_fabric():
    for argv in (["--limit", "0"], ["--since", "-1"], ["--follow", "--interval", "0"]):
        code, _, err = run(argv, Handle(LOG))
        assert code == 2 and "fabric events:" in err
    code, _, err = run([], Handle([], fail=RuntimeError("the fabric is not up on this Ray cluster")))
    assert code == 1 and "not up" in err


def test_summary_and_format():
    assert summary({}) == "(no data)" and summary(None) == "(no data)"
    assert summary({"job_id": "j", "jobs": {"a": 1, "b": 2}, "ids": [1, 2, 3, 4], "x": 0.5, "skip": None}) == \
        "job_id=j ids=[4] jobs={2} x=0.5"
    line = format_event({"seq": 12345, "kind": "k", "at": "?", "data": {}})
    assert line.split() == ["12345", "--:--:--", "k", "(no", "data)"]
