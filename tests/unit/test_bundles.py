"""Bundle models: shape checks naming the field, ``to_spec`` defaults, expansion, placement context."""

import pickle
from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from fabric.core.errors import InvalidSpecError, RequirementError
from fabric.core.jobs.bundles import Bundle, BundleJob, BundleStatus, ReplicaJob, ResiliencePolicy
from fabric.core.jobs.spec import JobSpec
from fabric.core.jobs.states import BundleState
from fabric.core.placement import Peer, Requirement
from fabric.core.placement.synth import mixed_settings
from fabric.core.tiers import ComputeTier


class Encoder:
    def __init__(self, channel, bitrate=1000):
        self.channel, self.bitrate = channel, bitrate


def bundle(**kw):
    kw.setdefault("bundle_id", "channel-1")
    kw.setdefault("jobs", [BundleJob(name="encode", cls=Encoder, args=("ch1",))])
    return Bundle(**kw)


def field_of(exc: ValidationError) -> set:
    return {e["loc"] for e in exc.errors()}


# -- shape: pydantic refuses bad fields, naming them ----------------------------------------------
@pytest.mark.parametrize("kw, loc", [
    ({"name": ""}, ("name",)),
    ({"name": "a\x00b"}, ("name",)),
    ({"name": "x" * 129}, ("name",)),
    ({"on_runtime_failure": "retry"}, ("on_runtime_failure",)),
    ({"max_restarts_per_hour": -1}, ("max_restarts_per_hour",)),
    ({"max_restarts_per_hour": True}, ("max_restarts_per_hour",)),
    ({"essential": "yes"}, ("essential",)),
    ({"start_mode": "lazy"}, ("start_mode",)),
    ({"exclusive": 1}, ("exclusive",)),
    ({"co_locate_with": "b"}, ("co_locate_with",)),
    ({"separate_from": [""]}, ("separate_from", 0)),
    ({"requirement": {"num_cpus": -1}}, ("requirement",)),
    ({"requirement": {"bogus": 1}}, ("requirement",)),
    ({"requirement": 5}, ("requirement",)),
    ({"colocate_with": ["b"]}, ("colocate_with",)),
    ({"start_at": datetime(2030, 1, 1)}, ("start_at",)),
    ({"start_at": -5}, ("start_at",)),
    ({"start_at": "tomorrow"}, ("start_at",)),
    ({"drain_strategy": "teleport"}, ("drain_strategy",)),
])
def test_bundle_job_refuses_a_bad_field_naming_it(kw, loc):
    with pytest.raises(ValidationError) as err:
        BundleJob(**{"name": "a", **kw})
    assert loc in field_of(err.value)


def test_a_bad_requirement_value_names_the_requirement_field_too():
    with pytest.raises(ValidationError) as err:
        BundleJob(name="a", requirement={"min_tier": "gpu_quantum"})
    assert "min_tier" in str(err.value)


@pytest.mark.parametrize("kw, loc", [
    ({"bundle_id": ""}, ("bundle_id",)),
    ({"bundle_id": "tab\there"}, ("bundle_id",)),
    ({"bundle_id": "b" * 129}, ("bundle_id",)),
    ({"jobs": []}, ("jobs",)),
    ({"jobs": [BundleJob(name=f"j{i}") for i in range(65)]}, ("jobs",)),
    ({"on_launch": "prefer_spare"}, ("on_launch",)),
    ({"intra_zone": "strict"}, ("intra_zone",)),
    ({"pool": ""}, ("pool",)),
    ({"resilience": {"same_node": "never"}}, ("resilience", "same_node")),
    ({"replicas": 3}, ("replicas",)),
])
def test_bundle_refuses_a_bad_field_naming_it(kw, loc):
    with pytest.raises(ValidationError) as err:
        bundle(**kw)
    assert loc in field_of(err.value)


def test_models_are_frozen_and_pickle():
    b = bundle(resilience=ResiliencePolicy(pool="edge"))
    with pytest.raises(ValidationError):
        b.pool = "other"
    again = pickle.loads(pickle.dumps(b))
    assert again == b and again.jobs[0].cls is Encoder


