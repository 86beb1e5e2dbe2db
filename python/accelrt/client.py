"""A client for ``accelrt serve``: submit, ps, logs and cancel over the
service's Unix socket (docs/service.md, "The protocol").

    import accelrt
    c = accelrt.Client()                       # the socket `accelrt submit` would use
    job = c.submit("configs/quickstart.yaml", sets={"train.epochs": 1})
    for line in c.logs(job, follow=True):      # dicts, until the job ends
        print(line["kind"], line["text"])
    print([j["state"] for j in c.ps()])

One request per connection, as the protocol has it.  Every read has a
deadline (``timeout``), so a server that stalls mid-message or sends
something malformed raises ``ProtocolError`` instead of hanging; only a
followed log waits between messages for as long as its job is quiet (pass
``idle_timeout`` to bound that too).

Requests are sent with the lowest protocol version that has their fields:
version 2 for plain ones, version 3 (the ``json`` flag) for ``ps()``,
``logs()`` and their ``json=True`` text forms, so a version 2 server still
serves ``submit``, ``cancel``, ``ps_text()`` and ``logs_text()``, and refuses
a version 3 request with an error that becomes a ``VersionError``.
"""

import codecs
import json as _json
import os
import socket as _socket
import stat

from . import protocol
from .errors import Error, ProtocolError, ServerError, UsageError, VersionError

SYSTEM_SOCKET = "/run/accelrt/accelrt.sock"


def default_socket(environ=None, euid=None):
    """The socket ``accelrt submit`` talks to (runtime/cli/cmd_service.c's
    rule): ``$ACCELRT_SOCKET`` when set and not empty; else, for a user other
    than root whose own server is running, ``$XDG_RUNTIME_DIR/accelrt.sock``
    (when that exists and is a socket); else the system server's
    ``/run/accelrt/accelrt.sock``.  environ and euid default to this
    process's."""
    env = os.environ if environ is None else environ
    euid = os.geteuid() if euid is None else euid
    if env.get("ACCELRT_SOCKET"):
        return env["ACCELRT_SOCKET"]
    rt = env.get("XDG_RUNTIME_DIR", "")
    if euid != 0 and rt.startswith("/"):
        path = rt + "/accelrt.sock"
        try:
            if stat.S_ISSOCK(os.stat(path).st_mode):
                return path
        except OSError:
            pass
    return SYSTEM_SOCKET


