"""Placement decisions on the record (pure: no Ray, no clock reads).

The scheduler's core hands each decision worth keeping to its ``DecisionTap`` (``tap``): every job
placement, and of the task placements and lease grants every fallback, every refusal and one in
``decisions.sample_one_in`` of the rest, with a frozen snapshot of the fleet the engine read. The
scheduler numbers it in the event log and the ``DecisionBook`` (``book``) keeps it under that number,
compressed: the requirement and context, the outcome, the walk's verdicts in the words
``Decision.explain`` prints, and references to the fleet slice and the settings in force. A fleet
slice is kept once per fleet version (its content), each node record once per content, so many
decisions over a large fleet share what did not change; retention is bounded by count and bytes.

``replay`` reads a kept decision back: ``explain_recorded`` prints why it was made (as it was, with
the fleet as it was), ``replay`` runs the engine again on the recorded inputs, with the recorded
settings or today's, and says whether it decides the same and, when not, what differs.

Modules: ``rows`` (the wire forms), ``tap``, ``book``, ``replay``; imports run that way.
"""

from __future__ import annotations

from fabric.core.decisions.book import DecisionBook, RecordedDecision
from fabric.core.decisions.replay import explain_recorded, replay
from fabric.core.decisions.tap import Capture, DecisionTap

__all__ = ["Capture", "DecisionBook", "DecisionTap", "RecordedDecision", "explain_recorded", "replay"]
