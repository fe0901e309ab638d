"""BookKeeper's shipped ``bk_server.conf`` (tests/support/pulsar_conf.py) starts a bookie:
its keys are implemented or accepted (logged once, with why), ``httpServerEnabled=false``
keeps the HTTP server off although ``httpServerPort`` is set, and ``journalDirectories`` /
``ledgerDirectories`` place the journal and the entry logs (here moved off ``/tmp`` by the
``MAGNETAR_BOOKIE_*`` variables, which override the file; the command line overrides both)."""

from __future__ import annotations

import pathlib
import tempfile

import pytest
from support import pulsar_conf
from support.bookies import BookieFactory
from support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration

DATA = pulsar_conf.materialize(pathlib.Path(tempfile.mkdtemp(prefix="pulsar-conf-")))
CONF = DATA / "bk_server.conf"


def test_bk_server_conf_starts_a_bookie(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory, tmp_path: pathlib.Path
) -> None:
    journal, ledgers = tmp_path / "journal-dir", tmp_path / "ledger-dir"
    bookie = bookie_factory.create(
        "bk-server-conf",
        metadata=f"{zookeeper_server.url}/bk-server-conf",
        extra_args=["--config", str(CONF)],
        env={
            "MAGNETAR_BOOKIE_JOURNAL_DIR": str(journal),
            "MAGNETAR_BOOKIE_LEDGER_DIR": str(ledgers),
        },
        cli=True,
    ).start()
    try:
        log = bookie.log_path.read_text(errors="replace")
        assert "stickyReadSEnabled=true accepted without a setting of its own" in log
        assert "reorderReadSequenceEnabled=true accepted" in log
        assert any(journal.iterdir()) and ledgers.is_dir()
        assert "'http_port': 8080, 'http_server_enabled': false" in log
        assert "metrics listening" not in log  # httpServerEnabled=false: no HTTP server
    finally:
        bookie.stop()
