"""Allow ``python -m stage_explore``."""

from __future__ import annotations

import sys

from stage_explore.cli import main

sys.exit(main())
