"""accelrt.Client against a fake server written here: the exact bytes of
its requests, and every kind of malformed reply (a short message, an
unknown tag, a field overrunning its message, a request posing as a reply,
a stall mid-message, ...) raising ProtocolError instead of hanging.  Also
the socket path rule and the CLI's exit codes.  Needs no accelrt binary."""

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

import accelrt

import support

TIMEOUT = 2.0  # the client's hang guard here; the tests assert what it raises


def field(tag, value):
    if isinstance(value, str):
        value = value.encode()
    return bytes([tag]) + struct.pack(">I", len(value)) + value


def message(*fields):
    body = b"".join(fields)
    return struct.pack(">I", len(body)) + body


def reply(op, text=None, version=3, **more):
    fs = [field(1, op), field(12, str(version))]
    if "id" in more:
        fs.append(field(2, str(more["id"])))
    if text is not None:
        fs.append(field(10, text))
    return message(*fs)


def parse_fields(body):
    """The test's own reading of a request body: [(tag, value), ...]."""
    out, at = [], 0
    while at < len(body):
        tag, n = struct.unpack_from(">BI", body, at)
        out.append((tag, body[at + 5:at + 5 + n]))
        at += 5 + n
    assert at == len(body), "a field overruns the request"
    return out


def recv_request(conn):
    head = b""
    while len(head) < 4:
        chunk = conn.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        chunk = conn.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    return body


class FakeServer:
    """Accepts connections on a socket of its own; for each, reads one
    request, records it and sends `replies` (bytes, or a list of bytes sent
    one by one); then closes the connection, or with hold=True keeps it open
    until the test ends, as a stalled server would."""

    def __init__(self, replies=b"", hold=False):
        self.dir = tempfile.mkdtemp(prefix="accelrt-fake-")
        self.path = os.path.join(self.dir, "fake.sock")
        self.replies = replies if isinstance(replies, list) else [replies]
        self.hold = hold
        self.requests = []
        self.done = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        self.sock.settimeout(0.1)  # to see `done` soon after the test ends
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with conn:
                self.requests.append(recv_request(conn))
                try:
                    for r in self.replies:
                        conn.sendall(r)
                except OSError:
                    pass
                if self.hold:
                    self.done.wait(30)

    def close(self):
        self.done.set()
        self.thread.join(5)
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.rmdir(self.dir)


class FakeServerTest(unittest.TestCase):
    def serve(self, replies=b"", hold=False):
        s = FakeServer(replies, hold)
        self.addCleanup(s.close)
        return s, accelrt.Client(s.path, timeout=TIMEOUT)

    def assertProtocolError(self, replies, call, needle, hold=False):
        _, client = self.serve(replies, hold)
        with self.assertRaises(accelrt.ProtocolError) as e:
            call(client)
        self.assertIn(needle, str(e.exception))
        return e.exception


