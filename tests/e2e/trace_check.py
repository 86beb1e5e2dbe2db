"""Checks a trace.json that accelrt wrote (Chrome trace format, docs/trace.md).

usage: trace_check.py KIND TRACE [KEY=VALUE]...
  KIND single  layers=a,b iterations=N [bounded=1] [lsh=1]
       graph   layers=a,b,... trained=a,b iterations=N
       jobs    jobs=N
       dist    layers=a,b servers=S ranks=R iterations=N [order=tac]

Every kind: valid JSON, the object form with traceEvents, every complete
event with ph/ts/dur/pid/tid, a process name for every pid and a track
name for every track with events, and no two events of one track
overlapping.  Then what each kind promises (see the functions).  Standard
library only; run with Debian's /usr/bin/python3.  Exit 0 when it holds.
"""
import collections
import json
import sys

EPS = 0.002  # microseconds: ts and dur are printed with 3 decimals
ITERATIONS, STEPS, LSH, CHANNEL = 1, 2, 3, 16  # the tracks (tid), trace.h


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def expect(cond, msg):
    if not cond:
        fail(msg)


def load(path):
    with open(path) as f:
        t = json.load(f)
    expect(isinstance(t, dict), "not the object form")
    expect(isinstance(t.get("traceEvents"), list) and t["traceEvents"], "no traceEvents")
    expect(t.get("displayTimeUnit") == "ms", "displayTimeUnit is not ms")
    ev = t["traceEvents"]
    procs, tracks, spans = set(), set(), []
    for e in ev:
        expect("ph" in e and "name" in e and "pid" in e, "event without ph/name/pid: %r" % e)
        if e["ph"] == "M" and e["name"] == "process_name":
            procs.add(e["pid"])
        if e["ph"] == "M" and e["name"] == "thread_name":
            tracks.add((e["pid"], e["tid"]))
        if e["ph"] == "X":
            for k in ("ts", "dur", "pid", "tid"):
                expect(isinstance(e.get(k), (int, float)), "complete event without %s: %r" % (k, e))
            expect(e["dur"] >= 0 and e["ts"] >= 0, "negative time: %r" % e)
            spans.append(e)
    expect(spans, "no complete events")
    by_track = collections.defaultdict(list)
    for e in spans:
        expect(e["pid"] in procs, "pid %d has no process_name" % e["pid"])
        expect((e["pid"], e["tid"]) in tracks, "track %d/%d has no thread_name" % (e["pid"], e["tid"]))
        by_track[(e["pid"], e["tid"])].append(e)
    for key, es in by_track.items():
        es.sort(key=lambda e: (e["ts"], e["dur"]))
        for a, b in zip(es, es[1:]):
            expect(b["ts"] >= a["ts"] + a["dur"] - EPS,
                   "track %r: %s (%.3f+%.3f) overlaps %s (%.3f)"
                   % (key, a["name"], a["ts"], a["dur"], b["name"], b["ts"]))
    return t, spans


def it_of(e):
    return e.get("args", {}).get("iteration")


def detailed(t):
    """The recorder's rule, as otherData states it."""
    o = t["otherData"]
    first, every, stop = o["detail_first"], o["detail_every"], o["detail_stopped_at"]

    def rule(i):
        return (i <= first or (every > 0 and i % every == 0)) and (stop is None or i < stop)
    return rule


def count(spans, **want):
    """Spans whose fields (args for iteration) match want, by name."""
    c = collections.Counter()
    for e in spans:
        if all((it_of(e) if k == "iteration" else e.get(k)) == v for k, v in want.items()):
            c[e["name"]] += 1
    return c


def per_iteration(t, spans, pid, iterations, bounded):
    """One iteration span per iteration (a prefix of them when bounded)
    on the iterations track; returns them by iteration."""
    its = {}
    for e in spans:
        if e["pid"] == pid and e["tid"] == ITERATIONS and e["name"] == "iteration":
            expect(it_of(e) not in its, "two spans of iteration %r" % it_of(e))
            its[it_of(e)] = e
    have = sorted(its)
    if bounded:
        expect(have == list(range(1, len(have) + 1)) and have, "iteration spans not a prefix: %r" % have)
        expect(len(have) < iterations or t["otherData"]["detail_stopped_at"] is not None,
               "the bound was not reached")
        expect(t["otherData"]["dropped_events"] > 0, "nothing dropped although bounded")
    else:
        expect(have == list(range(1, iterations + 1)), "iterations %r, want 1..%d" % (have, iterations))
    return its


