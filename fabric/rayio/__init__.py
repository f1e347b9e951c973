"""The one seam to Ray: every Ray call the fabric makes (the node table, named actors, actor
and task options and launch, the worker side of a call) goes through this package, so the actors
above it take a fake in their unit tests."""
