"""Bundles, carried out by the scheduler's ``JobRunner`` (see docs/jobs.md).

A bundle arrives pickled (its job classes by value: the scheduler need not import the user's
modules). ``create`` validates it against the settings and the live fleet
(``fabric.core.jobs.validation``): an error refuses it whole (``InvalidSpecError`` listing every
error) and nothing is stored. Otherwise it is expanded into one job per replica and job name
(``Bundle.expand``), each a job of the book filed under the bundle, and placed primaries first.

``update`` revives a bundle: its restart histories and its broken mark are cleared, jobs it no
longer names stop, new ones are added, ended ones start again, and running ones keep running with
their new spec (it applies from their next placement). ``delete`` stops every job, then forgets
the bundle. A ``start_mode="manual"`` job stays dormant until ``start_job``; ``stop_job`` makes it
dormant again for future placements (a running instance keeps running).
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from ray import cloudpickle

from actors.job_ports import TaskCorePort
from fabric.core.errors import InvalidSpecError
from fabric.core.jobs import JobSpec
from fabric.core.jobs.bundles import Bundle, BundleStatus
from fabric.core.jobs.core import JobsCore
from fabric.core.jobs.stimuli import BundleCreated, BundleDeleted, BundleUpdated, DormantSet
from fabric.core.jobs.validation import Admission, ValidationReport, place_dry_run, validate_bundle, validate_bundle_admission

MAX_BUNDLE_BYTES = 64 * 1024 * 1024


class BundleHost(Protocol):
    """What ``BundleOps`` uses of the job runner it serves (``actors.jobs.JobRunner`` is one)."""

    core: JobsCore
    tasks: TaskCorePort
    """The task core whose settings and fleet a bundle is validated against."""
    staged: dict[tuple[int, str], tuple[bytes, bytes]]

    def handle(self, stimulus: Any) -> Any: ...


def new_job_id() -> str:
    return f"job-{uuid.uuid4().hex[:12]}"


def defaults_for(cls: Any) -> JobSpec | None:
    """A job class's decorator defaults: an ``@adaptive.remote`` class carries its ``JobSpec``."""
    spec = getattr(cls, "spec", None)
    return spec if isinstance(spec, JobSpec) else None


def raw_class(cls: Any) -> Any:
    """The user's class behind a decorated one."""
    inner = getattr(cls, "cls", None)
    return inner if isinstance(inner, type) else cls


def load_bundle(blob: Any) -> Bundle:
    if not isinstance(blob, bytes) or len(blob) > MAX_BUNDLE_BYTES:
        raise InvalidSpecError("a bundle travels pickled: bytes of at most 64 MiB", field="bundle")
    try:
        b = cloudpickle.loads(blob)
    except Exception as exc:
        raise InvalidSpecError(f"the bundle cannot be loaded here: {type(exc).__name__}: {exc}", field="bundle") from None
    if not isinstance(b, Bundle):
        raise InvalidSpecError(f"not a fabric Bundle: {type(b).__name__}", field="bundle")
    return b


class BundleOps:
    """A job runner's bundles: created, updated, deleted, started and read (see the module docstring).
    ``runner`` is the job runner whose book files the bundles' jobs (the ``BundleHost`` port)."""

    def __init__(self, runner: BundleHost) -> None:
        self.runner = runner

    # -- checks ----------------------------------------------------------------------------------------
    def validate(self, blob: bytes) -> ValidationReport:
        return validate_bundle(load_bundle(blob), self.runner.tasks.settings, self.runner.tasks.fleet,
                               defaults_for=defaults_for)

    def admission(self, blob: bytes) -> Admission:
        return validate_bundle_admission(load_bundle(blob), self.runner.tasks.settings, self.runner.tasks.fleet,
                                         defaults_for=defaults_for)

    def dry_run(self, blob: bytes, replica: int, job: str) -> Any:
        return place_dry_run(load_bundle(blob), self.runner.tasks.settings, self.runner.tasks.fleet, replica, job,
                             defaults_for=defaults_for)

    def _checked(self, blob: bytes) -> Bundle:
        b = load_bundle(blob)
        for i, j in enumerate(b.jobs):
            if not isinstance(raw_class(j.cls), type):
                raise InvalidSpecError(f"bundle {b.bundle_id!r}: job {j.name!r} names no class to run", field=f"jobs.{i}.cls")
        report = validate_bundle(b, self.runner.tasks.settings, self.runner.tasks.fleet, defaults_for=defaults_for)
        if report.errors:
            first = report.errors[0]
            raise InvalidSpecError(f"bundle {b.bundle_id!r} refused: " + "; ".join(str(e) for e in report.errors),
                                   field=first.path)
        return b

    # -- changes ----------------------------------------------------------------------------------------
    def _stage(self, jobs: list[Any]) -> None:
        """Each job's class and arguments, pickled, kept until the core names the job that takes them."""
        self.runner.staged = {(rj.replica, rj.name): (cloudpickle.dumps(raw_class(rj.cls)), cloudpickle.dumps((rj.args, rj.kwargs)))
                              for rj in jobs}

    def create_bundle(self, blob: bytes) -> BundleStatus:
        b = self._checked(blob)
        jobs = b.expand(defaults_for, settings=self.runner.tasks.settings)
        self._stage(jobs)
        self.runner.handle(BundleCreated(b, tuple((new_job_id(), rj.spec, rj.replica, b.job(rj.name).start_mode == "manual")
                                                  for rj in jobs)))
        return self.bundle_status(b.bundle_id)

    def update_bundle(self, blob: bytes) -> BundleStatus:
        b = self._checked(blob)
        jobs = b.expand(defaults_for, settings=self.runner.tasks.settings)
        self._stage(jobs)
        self.runner.handle(BundleUpdated(b, tuple((rj.replica, rj.name, rj.spec, b.job(rj.name).start_mode == "manual",
                                                   new_job_id()) for rj in jobs)))
        return self.bundle_status(b.bundle_id)

    def delete_bundle(self, bundle_id: str) -> BundleStatus:
        status: BundleStatus = self.runner.handle(BundleDeleted(bundle_id))
        return status

    def set_dormant(self, bundle_id: str, replica: int, job: str, dormant: bool) -> str:
        state: str = self.runner.handle(DormantSet(bundle_id, replica, job, dormant))
        return state

    # -- reads -------------------------------------------------------------------------------------------
    def bundle_status(self, bundle_id: str) -> BundleStatus:
        return self.runner.core.bundle_status(bundle_id)

    def bundle_statuses(self) -> list[BundleStatus]:
        return self.runner.core.bundle_statuses()
