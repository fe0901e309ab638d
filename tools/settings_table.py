"""Print the settings tables of docs/operations.md (from the one table in magnetar.settings).

.venv/bin/python tools/settings_table.py            # print
.venv/bin/python tools/settings_table.py --check    # exit 1 when the docs differ
"""

from __future__ import annotations

import pathlib
import sys

from magnetar import settings
from magnetar.bookie.main import BookieConfig
from magnetar.broker.config import BrokerConfig

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "operations.md"
BEGIN = "<!-- settings-table: begin (tools/settings_table.py) -->"
END = "<!-- settings-table: end -->"


def tables() -> str:
    return (
        "Broker (and standalone) settings:\n\n"
        + settings.markdown_table(settings.BROKER, BrokerConfig)
        + "\n\nBookie settings:\n\n"
        + settings.markdown_table(settings.BOOKIE, BookieConfig)
        + "\n\nPulsar `broker.conf` / `standalone.conf` keys accepted without a setting of "
        "their own (any other value of these keys is refused, naming the key, the value and "
        "what fits):\n\n"
        + settings.markdown_accepted_table(settings.BROKER)
        + "\n\nBookKeeper `bk_server.conf` keys accepted without a setting of their own:\n\n"
        + settings.markdown_accepted_table(settings.BOOKIE)
    )


def documented() -> str:
    text = DOCS.read_text()
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()


def main(argv: list[str]) -> int:
    if "--check" in argv:
        if documented() != tables().strip():
            print(f"{DOCS}: the settings tables are stale; paste the output of {argv[0]}")
            return 1
        return 0
    if "--write" in argv:
        text = DOCS.read_text()
        start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
        DOCS.write_text(text[:start] + "\n" + tables() + "\n" + text[end:])
        return 0
    print(tables())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
