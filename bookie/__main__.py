"""``python -m magnetar.bookie``: run a bookie process (same flags as ``magnetar bookie``)."""

from __future__ import annotations

import sys

from magnetar.bookie.main import main

if __name__ == "__main__":
    sys.exit(main())
