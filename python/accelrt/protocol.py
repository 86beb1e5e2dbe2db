"""The service's wire format (docs/service.md, "The protocol"), both ways.

A message is a 4-byte big-endian length N and N bytes of body; the body is a
sequence of fields, each a 1-byte tag, a 4-byte big-endian length L and L
bytes.  This module encodes requests and decodes replies exactly as
runtime/tenancy/protocol.c does on the server, and is as strict about what it
accepts: an unknown tag, a field that overruns the body, a repeated field, a
NUL byte in a text field or a number that is not a decimal is a
``ProtocolError``, never a guess.
"""

import socket as _socket
import struct
import time

from .errors import ProtocolError, UsageError

# Field tags (docs/service.md's table; runtime/tenancy/protocol.h).
OP, ID, YAML, FILE, BASE, CWD, SET, FOLLOW, OFFSET, TEXT, ALL, VERSION, KEEP, JSON = range(1, 15)
TAG_NAMES = {OP: "op", ID: "id", YAML: "yaml", FILE: "file", BASE: "base", CWD: "cwd",
             SET: "set", FOLLOW: "follow", OFFSET: "offset", TEXT: "text", ALL: "all",
             VERSION: "version", KEEP: "keep", JSON: "json"}
NUMBER_TAGS = (ID, OFFSET, VERSION)
FLAG_TAGS = (FOLLOW, ALL, KEEP, JSON)

REQUESTS = ("submit", "ps", "logs", "cancel")
REPLIES = ("ok", "error", "data", "end")

# The newest version this client speaks: 3 adds `json` (tag 14) to ps and logs.
VERSION_NEWEST = 3
# What a request without `json` needs: version 2 added `version` and `keep`.
VERSION_PLAIN = 2

MAX_BODY = (1 << 20) + 65536  # a message's body, at most 1 MiB + 64 KiB
MAX_YAML = 1 << 20            # a job file's text
MAX_PATH = 4095               # file, base, cwd
MAX_SETS = 64
MAX_DIGITS = 19               # numbers are unsigned decimals of at most 19 digits


class Message:
    """One decoded message: ``op`` (str), ``version`` (int; 1 when the field
    is absent), ``id`` (int or None), ``text`` (str or None, decoded as UTF-8
    with undecodable bytes replaced), and ``fields``: every field as
    ``{tag: bytes}`` (``set`` as a list)."""

    def __init__(self, fields):
        self.fields = fields
        self.op = fields[OP].decode("ascii")
        self.version = _number(fields[VERSION]) if VERSION in fields else 1
        self.id = _number(fields[ID]) if ID in fields else None
        self.text = fields[TEXT].decode("utf-8", "replace") if TEXT in fields else None

    def __repr__(self):
        return "Message(op=%r, version=%r, id=%r, text=%r)" % (self.op, self.version, self.id,
                                                                self.text)


def _number(b):
    return int(b.decode("ascii"))


def _field(tag, value):
    return struct.pack(">BI", tag, len(value)) + value


def _text(name, value, limit=None):
    """A text field's bytes: str or bytes, no NUL, at most limit bytes."""
    b = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if b"\0" in b:
        raise UsageError("%s holds a NUL byte, which the protocol does not carry" % name)
    if limit is not None and len(b) > limit:
        raise UsageError("%s is %d bytes, more than the %d the protocol allows"
                         % (name, len(b), limit))
    return b


