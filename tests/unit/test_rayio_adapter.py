"""The real seam's reading of Ray's exceptions (``RayAdapter.is_actor_gone``, ``remote_cause``),
on exceptions made here: no cluster needed."""

from __future__ import annotations

import pickle

import pytest

ray_exceptions = pytest.importorskip("ray.exceptions")

from fabric.core.errors import CapacityError, RegistrationError  # noqa: E402
from fabric.rayio.adapter import RayAdapter  # noqa: E402


def task_error(cause: BaseException):
    """What awaiting a call whose remote method raised ``cause`` raises: the dual class, both
    Ray's ``RayTaskError`` and the cause's type."""
    return ray_exceptions.RayTaskError("wait_for_placement", "Traceback ...", cause).as_instanceof_cause()


@pytest.mark.parametrize("exc", [ray_exceptions.ActorUnavailableError("restarting", None), ray_exceptions.ActorDiedError(),
                                 ray_exceptions.RayActorError()])
def test_an_actor_that_died_or_is_away_is_gone(exc):
    assert RayAdapter().is_actor_gone(exc) and RayAdapter().remote_cause(exc) is None


@pytest.mark.parametrize("exc", [ValueError("x"), RuntimeError("y")])
def test_other_errors_are_not_gone_and_have_no_remote_cause(exc):
    assert not RayAdapter().is_actor_gone(exc) and RayAdapter().remote_cause(exc) is None


def test_a_remote_methods_own_error_is_its_cause_not_a_gone_actor():
    err = CapacityError("no node", reason="queue timeout")
    wrapped = task_error(err)
    assert isinstance(wrapped, CapacityError)  # why `except RegistrationError` works on a registry call
    assert RayAdapter().remote_cause(wrapped) is err and not RayAdapter().is_actor_gone(wrapped)
    assert isinstance(task_error(RegistrationError("bad", field="node_id")), RegistrationError)


def test_loads_reads_cloudpickle():
    assert RayAdapter().loads(pickle.dumps({"a": 1})) == {"a": 1}
