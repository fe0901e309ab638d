from . import pulsar_api_pb2 as _pulsar_api_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StickyKeyView(_message.Message):
    __slots__ = ("producer_name", "sequence_id", "publish_time", "partition_key", "partition_key_b64_encoded", "ordering_key")
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_KEY_FIELD_NUMBER: _ClassVar[int]
    PARTITION_KEY_B64_ENCODED_FIELD_NUMBER: _ClassVar[int]
    ORDERING_KEY_FIELD_NUMBER: _ClassVar[int]
    producer_name: str
    sequence_id: int
    publish_time: int
    partition_key: bytes
    partition_key_b64_encoded: bool
    ordering_key: bytes
    def __init__(self, producer_name: _Optional[str] = ..., sequence_id: _Optional[int] = ..., publish_time: _Optional[int] = ..., partition_key: _Optional[bytes] = ..., partition_key_b64_encoded: _Optional[bool] = ..., ordering_key: _Optional[bytes] = ...) -> None: ...

class MetadataList(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[_pulsar_api_pb2.MessageMetadata]
    def __init__(self, entries: _Optional[_Iterable[_Union[_pulsar_api_pb2.MessageMetadata, _Mapping]]] = ...) -> None: ...

class PlainMetadataColumns(_message.Message):
    __slots__ = ("producer_name", "sequence_id", "publish_time", "replicated_from", "replicate_to", "uncompressed_size", "highest_sequence_id")
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_FIELD_NUMBER: _ClassVar[int]
    REPLICATED_FROM_FIELD_NUMBER: _ClassVar[int]
    REPLICATE_TO_FIELD_NUMBER: _ClassVar[int]
    UNCOMPRESSED_SIZE_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    producer_name: _containers.RepeatedScalarFieldContainer[str]
    sequence_id: _containers.RepeatedScalarFieldContainer[int]
    publish_time: _containers.RepeatedScalarFieldContainer[int]
    replicated_from: _containers.RepeatedScalarFieldContainer[str]
    replicate_to: _containers.RepeatedScalarFieldContainer[str]
    uncompressed_size: _containers.RepeatedScalarFieldContainer[int]
    highest_sequence_id: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, producer_name: _Optional[_Iterable[str]] = ..., sequence_id: _Optional[_Iterable[int]] = ..., publish_time: _Optional[_Iterable[int]] = ..., replicated_from: _Optional[_Iterable[str]] = ..., replicate_to: _Optional[_Iterable[str]] = ..., uncompressed_size: _Optional[_Iterable[int]] = ..., highest_sequence_id: _Optional[_Iterable[int]] = ...) -> None: ...
