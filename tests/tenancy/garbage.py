#!/usr/bin/env python3
"""Sends garbage to an accelrt server's socket (tests/tenancy/service.sh):
random bytes, an oversized length, a well-framed but malformed body, a
truncated message, a reply posing as a request, and a connection closed at
once.  Each must be refused without taking the server down."""
import os, random, socket, struct, sys

path = sys.argv[1]
rng = random.Random(1234)


def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.settimeout(15)
    return s


def send(payload, read=True):
    s = conn()
    try:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        if read:
            s.recv(65536)
    except OSError:
        pass
    s.close()


def field(tag, data):
    return bytes([tag]) + struct.pack(">I", len(data)) + data


for _ in range(20):
    send(bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 300))))
send(struct.pack(">I", 0xFFFFFFFF) + b"x" * 16)              # oversized
send(struct.pack(">I", 8) + b"\x01\x00\x00\x00\x09ab")       # field overruns
body = field(1, b"cancel")                                   # no id
send(struct.pack(">I", len(body)) + body)
body = field(1, b"ok") + field(10, b"hi")                    # a reply
send(struct.pack(">I", len(body)) + body)
body = field(1, b"ps") + field(1, b"ps")                     # duplicate op
send(struct.pack(">I", len(body)) + body)
body = field(1, b"ps") + field(99, b"?")                     # unknown tag
send(struct.pack(">I", len(body)) + body)
body = field(1, b"submit") + field(3, b"name: [unclosed")    # bad YAML
send(struct.pack(">I", len(body)) + body)
send(struct.pack(">I", 100) + b"short", read=False)         # truncated
conn().close()                                                # nothing at all
print("garbage sent")