def _job_id(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 \
            or len(str(value)) > protocol.MAX_DIGITS:
        raise UsageError("a job id is a whole number (see ps), not %r" % (value,))
    return value


def _override(key, value):
    if isinstance(value, bool):
        value = "true" if value else "false"
    return "%s=%s" % (key, value)


class Client:
    """A client of one server.  ``socket``: its path (default
    ``default_socket()``); ``timeout``: seconds a connection, a request and
    each reply message may take (a hang guard; the server itself gives a
    request 10 s)."""

    def __init__(self, socket=None, timeout=60.0):
        self.socket_path = os.fspath(socket) if socket is not None else default_socket()
        self.timeout = timeout
        # The protocol version of the last reply received (None before any).
        self.last_version = None

    def __repr__(self):
        return "accelrt.Client(%r)" % self.socket_path

    # ---- requests ------------------------------------------------------------------

    def submit(self, job, sets=(), keep_generated=False, file=None, base=None, cwd=None):
        """Submits a job and returns its id (int).

        ``job`` is the job file's path (str or os.PathLike), or its text (bytes,
        or a str holding a newline).  ``sets``: overrides, a mapping
        ``{"train.epochs": 2}`` or ``"KEY=VALUE"`` strings, as ``--set``.
        As ``accelrt submit`` does, the request carries the file's real path
        (``file``), its folder (``base``: relative data paths in the file
        resolve against it) and the current folder (``cwd``: ``output.dir``
        and ``--set`` paths resolve against it).  For text, ``file`` defaults
        to ``<string>`` (it only names the text in messages) and ``base`` to
        the current folder.  Raises ``ServerError`` with the server's message
        (a job-file error reads ``FILE:LINE:COL: error: KEY: message``) and
        ``UsageError`` for a file it cannot read, empty or over 1 MiB."""
        try:
            here = os.getcwd()
        except OSError as e:
            raise Error("cannot resolve the current folder (%s); submit from one that exists"
                        % (e.strerror or e))
        if isinstance(job, (bytes, bytearray)) or (isinstance(job, str) and "\n" in job):
            text = bytes(job) if not isinstance(job, str) else job.encode("utf-8")
            file = "<string>" if file is None else file
            base = here if base is None else base
        else:
            path = os.fspath(job)
            text = self._read_job(path)
            real = os.path.realpath(path)
            file = real if file is None else file
            base = os.path.dirname(real) if base is None else base
        cwd = here if cwd is None else cwd
        for name, value in (("base", base), ("cwd", cwd)):
            if not os.path.isabs(value):
                raise UsageError("%s must be an absolute folder, not %r" % (name, value))
        if hasattr(sets, "items"):
            sets = [_override(k, v) for k, v in sets.items()]
        elif isinstance(sets, (str, bytes)):
            sets = [sets]
        version = protocol.VERSION_PLAIN
        req = protocol.encode_request("submit", version, yaml=text, file=file, base=base,
                                      cwd=cwd, sets=sets, keep=bool(keep_generated))
        last = self._last(self.request(req, version))
        if last.op != "ok":
            raise ProtocolError("submit was answered with %s, not ok" % last.op)
        if last.id is not None:
            return last.id
        t = (last.text or "").strip()
        if t.isdigit() and t.isascii():
            return int(t)
        raise ProtocolError("submit's ok reply carries no job id (text %r)" % last.text)

    def ps(self):
        """The jobs the caller may see (all of them for root), a list of
        dicts with the keys of docs/service.md's ``ps --json`` (``id``,
        ``name``, ``uid``, ``state``, ``iteration``, ``iterations``, ``loss``,
        ...).  Needs a protocol version 3 server (``VersionError`` from an
        older one; ``ps_text()`` works with any)."""
        text = self.ps_text(json=True)
        try:
            jobs = _json.loads(text)
        except ValueError as e:
            raise ProtocolError("ps's JSON reply does not parse: %s" % e)
        if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
            raise ProtocolError("ps's JSON reply is not an array of objects: %.200s" % text)
        return jobs

    def ps_text(self, json=False):
        """ps's reply text as the server sends it: the table ``accelrt ps``
        prints, or with json=True the JSON array ``accelrt ps --json`` prints
        (protocol version 3)."""
        version = protocol.VERSION_NEWEST if json else protocol.VERSION_PLAIN
        req = protocol.encode_request("ps", version, json=json)
        return "".join(m.text or "" for m in self.request(req, version))

    def logs(self, id, follow=False, idle_timeout=None):
        """Yields the job's log lines as dicts (``time``, ``kind``, ``text``;
        ``progress`` lines add ``iteration``, ``iterations``, ``loss``,
        ``samples_per_s``, ``eta_s``).  With follow, it keeps yielding as the
        job writes its log and stops when the job has ended; between lines it
        waits up to idle_timeout seconds (None: as long as the job is quiet).
        Needs a protocol version 3 server (``logs_text()`` works with any)."""
        pending = ""
        for chunk in self.logs_text(id, follow=follow, json=True, idle_timeout=idle_timeout):
            pending += chunk
            *lines, pending = pending.split("\n")
            for line in lines:
                if line.strip():
                    yield self._log_line(line)
        if pending.strip():
            yield self._log_line(pending)

    def logs_text(self, id, follow=False, json=False, offset=0, idle_timeout=None):
        """Yields the job's log as the server sends it, in chunks of text
        (not split at lines): what ``accelrt logs [--json] [-f] ID`` prints.
        offset: a byte offset in the log to start from."""
        version = protocol.VERSION_NEWEST if json else protocol.VERSION_PLAIN
        req = protocol.encode_request("logs", version, id=_job_id(id), follow=follow,
                                      offset=offset, json=json)
        # A chunk may end inside a UTF-8 character; the decoder keeps it.
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        for m in self.request(req, version, idle_timeout if follow else self.timeout):
            raw = m.fields.get(protocol.TEXT, b"")
            text = dec.decode(raw, final=m.op != "data")
            if text:
                yield text

    def cancel(self, id):
        """Cancels a job of the caller's (root: any); returns the server's
        text.  A job that does not exist, or another user's, is a
        ``ServerError`` ("no job N of yours")."""
        version = protocol.VERSION_PLAIN
        req = protocol.encode_request("cancel", version, id=_job_id(id))
        return self._last(self.request(req, version)).text or ""

    def server_version(self):
        """The protocol version the server speaks, from its reply to a plain
        ``ps`` (which every server answers)."""
        req = protocol.encode_request("ps", protocol.VERSION_PLAIN)
        return self._last(self.request(req, protocol.VERSION_PLAIN)).version

    # ---- helpers and the exchange ----------------------------------------------------------------

    @staticmethod
    def _read_job(path):
        try:
            with open(path, "rb") as f:
                text = f.read(protocol.MAX_YAML + 1)
        except OSError as e:
            raise UsageError("cannot read '%s': %s" % (path, e.strerror or e))
        if not text or len(text) > protocol.MAX_YAML:
            raise UsageError("'%s' is %s" % (path, "empty" if not text else "larger than 1 MiB"))
        return text

    @staticmethod
    def _log_line(line):
        try:
            obj = _json.loads(line)
        except ValueError as e:
            raise ProtocolError("a log line of the JSON stream does not parse (%s): %.200s"
                                % (e, line))
        if not isinstance(obj, dict):
            raise ProtocolError("a log line of the JSON stream is not an object: %.200s" % line)
        return obj

    @staticmethod
    def _last(messages):
        last = None
        for last in messages:
            pass
        return last

    def _connect(self):
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError as e:
            sock.close()
            if "too long" in str(e):
                raise UsageError("socket path '%s' is too long" % self.socket_path)
            raise Error("cannot reach the server at %s (%s); start it with 'accelrt serve' or "
                        "give its socket (--socket, $ACCELRT_SOCKET)"
                        % (self.socket_path, e.strerror or e))
        return sock

    def request(self, message, version, first_byte_timeout=-1):
        """The low level: sends one request (bytes from
        ``protocol.encode_request``, of protocol version ``version``) and
        yields its replies as ``protocol.Message`` objects: data messages,
        then the final ok or end.  An error reply raises ServerError, or
        VersionError when the reply's version is older than the request's
        (an older server refuses a newer request whatever it holds).  The
        first byte of each reply may take first_byte_timeout seconds
        (default ``timeout``; None waits as long as it takes)."""
        if first_byte_timeout == -1:
            first_byte_timeout = self.timeout
        sock = self._connect()
        try:
            # A server that refuses the connection says why before closing it,
            # so the reply is read even when sending failed.
            send_error = None
            try:
                sock.sendall(message)
            except OSError as e:
                send_error = e
            while True:
                try:
                    m = protocol.recv_message(sock, self.timeout, first_byte_timeout)
                except ProtocolError:
                    if send_error is None:
                        raise
                    m = None
                if m is None:
                    if send_error is not None:
                        raise Error("sending the request to %s failed: %s"
                                    % (self.socket_path, send_error))
                    raise ProtocolError("the server closed the connection before its reply "
                                        "ended (no ok, error or end)")
                self.last_version = m.version
                if m.op == "error":
                    text = m.text or "(the server gave no reason)"
                    if m.version < version:
                        raise VersionError(text, m.version, version)
                    raise ServerError(text, m.version)
                yield m
                if m.op != "data":
                    return
        finally:
            sock.close()