def steps_inside(spans, pid, its):
    """Every part of an iteration lies within its iteration span."""
    for e in spans:
        if e["pid"] != pid or e["tid"] != STEPS or e.get("cat") in ("eval", "checkpoint"):
            continue
        i = its.get(it_of(e))
        if i is None:
            continue
        expect(e["ts"] >= i["ts"] - EPS and e["ts"] + e["dur"] <= i["ts"] + i["dur"] + EPS,
               "%s of iteration %d outside its iteration span" % (e["name"], it_of(e)))


def check_layers(t, spans, pid, its, fwd, bwd, loss):
    rule = detailed(t)
    for i in its:
        c = count(spans, pid=pid, tid=STEPS, iteration=i)
        f = {n[8:]: k for n, k in c.items() if n.startswith("forward ")}
        b = {n[9:]: k for n, k in c.items() if n.startswith("backward ")}
        if rule(i):
            expect(f == {l: 1 for l in fwd}, "iteration %d: forward spans %r, want one per %r" % (i, f, fwd))
            expect(b == {l: 1 for l in bwd}, "iteration %d: backward spans %r, want one per %r" % (i, b, bwd))
            expect(not loss or c["loss"] == 1, "iteration %d: %d loss spans" % (i, c["loss"]))
        else:
            expect(not f and not b and not c["loss"], "iteration %d is not detailed but has %r" % (i, c))
        expect(c["batch"] == 1, "iteration %d: %d batch spans" % (i, c["batch"]))
        expect(c["optimizer"] == 1, "iteration %d: %d optimizer spans" % (i, c["optimizer"]))


def single(t, spans, a):
    layers = a["layers"].split(",")
    its = per_iteration(t, spans, 1, int(a["iterations"]), a.get("bounded") == "1")
    steps_inside(spans, 1, its)
    check_layers(t, spans, 1, its, layers, layers, True)
    if a.get("lsh") == "1":
        lsh = [e for e in spans if e["tid"] == LSH and e.get("cat") == "lsh"]
        expect(lsh, "no table rebuild spans")
        expect(all(e["name"].split(" ")[-1] in layers for e in lsh), "a rebuild names no layer")


def graph(t, spans, a):
    layers = a["layers"].split(",")
    trained = a["trained"].split(",")
    its = per_iteration(t, spans, 1, int(a["iterations"]), False)
    steps_inside(spans, 1, its)
    rule = detailed(t)
    # The ops that run backward are the same in every detailed iteration
    # and include every layer with parameters.
    first = next(i for i in its if rule(i))
    c = count(spans, pid=1, tid=STEPS, iteration=first)
    bwd = sorted(n[9:] for n in c if n.startswith("backward "))
    expect(set(trained) <= set(bwd) <= set(layers), "backward ops %r (trained %r)" % (bwd, trained))
    # The loss op's forward and backward are one `loss` span, as a chain's.
    check_layers(t, spans, 1, its, layers, bwd, True)


def jobs(t, spans, a):
    lanes = [e for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"
             and e["args"]["name"].startswith("lane")]
    expect(lanes, "no lane tracks")
    names = {e["name"] for e in spans if e.get("cat") == "iteration"}
    expect(len(names) == int(a["jobs"]), "iterations of %r, want %s jobs" % (names, a["jobs"]))