def test_requirement_dict_and_object():
    j = BundleJob(name="a", requirement={"min_tier": "gpu_vaapi", "num_cpus": 2})
    assert j.requirement == Requirement(min_tier="gpu_vaapi", num_cpus=2)
    r = Requirement(min_tier="gpu_cuda", fallback=False)
    assert BundleJob(name="a", requirement=r).requirement is r


# -- to_spec ------------------------------------------------------------------------------------------
def test_to_spec_takes_jobspec_defaults_and_sets_the_pool():
    spec = BundleJob(name="a", requirement={"min_tier": "gpu_vaapi"}, exclusive=True, single_use=True,
                     co_locate_with=["b"], start_mode="manual").to_spec("edge")
    assert isinstance(spec, JobSpec)
    assert spec.requirement.pool == "edge" and spec.requirement.exclusive and spec.requirement.min_tier is ComputeTier.GPU_VAAPI
    assert (spec.on_runtime_failure, spec.essential, spec.max_restarts_per_hour) == ("avoid_spare", True, None)
    assert spec.co_locate_with == ("b",) and spec.single_use and spec.start_mode == "manual"
    assert BundleJob(name="a", requirement={"pool": "default"}).to_spec(None).requirement.pool == "default"


def test_to_spec_fields_left_none_take_the_class_defaults():
    defaults = JobSpec(name="Encoder", requirement=Requirement(min_tier="gpu_cuda", capabilities=["cuda"]),
                       on_runtime_failure="prefer_spare", max_restarts_per_hour=2, essential=False, template="enc",
                       call_timeout_s=5.0, health_period_s=2.0)
    plain = BundleJob(name="a").to_spec("default", defaults)
    assert plain.requirement == Requirement(min_tier="gpu_cuda", capabilities=["cuda"], pool="default")
    assert (plain.on_runtime_failure, plain.max_restarts_per_hour, plain.essential, plain.template) == ("prefer_spare", 2, False, "enc")
    assert (plain.call_timeout_s, plain.health_period_s) == (5.0, 2.0)
    own = BundleJob(name="a", on_runtime_failure="drop", essential=True, template="mux", max_restarts_per_hour=0,
                    requirement={"num_cpus": 3}).to_spec(None, defaults)
    assert (own.on_runtime_failure, own.essential, own.template, own.max_restarts_per_hour) == ("drop", True, "mux", 0)
    # the keys given override the class's requirement; the others stay
    assert own.requirement == Requirement(min_tier="gpu_cuda", capabilities=["cuda"], num_cpus=3)
    # a Requirement object is used as it is
    r = Requirement(min_tier="relay")
    assert BundleJob(name="a", requirement=r).to_spec(None, defaults).requirement == r


def test_start_at_and_drain_strategy_reach_the_spec_and_beat_the_class_options():
    when = datetime(2030, 1, 1, 6, 0, tzinfo=timezone.utc)
    job = BundleJob(name="a", start_at=when, drain_strategy="handover")
    assert job.start_at == when.timestamp()  # held as epoch seconds, as JobSpec holds it
    spec = job.to_spec("default")
    assert (spec.start_at, spec.drain_strategy) == (when.timestamp(), "handover")
    defaults = JobSpec(name="Encoder", start_at=when.timestamp() + 60, drain_strategy="overlap")
    inherited = BundleJob(name="a").to_spec("default", defaults)
    assert (inherited.start_at, inherited.drain_strategy) == (when.timestamp() + 60, "overlap")
    own = BundleJob(name="a", start_at=when.timestamp(), drain_strategy="stop_then_start").to_spec("default", defaults)
    assert (own.start_at, own.drain_strategy) == (when.timestamp(), "stop_then_start")
    assert (BundleJob(name="a").to_spec(None).start_at, BundleJob(name="a").to_spec(None).drain_strategy) == (None, None)
    with pytest.raises(ValidationError, match="timezone"):
        BundleJob(name="a", start_at=datetime(2030, 1, 1))


