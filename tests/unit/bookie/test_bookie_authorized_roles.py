"""``authorized_roles`` (BookKeeper's ``authorizedRoles``) is read from the bookie's YAML under
both names and refused without TLS client authentication, at start."""

from __future__ import annotations

import pathlib

import pytest

from magnetar.bookie.tls import GrpcTls


def test_roles_need_client_authentication(tmp_path: pathlib.Path) -> None:
    tls = GrpcTls("cert.pem", "key.pem", "ca.pem", False, ("broker",))
    with pytest.raises(ValueError, match="authorized_roles needs tls_client_authentication"):
        tls.server_credentials()


@pytest.mark.parametrize("key", ["authorized_roles", "authorizedRoles"])
def test_both_names_are_read(tmp_path: pathlib.Path, key: str) -> None:
    from magnetar import settings
    from magnetar.bookie.main import BookieConfig

    conf = tmp_path / "bookie.yaml"
    conf.write_text(f"{key}: broker,autorecovery\n")
    values = settings.resolve(
        settings.BOOKIE,
        BookieConfig,
        file_values=settings.read_config_file(conf),
        file_origin=str(conf),
        environ=None,
        overrides={},
    )
    assert values["authorized_roles"] == "broker,autorecovery"