class MalformedReplies(FakeServerTest):
    def test_stalls_mid_message_and_before_it(self):
        # Servers that go silent: after a length of 100 and 10 bytes, after
        # half a header, before any reply.  The client must stop waiting
        # with each; each wait is its whole timeout, so the three run at
        # once (their own servers and clients).
        stalls = [(struct.pack(">I", 100) + b"\x01" * 10, "10 of the 100 bytes"),
                  (b"\x00\x00", "2 of the 4 bytes"),
                  (b"", "no reply")]
        clients = [self.serve(replies, hold=True)[1] for replies, _ in stalls]
        raised = [None] * len(stalls)

        def cancel(i):
            try:
                clients[i].cancel(1)
            except Exception as e:  # checked below, in the test's thread
                raised[i] = e

        threads = [threading.Thread(target=cancel, args=(i,)) for i in range(len(stalls))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)  # a hang guard; each returns after the client's timeout
        for (_, needle), e in zip(stalls, raised):
            self.assertIsInstance(e, accelrt.ProtocolError, needle)
            self.assertIn(needle, str(e))

    def test_short_message_then_close(self):
        self.assertProtocolError(struct.pack(">I", 100) + b"\x01" * 10,
                                 lambda c: c.cancel(1), "closed the connection after 10 of")

    def test_no_reply_then_close(self):
        self.assertProtocolError(b"", lambda c: c.cancel(1), "before its reply ended")

    def test_unknown_tag(self):
        for tag in (0, 15, 99, 255):
            self.assertProtocolError(message(field(1, "ok"), field(tag, "?")),
                                     lambda c: c.cancel(1), "unknown field tag %d" % tag)

    def test_field_overruns_the_message(self):
        body = field(1, "ok") + bytes([10]) + struct.pack(">I", 50) + b"short"
        self.assertProtocolError(struct.pack(">I", len(body)) + body, lambda c: c.cancel(1),
                                 "declares 50 bytes, only 5 remain")

    def test_truncated_field_header(self):
        body = field(1, "ok") + b"\x0a\x00\x00"
        self.assertProtocolError(struct.pack(">I", len(body)) + body, lambda c: c.cancel(1),
                                 "truncated field header at byte 7")

    def test_oversized_length(self):
        # Refused from the header alone: the client does not wait for 4 GiB.
        self.assertProtocolError(struct.pack(">I", 0xFFFFFFFF), lambda c: c.cancel(1),
                                 "more than the 1114112", hold=True)

    def test_bad_values(self):
        cases = [(message(field(1, "ok"), field(2, "12a")), "not a decimal"),
                 (message(field(1, "ok"), field(2, "1" * 20)), "not a decimal"),
                 (message(field(1, "ok"), field(12, "0")), "positive decimal"),
                 (message(field(1, "ok"), field(8, "2")), "a flag"),
                 (message(field(1, "ok"), field(10, "a\0b")), "NUL byte"),
                 (message(field(1, "ok"), field(10, "a"), field(10, "b")), "appears twice"),
                 (message(field(10, "no op")), "names no operation"),
                 (message(field(1, "hello")), "unknown operation"),
                 (message(field(1, "ps")), "a request (ps), not a reply")]
        for data, needle in cases:
            with self.subTest(needle=needle):
                self.assertProtocolError(data, lambda c: c.cancel(1), needle)

    def test_stream_without_end(self):
        # Data, then the server goes away: not a complete log.
        self.assertProtocolError(reply("data", "[12:00:00] queued\n"),
                                 lambda c: list(c.logs_text(1)), "before its reply ended")
        self.assertProtocolError(reply("data", "[12:00:00] queued\n"),
                                 lambda c: list(c.logs_text(1, follow=True)),
                                 "before its reply ended")

    def test_submit_without_an_id(self):
        self.assertProtocolError(reply("ok", "queued"), lambda c: c.submit("name: x\n"),
                                 "no job id")

    def test_ps_json_that_is_not_an_array_of_objects(self):
        for text in ("[{\"id\": 1}", "{\"id\": 1}", "[1, 2]"):
            with self.subTest(text=text):
                self.assertProtocolError(reply("ok", text), lambda c: c.ps(), "ps's JSON reply")

    def test_logs_json_line_that_does_not_parse(self):
        self.assertProtocolError([reply("data", '{"kind": "queued"}\n{"kind": \n'),
                                  reply("end")], lambda c: list(c.logs(1)), "does not parse")


class Replies(FakeServerTest):
    def test_error_reply_is_an_error_with_the_servers_text(self):
        _, c = self.serve(reply("error", "no job 5 of yours; see accelrt ps", version=2))
        with self.assertRaises(accelrt.ServerError) as e:
            c.cancel(5)
        self.assertEqual(e.exception.text, "no job 5 of yours; see accelrt ps")
        self.assertNotIsInstance(e.exception, accelrt.VersionError)

    def test_an_older_server_refusing_json_is_a_version_error(self):
        _, c = self.serve(reply("error", "unknown field tag 14 at byte 13", version=2))
        with self.assertRaises(accelrt.VersionError) as e:
            c.ps()
        self.assertEqual((e.exception.server_version, e.exception.needed), (2, 3))
        self.assertIn("unknown field tag 14", str(e.exception))
        self.assertIsInstance(e.exception, accelrt.Error)

    def test_a_reply_without_version_is_version_1(self):
        s, c = self.serve(message(field(1, "ok"), field(10, "ID ...\n")))
        self.assertEqual(c.server_version(), 1)

    def test_submit_returns_the_id(self):
        _, c = self.serve(reply("ok", "42", id=42))
        self.assertEqual(c.submit("name: x\n"), 42)

    def test_ps_objects(self):
        jobs = [{"id": 1, "name": "a", "state": "running"}, {"id": 2, "name": "b",
                                                              "state": "queued"}]
        _, c = self.serve(reply("ok", json.dumps(jobs)))
        self.assertEqual(c.ps(), jobs)

    def test_logs_lines_split_anywhere_across_chunks(self):
        lines = [{"time": 1.5, "kind": "submitted", "text": "submitted by uid 0 — é"},
                 {"time": 2.0, "kind": "progress", "text": "iteration 3/30", "iteration": 3,
                  "iterations": 30, "loss": 5.1, "samples_per_s": 100.0, "eta_s": 2.0},
                 {"time": 3.25, "kind": "done", "text": "done: 30 iterations"}]
        raw = "".join(json.dumps(l, ensure_ascii=False) + "\n" for l in lines).encode()
        # Cut inside a line, inside a UTF-8 character and at every few bytes.
        cuts = sorted([0, 5, raw.index("é".encode()) + 1, 60, 61, 90, 200, len(raw)])
        chunks = [raw[a:b] for a, b in zip(cuts, cuts[1:])]
        replies = [message(field(1, "data"), field(12, "3"), field(10, ch)) for ch in chunks]
        _, c = self.serve(replies + [reply("end", id=7)])
        self.assertEqual(list(c.logs(7, follow=True)), lines)

    def test_logs_text_joins_a_character_split_across_chunks(self):
        raw = "[12:00:00] naïve\n".encode()
        k = raw.index("ï".encode()) + 1
        _, c = self.serve([message(field(1, "data"), field(10, raw[:k])),
                           message(field(1, "data"), field(10, raw[k:])), reply("end")])
        self.assertEqual("".join(c.logs_text(3)), raw.decode())

    def test_a_server_that_is_not_there(self):
        with tempfile.TemporaryDirectory() as d:
            c = accelrt.Client(os.path.join(d, "absent.sock"), timeout=TIMEOUT)
            with self.assertRaises(accelrt.Error) as e:
                c.ps_text()
        self.assertNotIsInstance(e.exception, accelrt.ProtocolError)
        self.assertIn("cannot reach the server", str(e.exception))