def test_operation_preset_with_overrides():
    s = mixed_settings()
    j = BundleJob(name="a", requirement={"operation": "vaapi_encode", "num_cpus": 3})
    assert j.operation == "vaapi_encode"
    spec = j.to_spec("default", settings=s)
    assert spec.requirement.min_tier is ComputeTier.GPU_VAAPI and spec.requirement.floor is ComputeTier.CPU_FFMPEG
    assert spec.requirement.num_cpus == 3
    with pytest.raises(InvalidSpecError) as err:
        BundleJob(name="a", operation="nope").to_spec(None, settings=s)
    assert err.value.field == "operation"
    with pytest.raises(ValidationError, match="operation"):
        BundleJob(name="a", operation="flac", requirement=Requirement())
    with pytest.raises(ValidationError, match="operation"):
        BundleJob(name="a", operation="flac", requirement={"operation": "braid"})


def test_to_spec_wraps_an_inconsistent_job_in_invalid_spec_error_naming_the_field():
    with pytest.raises(InvalidSpecError) as err:
        BundleJob(name="a", single_use=True).to_spec(None)
    assert err.value.field == "single_use" and isinstance(err.value.__cause__, RequirementError)
    with pytest.raises(InvalidSpecError) as err:
        BundleJob(name="a", co_locate_with=["a"]).to_spec(None)
    assert err.value.field == "co_locate_with"


# -- expansion --------------------------------------------------------------------------------------
def test_expand_without_resilience_is_one_replica():
    b = bundle()
    assert b.replica_count == 1
    [rj] = b.expand()
    assert isinstance(rj, ReplicaJob) and (rj.replica, rj.name, rj.key) == (0, "encode", "0/encode")
    assert rj.spec.requirement.pool == "default" and rj.cls is Encoder and rj.args == ("ch1",)


def test_expand_backup_from_its_own_pool_with_overrides_merged():
    b = bundle(pool="default", resilience=ResiliencePolicy(pool="edge"), jobs=[
        BundleJob(name="encode", cls=Encoder, args=("ch1",), kwargs={"bitrate": 1000, "tag": "x"},
                  backup_overrides={"bitrate": 500}),
        BundleJob(name="mux", co_locate_with=["encode"]),
    ])
    assert b.replica_count == 2
    out = b.expand()
    assert [(r.replica, r.name) for r in out] == [(0, "encode"), (0, "mux"), (1, "encode"), (1, "mux")]
    assert [r.spec.requirement.pool for r in out] == ["default", "default", "edge", "edge"]
    assert out[0].kwargs == {"bitrate": 1000, "tag": "x"}
    assert out[2].kwargs == {"bitrate": 500, "tag": "x"}
    assert b.jobs[0].kwargs == {"bitrate": 1000, "tag": "x"}  # the bundle is not changed


def test_expand_backup_defaults_to_the_bundle_pool_and_reads_class_defaults():
    b = bundle(pool="edge", resilience=ResiliencePolicy())
    defaults = JobSpec(name="Encoder", on_runtime_failure="prefer_spare", template="enc")
    out = b.expand(lambda cls: defaults if cls is Encoder else None)
    assert [r.spec.requirement.pool for r in out] == ["edge", "edge"]
    assert all(r.spec.on_runtime_failure == "prefer_spare" and r.spec.template == "enc" for r in out)


def test_replica_and_job_lookups_name_the_field():
    b = bundle()
    with pytest.raises(InvalidSpecError) as err:
        b.replica_pool(1)
    assert err.value.field == "replica"
    with pytest.raises(InvalidSpecError) as err:
        b.job("nope")
    assert err.value.field == "job"
    with pytest.raises(InvalidSpecError):
        b.context(0, "nope")