def dist(t, spans, a):
    """Rank r is process r + 1 (Perfetto treats pid 0 as the kernel's)."""
    layers = a["layers"].split(",")
    S, R, N = int(a["servers"]), int(a["ranks"]), int(a["iterations"])
    W = R - S
    o = t["otherData"]
    procs = {e["pid"]: e["args"]["name"] for e in t["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    expect(procs == {r + 1: "rank %d (%s)" % (r, "server" if r < S else "worker") for r in range(R)},
           "processes %r" % procs)
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in t["traceEvents"]
              if e["ph"] == "M" and e["name"] == "thread_name"}
    # The transfers: one per parameter tensor, w and b of each layer.
    tensors = [x["name"] for x in o["transfers"]]
    expect(tensors == [l + s for l in layers for s in (".w", ".b")], "transfers %r" % tensors)
    owner = {x["name"]: x["server"] for x in o["transfers"]}
    rule = detailed(t)
    its = {r: per_iteration(t, spans, r + 1, N, False) for r in range(R)}
    ndet = sum(rule(i) for i in range(1, N + 1))
    expect(ndet > 0, "no detailed iteration")
    total = collections.Counter()
    for r in range(R):
        for k in range(W) if r < S else range(S):
            want_name = "worker %d (rank %d)" % (k, S + k) if r < S else "server %d (rank %d)" % (k, k)
            got = tracks.get((r + 1, CHANNEL + k))
            expect(got == want_name, "rank %d track %d: %r" % (r, CHANNEL + k, got))
            # The channel's gradients on a track of their own (the ports
            # are apart: they overlap the parameters in time).
            peers = W if r < S else S
            got = tracks.get((r + 1, CHANNEL + peers + k))
            expect(got == want_name + " gradients",
                   "rank %d track %d: %r" % (r, CHANNEL + peers + k, got))
            mine = {n for n, s in owner.items() if s == (r if r < S else k)}
            for i in range(1, N + 1):
                for cat in ("param", "grad"):
                    tid = CHANNEL + k + (peers if cat == "grad" else 0)
                    c = count(spans, pid=r + 1, tid=tid, iteration=i, cat=cat)
                    total[cat] += sum(c.values())
                    want = {n: 1 for n in mine} if rule(i) else {}
                    expect(dict(c) == want, "rank %d channel %d iteration %d %s: %r, want %r"
                           % (r, k, i, cat, dict(c), want))
    for cat in ("param", "grad"):  # both ends of every transfer
        expect(total[cat] == 2 * ndet * W * len(tensors),
               "%d %s spans, want 2 x %d iterations x %d workers x %d tensors"
               % (total[cat], cat, ndet, W, len(tensors)))
    for r in range(S):
        for i in range(1, N + 1):
            expect(count(spans, pid=r + 1, tid=STEPS, iteration=i, cat="optimizer")["optimizer"] == 1,
                   "server %d iteration %d: no optimizer span" % (r, i))
    for r in range(S, R):
        steps_inside(spans, r + 1, its[r])
        for i in its[r]:
            c = count(spans, pid=r + 1, tid=STEPS, iteration=i)
            want = 1 if rule(i) else 0
            for l in layers:
                expect(c["forward " + l] == want and c["backward " + l] == want,
                       "worker rank %d iteration %d layer %s: %r" % (r, i, l, c))
    # The order on a server's channel: its places are 0..n-1 and, once a
    # TIC or TAC schedule is in force, follow the priorities.
    for r in range(S):
        for k in range(W):
            for i in range(1, N + 1):
                ps = [e for e in spans if e["pid"] == r + 1 and e["tid"] == CHANNEL + k
                      and e.get("cat") == "param" and it_of(e) == i]
                if not ps:
                    continue
                ps.sort(key=lambda e: e["args"]["order"])
                places = [e["args"]["order"] for e in ps]
                expect(places == list(range(len(ps))),
                       "rank %d channel %d iteration %d: places %r" % (r, k, i, places))
                if a.get("order") in ("tic", "tac") and i > o["warmup_iterations"]:
                    pr = [e["args"].get("priority") for e in ps]
                    expect(None not in pr and pr == sorted(pr),
                           "rank %d channel %d iteration %d: sent in priorities %r" % (r, k, i, pr))
    # One clock: a worker has no parameters of an iteration before its
    # server began sending that iteration's to it (iterations overlap at the
    # server: the next iteration's may leave before its iteration span
    # begins), and a server updates only after every worker began sending.
    sent = {}
    for e in spans:
        if e["pid"] <= S and e.get("cat") == "param":
            k = (e["pid"] - 1, e["tid"] - CHANNEL, it_of(e))
            sent[k] = min(sent.get(k, e["ts"]), e["ts"])
    for w in range(S, R):
        for e in spans:
            if e["pid"] == w + 1 and e.get("cat") == "param":
                s = sent.get((owner[e["name"]], w - S, it_of(e)))
                expect(s is None or e["ts"] + e["dur"] >= s - EPS,
                       "rank %d received %s of iteration %d before its server sent it"
                       % (w, e["name"], it_of(e)))
    for r in range(S):
        for i in range(1, N + 1):
            if not rule(i):
                continue
            opt = [e for e in spans if e["pid"] == r + 1 and e.get("cat") == "optimizer"
                   and it_of(e) == i][0]
            for w in range(S, R):
                g = [e["ts"] for e in spans if e["pid"] == w + 1 and e["tid"] == CHANNEL + S + r
                     and e.get("cat") == "grad" and it_of(e) == i]
                expect(opt["ts"] >= min(g) - EPS,
                       "server %d updated iteration %d before worker rank %d sent a gradient"
                       % (r, i, w))


def main():
    kind, path = sys.argv[1], sys.argv[2]
    a = dict(x.split("=", 1) for x in sys.argv[3:])
    t, spans = load(path)
    {"single": single, "graph": graph, "jobs": jobs, "dist": dist}[kind](t, spans, a)
    print("ok: %s, %d events" % (path, len(t["traceEvents"])))


if __name__ == "__main__":
    main()
