"""``python -m fabric`` is the ``fabric`` command."""

import sys

from fabric.cli import main

sys.exit(main())
