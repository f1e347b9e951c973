"""Long-running work, pure: job specs and states, the runtime-failure policy, the job book, bundles.

Modules: ``states`` (JobState, BundleState and their lifecycles), ``spec`` (JobSpec), ``restarts``
(the restart ceiling and what a death leads to), ``book`` (JobBook: every job and bundle, and the
instructions that keep them), ``bundles`` (Bundle, BundleJob, ResiliencePolicy, expansion into
jobs), ``validation`` (validate_bundle, admission, dry runs), ``migration`` (one saga's rules),
``drains`` (one node's drain), ``rebalance`` (the choice), and the jobs core over them all: ``core``
(``JobsCore.handle(stimulus) -> instructions``), ``stimuli``, ``state`` (its books, ``JobsWorld``
and the executor's instructions), ``sagas`` and ``node_moves`` (their handlers)."""

from fabric.core.jobs.book import Binding, JobBook, JobRecord
from fabric.core.jobs.restarts import Restart, Verdict, verdict
from fabric.core.jobs.spec import JobSpec
from fabric.core.jobs.states import BUNDLE_LIFECYCLE, JOB_LIFECYCLE, BundleState, JobState

__all__ = ["BUNDLE_LIFECYCLE", "Binding", "BundleState", "JOB_LIFECYCLE", "JobBook", "JobRecord", "JobSpec", "JobState",
           "Restart", "Verdict", "verdict"]
