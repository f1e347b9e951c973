"""The CLI's tables on an 80-column terminal (issue 17): ``fabric status|nodes|jobs|bundles|pools|
explain`` rendered from fake data with long names and many GPUs; off a terminal no line is wider
than 80, ``--wide`` keeps every cell whole, ``--json`` parses; every command that talks to a
cluster takes ``--address HOST:PORT``.

The commands run through ``fabric.cli.main`` with the cluster replaced (``connect`` and
``FabricHandle`` patched): what a shell sees, without Ray.
"""

from __future__ import annotations

import argparse
import json

import pytest

from fabric.cli import build_parser, main
from fabric.cli.bundles_cmd import bundle_rows, format_bundle, format_bundles_table
from fabric.cli.jobs_cmd import format_job, format_jobs_table, job_rows
from fabric.cli.node import ELLIPSIS, NARROW, clip, fit_lines, format_status_table, gpus_cell, output_width, render_table, status_rows
from fabric.cli.nodes_cmd import NODES_HEADER, format_nodes_table, node_rows, resolve_pool
from fabric.cli.pools_cmd import format_pools, pools_view
from fabric.core.capabilities import GpuInfo, Limitations, NodeCapabilities
from fabric.core.jobs import JobState
from fabric.core.jobs.book import Binding, JobStatus
from fabric.core.jobs.bundles import BundleStatus
from fabric.core.placement import FleetView, NodeRecord, dry_run
from fabric.core.settings import FabricSettings
from fabric.runtime.client import build_requirement

NOW = 1_800_000_000.0
LONG = "render-farm-node-with-a-really-long-hostname.rack42.datacenter.example.internal"
H100 = "NVIDIA H100 80GB HBM3 with a long marketing name"
SETTINGS = FabricSettings.load({"pools": [
    {"name": "default", "tiers": [{"name": "onprem"},
                                  {"name": "burst-capacity-in-another-region", "scale_out": "elastic", "provider": "local",
                                   "max_nodes": 3, "candidate_shapes": [{"name": "cpu-box", "profile": "cpu-only-box"}]}]},
    {"name": "a-pool-whose-name-goes-on-and-on-for-a-while", "tiers": [{"name": "fixed-tier-with-a-long-name"}]}]})


def _caps(name: str, gpus: int = 0, model: str = H100, slots: int = 16) -> NodeCapabilities:
    devices = tuple(GpuInfo(vendor="nvidia", model=model, index=i, vram_mib=81559, discrete=True, cuda=True) for i in range(gpus))
    return NodeCapabilities(name=name, cpu_logical=64, cpu_physical=32, cpu_usable=64, memory_mib=512_000, gpus=devices,
                            limitations=Limitations(max_concurrent_tasks=slots))


def fleet() -> list[NodeRecord]:
    mixed = NodeCapabilities(name="mixed-gpu-box", cpu_logical=16, cpu_physical=8, cpu_usable=16, memory_mib=64_000,
                             gpus=tuple(GpuInfo(vendor="nvidia", model=m, index=i, discrete=True, cuda=True)
                                        for i, m in enumerate([H100, H100, "NVIDIA GeForce RTX 4070"])),
                             limitations=Limitations(max_concurrent_tasks=8))
    return [
        NodeRecord(node_id="a" * 56, name=LONG, capabilities=_caps(LONG, 8), running=12, last_seen=NOW - 0.4,
                   cordoned=True, flap_held=True, unhealthy=True, pool="a-pool-whose-name-goes-on-and-on-for-a-while",
                   pool_tier="fixed-tier-with-a-long-name"),
        NodeRecord(node_id="b" * 56, name="mixed-gpu-box", capabilities=mixed, running=1, last_seen=NOW - 4000),
        NodeRecord(node_id="c" * 56, name="cpu-box", capabilities=_caps("cpu-box", 0, slots=4), last_seen=None, launching=True,
                   spare=True, pool="default", pool_tier="burst-capacity-in-another-region"),
    ]


def jobs() -> list[JobStatus]:
    return [
        JobStatus("job-" + "f" * 40, "an-encoder-job-with-a-name-longer-than-any-column", JobState.RUNNING,
                  "channel-bundle-with-a-long-identifier", 1, Binding("a" * 56, "backup@3f9c1e2a"), 3,
                  history=((NOW - 90, "starting", ""), (NOW - 80, "running", "placed on " + LONG + " after " + "x" * 120))),
        JobStatus("job-0123456789ab", "Echo", JobState.PENDING),
    ]


