from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FetchRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "max_records", "max_bytes", "tags", "wait_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    max_records: int
    max_bytes: int
    tags: _containers.RepeatedScalarFieldContainer[str]
    wait_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., max_records: _Optional[int] = ..., max_bytes: _Optional[int] = ..., tags: _Optional[_Iterable[str]] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("result", "records", "record_count", "next_offset", "min_offset", "max_offset")
    class Result(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        RESULT_UNSPECIFIED: _ClassVar[FetchResponse.Result]
        FOUND: _ClassVar[FetchResponse.Result]
        NO_NEW_RECORDS: _ClassVar[FetchResponse.Result]
        OFFSET_TOO_SMALL: _ClassVar[FetchResponse.Result]
        OFFSET_TOO_LARGE: _ClassVar[FetchResponse.Result]
    RESULT_UNSPECIFIED: FetchResponse.Result
    FOUND: FetchResponse.Result
    NO_NEW_RECORDS: FetchResponse.Result
    OFFSET_TOO_SMALL: FetchResponse.Result
    OFFSET_TOO_LARGE: FetchResponse.Result
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    result: FetchResponse.Result
    records: bytes
    record_count: int
    next_offset: int
    min_offset: int
    max_offset: int
    def __init__(self, result: _Optional[_Union[FetchResponse.Result, str]] = ..., records: _Optional[bytes] = ..., record_count: _Optional[int] = ..., next_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ...) -> None: ...

class AppendRequest(_message.Message):
    __slots__ = ("topic", "records")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    records: bytes
    def __init__(self, topic: _Optional[str] = ..., records: _Optional[bytes] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("status", "message", "queue_id", "first_offset", "record_count")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STORED: _ClassVar[AppendResponse.Status]
        FLUSH_DISK_TIMEOUT: _ClassVar[AppendResponse.Status]
        FLUSH_SLAVE_TIMEOUT: _ClassVar[AppendResponse.Status]
    STORED: AppendResponse.Status
    FLUSH_DISK_TIMEOUT: AppendResponse.Status
    FLUSH_SLAVE_TIMEOUT: AppendResponse.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    status: AppendResponse.Status
    message: str
    queue_id: int
    first_offset: int
    record_count: int
    def __init__(self, status: _Optional[_Union[AppendResponse.Status, str]] = ..., message: _Optional[str] = ..., queue_id: _Optional[int] = ..., first_offset: _Optional[int] = ..., record_count: _Optional[int] = ...) -> None: ...
