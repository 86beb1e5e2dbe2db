"""Helpers of tests/e2e/lanes_mixed.sh: writes the job files it runs and
checks what the runs leave (summary.json, metrics.jsonl, each job's own
summary, accelrt check's text).

  lanes_mixed.py slice MIXED.yaml WORK          -> WORK/slice.yaml
  lanes_mixed.py check-slice WORK POLICY CHECK.txt
  lanes_mixed.py random SEED WORK               -> WORK/random.yaml
  lanes_mixed.py capacity CHECK.txt             -> prints a capacity in MiB
  lanes_mixed.py check-random WORK CAPACITY_MIB
  lanes_mixed.py admit MIXED.yaml WORK          -> WORK/admit.yaml
  lanes_mixed.py check-admit WORK CHECK.txt     -> prints a capacity just under the total

Exit 0 when the checks hold, 1 with a message otherwise."""
import gzip
import json
import os
import random
import re
import struct
import sys

import yaml

GRAPH_INPUTS = ("image", "tokens")


def fmt_bytes(n):
    """The lanes library's human byte count (lanes/arena.c, ar_lanes_fmt_bytes)."""
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
    v, u = float(n), 0
    while v >= 1024.0 and u < 5:
        v /= 1024.0
        u += 1
    if u == 0:
        return "%d B" % n
    return ("%.1f %s" if v < 10.0 else "%.0f %s") % (v, units[u])


