"""The driver side: ``@adaptive.remote`` (``client``), dispatch and leases (``dispatch``), and
``up``/``down``/``FabricHandle`` (``control``). Importing this package imports no Ray; its
modules import Ray when a call needs it."""