# -- rules as groups -----------------------------------------------------------------------------------
def test_co_location_groups_are_transitive_and_same_node_default_joins_rule_less_jobs():
    jobs = [BundleJob(name="a", co_locate_with=["b"]), BundleJob(name="b"), BundleJob(name="c", co_locate_with=["b"]),
            BundleJob(name="d"), BundleJob(name="e"), BundleJob(name="f", separate_from=["a"])]
    assert bundle(jobs=jobs).co_location_groups() == [frozenset("abc"), frozenset("d"), frozenset("e"), frozenset("f")]
    # b, d, e declare no rule: one group with same_node_default (and a, c join through b)
    assert bundle(jobs=jobs, same_node_default=True).co_location_groups() == [frozenset("abcde"), frozenset("f")]
    b = bundle(jobs=jobs)
    assert b.co_located_with("c") == {"a", "b"}
    assert b.separated_from("a") == {"f"} and b.separated_from("f") == {"a"}


# -- placement context ---------------------------------------------------------------------------------
def resilient(**kw):
    return bundle(resilience=ResiliencePolicy(same_node="forbid", same_zone="allow", same_cloud="forbid"), jobs=[
        BundleJob(name="encode", on_runtime_failure="prefer_spare", template="enc"),
        BundleJob(name="mux", co_locate_with=["encode"], separate_from=["probe"]),
        BundleJob(name="probe"),
    ], **kw)


def test_context_backup_carries_the_resilience_flags():
    b = resilient()
    ctx = b.context(1, "encode", other_node="n0", other_zone="z0", other_cloud="aws")
    assert (ctx.replica_index, ctx.job) == (1, "encode")
    assert (ctx.same_node, ctx.same_az, ctx.same_cloud) == ("forbid", "allow", "forbid")
    assert (ctx.other_node, ctx.other_zone, ctx.other_cloud) == ("n0", "z0", "aws")
    assert ctx.resilience_forbids


def test_context_primary_carries_no_resilience_unless_recovering_with_the_backup_placed():
    b = resilient()
    first = b.context(0, "encode")
    assert (first.same_node, first.same_az, first.same_cloud) == ("allow",) * 3 and not first.resilience_forbids
    not_placed = b.context(0, "encode", recovering=True)
    assert not not_placed.resilience_forbids
    back = b.context(0, "encode", recovering=True, other_node="n1", exclude_nodes=["n0"])
    assert (back.same_node, back.same_az, back.same_cloud) == ("forbid", "allow", "forbid") and back.resilience_forbids
    assert back.exclude_nodes == frozenset({"n0"})


def test_context_rules_peers_and_policies():
    b = resilient(on_launch="allow_spare", override_reservation=True, intra_zone="hard")
    ctx = b.context(0, "mux", peers=[("encode", "n1", "z1"), Peer(job="probe", node_id="n2")])
    assert ctx.co_locate_with == ("encode",) and ctx.separate_from == ("probe",)
    assert ctx.co_locate_nodes == {"n1"} and ctx.separate_nodes == {"n2"} and ctx.peer_zones == {"z1"}
    assert (ctx.same_node_default, ctx.intra_zone) == (False, "hard")
    assert (ctx.launch_policy, ctx.override_reservation, ctx.recovering) == ("allow_spare", True, False)
    # the separation holds both ways: probe keeps away from mux
    assert b.context(0, "probe").separate_from == ("mux",)
    # encode co-locates with mux although only mux names it
    assert b.context(0, "encode").co_locate_with == ("mux",)
    # peers' rule_less comes from the bundle, whatever the caller said
    assert b.context(0, "encode", peers=[Peer(job="mux", node_id="n1", rule_less=True)]).peers[0].rule_less is False


def test_context_same_node_default_groups_rule_less_jobs():
    b = bundle(same_node_default=True, jobs=[BundleJob(name="a"), BundleJob(name="b"), BundleJob(name="c", separate_from=["a"])])
    ctx = b.context(0, "b", peers=[("a", "n1"), ("c", "n2")])
    assert ctx.same_node_default and ctx.co_locate_with == ("a",) and ctx.co_locate_nodes == {"n1"}
    assert b.context(0, "c").co_locate_with == () and b.context(0, "c").separate_from == ("a",)


