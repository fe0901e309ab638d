"""Generated protobuf and gRPC code of ``bookie.proto`` (``make proto``): imported by module
(``bookie_pb2``, ``bookie_pb2_grpc``); nothing re-exported."""

__all__: list[str] = []
