"""Names the fabric's Ray actors are found by (detached, in one namespace), shared by the runtime,
the actors and the client so that any driver or ``ray job submit`` script finds the same fabric."""

NAMESPACE = "fabric"
SCHEDULER = "fabric.scheduler"
DISPATCHER = "fabric.dispatcher"
TIER_LABEL = "fabric.io/tier"
SLOTS_RESOURCE = "fabric.slots"
