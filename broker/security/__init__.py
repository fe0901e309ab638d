"""Security shared by the binary protocol and the admin REST: TLS contexts, JSON Web Tokens,
authentication providers and authorization.

Owns: who a caller is and what a role may do.
Must not know: connections, HTTP handlers or topics; callers ask it questions.
"""