def bundles() -> list[BundleStatus]:
    return [BundleStatus(bundle_id="channel-bundle-with-a-long-identifier", state="broken", replicas=2,
                         jobs={"0/an-encoder-job-with-a-name-longer-than-any-column": "gone-job",
                               "1/an-encoder-job-with-a-name-longer-than-any-column": "job-" + "f" * 40},
                         reasons=["an-encoder-job (replica 0): restart ceiling reached after 5 restarts in 3600 s; "
                                  "the essential job is lost", "and another reason " * 4])]


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


# -- the renderer ---------------------------------------------------------------------------------
def test_render_table_fits_by_gap_then_cut_then_drop_and_keeps_headers_whole():
    header = ("NAME", "COUNT", "NOTE")
    body = [("x" * 30, "7", "y" * 30)]
    whole, _ = render_table(header, body, None)
    assert whole[1] == "x" * 30 + "  7      " + "y" * 30  # two spaces between columns, COUNT padded to its header
    one_gap, _ = render_table(header, body, 67, right=("COUNT",))
    assert one_gap[1] == "x" * 30 + " " + "    7" + " " + "y" * 30 and len(one_gap[1]) == 67  # one space before any cut
    cut, left_out = render_table(header, body, 50, right=("COUNT",), shrink={"NAME": 10, "NOTE": 10})
    assert left_out == [] and max(len(x) for x in cut) <= 50
    assert cut[0].split() == ["NAME", "COUNT", "NOTE"]
    assert cut[1] == "x" * 12 + ELLIPSIS + "     7 " + "y" * 30  # the first listed is cut first, only as far as needed
    both, _ = render_table(header, body, 30, right=("COUNT",), shrink={"NAME": 10, "NOTE": 10})
    assert both[1] == "x" * 9 + ELLIPSIS + "     7 " + "y" * 12 + ELLIPSIS and len(both[1]) == 30
    dropped, left_out = render_table(header, body, 30, shrink={"NAME": 10}, drop=("NOTE",))
    assert left_out == ["NOTE"] and "NOTE" not in dropped[0] and max(len(x) for x in dropped) <= 30
    tiny, _ = render_table(header, body, 12)
    assert max(len(x) for x in tiny) <= 12  # the last resort cuts each line


def test_clip_and_fit_lines_cut_wide_and_control_characters():
    assert clip("abc", 3) == "abc" and clip("abcdef", 4) == "abc" + ELLIPSIS and clip("a\tb\nc", 10) == "a b c"
    assert clip("界" * 10, 5).endswith(ELLIPSIS)  # double-width cells counted as two
    text = "head\n    " + " ".join(["word"] * 40) + "\n  " + "z" * 200
    fitted = fit_lines(text, 40)
    assert widest(fitted) <= 40 and fitted.splitlines()[0] == "head"
    assert fitted.splitlines()[2].startswith("        word")  # a continuation hangs four past the line's indent
    assert fit_lines(text, None) == text


def test_gpus_cell_counts_runs_of_one_model():
    assert gpus_cell([H100] * 8) == f"8x {H100}"
    assert gpus_cell(["A", "A", "B"]) == "2x A, B" and gpus_cell([]) == "-"


def test_output_width_is_80_off_a_terminal_and_none_with_wide():
    assert output_width(argparse.Namespace(wide=False), isatty=False) == NARROW == 80
    assert output_width(argparse.Namespace(wide=True), isatty=False) is None
    assert output_width(argparse.Namespace(wide=True), isatty=True) is None