class Requests(FakeServerTest):
    def test_cancel_bytes(self):
        s, c = self.serve(reply("ok", ""))
        c.cancel(7)
        # op "cancel", version "2", id "7": hand-assembled.
        self.assertEqual(s.requests, [b"\x01\x00\x00\x00\x06cancel"
                                      b"\x0c\x00\x00\x00\x012"
                                      b"\x02\x00\x00\x00\x017"])

    def test_submit_carries_file_base_and_cwd_as_the_cli_does(self):
        s, c = self.serve(reply("ok", "3", id=3))
        with tempfile.TemporaryDirectory() as d:
            sub = os.path.join(d, "jobs")
            os.mkdir(sub)
            link = os.path.join(d, "link")
            os.symlink(sub, link)
            text = b"name: x\n# \xc3\xa9\n"
            with open(os.path.join(sub, "job.yaml"), "wb") as f:
                f.write(text)
            here = os.getcwd()
            os.chdir(d)
            try:
                c.submit(os.path.join("link", "job.yaml"),
                         sets={"train.epochs": 2, "output.dir": "o", "x.flag": True},
                         keep_generated=True)
                cwd = os.getcwd()
            finally:
                os.chdir(here)
            real = os.path.realpath(os.path.join(sub, "job.yaml"))
        f = parse_fields(s.requests[0])
        self.assertEqual(f, [(1, b"submit"), (12, b"2"), (3, text), (4, real.encode()),
                             (5, os.path.dirname(real).encode()), (6, cwd.encode()),
                             (7, b"train.epochs=2"), (7, b"output.dir=o"), (7, b"x.flag=true"),
                             (13, b"1")])

    def test_submit_text(self):
        s, c = self.serve(reply("ok", "4", id=4))
        c.submit("name: x\nmodel: {}\n", sets=["a=b"])
        f = dict(parse_fields(s.requests[0]))
        self.assertEqual((f[3], f[4], f[5], f[6]), (b"name: x\nmodel: {}\n", b"<string>",
                                                    os.getcwd().encode(),
                                                    os.getcwd().encode()))
        self.assertNotIn(13, f)

    def test_version_3_only_for_json(self):
        s, c = self.serve(reply("end"))
        list(c.logs_text(9, follow=True))
        list(c.logs(9))
        c.ps_text()
        self.assertEqual([parse_fields(r) for r in s.requests[:3]], [
            [(1, b"logs"), (12, b"2"), (2, b"9"), (8, b"1")],
            [(1, b"logs"), (12, b"3"), (2, b"9"), (14, b"1")],
            [(1, b"ps"), (12, b"2")]])

    def test_refused_before_sending(self):
        s, c = self.serve(reply("ok", "1", id=1))
        with tempfile.TemporaryDirectory() as d:
            empty = os.path.join(d, "empty.yaml")
            open(empty, "w").close()
            big = os.path.join(d, "big.yaml")
            with open(big, "wb") as f:
                f.write(b"#" * ((1 << 20) + 1))
            for call, needle in [(lambda: c.submit(empty), "empty"),
                                 (lambda: c.submit(big), "larger than 1 MiB"),
                                 (lambda: c.submit(os.path.join(d, "absent.yaml")),
                                  "cannot read"),
                                 (lambda: c.submit("a: 1\n", sets=["novalue"]), "KEY=VALUE"),
                                 (lambda: c.submit("a: 1\n", sets=["k=v"] * 65), "at most 64"),
                                 (lambda: c.submit("a: 1\n", cwd="relative"), "absolute"),
                                 (lambda: c.cancel(-1), "job id"),
                                 (lambda: c.cancel("3"), "job id")]:
                with self.subTest(needle=needle):
                    with self.assertRaises(accelrt.UsageError) as e:
                        call()
                    self.assertIn(needle, str(e.exception))
        self.assertEqual(s.requests, [])


