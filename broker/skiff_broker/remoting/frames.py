"""RocketMQ remoting frames: encoding and an incremental decoder. Pure: no I/O.

A frame on the wire is::

    int32 length            bytes after this field (header-length field + header + body)
    int32 header_word       high byte: serialize type (0 JSON, 1 ROCKETMQ); low 3 bytes:
                            header length
    header                  a RemotingCommand's fields, JSON or ROCKETMQ binary
    body                    the rest of the frame

All integers are big-endian. A ROCKETMQ binary header is: code int16, language int8,
version int16, opaque int32, flag int32, remark (int32 length + UTF-8), extFields (int32
length of the whole map, then per entry an int16-length key and an int32-length value).

Invariants:
- ``FrameDecoder`` never holds more than one frame's bytes past ``max_frame_length``:
  a length field over the limit (or under the smallest frame) raises ``FrameError``
  before any of that frame's body is buffered.
- Every malformed input raises ``FrameError`` (never another exception), whose text
  says what was wrong; after one the connection's stream cannot be resynchronised, so
  the caller closes it.
- ``encode`` and ``FrameDecoder`` are inverse for every command either can hold.
"""

from __future__ import annotations

import dataclasses
import json
import struct

JSON = 0
ROCKETMQ = 1
SERIALIZE_TYPES = (JSON, ROCKETMQ)
_SERIALIZE_NAMES = {JSON: "JSON", ROCKETMQ: "ROCKETMQ"}

# Flag bits (RemotingCommand's RPC_TYPE and RPC_ONEWAY).
RESPONSE_FLAG = 1
ONEWAY_FLAG = 2

# RocketMQ's default com.rocketmq.remoting.frameMaxLength.
DEFAULT_MAX_FRAME_LENGTH = 16 * 1024 * 1024
# The header-length field takes 3 bytes.
MAX_HEADER_LENGTH = (1 << 24) - 1

# RocketMQ's LanguageCode values (binary headers carry the number, JSON the name).
LANGUAGES = (
    "JAVA",
    "CPP",
    "DOTNET",
    "PYTHON",
    "DELPHI",
    "ERLANG",
    "RUBY",
    "OTHER",
    "HTTP",
    "GO",
    "PHP",
    "OMS",
    "RUST",
)
_LANGUAGE_CODES = {name: code for code, name in enumerate(LANGUAGES)}

_INT = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")
_BINARY_FIXED = struct.Struct(">hbhii")


class FrameError(ValueError):
    """A frame that cannot be read; the stream after it is lost."""


@dataclasses.dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = dataclasses.field(default_factory=dict)
    body: bytes = b""
    language: str = "PYTHON"
    version: int = 0
    # How the header came (and how its response goes back).
    serialize_type: int = JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def response(self, code: int, remark: str | None = None, **ext_fields: str) -> RemotingCommand:
        """The answer to this request: same opaque and serialize type, the response flag."""
        return RemotingCommand(
            code=code,
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            ext_fields=dict(ext_fields),
            version=self.version,
            serialize_type=self.serialize_type,
        )


# -- encoding -----------------------------------------------------------------


def encode(command: RemotingCommand) -> bytes:
    """The whole frame of ``command``, length prefix included."""
    if command.serialize_type == ROCKETMQ:
        header = _binary_header(command)
    else:
        header = _json_header(command)
    if len(header) > MAX_HEADER_LENGTH:
        raise FrameError(f"a header of {len(header)} bytes does not fit the 24-bit length field")
    length = 4 + len(header) + len(command.body)
    word = (command.serialize_type << 24) | len(header)
    return _PREFIX.pack(length, word) + header + command.body


def _json_header(command: RemotingCommand) -> bytes:
    fields: dict[str, object] = {
        "code": command.code,
        "language": command.language,
        "version": command.version,
        "opaque": command.opaque,
        "flag": command.flag,
        "serializeTypeCurrentRPC": _SERIALIZE_NAMES[JSON],
    }
    if command.remark is not None:
        fields["remark"] = command.remark
    if command.ext_fields:
        fields["extFields"] = command.ext_fields
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode()


def _binary_header(command: RemotingCommand) -> bytes:
    parts = [
        _BINARY_FIXED.pack(
            command.code,
            _LANGUAGE_CODES.get(command.language, _LANGUAGE_CODES["OTHER"]),
            command.version,
            command.opaque,
            command.flag,
        )
    ]
    remark = command.remark.encode() if command.remark else b""
    parts.append(_INT.pack(len(remark)))
    parts.append(remark)
    entries = []
    for key, value in command.ext_fields.items():
        k, v = key.encode(), value.encode()
        entries.append(struct.pack(">h", len(k)) + k + _INT.pack(len(v)) + v)
    ext = b"".join(entries)
    parts.append(_INT.pack(len(ext)))
    parts.append(ext)
    return b"".join(parts)


# -- decoding -----------------------------------------------------------------


def decode_frame(frame: bytes | memoryview) -> RemotingCommand:
    """One frame's command, ``frame`` being what follows its length field."""
    if len(frame) < 4:
        raise FrameError(f"a frame of {len(frame)} bytes has no header-length field")
    (word,) = struct.unpack_from(">I", frame, 0)
    serialize_type = word >> 24
    header_length = word & MAX_HEADER_LENGTH
    if serialize_type not in SERIALIZE_TYPES:
        raise FrameError(
            f"serialize type {serialize_type} is unknown: RocketMQ knows 0 (JSON) and 1 (ROCKETMQ)"
        )
    if header_length > len(frame) - 4:
        raise FrameError(
            f"header length {header_length} is more than the {len(frame) - 4} bytes the "
            "frame has after its header-length field"
        )
    header = bytes(frame[4 : 4 + header_length])
    command = _from_json(header) if serialize_type == JSON else _from_binary(header)
    command.body = bytes(frame[4 + header_length :])
    return command


