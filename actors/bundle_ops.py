"""Bundles, carried out by the scheduler's ``JobRunner`` (seed 000 § Bundles; API.md § Bundles).

A bundle arrives pickled (its job classes by value: the scheduler need not import the user's
modules). ``create`` validates it against the settings and the live fleet
(``fabric.core.jobs.validation``): an error refuses it whole (``InvalidSpecError`` listing every
error) and nothing is stored. Otherwise it is expanded into one job per replica and job name
(``Bundle.expand``), each a job of the book filed under the bundle, and placed primaries first.

``update`` revives a bundle: its restart histories and its broken mark are cleared, jobs it no
longer names stop, new ones are added, ended ones start again, and running ones keep running with
their new spec (it applies from their next placement). ``delete`` stops every job, then forgets
the bundle. A ``start_mode="manual"`` job stays dormant until ``start_job``; ``stop_job`` makes it
dormant again for future placements (a running instance keeps running, as in seed 000).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from ray import cloudpickle

from fabric.core.errors import InvalidSpecError, JobNotFoundError
from fabric.core.jobs import BundleState, JobBook, JobSpec
from fabric.core.jobs.book import Instruction
from fabric.core.jobs.bundles import Bundle, BundleStatus
from fabric.core.jobs.validation import Admission, ValidationReport, place_dry_run, validate_bundle, validate_bundle_admission

MAX_BUNDLE_BYTES = 64 * 1024 * 1024


class BundleHost(Protocol):
    """What ``BundleOps`` uses of the job runner it serves (``actors.jobs.JobRunner`` is one)."""

    book: JobBook
    scheduler: Any
    """The scheduler whose settings and fleet a bundle is validated against."""
    payloads: dict[str, tuple[bytes, bytes]]
    clock: Callable[[], float]

    def submit(self, spec: JobSpec, cls_blob: bytes, args_blob: bytes, job_id: str | None = None,
               bundle_id: str | None = None, replica: int = 0, dormant: bool = False, place: bool = True) -> str: ...

    def persist(self, new_payloads: dict[str, tuple[bytes, bytes]] | None = None) -> None: ...

    def apply(self, instructions: list[Instruction]) -> None: ...

    def emit(self, kind: str, data: dict, stimulus_id: str | None = None) -> None: ...

    def where(self, node_id: str) -> tuple[str | None, str | None] | None: ...


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
        return validate_bundle(load_bundle(blob), self.runner.scheduler.settings, self.runner.scheduler.core.fleet,
                               defaults_for=defaults_for)

    def admission(self, blob: bytes) -> Admission:
        return validate_bundle_admission(load_bundle(blob), self.runner.scheduler.settings, self.runner.scheduler.core.fleet,
                                         defaults_for=defaults_for)

    def dry_run(self, blob: bytes, replica: int, job: str) -> Any:
        return place_dry_run(load_bundle(blob), self.runner.scheduler.settings, self.runner.scheduler.core.fleet, replica, job,
                             defaults_for=defaults_for)

    def _checked(self, blob: bytes) -> Bundle:
        b = load_bundle(blob)
        for i, j in enumerate(b.jobs):
            if not isinstance(raw_class(j.cls), type):
                raise InvalidSpecError(f"bundle {b.bundle_id!r}: job {j.name!r} names no class to run", field=f"jobs.{i}.cls")
        report = validate_bundle(b, self.runner.scheduler.settings, self.runner.scheduler.core.fleet, defaults_for=defaults_for)
        if report.errors:
            first = report.errors[0]
            raise InvalidSpecError(f"bundle {b.bundle_id!r} refused: " + "; ".join(str(e) for e in report.errors),
                                   field=first.path)
        return b

    # -- changes ----------------------------------------------------------------------------------------
    def create_bundle(self, blob: bytes) -> BundleStatus:
        b = self._checked(blob)
        if b.bundle_id in self.runner.book.bundles:
            raise InvalidSpecError(f"a bundle {b.bundle_id!r} exists already (update_bundle changes it)", field="bundle_id")
        jobs = b.expand(defaults_for, settings=self.runner.scheduler.settings)
        self.runner.book.add_bundle(b.bundle_id, b)
        for rj in jobs:
            self._add_job(b, rj)
        self.runner.persist()
        self.runner.emit("bundle_updated", {"bundle_id": b.bundle_id, "created": True})
        self.runner.apply(self.runner.book.due(self.runner.clock(), self.runner.where))
        return self.bundle_status(b.bundle_id)

    def _add_job(self, b: Bundle, rj: Any) -> str:
        dormant = b.job(rj.name).start_mode == "manual"
        return self.runner.submit(rj.spec, cloudpickle.dumps(raw_class(rj.cls)), cloudpickle.dumps((rj.args, rj.kwargs)),
                           bundle_id=b.bundle_id, replica=rj.replica, dormant=dormant, place=False)

    def update_bundle(self, blob: bytes) -> BundleStatus:
        b = self._checked(blob)
        rec = self.runner.book.bundles.get(b.bundle_id)
        if rec is None or rec.state == "deleting":
            raise JobNotFoundError(f"no bundle {b.bundle_id!r} to update (create_bundle makes one)", job_id=b.bundle_id)
        now = self.runner.clock()
        wanted = {(rj.replica, rj.name): rj for rj in b.expand(defaults_for, settings=self.runner.scheduler.settings)}
        out: list = []
        self.runner.book.add_bundle(b.bundle_id, b)
        self.runner.book.set_bundle_state(b.bundle_id, BundleState.LIVE, reasons=[])
        for key, job_id in list(rec.jobs.items()):
            job = self.runner.book.jobs.get(job_id)
            if key not in wanted:
                if job is not None and not job.terminal:
                    out += self.runner.book.stop(job_id, now, reason="no longer in its bundle")
                del rec.jobs[key]
                continue
            rj = wanted.pop(key)
            if job is None or job.terminal:  # ended (broken, dropped, stopped): it starts again
                if job is not None:
                    self.runner.book.forget(job_id)
                del rec.jobs[key]
                self._add_job(b, rj)
                continue
            job.spec, job.restarts = rj.spec, []
            job.dormant = job.dormant and b.job(rj.name).start_mode == "manual"
            self.runner.payloads[job_id] = (cloudpickle.dumps(raw_class(rj.cls)), cloudpickle.dumps((rj.args, rj.kwargs)))
            self.runner.book.dirty.add(job_id)
            self.runner.persist({job_id: self.runner.payloads[job_id]})
        for rj in wanted.values():
            self._add_job(b, rj)
        self.runner.book.dirty_bundles.add(b.bundle_id)
        self.runner.apply(out)
        self.runner.emit("bundle_updated", {"bundle_id": b.bundle_id, "created": False})
        self.runner.apply(self.runner.book.due(now, self.runner.where))
        return self.bundle_status(b.bundle_id)

    def delete_bundle(self, bundle_id: str) -> BundleStatus:
        rec = self._bundle(bundle_id)
        now = self.runner.clock()
        out: list = []
        self.runner.book.set_bundle_state(bundle_id, BundleState.DELETING)
        for job_id in rec.jobs.values():
            if job_id in self.runner.book.jobs:
                out += self.runner.book.stop(job_id, now, reason="bundle deleted")
        self.runner.apply(out)
        status = self.bundle_status(bundle_id)
        self.reap_deleted()
        return status

    def reap_deleted(self) -> None:
        """Forget deleted bundles whose jobs have all ended."""
        for bundle_id, rec in list(self.runner.book.bundles.items()):
            if rec.state != "deleting":
                continue
            if all(j is None or j.terminal for j in (self.runner.book.jobs.get(jid) for jid in rec.jobs.values())):
                for jid in rec.jobs.values():
                    self.runner.book.forget(jid)
                    self.runner.payloads.pop(jid, None)
                del self.runner.book.bundles[bundle_id]
                self.runner.book.dirty_bundles.add(bundle_id)
                self.runner.emit("bundle_deleted", {"bundle_id": bundle_id})
                self.runner.persist()

    def set_dormant(self, bundle_id: str, replica: int, job: str, dormant: bool) -> str:
        rec = self._bundle(bundle_id)
        job_id = rec.jobs.get((replica, job))
        if job_id is None:
            raise JobNotFoundError(f"bundle {bundle_id!r} has no job {job!r} in replica {replica}", job_id=job)
        j = self.runner.book.job(job_id)
        j.dormant = dormant
        self.runner.book.dirty.add(job_id)
        self.runner.persist()
        if not dormant:
            self.runner.apply(self.runner.book.due(self.runner.clock(), self.runner.where))
        return j.state.value

    # -- reads -------------------------------------------------------------------------------------------
    def _bundle(self, bundle_id: str) -> Any:
        rec = self.runner.book.bundles.get(bundle_id)
        if rec is None:
            raise JobNotFoundError(f"no bundle {bundle_id!r}", job_id=bundle_id)
        return rec

    def bundle_status(self, bundle_id: str) -> BundleStatus:
        rec = self._bundle(bundle_id)
        return BundleStatus(bundle_id=bundle_id, state=rec.state, replicas=rec.bundle.replica_count,
                            jobs={f"{r}/{n}": jid for (r, n), jid in sorted(rec.jobs.items())}, reasons=list(rec.reasons))

    def bundle_statuses(self) -> list[BundleStatus]:
        return [self.bundle_status(b) for b in sorted(self.runner.book.bundles)]
