"""The driver side: ``@adaptive.remote`` (``client``), the session a process holds with the fabric
(``session``), dispatch (``dispatch``) and the lease decisions it follows (``leases``), and
``up``/``down``/``FabricHandle`` (``control``). Importing this package imports no Ray; its
modules import Ray (through ``fabric.rayio``) when a call needs it."""
