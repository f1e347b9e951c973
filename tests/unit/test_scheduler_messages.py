"""What the scheduler accepts (issue 12): each message is read on arrival; a bad one is a
``MessageError`` naming the field, and the core is never reached."""

import pickle

import pytest

from fabric import MessageError, Requirement
from fabric.core.scheduling import messages as msg

REQ = Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg")


def test_a_good_lease_request_reads_back_as_sent():
    assert msg.read_lease_request("c1:0", REQ, {"n" * 56: 2}, 8, ["c1:1"]) == ("c1:0", REQ, {"n" * 56: 2}, 8, ("c1:1",))
    assert msg.read_lease_request("c1:0", REQ, None, 0, None) == ("c1:0", REQ, {}, 0, ())


@pytest.mark.parametrize("args, field", [
    (({"x": 1}, REQ, None, 1, None), "lease_id"),  # a dict as an id (sqlite would have bound it)
    (("x" * 500, REQ, None, 1, None), "lease_id"),
    (("c", "gpu_apu", None, 1, None), "requirement"),
    (("c", REQ, [("n", 1)], 1, None), "holding"),
    (("c", REQ, {"n": -1}, 1, None), "holding[n]"),
    (("c", REQ, {"n": 10**400}, 1, None), "holding[n]"),
    (("c", REQ, None, 10**400, None), "want"),
    (("c", REQ, None, True, None), "want"),
    (("c", REQ, None, 1, "c2"), "release"),
    (("c", REQ, None, 1, [5]), "release[0]"),
])
def test_a_bad_lease_request_names_its_field(args, field):
    with pytest.raises(MessageError) as exc:
        msg.read_lease_request(*args)
    assert exc.value.field == field


def test_reports_releases_and_seconds():
    assert msg.read_call_report(10, 3) == (10, 3)
    for bad in ((-1, 0), (1.5, 0), (3, 4), ("3", 0)):
        with pytest.raises(MessageError):
            msg.read_call_report(*bad)
    assert msg.read_allocations([1, 2]) == (1, 2)
    with pytest.raises(MessageError):
        msg.read_allocations(7)
    assert msg.read_seconds("grace_s", 0, allow_zero=True) == 0.0 and msg.read_timeout("t", None) is None
    for bad in (0, -1, float("nan"), float("inf"), 10**400, True, "5"):
        with pytest.raises(MessageError):
            msg.read_timeout("timeout_s", bad)


def test_message_error_pickles_and_never_fails_to_show_what_came():
    class Hostile:
        def __repr__(self):
            raise RuntimeError("no repr")

    err = MessageError("lease_id", "must be a string", Hostile())
    assert "<Hostile>" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert (back.field, back.reason, str(back)) == ("lease_id", "must be a string", str(err))
    assert isinstance(back, ValueError)