# -- each command's table, pure ---------------------------------------------------------------------
def test_nodes_rows_resolve_the_default_pool_and_the_table_fits_80():
    rows = node_rows(fleet(), NOW, SETTINGS)
    by_name = {r["name"]: r for r in rows}
    assert by_name["mixed-gpu-box"]["pool"] == "default" and by_name["mixed-gpu-box"]["pool_tier"] == "onprem"
    assert by_name[LONG]["gpus"] == [H100] * 8 and by_name[LONG]["flags"] == ["cordoned", "flap-held", "unhealthy"]
    assert by_name["cpu-box"]["flags"] == ["launching", "spare"] and by_name["cpu-box"]["last_seen_ago_s"] is None
    json.loads(json.dumps(rows))
    table = format_nodes_table(rows, NOW, 80)
    lines = table.splitlines()
    assert widest(table) <= 80 and len(lines) == 4
    assert lines[0].split() == ["NAME", "TIER", "STATUS", "RUN/MAX", "GPUS", "POOL/TIER", "LAST", "SEEN"]
    assert [ln.split()[0][:8] for ln in lines[1:]] == ["mixed-gp", "render-f", "cpu-box"]  # best tier first, then by name
    assert ELLIPSIS in lines[2] and "12/16" in lines[2] and lines[2].endswith("0.4s ago")
    assert "cordoned" in lines[2] and lines[1].endswith("1.1h ago") and lines[3].endswith("never")
    wide = format_nodes_table(rows, NOW, None)
    assert LONG in wide and f"8x {H100}" in wide and "a-pool-whose-name-goes-on-and-on-for-a-while/fixed-tier-with-a-long-name" in wide
    assert len(wide.splitlines()) == 4 and widest(wide) > 80
    assert resolve_pool(None, None, None) == (None, None)
    assert resolve_pool(SETTINGS, "a-pool-whose-name-goes-on-and-on-for-a-while", None)[1] == "fixed-tier-with-a-long-name"
    assert format_nodes_table([], NOW, 80).splitlines() == [format_nodes_table([], NOW, 80).splitlines()[0], "(no nodes registered)"]
    assert tuple(format_nodes_table([], NOW, 80).splitlines()[0].replace("LAST SEEN", "LAST_SEEN").split()) == \
        tuple(h.replace(" ", "_") for h in NODES_HEADER)


def test_status_table_fits_80_keeps_its_columns_and_says_what_it_left_out_when_narrower():
    rows = status_rows(fleet(), NOW)
    roomy = format_status_table(rows, NOW, 100)  # room for each column, long cells cut
    assert widest(roomy) <= 100 and "left out" not in roomy and roomy.splitlines()[0].split()[-1] == "NODE"
    assert "aaaaaaaaaaaa" in roomy and ELLIPSIS in roomy
    table = format_status_table(rows, NOW, 80)  # a node id is whole or left out, never cut
    assert widest(table) <= 80 and table.splitlines()[-1] == "(NODE left out on 80 columns; --json has every field)"
    assert table.splitlines()[0].split()[:3] == ["NAME", "TIER", "GPUS"] and "active cordoned" in table
    narrower = format_status_table(rows, NOW, 50)
    assert widest(narrower) <= 50 and "GPUS and NODE left out" in narrower
    assert LONG in format_status_table(rows, NOW, None)


def test_jobs_table_and_detail_fit_80_and_a_cut_job_id_is_still_its_prefix():
    rows = job_rows(jobs(), {"a" * 56: LONG})
    table = format_jobs_table(rows, 80)
    lines = table.splitlines()
    assert widest(table) <= 80 and lines[0].split() == ["JOB", "NAME", "STATE", "NODE", "INSTANCE", "RESTARTS/H", "BUNDLE"]
    first = lines[1].split()[0]
    assert first.endswith(ELLIPSIS) and ("job-" + "f" * 40).startswith(first[:-1])
    assert lines[2].split() == ["job-0123456789ab", "Echo", "pending", "-", "-", "0", "-"]  # short rows stay whole
    row = job_rows(jobs()[:1], {"a" * 56: LONG}, history=True)[0]
    detail = format_job(row, NOW, 80)
    assert widest(detail) <= 80 and "x" * 60 in detail.replace("\n", "")  # the long reason wraps, nothing is lost
    json.loads(json.dumps(rows))


def test_bundles_table_and_detail_fit_80():
    rows = bundle_rows(bundles(), jobs(), {"a" * 56: LONG})
    table = format_bundles_table(rows, 80)
    assert widest(table) <= 80 and table.splitlines()[0].split() == ["BUNDLE", "STATE", "REPLICAS", "JOBS", "REASON"]
    assert "broken" in table and ELLIPSIS in table
    detail = format_bundle(rows[0], 80)
    assert widest(detail) <= 80 and "restart ceiling reached" in detail
    assert "channel-bundle-with-a-long-identifier" in format_bundles_table(rows, None)
    json.loads(json.dumps(rows))


def test_pools_fit_80_with_long_pool_names():
    spares = [{"pool": "a-pool-whose-name-goes-on-and-on-for-a-while", "target": 2, "live": [], "pending": [],
               "consumed": [], "warm_for": [f"template-{i}-with-a-long-name" for i in range(6)], "reserved_for": [],
               "exclusive": False, "backing_off": False}]
    view = pools_view(SETTINGS, fleet(), {"pending": [], "held": [], "instances": []}, spares)
    text = format_pools(view)
    assert widest(text) <= 80 and "template-5-with-a-long-name" in text  # the warm-for list wraps
    json.loads(json.dumps(view, default=str))


