"""The clouds' reclaim-notice documents, read over real HTTP from a fake metadata service on loopback.

For each cloud: a notice present, none (AWS's 404, GCP's ``FALSE``, Azure's empty list, events of
other types) and malformed documents, which are noted and never acted on; the AWS IMDSv2 token
dance (a PUT with the TTL header, then every GET with the token, a new token when the old one is
refused); a service that does not answer; and the pure readers' edges (times, statuses, errors)."""

from __future__ import annotations

import pickle
import socket

import pytest

from fabric.core.errors import ProbeError
from fabric.core.spot import (AWS_INSTANCE_ACTION, AWS_REBALANCE, AWS_TOKEN, AWS_TOKEN_HEADER, AZURE_SCHEDULED_EVENTS,
                              GCP_NOTICE_S, GCP_PREEMPTED, REBALANCE, SPOT_INTERRUPTION, base_url, read_aws_instance_action,
                              read_azure_scheduled_events, read_gcp_preempted, read_iso_time, read_rfc1123_time)
from fabric.testing.fake_metadata import FakeMetadata, iso_time, rfc1123_time
from probes.spot import MetadataHttp, SpotPoller, poller_for

NOW = 1_796_644_800.0  # 2026-12-07T12:00:00Z


@pytest.fixture
def md():
    with FakeMetadata() as fake:
        yield fake


def poller(md: FakeMetadata, cloud: str, *, clock=lambda: NOW, monotonic=lambda: 0.0) -> SpotPoller:
    return SpotPoller(cloud, MetadataHttp(md.url, timeout_s=2.0), clock=clock, monotonic=monotonic)


# -- AWS ------------------------------------------------------------------------------------------------
def test_aws_without_a_notice_reads_404s_and_finds_nothing(md):
    reading = poller(md, "aws").poll()
    assert reading.notices == [] and reading.notes == []
    assert [(r.method, r.path) for r in md.requests] == [
        ("PUT", AWS_TOKEN.path), ("GET", AWS_REBALANCE.path), ("GET", AWS_INSTANCE_ACTION.path)]


def test_aws_imdsv2_takes_a_token_with_a_put_and_sends_it_with_every_get(md):
    p = poller(md, "aws")
    p.poll()
    p.poll()
    (put,) = md.sent("PUT")
    assert put.path == "/latest/api/token" and put.header("X-aws-ec2-metadata-token-ttl-seconds") == "300"
    gets = md.sent("GET")
    assert len(gets) == 4 and {g.header(AWS_TOKEN_HEADER) for g in gets} == {"token-1"}  # one token, held


def test_aws_takes_a_new_token_when_the_service_refuses_the_old_one_or_it_ages(md):
    clock = [0.0]
    p = poller(md, "aws", monotonic=lambda: clock[0])
    p.poll()
    md.expire_token()
    md.aws_instance_action("terminate", NOW + 120)
    reading = p.poll()
    assert [n.kind for n in reading.notices] == [SPOT_INTERRUPTION] and reading.notes == []
    assert len(md.sent("PUT")) == 2 and md.sent("GET")[-1].header(AWS_TOKEN_HEADER) == "token-2"
    clock[0] = 151.0  # past half the token's 300 s
    p.poll()
    assert len(md.sent("PUT")) == 3


def test_aws_instance_action_is_a_spot_interruption_at_its_time(md):
    md.aws_instance_action("terminate", NOW + 120)
    (notice,) = poller(md, "aws").poll().notices
    assert (notice.cloud, notice.kind, notice.deadline) == ("aws", SPOT_INTERRUPTION, NOW + 120)
    assert "terminate" in notice.detail and notice.key == f"aws:instance-action:terminate:{iso_time(NOW + 120)}"
    for action in ("stop", "hibernate"):
        md.aws_instance_action(action, NOW + 60)
        assert poller(md, "aws").poll().notices[0].deadline == NOW + 60


def test_aws_rebalance_has_no_deadline_and_comes_before_a_spot_notice(md):
    md.aws_rebalance(NOW - 10)
    (notice,) = poller(md, "aws").poll().notices
    assert (notice.kind, notice.deadline) == (REBALANCE, None) and notice.key == f"aws:rebalance:{iso_time(NOW - 10)}"
    md.aws_instance_action("terminate", NOW + 120)
    assert [n.kind for n in poller(md, "aws").poll().notices] == [REBALANCE, SPOT_INTERRUPTION]


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"action": "reboot", "time": "2026-12-07T12:00:00Z"}',
                                  b'{"action": "terminate", "time": "soon"}', b'{"action": "terminate"}', b"\xff\xfe"])
def test_aws_a_malformed_instance_action_is_noted_not_acted_on(md, body):
    md.serve(AWS_INSTANCE_ACTION.path, 200, body)
    md.aws_rebalance(NOW)
    reading = poller(md, "aws").poll()
    assert [n.kind for n in reading.notices] == [REBALANCE]  # the other document still read
    (note,) = reading.notes
    assert note.startswith(f"aws metadata {AWS_INSTANCE_ACTION.path}:")


def test_aws_a_malformed_rebalance_and_an_error_status_are_noted(md):
    md.serve(AWS_REBALANCE.path, 200, {"noticeTime": 5})
    md.serve(AWS_INSTANCE_ACTION.path, 500, b"oops")
    reading = poller(md, "aws").poll()
    assert reading.notices == [] and len(reading.notes) == 2
    assert "noticeTime" in reading.notes[0] and "HTTP 500" in reading.notes[1]


