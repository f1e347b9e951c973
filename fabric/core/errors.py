"""The fabric's typed errors: one root, a few meaningful branches, data carried as attributes.

Errors cross actor boundaries, so each one pickles with its data intact: ``__reduce__``
rebuilds it from its keyword arguments rather than from the formatted message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class FabricError(Exception):
    """Root of every error the fabric raises on purpose."""

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self._data = dict(data)
        for key, value in data.items():
            setattr(self, key, value)

    def __reduce__(self):  # keep attributes across pickling (actor boundaries)
        return (_rebuild, (type(self), self.message, self._data))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[FabricError], message: str, data: dict[str, Any]) -> FabricError:
    err = cls.__new__(cls)
    FabricError.__init__(err, message, **data)
    return err


@dataclass(frozen=True)
class SettingsProblem:
    """One problem in a settings document: a stable code, the dotted path, and what is wrong."""

    code: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message} [{self.code}]"


class SettingsError(FabricError, ValueError):
    """Settings are invalid. ``problems`` lists every problem found, not just the first."""

    problems: tuple[SettingsProblem, ...]

    def __init__(self, problems: list[SettingsProblem] | tuple[SettingsProblem, ...], message: str | None = None, **_: Any) -> None:
        problems = tuple(problems)
        if message is None:
            lines = "\n".join(f"  - {p}" for p in problems)
            message = f"{len(problems)} problem(s) in fabric settings:\n{lines}"
        FabricError.__init__(self, message, problems=problems)

    def __reduce__(self):
        return (SettingsError, (self.problems, self.message))


class SettingsConflictError(FabricError):
    """The fabric is already up with other settings than the ones asked for. ``fields`` names the
    top-level settings fields that differ; bringing it up with new settings means ``fabric down``
    first (``up()`` without settings attaches to the running fabric, whatever it runs with)."""

    fields: tuple[str, ...]

    def __init__(self, fields: list[str] | tuple[str, ...], message: str | None = None, **_: Any) -> None:
        fields = tuple(fields)
        if message is None:
            message = (f"the fabric is already up with other settings: {', '.join(fields)} "
                       f"{'differs' if len(fields) == 1 else 'differ'} from the settings in force; run `fabric down` "
                       "(fabric.down()) first to bring it up with these, or call up() without settings to attach to it")
        FabricError.__init__(self, message, fields=fields)

    def __reduce__(self):
        return (SettingsConflictError, (self.fields, self.message))


class RequirementError(FabricError, ValueError):
    """A requirement (or decorator argument) is invalid; ``field`` names the one at fault. An argument
    of a call to an actor that does not validate is one too (``MessageError``)."""

    field: str
    reason: str
    """The message without the field name."""
    value: Any

    def __init__(self, field: str, message: str, value: Any = None) -> None:
        super().__init__(f"{field}: {message}", field=field, value=value, reason=message)

    def __reduce__(self):
        return (RequirementError, (self.field, self.reason, self.value))


class CapacityError(FabricError):
    """No node at or above the requirement's floor could take the work (in time)."""

    requirement: Any
    reason: str
    waited_s: float | None

    def __init__(self, message: str, *, requirement: Any = None, reason: str = "no capacity", waited_s: float | None = None) -> None:
        super().__init__(message, requirement=requirement, reason=reason, waited_s=waited_s)

    def __reduce__(self):
        return (_rebuild_kw, (CapacityError, self.message, self._data))


class SchedulerUnavailableError(FabricError):
    """The scheduler did not answer a caller within ``waited_s`` (hung, overloaded, or gone and not
    back): the call was not submitted, so nothing of it runs."""

    waited_s: float | None
    what: str

    def __init__(self, message: str, *, waited_s: float | None = None, what: str = "") -> None:
        super().__init__(message, waited_s=waited_s, what=what)

    def __reduce__(self):
        return (_rebuild_kw, (SchedulerUnavailableError, self.message, self._data))


class ProbeError(FabricError):
    """A probe source could not be read in a way that is not simply "absent" (a bad recording path)."""

    source: str | None

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(message, source=source)

    def __reduce__(self):
        return (_rebuild_kw, (ProbeError, self.message, self._data))