def _explain_out(verbose: bool = True) -> dict:
    records = [r.evolve(cordoned=False, flap_held=False, unhealthy=False, launching=False) for r in fleet()]
    d = dry_run(FleetView(records, SETTINGS), build_requirement({"min_tier": "cpu_ffmpeg", "num_cpus": 1}))
    return {"decision": d.to_dict(), "verdicts": {}, "survivors": [], "text": d.explain(verbose=verbose)}


# -- the commands, end to end through main() with the cluster faked --------------------------------
class _Remote:
    def __init__(self, value):
        self.value = value

    def remote(self, *args, **kwargs):
        return self.value


class FakeHandle:
    def nodes(self):
        return fleet()

    def records(self):
        return [argparse.Namespace(node_id=r.node_id, name=r.name) for r in fleet()]

    def jobs(self):
        return jobs()

    def bundles(self):
        return bundles()

    def settings_in_force(self):
        return SETTINGS

    def scheduler_nodes(self):
        return fleet()

    def provisions(self):
        return {"pending": [{"provision_id": "p1", "pool": "default", "pool_tier": "burst-capacity-in-another-region",
                             "shape": "cpu-box-with-a-long-shape-name", "age_s": 3.2, "timeout_in_s": 596.8}],
                "held": [], "instances": []}

    def spares(self):
        return []


class FakeRay:
    def __init__(self):
        self.shut = False

    def shutdown(self):
        self.shut = True

    def get_actor(self, name, namespace=None):
        return argparse.Namespace(explain=_Remote(_explain_out()))

    def get(self, value, timeout=None):
        return value


@pytest.fixture
def cluster(monkeypatch):
    import fabric.cli.connect
    import fabric.cli.ops
    import fabric.runtime.control

    fake = FakeRay()
    seen: list[str] = []

    def connect(address, command, **kw):
        seen.append(address)
        return fake

    monkeypatch.setattr(fabric.cli.connect, "connect", connect)
    monkeypatch.setattr(fabric.cli.ops, "connect", connect)
    monkeypatch.setattr(fabric.runtime.control, "FabricHandle", FakeHandle)
    return seen


COMMANDS = [["status"], ["nodes"], ["jobs"], ["jobs", "job-ffff"], ["bundles"],
            ["bundles", "channel-bundle-with-a-long-identifier"], ["pools"], ["explain", "--min-tier", "cpu_ffmpeg", "--verbose"]]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: "-".join(a)[:30])
def test_each_command_fits_80_columns_off_a_terminal_and_its_json_parses(cluster, capsys, argv):
    assert main([*argv, "--address", "10.1.2.3:6379"]) == 0
    out = capsys.readouterr().out
    assert out.strip() and widest(out) <= 80, out
    assert cluster == ["10.1.2.3:6379"]  # the address reached the connection
    assert main([*argv, "--address", "10.1.2.3:6379", "--json"]) == 0
    json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("argv", [["status"], ["nodes"], ["jobs"], ["bundles"], ["explain", "--min-tier", "cpu_ffmpeg", "--verbose"]],
                         ids=lambda a: a[0])
def test_wide_keeps_every_cell_whole(cluster, capsys, argv):
    assert main([*argv, "--wide"]) == 0
    out = capsys.readouterr().out
    assert widest(out) > 80 and cluster == ["auto"]


# Commands that never talk to a running cluster: they probe this machine, start a head, or print.
LOCAL_ONLY = {"probe", "start-head", "settings validate", "settings schema", "settings example"}


def _commands(parser, prefix=""):
    """(name, parser) of every command, a command with subcommands as its subcommands (``settings show``)."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is None:
        return [(prefix, parser)]
    return [found for name, p in sub.choices.items() for found in _commands(p, f"{prefix} {name}".strip())]


def test_every_command_that_talks_to_a_cluster_takes_address():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in ("status", "nodes", "jobs", "bundles", "pools", "explain", "cordon", "uncordon"):
        assert name in sub.choices, name
    missing = []
    for name, p in _commands(parser):
        if name in LOCAL_ONLY:
            continue
        if not any("--address" in a.option_strings for a in p._actions):
            missing.append(name)
    assert missing == [], f"commands without --address: {missing}"


def test_a_bad_address_is_refused_before_anything_connects(capsys):
    assert main(["nodes", "--address", "not-an-address"]) == 2
    assert "is not HOST:PORT" in capsys.readouterr().err