class SocketPath(unittest.TestCase):
    def test_the_rule_of_the_cli(self):
        with tempfile.TemporaryDirectory() as rt:
            env = {"XDG_RUNTIME_DIR": rt}
            # No socket there yet: the system's.
            self.assertEqual(accelrt.default_socket(env, euid=1000), "/run/accelrt/accelrt.sock")
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(os.path.join(rt, "accelrt.sock"))
            try:
                self.assertEqual(accelrt.default_socket(env, euid=1000),
                                 os.path.join(rt, "accelrt.sock"))
                # Root never takes a user's socket.
                self.assertEqual(accelrt.default_socket(env, euid=0),
                                 "/run/accelrt/accelrt.sock")
                # $ACCELRT_SOCKET first, when not empty.
                env["ACCELRT_SOCKET"] = "/x/y.sock"
                self.assertEqual(accelrt.default_socket(env, euid=1000), "/x/y.sock")
                env["ACCELRT_SOCKET"] = ""
                self.assertEqual(accelrt.default_socket(env, euid=1000),
                                 os.path.join(rt, "accelrt.sock"))
                # A relative XDG_RUNTIME_DIR is not used.
                self.assertEqual(accelrt.default_socket({"XDG_RUNTIME_DIR": "rel"}, euid=1000),
                                 "/run/accelrt/accelrt.sock")
            finally:
                s.close()
        # A regular file in its place is not a socket.
        with tempfile.TemporaryDirectory() as rt:
            open(os.path.join(rt, "accelrt.sock"), "w").close()
            self.assertEqual(accelrt.default_socket({"XDG_RUNTIME_DIR": rt}, euid=1000),
                             "/run/accelrt/accelrt.sock")

    def test_client_uses_it(self):
        with tempfile.TemporaryDirectory() as d:
            old = os.environ.get("ACCELRT_SOCKET")
            os.environ["ACCELRT_SOCKET"] = os.path.join(d, "env.sock")
            try:
                self.assertEqual(accelrt.Client().socket_path, os.path.join(d, "env.sock"))
            finally:
                if old is None:
                    del os.environ["ACCELRT_SOCKET"]
                else:
                    os.environ["ACCELRT_SOCKET"] = old


class CommandLine(FakeServerTest):
    def test_exit_codes(self):
        s, _ = self.serve(reply("error", "no job 1 of yours; see accelrt ps"))
        rc, out, err = support.run_cli("cancel", "1", "2", "--socket", s.path)
        self.assertEqual(rc, 1)
        self.assertEqual(err.count("accelrt cancel: error: no job 1 of yours"), 2)
        self.assertEqual(len(s.requests), 2)  # one request per id, both sent
        s, _ = self.serve(struct.pack(">I", 100) + b"short")
        rc, out, err = support.run_cli("ps", "--socket", s.path)
        self.assertEqual(rc, 1)
        self.assertIn("closed the connection", err)
        s, _ = self.serve(reply("ok", "ID  USER  STATE"))
        rc, out, err = support.run_cli("ps", "--socket", s.path)
        self.assertEqual((rc, out), (0, "ID  USER  STATE\n"))
        rc, out, err = support.run_cli("logs", "--socket", s.path)
        self.assertEqual(rc, 2)
        self.assertIn("usage:", err)

    def test_module_runs_under_the_system_python(self):
        # The package imports nothing beyond the standard library.
        p = subprocess.run([sys.executable, "-S", "-c", "import accelrt, accelrt.cli"],
                           env={"PYTHONPATH": os.path.dirname(os.path.dirname(
                               accelrt.__file__))}, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)


if __name__ == "__main__":
    unittest.main()