class RegistrationError(FabricError, ValueError):
    """A node registration or report was refused (unknown node id, malformed report); nothing stored."""

    node_id: str | None
    field: str | None

    def __init__(self, message: str, *, node_id: str | None = None, field: str | None = None) -> None:
        super().__init__(message, node_id=node_id, field=field)

    def __reduce__(self):
        return (_rebuild_kw, (RegistrationError, self.message, self._data))


class TransitionError(FabricError):
    """An illegal lifecycle transition: says what, from, to and why."""

    what: str
    from_state: str
    to_state: str
    why: str

    def __init__(self, what: str, from_state: str, to_state: str, why: str = "not an allowed transition") -> None:
        super().__init__(
            f"{what}: cannot go from {from_state!s} to {to_state!s}: {why}",
            what=what, from_state=str(from_state), to_state=str(to_state), why=why,
        )

    def __reduce__(self):
        return (TransitionError, (self.what, self.from_state, self.to_state, self.why))


class NodeNotFoundError(FabricError, KeyError):
    """No node known by that id or name."""

    node: str

    def __init__(self, node: str) -> None:
        super().__init__(f"no node known as {node!r}", node=node)

    def __reduce__(self):
        return (NodeNotFoundError, (self.node,))

    def __str__(self) -> str:
        return self.message


class MessageError(RequirementError):
    """An argument of a call to an actor does not validate (a lease request, a call report, an
    operator call): ``field`` names what is wrong, ``reason`` why, ``value`` a short repr of what came.

    The scheduler's readers (``fabric.core.scheduling.messages``, ``fabric.core.scheduler_args``)
    raise it wherever an argument is read: by the actor on arrival, and by an edge (a
    ``FabricHandle`` method, the gRPC servicer, the CLI) that reads it first with the same reader.
    It is a ``RequirementError``, so every path a bad argument can take ends in the same error."""

    field: str
    reason: str
    value: str

    def __init__(self, field: str, reason: str, value: Any = None) -> None:
        try:
            shown = value if isinstance(value, str) and len(value) <= 80 else repr(value)
        except Exception:  # a hostile object whose repr raises: its type is enough
            shown = f"<{type(value).__name__}>"
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        FabricError.__init__(self, f"{field}: {reason} (got {shown})", field=field, reason=reason, value=shown)

    def __reduce__(self):
        return (MessageError, (self.field, self.reason, self.value))


def _rebuild_kw(cls: type[FabricError], message: str, data: dict[str, Any]) -> FabricError:
    return cls(message, **data)


class InvalidSpecError(FabricError, ValueError):
    """A job (or bundle) no node would fix: its constructor refused its arguments, or the job's spec is
    inconsistent. Raised by a job's ``__init__``, it is terminal on the first time (the job is
    rejected, ``JOB_REJECTED_INVALID_SPEC``), with the job's own message as the reason. ``field`` names the
    part of a bundle or job at fault when the fabric raises it."""

    field: str

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message, field=field)

    def __reduce__(self):
        return (_rebuild_kw, (InvalidSpecError, self.message, self._data))


class JobUnavailableError(FabricError):
    """A job had no running instance to take a call: none came up within ``call_timeout_s`` (it is
    recovering, or it stopped, was dropped or failed), or the instance a call was in flight on died."""

    job_id: str
    state: str

    def __init__(self, message: str, *, job_id: str = "", state: str = "") -> None:
        super().__init__(message, job_id=job_id, state=state)

    def __reduce__(self):
        return (_rebuild_kw, (JobUnavailableError, self.message, self._data))


class JobNotFoundError(FabricError, KeyError):
    """No job (or bundle) has this id."""

    job_id: str

    def __init__(self, message: str, *, job_id: str = "") -> None:
        super().__init__(message, job_id=job_id)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return (_rebuild_kw, (JobNotFoundError, self.message, self._data))


class MigrationError(FabricError):
    """A migration refused: the job cannot move now (not running, already moving, its own node as
    the target), or an abort asked for after the point of no return."""

    migration_id: str
    job_id: str
    phase: str

    def __init__(self, message: str, *, migration_id: str = "", job_id: str = "", phase: str = "") -> None:
        super().__init__(message, migration_id=migration_id, job_id=job_id, phase=phase)

    def __reduce__(self):
        return (_rebuild_kw, (MigrationError, self.message, self._data))
