"""Hardware detection: what a node is and can do, read through one ``Sources`` seam.

``probe_node()`` reads this machine; ``probe_node(RecordedSources(folder))`` reads a recording of
one. Absent hardware or tools are simply absent, never an exception. This
package sits above the pure core and below the actors: it imports neither Ray nor ``actors``.
"""

from __future__ import annotations

from fabric.core.capabilities import classify
from probes.node import apply_settings, probe_node
from probes.sources import LiveSources, RecordedSources, RecordingSources, Sources

__all__ = ["probe_node", "apply_settings", "classify", "Sources", "LiveSources", "RecordedSources", "RecordingSources"]