def _from_json(header: bytes) -> RemotingCommand:
    try:
        fields = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"the JSON header is not valid JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise FrameError("the JSON header must be an object")
    code = _int_field(fields, "code", required=True)
    ext = fields.get("extFields")
    if ext is None:
        ext = {}
    if not isinstance(ext, dict):
        raise FrameError("extFields in the JSON header must be an object")
    ext_fields: dict[str, str] = {}
    for key, value in ext.items():
        if isinstance(value, bool):
            ext_fields[key] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            ext_fields[key] = str(value)
        elif value is not None:
            raise FrameError(f"extFields value of {key!r} must be a string")
    remark = fields.get("remark")
    if remark is not None and not isinstance(remark, str):
        raise FrameError("remark in the JSON header must be a string")
    language = fields.get("language", "JAVA")
    if not isinstance(language, str):
        raise FrameError("language in the JSON header must be a name such as JAVA")
    return RemotingCommand(
        code=code,
        opaque=_int_field(fields, "opaque"),
        flag=_int_field(fields, "flag"),
        remark=remark,
        ext_fields=ext_fields,
        language=language,
        version=_int_field(fields, "version"),
        serialize_type=JSON,
    )


def _int_field(fields: dict, name: str, *, required: bool = False) -> int:
    value = fields.get(name)
    if value is None and not required:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not -(2**31) <= value < 2**31:
        raise FrameError(f"{name} in the JSON header must be a 32-bit integer")
    return value


def _from_binary(header: bytes) -> RemotingCommand:
    if len(header) < _BINARY_FIXED.size + 8:
        raise FrameError(f"a ROCKETMQ header of {len(header)} bytes is too short")
    code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
    at = _BINARY_FIXED.size
    remark_bytes, at = _sized(header, at, 4, "remark")
    (ext_length,) = _INT.unpack_from(header, _need(header, at, 4, "extFields length"))
    at += 4
    if ext_length < 0 or ext_length > len(header) - at:
        raise FrameError(
            f"extFields length {ext_length} does not fit the {len(header) - at} header bytes left"
        )
    end = at + ext_length
    ext_fields: dict[str, str] = {}
    while at < end:
        key, at = _sized(header, at, 2, "extFields key", end)
        value, at = _sized(header, at, 4, "extFields value", end)
        ext_fields[_text(key, "extFields key")] = _text(value, "extFields value")
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        remark=_text(remark_bytes, "remark") if remark_bytes else None,
        ext_fields=ext_fields,
        language=LANGUAGES[language] if 0 <= language < len(LANGUAGES) else "OTHER",
        version=version,
        serialize_type=ROCKETMQ,
    )


def _need(header: bytes, at: int, size: int, what: str, end: int | None = None) -> int:
    if at + size > (len(header) if end is None else end):
        raise FrameError(f"the ROCKETMQ header ends inside its {what}")
    return at


def _sized(
    header: bytes, at: int, width: int, what: str, end: int | None = None
) -> tuple[bytes, int]:
    """A length-prefixed byte string at ``at`` (prefix ``width`` bytes) and where it ends."""
    _need(header, at, width, f"{what} length", end)
    (length,) = struct.unpack_from(">h" if width == 2 else ">i", header, at)
    at += width
    if length < 0:
        raise FrameError(f"{what} length {length} is negative")
    _need(header, at, length, what, end)
    return header[at : at + length], at + length


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FrameError(f"the {what} is not UTF-8") from None


class FrameDecoder:
    """Commands out of a byte stream, in order, however the stream is cut.

    ``max_frame_length`` bounds a frame with its length field, as RocketMQ's
    ``frameMaxLength`` does.
    """

    def __init__(self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        self.max_frame_length = max_frame_length
        self._buffer = bytearray()
        # The current frame's length (after its length field), once read.
        self._need: int | None = None
        # A malformed frame met after commands that ``feed`` still returned.
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def failed(self) -> FrameError | None:
        """The malformed frame met (after commands ``feed`` still returned), if any."""
        return self._error

    def feed(self, data: bytes | memoryview) -> list[RemotingCommand]:
        """The commands ``data`` completes; FrameError on a malformed frame.

        The commands before a malformed frame are returned first; the next call raises.
        """
        if self._error is not None:
            raise self._error
        self._buffer += data
        commands: list[RemotingCommand] = []
        try:
            self._decode_into(commands)
        except FrameError as exc:
            if not commands:
                raise
            # Kept without its traceback: that holds this call's frame, the peer's chunk and
            # this decoder among its locals, a cycle only the collector would free.
            exc.__traceback__ = exc.__context__ = exc.__cause__ = None
            self._error = exc
        return commands

    def _decode_into(self, commands: list[RemotingCommand]) -> None:
        while True:
            if self._need is None:
                if len(self._buffer) < 4:
                    return
                (length,) = _INT.unpack_from(self._buffer, 0)
                if length < 4:
                    raise FrameError(
                        f"frame length {length} is less than the 4-byte header-length field"
                    )
                if length + 4 > self.max_frame_length:
                    raise FrameError(
                        f"a frame of {length + 4} bytes is over the {self.max_frame_length}-"
                        "byte limit; send smaller messages or batches"
                    )
                self._need = length
            if len(self._buffer) < 4 + self._need:
                return
            end = 4 + self._need
            frame = memoryview(self._buffer)[4:end]
            try:
                commands.append(decode_frame(frame))
            finally:
                frame.release()
            del self._buffer[:end]
            self._need = None
