"""The pure core: names, tiers, errors, lifecycle, capabilities, settings, events, records, the
wire messages, and the decisions (``placement``, ``health``, ``scheduling``).

Nothing here imports Ray, SQLite, a subprocess, psutil, NVML or gRPC (an import-linter contract
says so), and nothing reads a clock: time comes in as an argument. The one file it opens is a
settings file the user names (``FabricSettings.from_yaml``, through ``bounded_read``).
"""
