from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AddBatch(_message.Message):
    __slots__ = ("batch_id", "master_key", "packed", "recovery")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    master_key: bytes
    packed: bytes
    recovery: bool
    def __init__(self, batch_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., packed: _Optional[bytes] = ..., recovery: _Optional[bool] = ...) -> None: ...

class AddFailure(_message.Message):
    __slots__ = ("batch_id", "index", "status", "message", "whole_batch")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    WHOLE_BATCH_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    index: int
    status: int
    message: str
    whole_batch: bool
    def __init__(self, batch_id: _Optional[int] = ..., index: _Optional[int] = ..., status: _Optional[int] = ..., message: _Optional[str] = ..., whole_batch: _Optional[bool] = ...) -> None: ...

class AddResponse(_message.Message):
    __slots__ = ("first_batch_id", "last_batch_id", "failures")
    FIRST_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    first_batch_id: int
    last_batch_id: int
    failures: _containers.RepeatedCompositeFieldContainer[AddFailure]
    def __init__(self, first_batch_id: _Optional[int] = ..., last_batch_id: _Optional[int] = ..., failures: _Optional[_Iterable[_Union[AddFailure, _Mapping]]] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "lac", "crc32c", "payload")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    lac: int
    crc32c: int
    payload: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., lac: _Optional[int] = ..., crc32c: _Optional[int] = ..., payload: _Optional[bytes] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("ledger_id", "first_entry_id", "last_entry_id", "max_bytes", "long_poll", "previous_lac", "timeout_ms", "packed", "background")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    LONG_POLL_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_LAC_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    first_entry_id: int
    last_entry_id: int
    max_bytes: int
    long_poll: bool
    previous_lac: int
    timeout_ms: int
    packed: bool
    background: bool
    def __init__(self, ledger_id: _Optional[int] = ..., first_entry_id: _Optional[int] = ..., last_entry_id: _Optional[int] = ..., max_bytes: _Optional[int] = ..., long_poll: _Optional[bool] = ..., previous_lac: _Optional[int] = ..., timeout_ms: _Optional[int] = ..., packed: _Optional[bool] = ..., background: _Optional[bool] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("status", "message", "entries", "lac", "packed")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    status: int
    message: str
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    lac: int
    packed: bytes
    def __init__(self, status: _Optional[int] = ..., message: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., lac: _Optional[int] = ..., packed: _Optional[bytes] = ...) -> None: ...

class LedgerRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class ReadLacResponse(_message.Message):
    __slots__ = ("status", "message", "lac")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    status: int
    message: str
    lac: int
    def __init__(self, status: _Optional[int] = ..., message: _Optional[str] = ..., lac: _Optional[int] = ...) -> None: ...

class FenceRequest(_message.Message):
    __slots__ = ("ledger_id", "master_key")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    master_key: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., master_key: _Optional[bytes] = ...) -> None: ...

class FenceResponse(_message.Message):
    __slots__ = ("status", "message", "last_entry_id")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    status: int
    message: str
    last_entry_id: int
    def __init__(self, status: _Optional[int] = ..., message: _Optional[str] = ..., last_entry_id: _Optional[int] = ...) -> None: ...

class WriteLacRequest(_message.Message):
    __slots__ = ("ledger_id", "master_key", "lac")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    master_key: bytes
    lac: int
    def __init__(self, ledger_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., lac: _Optional[int] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("status", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: int
    message: str
    def __init__(self, status: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("serving", "read_only", "bookie_id")
    SERVING_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    serving: bool
    read_only: bool
    bookie_id: str
    def __init__(self, serving: _Optional[bool] = ..., read_only: _Optional[bool] = ..., bookie_id: _Optional[str] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("status", "message", "bookie_id", "read_only", "total_disk_bytes", "free_disk_bytes", "journal_lag_bytes")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    TOTAL_DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    FREE_DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    status: int
    message: str
    bookie_id: str
    read_only: bool
    total_disk_bytes: int
    free_disk_bytes: int
    journal_lag_bytes: int
    def __init__(self, status: _Optional[int] = ..., message: _Optional[str] = ..., bookie_id: _Optional[str] = ..., read_only: _Optional[bool] = ..., total_disk_bytes: _Optional[int] = ..., free_disk_bytes: _Optional[int] = ..., journal_lag_bytes: _Optional[int] = ...) -> None: ...