def test_context_spare_policy_launch_recovery_and_later_placements():
    b = resilient()
    launch = b.context(0, "encode")
    assert launch.launch_policy == "avoid_spare" and launch.avoid_spares and launch.template == "enc"
    rec = b.context(0, "encode", recovering=True)
    assert rec.recovering and rec.on_runtime_failure == "prefer_spare" and rec.prefer_spares and not rec.avoid_spares
    later = b.context(0, "mux", first_placement=False, target_node="n9")
    assert later.launch_policy == "allow_spare" and not later.avoid_spares and later.target_node == "n9"
    # the expanded spec's policy wins over the bundle job's own fields
    spec = JobSpec(name="mux", on_runtime_failure="avoid_spare", template="tpl")
    ctx = b.context(0, "mux", recovering=True, spec=spec, job_id="j-1")
    assert (ctx.on_runtime_failure, ctx.template, ctx.job_id) == ("avoid_spare", "tpl", "j-1") and ctx.avoid_spares


def test_context_recovering_a_drop_job_is_refused_naming_the_field():
    b = bundle(jobs=[BundleJob(name="a", on_runtime_failure="drop")])
    with pytest.raises(RequirementError) as err:
        b.context(0, "a", recovering=True)
    assert err.value.field == "on_runtime_failure"


def test_context_refuses_a_malformed_peer():
    with pytest.raises(InvalidSpecError) as err:
        resilient().context(0, "mux", peers=["encode"])
    assert err.value.field == "peers"


# -- status ---------------------------------------------------------------------------------------------
def test_bundle_status():
    st = BundleStatus(bundle_id="b", state=BundleState.BROKEN, replicas=2, jobs={"0/encode": "j1"}, reasons=["ceiling"])
    assert st.state == "broken" and st.jobs == {"0/encode": "j1"}
    with pytest.raises(ValidationError) as err:
        BundleStatus(bundle_id="b", state="gone", replicas=1)
    assert ("state",) in field_of(err.value)
    with pytest.raises(ValidationError) as err:
        BundleStatus(bundle_id="b", state="live", replicas=3)
    assert ("replicas",) in field_of(err.value)


def test_a_co_location_group_inherits_its_members_separations():
    # b co-locates with a; c keeps away from a. When a and b are both re-placed after their node
    # died and b goes first, b must already keep off c's node: a could never join it there.
    b = bundle(jobs=[BundleJob(name="a"), BundleJob(name="b", co_locate_with=["a"]), BundleJob(name="c", separate_from=["a"])])
    ctx = b.context(0, "b", peers=[("c", "n2")])
    assert ctx.separate_from == () and ctx.group_separate_from == ("c",) and ctx.separate_nodes == {"n2"}
    # and c, placed again while b alone runs, keeps off b's node (a will join b there)
    assert b.context(0, "c", peers=[("b", "n1")]).separate_nodes == {"n1"}
    assert b.context(0, "a").group_separate_from == ()  # a's own rule is in separate_from


def test_a_bundles_state_moves_only_through_its_lifecycle():
    """``JobBook.set_bundle_state`` checks ``BUNDLE_LIFECYCLE``: deleting is terminal."""
    from fabric.core.errors import TransitionError
    from fabric.core.jobs import BundleState, JobBook
    from fabric.core.settings import FabricSettings

    book = JobBook(FabricSettings().failure, FabricSettings())
    book.add_bundle("b", None)
    book.set_bundle_state("b", BundleState.BROKEN, reasons=["lost"])
    assert book.bundles["b"].state == "broken" and book.bundles["b"].reasons == ["lost"]
    book.set_bundle_state("b", BundleState.LIVE, reasons=[])
    book.set_bundle_state("b", BundleState.DELETING)
    with pytest.raises(TransitionError, match="bundle b"):
        book.set_bundle_state("b", BundleState.LIVE)
