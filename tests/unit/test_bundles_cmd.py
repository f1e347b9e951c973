"""``fabric bundles`` rows and text, pure: bundles and their jobs in, what the operator reads out."""

from fabric.cli.bundles_cmd import bundle_rows, format_bundle, format_bundles_table
from fabric.core.jobs import JobState
from fabric.core.jobs.book import Binding, JobStatus
from fabric.core.jobs.bundles import BundleStatus

N1 = "aa" * 28


def fixtures():
    b = BundleStatus(bundle_id="channel-1", state="broken", replicas=2,
                     jobs={"0/encode": "j0", "1/encode": "j1"}, reasons=["encode (replica 0): restart ceiling"])
    jobs = [JobStatus("j0", "encode", JobState.FAILED, "channel-1", 0),
            JobStatus("j1", "encode", JobState.STOPPED, "channel-1", 1, Binding(N1, "backup@1"), 2)]
    return [b], jobs


def test_rows_name_each_job_its_replica_state_and_node():
    bundles, jobs = fixtures()
    row = bundle_rows(bundles, jobs, {N1: "steamdeck"})[0]
    assert row["state"] == "broken" and row["reasons"] == ["encode (replica 0): restart ceiling"]
    assert [(j["replica"], j["state"], j["node"]) for j in row["jobs"]] == [("primary", "failed", None),
                                                                           ("backup", "stopped", "steamdeck")]


def test_the_table_and_the_detail_say_what_broke_it():
    bundles, jobs = fixtures()
    rows = bundle_rows(bundles, jobs, {N1: "steamdeck"})
    table = format_bundles_table(rows)
    assert "channel-1" in table and "1 failed, 1 stopped" in table and "restart ceiling" in table
    detail = format_bundle(rows[0])
    assert "broken    encode (replica 0): restart ceiling" in detail and "steamdeck" in detail
    assert format_bundles_table([]).endswith("(no bundles)")
