#!/usr/bin/env python3
"""metrics_client.py: the HTTP side of tests/tenancy/metrics.sh, standard
library only.

  scrape URL OUT         GET URL, body to OUT; fails unless 200 (prints the
                         status otherwise)
  check FILE             validates FILE as Prometheus text (format 0.0.4):
                         well-formed lines, a TYPE before a family's first
                         sample, no family split or declared twice, no
                         duplicate series, counters named *_total and never
                         negative, histograms with ascending le ending at
                         +Inf, cumulative buckets and _count equal to the
                         +Inf bucket; prints the number of samples
  value FILE SERIES      prints a series' value (SERIES as in the text, e.g.
                         'accelrt_jobs{state="running"}')
  bad PORT               bad requests (POST, PUT, an unknown path, a body, a
                         huge header, a request line that never ends) each
                         get their error status; prints one line per probe
  conn-limit PORT N      N idle connections are held; one more is closed
                         without an answer; once they go, a scrape works
  free-port              prints a TCP port free on 127.0.0.1 now
"""
import math
import re
import socket
import sys
import time
import urllib.error
import urllib.request

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"'
SAMPLE = re.compile(r"^(?P<name>%s)(?P<labels>\{(?:%s(?:,%s)*)?,?\})? (?P<value>\S+)( -?\d+)?$"
                    % (NAME, LABEL, LABEL))
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def die(msg):
    sys.exit("metrics_client: " + msg)


def parse_value(v, line):
    if v in ("+Inf", "Inf"):
        return math.inf
    if v == "-Inf":
        return -math.inf
    if v == "NaN":
        return math.nan
    try:
        return float(v)
    except ValueError:
        die("not a number %r in: %s" % (v, line))


def parse_labels(text):
    if not text:
        return ()
    return tuple(re.findall(LABEL, text[1:-1]))


def family_of(name, types):
    """The family a sample belongs to: its own name, or a histogram's."""
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and types.get(base) == "histogram":
            return base
    return None


def parse(text):
    """Returns {family: (type, [(name, labels, value)])}, checking the
    format line by line."""
    if text and not text.endswith("\n"):
        die("the text does not end with a newline")
    types, helps, samples, order, seen = {}, set(), {}, [], set()
    current = None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = "line %d: %s" % (n, line)
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not re.fullmatch(NAME, name):
                    die("bad metric name in " + where)
                if parts[1] == "TYPE":
                    if len(parts) != 4 or parts[3] not in TYPES:
                        die("bad TYPE in " + where)
                    if name in types:
                        die("TYPE declared twice: " + where)
                    if name in samples:
                        die("TYPE after the family's samples: " + where)
                    types[name] = parts[3]
                else:
                    if name in helps:
                        die("HELP given twice: " + where)
                    if len(parts) != 4 or not parts[3].strip():
                        die("empty HELP: " + where)
                    helps.add(name)
            continue
        if not line.strip():
            continue
        m = SAMPLE.match(line)
        if not m:
            die("malformed sample " + where)
        name, labels = m.group("name"), parse_labels(m.group("labels"))
        value = parse_value(m.group("value"), line)
        fam = family_of(name, types)
        if fam is None:
            die("sample before its family's TYPE: " + where)
        if fam != current:
            if fam in samples:
                die("family %s is split: %s" % (fam, where))
            current = fam
            order.append(fam)
            samples[fam] = []
        key = (name, tuple(sorted(labels)))
        if key in seen:
            die("duplicate series " + where)
        seen.add(key)
        samples[fam].append((name, labels, value))
    for fam in types:
        if fam not in helps:
            die("family %s has no HELP" % fam)
    return {f: (types[f], samples.get(f, [])) for f in types}


def check_family(fam, kind, rows):
    if kind == "counter":
        if not fam.endswith("_total"):
            die("counter %s is not named *_total" % fam)
        for name, _, v in rows:
            if not v >= 0:
                die("counter %s is %r" % (name, v))
    if kind != "histogram":
        return
    buckets = [(dict(l).get("le"), v) for n, l, v in rows if n == fam + "_bucket"]
    sums = [v for n, _, v in rows if n == fam + "_sum"]
    counts = [v for n, _, v in rows if n == fam + "_count"]
    if not buckets or len(sums) != 1 or len(counts) != 1:
        die("histogram %s needs buckets, one _sum and one _count" % fam)
    if buckets[-1][0] != "+Inf":
        die("histogram %s's last bucket is le=%r, not +Inf" % (fam, buckets[-1][0]))
    les = [parse_value(le, fam) for le, _ in buckets]
    if any(b <= a for a, b in zip(les, les[1:])):
        die("histogram %s's le bounds do not ascend: %r" % (fam, les))
    vals = [v for _, v in buckets]
    if any(b < a for a, b in zip(vals, vals[1:])):
        die("histogram %s's buckets are not cumulative: %r" % (fam, vals))
    if counts[0] != vals[-1]:
        die("histogram %s: _count %r is not the +Inf bucket %r" % (fam, counts[0], vals[-1]))
    if sums[0] < 0 or (counts[0] == 0 and sums[0] != 0):
        die("histogram %s: _sum %r with _count %r" % (fam, sums[0], counts[0]))


