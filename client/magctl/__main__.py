"""``python -m magnetar.client.magctl``: the same as the ``magctl`` console script."""

import sys

from magnetar.client.magctl import main

sys.exit(main())
