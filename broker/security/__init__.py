"""Security shared by the binary protocol and the admin REST: TLS contexts, JSON Web Tokens,
authentication providers and authorization.

Owns: who a caller is and what a role may do.
Must not know: connections, HTTP handlers or topics; callers ask it questions.
"""

from magnetar.broker.security.authentication import AuthenticationError, AuthenticationService
from magnetar.broker.security.authorization import AuthorizationService
from magnetar.broker.security.broker_client import BrokerClientAuth
from magnetar.broker.security.tls import TlsSettings
from magnetar.broker.security.tokens import TokenValidator, create_token

__all__ = [
    "AuthenticationError",
    "AuthenticationService",
    "AuthorizationService",
    "BrokerClientAuth",
    "TlsSettings",
    "TokenValidator",
    "create_token",
]
