"""Long-running work, pure: job specs and states, the runtime-failure policy, the job book, bundles.

Modules: ``states`` (JobState, BundleState and their lifecycles), ``spec`` (JobSpec), ``restarts``
(the restart ceiling and what a death leads to), ``book`` (JobBook: every job and bundle, and the
instructions that keep them), ``bundles`` (Bundle, BundleJob, ResiliencePolicy, expansion into
jobs) and ``validation`` (validate_bundle, admission, dry runs)."""

from fabric.core.jobs.book import Binding, JobBook, JobRecord
from fabric.core.jobs.restarts import Restart, Verdict, verdict
from fabric.core.jobs.spec import JobSpec
from fabric.core.jobs.states import BUNDLE_LIFECYCLE, JOB_LIFECYCLE, BundleState, JobState

__all__ = ["BUNDLE_LIFECYCLE", "Binding", "BundleState", "JOB_LIFECYCLE", "JobBook", "JobRecord", "JobSpec", "JobState",
           "Restart", "Verdict", "verdict"]