def test_aws_a_refused_token_is_a_note_and_no_document_is_read_without_one(md):
    class NoToken(MetadataHttp):
        def send(self, request, headers=()):
            return (403, b"") if request == AWS_TOKEN else super().send(request, headers)

    reading = SpotPoller("aws", NoToken(md.url, 2.0)).poll()
    assert reading.notices == [] and len(reading.notes) == 2 and all("no session token" in n for n in reading.notes)
    assert md.sent("GET") == []


# -- GCP ------------------------------------------------------------------------------------------------
def test_gcp_false_is_no_notice_and_the_flavor_header_is_sent(md):
    reading = poller(md, "gcp").poll()
    assert reading.notices == [] and reading.notes == []
    (get,) = md.requests
    assert (get.method, get.path, get.header("Metadata-Flavor")) == ("GET", GCP_PREEMPTED.path, "Google")


def test_gcp_true_is_a_spot_interruption_thirty_seconds_on(md):
    md.gcp_preempted()
    (notice,) = poller(md, "gcp").poll().notices
    assert (notice.cloud, notice.kind, notice.deadline, notice.key) == ("gcp", SPOT_INTERRUPTION, NOW + GCP_NOTICE_S, "gcp:preempted")
    later = poller(md, "gcp", clock=lambda: NOW + 5).poll().notices[0]
    assert later.key == notice.key  # read again, the same notice: delivered once with its first deadline


@pytest.mark.parametrize("status, body", [(200, b"MAYBE"), (200, b""), (503, b"TRUE")])
def test_gcp_a_malformed_answer_is_noted(md, status, body):
    md.serve(GCP_PREEMPTED.path, status, body)
    reading = poller(md, "gcp").poll()
    assert reading.notices == [] and len(reading.notes) == 1 and reading.notes[0].startswith("gcp metadata")


# -- Azure ----------------------------------------------------------------------------------------------
def test_azure_no_events_is_no_notice_and_the_metadata_header_and_api_version_are_sent(md):
    reading = poller(md, "azure").poll()
    assert reading.notices == [] and reading.notes == []
    (get,) = md.requests
    assert get.path == AZURE_SCHEDULED_EVENTS.path and "api-version=2020-07-01" in get.path and get.header("Metadata") == "true"


def test_azure_a_preempt_event_is_a_spot_interruption_at_not_before_and_other_events_are_not(md):
    md.azure_events({"EventId": "602d9444-d2cd-49c7-8624-8643e7171297", "EventType": "Preempt", "ResourceType": "VirtualMachine",
                     "Resources": ["vm1"], "EventStatus": "Scheduled", "NotBefore": rfc1123_time(NOW + 30)},
                    {"EventId": "other", "EventType": "Reboot", "NotBefore": rfc1123_time(NOW + 600)})
    (notice,) = poller(md, "azure").poll().notices
    assert (notice.cloud, notice.kind, notice.deadline) == ("azure", SPOT_INTERRUPTION, NOW + 30)
    assert notice.key == "azure:602d9444-d2cd-49c7-8624-8643e7171297"
    md.azure_events({"EventId": "e2", "EventType": "Preempt", "EventStatus": "Started", "NotBefore": ""})
    assert poller(md, "azure").poll().notices[0].deadline == NOW  # started: it goes now
    md.azure_events({"EventId": "e3", "EventType": "Freeze", "NotBefore": rfc1123_time(NOW)})
    assert poller(md, "azure").poll().notices == []


@pytest.mark.parametrize("body", [b"{", b'{"DocumentIncarnation": 1}', b'{"Events": {}}', b'{"Events": [3]}',
                                  b'{"Events": [{"EventType": "Preempt", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"}]}',
                                  b'{"Events": [{"EventId": "e", "EventType": "Preempt", "NotBefore": "tomorrow"}]}'])
def test_azure_a_malformed_document_is_noted(md, body):
    md.serve(AZURE_SCHEDULED_EVENTS.path, 200, body)
    reading = poller(md, "azure").poll()
    assert reading.notices == [] and len(reading.notes) == 1 and reading.notes[0].startswith("azure metadata")


# -- the seam ---------------------------------------------------------------------------------------------
def test_a_service_that_does_not_answer_is_a_note_per_document_not_an_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    reading = SpotPoller("gcp", MetadataHttp(f"http://127.0.0.1:{port}", 0.5)).poll()
    assert reading.notices == [] and len(reading.notes) == 1 and "no answer" in reading.notes[0]


def test_the_standard_addresses_are_used_without_a_url_and_a_url_replaces_them(md):
    assert base_url("aws") == base_url("azure") == "http://169.254.169.254"
    assert base_url("gcp") == "http://metadata.google.internal"
    assert base_url("gcp", md.url + "/") == md.url
    assert poller_for("aws", metadata_url=None, timeout_s=1.0).http.base == "http://169.254.169.254"  # built, nothing sent
    with pytest.raises(ValueError, match="mars"):
        SpotPoller("mars", MetadataHttp(md.url, 1.0))


def test_the_readers_edges():
    assert read_iso_time("2026-12-07T12:00:00Z") == NOW == read_iso_time("2026-12-07T12:00:00")
    assert read_rfc1123_time("Mon, 07 Dec 2026 12:00:00 GMT") == NOW
    for bad in (None, 5, "yesterday"):
        with pytest.raises(ValueError):
            read_iso_time(bad)
        with pytest.raises(ValueError):
            read_rfc1123_time(bad)
    assert read_aws_instance_action(404, b"") is None and read_gcp_preempted(200, b" false\n", NOW) is None
    with pytest.raises(ProbeError) as caught:
        read_azure_scheduled_events(401, b"", NOW)
    assert caught.value.source == f"azure:{AZURE_SCHEDULED_EVENTS.path}"
    back = pickle.loads(pickle.dumps(caught.value))
    assert back.source == caught.value.source and str(back) == str(caught.value)