def check(path):
    fams = parse(open(path, encoding="utf-8").read())
    for fam, (kind, rows) in fams.items():
        if not rows:
            die("family %s has no sample" % fam)
        check_family(fam, kind, rows)
    print(sum(len(rows) for _, rows in fams.values()))


def value(path, series):
    m = SAMPLE.match(series + " 0")
    if not m:
        die("bad series %r" % series)
    want = (m.group("name"), tuple(sorted(parse_labels(m.group("labels")))))
    for line in open(path, encoding="utf-8"):
        s = SAMPLE.match(line.rstrip("\n"))
        if s and (s.group("name"), tuple(sorted(parse_labels(s.group("labels"))))) == want:
            print(s.group("value"))
            return
    die("no series %s in %s" % (series, path))


def scrape(url, out):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            body = r.read()
            ctype = r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        die("GET %s: HTTP %d" % (url, e.code))
    except OSError as e:
        die("GET %s: %s" % (url, e))
    open(out, "wb").write(body)
    print(ctype)


def raw(port, data, timeout=15.0):
    """Sends data, returns the status code of the answer (0: closed
    without one) and the seconds it took."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        got = b""
        while b"\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except OSError:
        got = b""
    finally:
        s.close()
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", got)
    return (int(m.group(1)) if m else 0), time.monotonic() - t0


def bad(port):
    big = b"X-Big: " + b"a" * 70000 + b"\r\n"
    probes = [
        ("POST", b"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc", {405}),
        ("PUT", b"PUT / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", {405}),
        ("DELETE", b"DELETE /metrics HTTP/1.1\r\nHost: t\r\n\r\n", {405}),
        ("unknown path", b"GET /jobs HTTP/1.1\r\nHost: t\r\n\r\n", {404}),
        ("traversal", b"GET /../../etc/passwd HTTP/1.1\r\nHost: t\r\n\r\n", {400, 404}),
        ("GET with a body", b"GET /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
         {413}),
        ("chunked GET", b"GET /metrics HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
         b"5\r\nhello\r\n0\r\n\r\n", {413}),
        ("huge header", b"GET /metrics HTTP/1.1\r\nHost: t\r\n" + big + b"\r\n", {413, 431}),
        ("garbage", b"\x00\x01\x02 not http at all\r\n\r\n", {0, 400}),
    ]
    for what, data, want in probes:
        code, _ = raw(port, data)
        print("%s: %d" % (what, code))
        if code not in want:
            die("%s got %d, not one of %s" % (what, code, sorted(want)))
    # A request line that never ends: the connection is cut (the whole
    # request has a deadline), however regularly bytes arrive.
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\n")
    cut = False
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:  # a hang guard, not a timing check
        try:
            s.sendall(b"X-Slow: a\r\n")
            time.sleep(0.2)
        except OSError:
            cut = True
            break
    s.close()
    print("trickle cut: %s" % cut)
    if not cut:
        die("a request trickling headers for 60 s was never cut")


def conn_limit(port, n):
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(n)]
    time.sleep(0.5)  # let the server accept them all
    code, _ = raw(port, b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n", timeout=10)
    for s in held:
        s.close()
    print("over the limit: %d" % code)
    if code != 0:
        die("a connection over the per-address limit of %d was answered %d" % (n, code))
    for _ in range(100):  # until the server noticed the closes
        code, _ = raw(port, b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n", timeout=10)
        if code == 200:
            return
        time.sleep(0.1)
    die("after the held connections closed, /metrics still answers %d" % code)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
    s.close()


def main(argv):
    if len(argv) == 3 and argv[0] == "scrape":
        scrape(argv[1], argv[2])
    elif len(argv) == 2 and argv[0] == "check":
        check(argv[1])
    elif len(argv) == 3 and argv[0] == "value":
        value(argv[1], argv[2])
    elif len(argv) == 2 and argv[0] == "bad":
        bad(int(argv[1]))
    elif len(argv) == 3 and argv[0] == "conn-limit":
        conn_limit(int(argv[1]), int(argv[2]))
    elif len(argv) == 1 and argv[0] == "free-port":
        free_port()
    else:
        die(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