def _decimal(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 \
            or len(str(value)) > MAX_DIGITS:
        raise UsageError("%s must be a whole number from 0 to %s, not %r"
                         % (name, "9" * MAX_DIGITS, value))
    return str(value).encode("ascii")


def encode_request(op, version, id=None, yaml=None, file=None, base=None, cwd=None, sets=(),
                   follow=False, offset=0, keep=False, json=False):
    """The wire bytes (length prefix included) of one request.  Fields are
    written in the order the C client writes them; a flag is sent only when
    set and ``offset`` only when not 0, as the C encoder does.  Raises
    ``UsageError`` for a value the protocol cannot carry."""
    if op not in REQUESTS:
        raise UsageError("unknown request %r (one of %s)" % (op, ", ".join(REQUESTS)))
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise UsageError("protocol versions start at 1, not %r" % (version,))
    body = [_field(OP, op.encode("ascii")), _field(VERSION, _decimal("version", version))]
    if id is not None:
        body.append(_field(ID, _decimal("a job id", id)))
    if yaml is not None:
        y = yaml.encode("utf-8") if isinstance(yaml, str) else bytes(yaml)
        if not y or len(y) > MAX_YAML:
            raise UsageError("the job file is %s" % ("empty" if not y else
                                                     "larger than 1 MiB (%d bytes)" % len(y)))
        body.append(_field(YAML, y))
    for tag, name, value in ((FILE, "file", file), (BASE, "base", base), (CWD, "cwd", cwd)):
        if value is not None:
            body.append(_field(tag, _text(name, value, MAX_PATH)))
    sets = list(sets)
    if len(sets) > MAX_SETS:
        raise UsageError("at most %d overrides (--set), got %d" % (MAX_SETS, len(sets)))
    for s in sets:
        b = _text("an override", s)
        if b"=" not in b:
            raise UsageError("an override is KEY=VALUE, not %r" % s)
        body.append(_field(SET, b))
    if follow:
        body.append(_field(FOLLOW, b"1"))
    if keep:
        body.append(_field(KEEP, b"1"))
    if offset:
        body.append(_field(OFFSET, _decimal("offset", offset)))
    if json:
        body.append(_field(JSON, b"1"))
    data = b"".join(body)
    if len(data) > MAX_BODY:
        raise UsageError("the request is %d bytes, more than the %d a message holds"
                         % (len(data), MAX_BODY))
    return struct.pack(">I", len(data)) + data


def decode(body, want_reply=True):
    """Decodes one message body (without its length prefix) into a Message;
    ``ProtocolError`` naming the field and byte for anything the format does
    not allow.  With want_reply, a request's op is refused too."""
    fields = {}
    at, n = 0, len(body)
    while at < n:
        if n - at < 5:
            raise ProtocolError("truncated field header at byte %d of a %d-byte message"
                                % (at, n))
        tag, length = struct.unpack_from(">BI", body, at)
        if tag not in TAG_NAMES:
            raise ProtocolError("unknown field tag %d at byte %d" % (tag, at))
        if length > n - at - 5:
            raise ProtocolError("field %d (%s) at byte %d declares %d bytes, only %d remain"
                                % (tag, TAG_NAMES[tag], at, length, n - at - 5))
        value = bytes(body[at + 5:at + 5 + length])
        if tag != YAML and b"\0" in value:
            raise ProtocolError("field %d (%s) at byte %d holds a NUL byte"
                                % (tag, TAG_NAMES[tag], at))
        _check_value(tag, value, at)
        if tag == SET:
            fields.setdefault(SET, []).append(value)
        elif tag in fields:
            raise ProtocolError("field %d (%s) appears twice (again at byte %d)"
                                % (tag, TAG_NAMES[tag], at))
        else:
            fields[tag] = value
        at += 5 + length
    if OP not in fields:
        raise ProtocolError("the message names no operation")
    op = fields[OP].decode("ascii", "replace")
    if op not in REQUESTS + REPLIES:
        raise ProtocolError("unknown operation %r" % op)
    if want_reply and op not in REPLIES:
        raise ProtocolError("the server sent a request (%s), not a reply" % op)
    return Message(fields)


def _check_value(tag, value, at):
    name = TAG_NAMES[tag]
    if tag in NUMBER_TAGS:
        ok = 0 < len(value) <= MAX_DIGITS and value.isdigit() and value.isascii()
        if ok and tag == VERSION and int(value) == 0:
            ok = False
        if not ok:
            raise ProtocolError("field %s at byte %d is not a%s decimal number: %r"
                                % (name, at, " positive" if tag == VERSION else "", value[:40]))
    elif tag in FLAG_TAGS and value not in (b"0", b"1"):
        raise ProtocolError("field %s at byte %d is a flag (0 or 1), not %r" % (name, at,
                                                                                 value[:40]))


def recv_message(sock, timeout, first_byte_timeout=None):
    """Reads one message from a connected socket and decodes it.

    The first byte may take up to ``first_byte_timeout`` seconds (None: as
    long as it takes, for a followed log whose job is quiet); from then on
    the whole message must arrive within ``timeout`` seconds, a deadline for
    the message rather than for each read, so a server that sends part of a
    message and stalls cannot hang the client.  Returns None when the server
    closed the connection cleanly between messages."""
    sock.settimeout(first_byte_timeout)
    try:
        first = sock.recv(4)
    except _socket.timeout:
        raise ProtocolError("no reply from the server within %g s" % first_byte_timeout)
    except OSError as e:
        raise ProtocolError("reading the server's reply failed: %s" % e)
    if not first:
        return None
    deadline = time.monotonic() + timeout
    head = first + _recv_exact(sock, 4 - len(first), deadline, timeout, "header", len(first), 4)
    (length,) = struct.unpack(">I", head)
    if length > MAX_BODY:
        raise ProtocolError("the server announced a message of %d bytes, more than the %d "
                            "a message holds" % (length, MAX_BODY))
    return decode(_recv_exact(sock, length, deadline, timeout, "body", 0, length))


def _recv_exact(sock, n, deadline, timeout, part, have, whole):
    """n more bytes of a message's part (`have` of `whole` already read), all
    before deadline (time.monotonic())."""
    buf = bytearray()
    while len(buf) < n:
        sock.settimeout(max(0.0, deadline - time.monotonic()))
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 16))
        except _socket.timeout:
            raise ProtocolError("the server sent %d of the %d bytes of a message's %s and "
                                "no more within %g s" % (have + len(buf), whole, part, timeout))
        except OSError as e:
            raise ProtocolError("reading the server's reply failed: %s" % e)
        if not chunk:
            raise ProtocolError("the server closed the connection after %d of the %d bytes "
                                "of a message's %s" % (have + len(buf), whole, part))
        buf += chunk
    return bytes(buf)
