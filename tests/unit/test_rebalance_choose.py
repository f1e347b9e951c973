"""Which jobs move up a tier when better capacity joins (issue 16, the reconfiguration
engine), pure: only jobs below their ``min_tier``, none inside its cool-down, the furthest below
first then the longest running then by id, at most ``max_concurrent - in_flight``, nothing when off."""

from __future__ import annotations

import pytest

from fabric.core.errors import RequirementError
from fabric.core.jobs.rebalance import Candidate, choose
from fabric.core.settings_moves import RebalanceSettings
from fabric.core.tiers import ComputeTier as T

NOW = 10_000.0


def cand(job_id, node_tier=T.CPU_FFMPEG, min_tier=T.GPU_CUDA, last_moved_at=None, running_since=0.0) -> Candidate:
    return Candidate(job_id, node_tier, min_tier, last_moved_at, running_since)


def pick(cands, in_flight=0, **kw) -> list[str]:
    return choose(cands, in_flight=in_flight, now=NOW, settings=RebalanceSettings(**{"max_concurrent": 10, **kw}))


def test_only_jobs_below_their_min_tier_move():
    got = pick([cand("below"), cand("at", node_tier=T.GPU_CUDA), cand("above", node_tier=T.GPU_CUDA, min_tier=T.BATCH)])
    assert got == ["below"]


def test_a_job_moved_within_the_cooldown_stays():
    got = pick([cand("recent", last_moved_at=NOW - 599.9), cand("cooled", last_moved_at=NOW - 600.0), cand("never")],
               cooldown_s=600)
    assert got == ["cooled", "never"]
    assert pick([cand("recent", last_moved_at=NOW)], cooldown_s=0) == ["recent"]


def test_furthest_below_first_then_longest_running_then_id():
    cands = [
        cand("one-step-old", node_tier=T.GPU_VAAPI, running_since=0.0),       # 1 tier below
        cand("far-new", node_tier=T.RELAY, running_since=9_000.0),            # 10 tiers below
        cand("mid-b", node_tier=T.CPU_FFMPEG, running_since=50.0),            # 3 below
        cand("mid-a", node_tier=T.CPU_FFMPEG, running_since=50.0),
        cand("mid-old", node_tier=T.CPU_FFMPEG, running_since=10.0),
    ]
    assert pick(cands) == ["far-new", "mid-old", "mid-a", "mid-b", "one-step-old"]
    assert pick(list(reversed(cands))) == pick(cands)  # the order given does not matter


def test_at_most_max_concurrent_minus_in_flight():
    cands = [cand(f"j{i}", running_since=float(i)) for i in range(5)]
    assert pick(cands, max_concurrent=2) == ["j0", "j1"]
    assert pick(cands, max_concurrent=2, in_flight=1) == ["j0"]
    assert pick(cands, max_concurrent=2, in_flight=2) == []
    assert pick(cands, max_concurrent=2, in_flight=5) == []
    assert choose(cands, in_flight=0, now=NOW, settings=RebalanceSettings()) == ["j0"]  # default: one at a time


def test_off_moves_nothing():
    assert pick([cand("below")], enabled=False) == []
    assert pick([]) == []


@pytest.mark.parametrize("kw, field", [({"in_flight": -1}, "in_flight"), ({"in_flight": 1.5}, "in_flight"),
                                       ({"now": float("nan")}, "now")])
def test_bad_input_names_the_field(kw, field):
    with pytest.raises(RequirementError) as err:
        choose([cand("a")], **{"in_flight": 0, "now": NOW, "settings": RebalanceSettings(), **kw})
    assert err.value.field == field


def test_a_job_listed_twice_is_refused():
    with pytest.raises(RequirementError) as err:
        pick([cand("a"), cand("a", node_tier=T.RELAY)])
    assert err.value.field == "candidates"


def test_shortfall_counts_tiers_by_rank():
    assert cand("a", node_tier=T.CPU_FFMPEG, min_tier=T.GPU_CUDA).shortfall == 3
    assert cand("a", node_tier=T.GPU_CUDA, min_tier=T.CPU_FFMPEG).shortfall == -3