def write_idx(folder, prefix, images, labels):
    """An MNIST-style pair of gzipped idx files (the naming rule's names)."""
    n = len(labels)
    with gzip.open(os.path.join(folder, prefix + "-images-idx3-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + images)
    with gzip.open(os.path.join(folder, prefix + "-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(labels))
    return os.path.join(folder, prefix + "-images-idx3-ubyte.gz")


def cut_idx(src, dst, prefix, n):
    """The first n points of a gzipped idx pair."""
    with gzip.open(src, "rb") as f:
        head = f.read(16)
        assert struct.unpack(">I", head[:4])[0] == 0x803, src
        images = f.read(n * 784)
    lab = src.replace("-images-idx3-ubyte", "-labels-idx1-ubyte")
    with gzip.open(lab, "rb") as f:
        f.read(8)
        labels = f.read(n)
    return write_idx(dst, prefix, images, labels)


TRAIN_POINTS, TEST_POINTS = 256, 64


def make_slice(mixed, work):
    """configs/multi-tenant-mixed.yaml made small: every item once (no
    repeat), 3 iterations of batch 16, small data, arrivals close together."""
    d = yaml.safe_load(open(mixed))
    data = os.path.join(work, "fm")
    os.makedirs(data, exist_ok=True)
    cut = {}
    for item in d["jobs"]:
        item.pop("repeat", None)
        t = item["train"]
        t["iterations"], t["batch"], t["eval_points"] = 3, 16, 32
        g = item["data"].get("generate")
        if g:
            g["train_points"], g["test_points"] = 4 * TRAIN_POINTS, TEST_POINTS
        for split, n in (("train", TRAIN_POINTS), ("test", TEST_POINTS)):
            p = item["data"].get(split)
            if p:
                if p not in cut:
                    cut[p] = cut_idx(p, data, split, n)
                item["data"][split] = cut[p]
    d["device"] = "host"
    d["runtime"]["poisson_mean_s"] = 0.01
    d["output"] = {"dir": os.path.join(work, "out")}
    yaml.safe_dump(d, open(os.path.join(work, "slice.yaml"), "w"), sort_keys=False)


def check_text(path):
    """accelrt check's text of a jobs: file: per job the graph plan line's
    persistent and the admission table's persistent and ephemeral."""
    plan, table, job = {}, {}, None
    for line in open(path):
        m = re.match(r"== job \d+ of \d+: (\S+) ==", line)
        if m:
            job = m.group(1)
        m = re.match(r"memory plan: persistent (\S+ \S+) .*ephemeral (\S+ \S+) ", line)
        if m and job:
            plan[job] = (m.group(1), m.group(2))
        m = re.match(r"  (\S+)\s+(\d\S* \S+)\s+(\d\S* \S+)\s+(\d\S* \S+)\s+(yes|no)\s*$", line)
        if m:
            table[m.group(1)] = (m.group(2), m.group(3))
    return plan, table


def load_run(out):
    s = json.load(open(os.path.join(out, "summary.json")))
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    jobs = {l["name"]: l for l in lines if l.get("event") == "job"}
    mem = [l for l in lines if l.get("event") == "memory"]
    return s, jobs, mem


def check_memory(s, mem, capacity):
    """Every sample of the arena within capacity: persistent blocks and
    lanes together, the lanes disjoint ranges inside it (the safety rule's
    construction, include/accelrt/lanes.h), the maximum the summary gives."""
    assert s["capacity_bytes"] == capacity, (s["capacity_bytes"], capacity)
    assert 0 < s["max_memory_bytes"] <= s["capacity_bytes"], s
    assert mem, "no memory samples in metrics.jsonl"
    for m in mem:
        used = m["persistent_bytes"] + m["lane_bytes"]
        assert used <= m["capacity_bytes"] == capacity, m
        assert used <= s["max_memory_bytes"], (m, s["max_memory_bytes"])
        lanes = sorted((l["offset"], l["offset"] + l["bytes"]) for l in m["lane_sizes"])
        assert sum(b - a for a, b in lanes) == m["lane_bytes"], m
        assert all(a[1] <= b[0] for a, b in zip(lanes, lanes[1:])), m
        assert all(b <= capacity for _, b in lanes), m
        if lanes:
            assert m["persistent_bytes"] <= lanes[0][0], m


def check_slice(work, policy, check_txt):
    d = yaml.safe_load(open(os.path.join(work, "slice.yaml")))
    out = d["output"]["dir"]
    s, jobs, mem = load_run(out)
    items = {i["name"]: i for i in d["jobs"]}
    assert s["policy"] == policy, s["policy"]
    assert s["failed"] == 0, s
    assert sorted(j["name"] for j in s["jobs"]) == sorted(items), s["jobs"]
    for j in s["jobs"]:
        assert j["status"] == "done" and j["iterations"] == 3, j
    m = re.match(r"(\d+)(GiB|MiB)$", str(d["runtime"]["memory"]))
    assert m, "runtime.memory %r: the test reads NGiB or NMiB" % d["runtime"]["memory"]
    capacity = int(m.group(1)) << (30 if m.group(2) == "GiB" else 20)
    check_memory(s, mem, capacity)
    plan, table = check_text(check_txt)
    graph = 0
    for name, item in items.items():
        ev = jobs[name]
        own = json.load(open(os.path.join(out, name, "summary.json")))
        # Admitted on the engine's plan: persistent with the host bytes
        # (the datasets held in memory, staging), one iteration's peak.
        assert ev["persistent_bytes"] == own["persistent_bytes"] + own["host_bytes"], (name, ev, own)
        assert ev["ephemeral_bytes"] == own["ephemeral_bytes"], (name, ev, own)
        # ... and that plan is the one accelrt check computes from shapes.
        assert table[name][1] == fmt_bytes(own["ephemeral_bytes"]), (name, table[name], own)
        if any(k in item["model"]["input"] for k in GRAPH_INPUTS):
            graph += 1
            assert plan[name] == (fmt_bytes(own["persistent_bytes"]),
                                  fmt_bytes(own["ephemeral_bytes"])), (name, plan[name], own)
            if "image" in item["model"]["input"]:  # both splits held: 785 bytes a point
                assert own["host_bytes"] >= 785 * (TRAIN_POINTS + TEST_POINTS), (name, own)
        else:
            assert table[name][0] == fmt_bytes(ev["persistent_bytes"]), (name, table[name], ev)
    assert graph >= 3, "the slice has %d graph jobs" % graph
    print("%s: %d jobs (%d graph) done, max memory %s of %s" % (
        policy, len(items), graph, fmt_bytes(s["max_memory_bytes"]), fmt_bytes(capacity)))


# ---- one admission figure ----------------------------------------------------


def make_admit(mixed, work):
    """The mixed file's cnn-short (the whole Fashion-MNIST, 55 MB held in
    memory), tok-short and xc-short items once each, 2 iterations of batch
    16, arriving at once at 1 GiB."""
    d = yaml.safe_load(open(mixed))
    keep = {"cnn-short", "tok-short", "xc-short"}
    jobs = [i for i in d["jobs"] if i["name"] in keep]
    assert len(jobs) == 3, [i["name"] for i in d["jobs"]]
    for item in jobs:
        item.pop("repeat", None)
        item["arrival"] = 0
        t = item["train"]
        t["iterations"], t["batch"], t["eval_points"] = 2, 16, 32
        g = item["data"].get("generate")
        if g:
            g["train_points"], g["test_points"] = 512, 64
    d = {"name": "admit", "device": "host", "seed": 3,
         "runtime": {"policy": "fifo", "memory": "1GiB"},
         "output": {"dir": os.path.join(work, "out")}, "jobs": jobs}
    yaml.safe_dump(d, open(os.path.join(work, "admit.yaml"), "w"), sort_keys=False)


def check_admit(work, check_txt):
    d = yaml.safe_load(open(os.path.join(work, "admit.yaml")))
    s, jobs, _ = load_run(d["output"]["dir"])
    assert s["failed"] == 0 and all(j["status"] == "done" for j in s["jobs"]), s["jobs"]
    _, table = check_text(check_txt)
    assert sorted(table) == sorted(jobs), (sorted(table), sorted(jobs))
    for name, ev in jobs.items():
        assert table[name] == (fmt_bytes(ev["persistent_bytes"]),
                               fmt_bytes(ev["ephemeral_bytes"])), (name, table[name], ev)
    # The cnn job's figure holds its datasets (train and test, 785 bytes a
    # point and the idx headers) on top of its model.
    cnn = json.load(open(os.path.join(d["output"]["dir"], "cnn-short", "summary.json")))
    data = 785 * (60000 + 10000)
    assert jobs["cnn-short"]["persistent_bytes"] >= cnn["persistent_bytes"] + data, cnn
    total = (sum(ev["persistent_bytes"] for ev in jobs.values()) +
             max(ev["ephemeral_bytes"] for ev in jobs.values()))
    m = re.search(r"^  all at once: .* = \S+ \S+ \((\d+) bytes\)", open(check_txt).read(), re.M)
    assert m, "no all-at-once line with bytes in " + check_txt
    assert int(m.group(1)) == total, (int(m.group(1)), total)
    # A capacity just under the total, far above it without the datasets.
    below = total - 4096
    assert below > total - data
    print("%dKiB" % (below // 1024))


# ---- random mixes ------------------------------------------------------------


def cnn(r):
    c1, c2 = r.choice([4, 8, 16]), r.choice([8, 16, 32])
    return {"input": {"image": [1, 28, 28]}, "layers": [
        {"name": "c1", "conv": c1, "kernel": 3, "padding": 1},
        {"name": "bn1", "op": "batchnorm", "activation": "relu"},
        {"name": "p1", "op": "maxpool", "kernel": 2},
        {"name": "c2", "conv": c2, "kernel": 3, "padding": 1},
        {"name": "bn2", "op": "batchnorm", "activation": "relu"},
        {"name": "p2", "op": "maxpool", "kernel": 2},
        {"name": "flat", "op": "flatten"},
        {"name": "fc", "dense": r.choice([16, 32, 64]), "activation": "relu"},
        {"name": "out", "dense": 10, "activation": "softmax"}]}


def resnet(r):
    w = r.choice([4, 8])
    return {"input": {"image": [1, 28, 28]}, "layers": [
        {"name": "stem", "conv": w, "kernel": 3, "padding": 1, "bias": False},
        {"name": "stem_bn", "op": "batchnorm", "activation": "relu"},
        {"name": "s1", "repeat": r.choice([1, 2]), "block": [
            {"name": "c1", "conv": w, "kernel": 3, "padding": 1, "bias": False},
            {"name": "b1", "op": "batchnorm", "activation": "relu"},
            {"name": "sum", "op": "add", "inputs": ["b1", "input"]},
            {"name": "r", "op": "relu"}]},
        {"name": "pool", "op": "global_avgpool"},
        {"name": "out", "dense": 10, "activation": "softmax"}]}


def transformer(r):
    w = r.choice([16, 32])
    return {"input": {"tokens": 12, "vocab": 16}, "layers": [
        {"name": "m", "op": "mask", "inputs": ["input"]},
        {"name": "emb", "op": "embedding", "width": w, "inputs": ["input"]},
        {"name": "pos", "op": "posembed"},
        {"name": "att", "op": "attention", "heads": r.choice([1, 2, 4]), "inputs": ["pos", "m"]},
        {"name": "r1", "op": "add", "inputs": ["pos", "att"]},
        {"name": "n1", "op": "layernorm"},
        {"name": "pool", "op": "mean", "axis": 1},
        {"name": "out", "dense": 2, "activation": "softmax"}]}


def make_random(seed, work):
    """6 to 9 jobs drawn from the four families, all arriving at once, for
    the capacity the shell script then chooses (from accelrt check)."""
    r = random.Random(seed)
    fm = os.path.join(work, "fm")
    os.makedirs(fm, exist_ok=True)
    train = write_idx(fm, "train", bytes(r.randrange(256) for _ in range(128 * 784)),
                      [r.randrange(10) for _ in range(128)])
    test = write_idx(fm, "test", bytes(r.randrange(256) for _ in range(32 * 784)),
                     [r.randrange(10) for _ in range(32)])
    jobs = []
    for i in range(r.randint(6, 9)):
        kind = r.choice(["cnn", "resnet", "transformer", "xc"])
        batch = r.choice([8, 16, 32])
        train_s = {"batch": batch, "iterations": 2, "eval_points": 16}
        if kind == "xc":
            labels = r.choice([100, 500, 2000])
            model = {"input": {"sparse": 2000}, "layers": [
                {"name": "hidden", "dense": r.choice([16, 32, 64]), "activation": "relu"},
                {"name": "out", "dense": labels, "activation": "softmax"}]}
            data = {"generate": {"train_points": 256, "test_points": 32, "features": 2000,
                                 "labels": labels}}
        elif kind == "transformer":
            model = transformer(r)
            data = {"format": "npy", "generate": {"train_points": 128, "test_points": 32,
                                                  "features": 12, "labels": 2}}
        else:
            model = cnn(r) if kind == "cnn" else resnet(r)
            data = {"format": "idx", "train": train, "test": test}
        jobs.append({"name": "%s-%d" % (kind, i), "arrival": 0, "model": model, "data": data,
                     "train": train_s})
    policy = ["fifo", "pack", "srtf", "fair"][seed % 4]
    d = {"name": "mix%d" % seed, "device": "host", "seed": seed,
         "runtime": {"policy": policy, "memory": "1GiB"},
         "output": {"dir": os.path.join(work, "out")}, "jobs": jobs}
    yaml.safe_dump(d, open(os.path.join(work, "random.yaml"), "w"), sort_keys=False)


def parse_bytes(text):
    n, unit = text.split()
    return float(n) * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(unit)


def capacity_for(check_txt):
    """The largest job alone (accelrt check's table, the runner's figure)
    plus 1 MiB for the table's rounding: every job fits alone, and the mix
    does not fit at once."""
    _, table = check_text(check_txt)
    assert table, "no admission table in " + check_txt
    alone = max(parse_bytes(p) + parse_bytes(e) for p, e in table.values())
    return int(alone / 2**20) + 2


def check_random(work, capacity_mib):
    capacity = capacity_mib << 20
    d = yaml.safe_load(open(os.path.join(work, "random.yaml")))
    s, jobs, mem = load_run(d["output"]["dir"])
    assert s["failed"] == 0 and all(j["status"] == "done" for j in s["jobs"]), s["jobs"]
    assert len(jobs) == len(d["jobs"]), (len(jobs), len(d["jobs"]))
    check_memory(s, mem, capacity)
    peaks = sum(j["persistent_bytes"] + j["ephemeral_bytes"] for j in jobs.values())
    # The capacity binds: the jobs' peaks together do not fit, so admission
    # had to keep some waiting.
    assert peaks > capacity, (peaks, capacity)
    print("%s: %d jobs, sum of peaks %s, capacity %s, max used %s, at most %d admitted" % (
        s["policy"], len(jobs), fmt_bytes(peaks), fmt_bytes(capacity),
        fmt_bytes(s["max_memory_bytes"]), max(m["admitted"] for m in mem)))


def main(argv):
    cmd = argv[1]
    if cmd == "slice":
        make_slice(argv[2], argv[3])
    elif cmd == "check-slice":
        check_slice(argv[2], argv[3], argv[4])
    elif cmd == "random":
        make_random(int(argv[2]), argv[3])
    elif cmd == "capacity":
        print(capacity_for(argv[2]))
    elif cmd == "admit":
        make_admit(argv[2], argv[3])
    elif cmd == "check-admit":
        check_admit(argv[2], argv[3])
    elif cmd == "check-random":
        check_random(argv[2], int(argv[3]))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
