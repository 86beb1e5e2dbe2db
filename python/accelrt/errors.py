"""The exceptions of the accelrt package.

Every exception the package raises on purpose is an ``accelrt.Error``, so a
caller can catch that one class; the subclasses say whose fault it was.
"""


class Error(Exception):
    """Something accelrt could not do; ``str(e)`` says what and what to do."""


class UsageError(Error, ValueError):
    """A call the client refuses before it sends anything: a job file it
    cannot read, empty or over 1 MiB, an override without ``=``, a value the
    protocol cannot carry.  ``python3 -m accelrt`` exits 2 on it, as the CLI
    does."""


class ServerError(Error):
    """The server answered a request with ``error``; ``text`` is its message
    exactly as sent (a job-file error holds ``FILE:LINE:COL: error: ...``
    lines)."""

    def __init__(self, text, version=None):
        super().__init__(text)
        self.text = text
        self.version = version  # the protocol version the reply carried


class VersionError(ServerError):
    """The server speaks an older protocol than the request needs (for
    example ``ps`` with ``json``, protocol version 3, asked of a version 2
    server).  ``server_version`` is the version its reply carried and
    ``needed`` the version of the request."""

    def __init__(self, text, server_version, needed):
        super().__init__(
            "the server speaks protocol version %s, this request needs version %d "
            "(upgrade the server's accelrt, or leave out the option that needs it); "
            "the server said: %s" % (server_version, needed, text), server_version)
        self.text = text
        self.server_version = server_version
        self.needed = needed


class ProtocolError(Error):
    """The server's reply broke the wire format of docs/service.md (a short
    message, an unknown tag, a value that is not what its tag holds), or no
    reply came within the client's timeout."""


class FormatError(Error, ValueError):
    """A file (metrics.jsonl, summary.json, trace.json, checkpoint.bin) is not
    what accelrt writes.  ``path`` names it and ``offset`` is the byte where
    the problem was found (None when it concerns the file as a whole)."""

    def __init__(self, path, offset, what):
        where = str(path) if offset is None else "%s: at byte %d" % (path, offset)
        super().__init__("%s: %s" % (where, what))
        self.path = str(path)
        self.offset = offset
        self.what = what
