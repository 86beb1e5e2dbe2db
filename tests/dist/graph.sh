#!/usr/bin/env bash
# Graph models under distributed: (label mpi): a tiny CNN with batch norm
# and a residual add on 8x8 images written by the test (numpy), trained on
# one thread against the same job on one process.
#   graph.sh MPIEXEC ACCELRT PYTHON SRC CASE
# Cases:
#   exact   -np 2 (1 server, 1 worker): every iteration's loss equals the
#           single-process run's as the float32 it logs, and the final
#           checkpoints (parameters, optimizer state, batch-norm running
#           statistics) are identical byte for byte: SGD with momentum,
#           then Adam with weight decay, then AdamW with a cosine schedule
#           over two servers (-np 3: the shards gathered to rank 0), and a
#           token model with attention over two servers.
#           -np 3 (1 server, 2 workers) without batch norm: every loss
#           within 1e-5 (relative) of the single process's (the workers'
#           half-batch gradients summed in another order).  With batch norm
#           each worker normalises its half batch with its own statistics
#           (no synchronised batch norm), so the losses differ by design;
#           the run trains, and rank 0's checkpoint holds worker 0's
#           running statistics, not their initial zeros and ones.
#   orders  random, tic and tac under -np 3 complete; tac writes its
#           schedule (one line per parameter tensor) and the oracle (the
#           net's nodes as ops), and the run's trace.json has the
#           parameters' transfers and, in most iterations, the server's
#           optimizer beginning before the last gradient arrived (the
#           early update); over an emulated link the server sends a
#           worker a node's tensors (a layer's w and b) one after the
#           other before the next worker's, and `accelrt simulate --trace`
#           models the job from that trace; a batch the 2 workers cannot split is refused
#           naming both.
#   overlap -np 2, random orders over a slow emulated link: trace.json shows
#           a parameter of iteration i + 1 sent before iteration i's last
#           gradient came in (the server's iterations overlap), and the
#           losses and checkpoint still equal one process's exactly; the
#           iterations' comp_busy_s counts the server's updates, not the
#           stretch between its first and last (mostly waiting).
#   resume  -np 2: 12 iterations straight and 6 + 6 resumed end with the
#           same checkpoint; a worker killed at iteration 5 ends the job
#           with an error naming it, no hang, and the checkpoint left
#           behind resumes to the end; SIGTERM to a worker stops every
#           rank at one iteration with rank 0's checkpoint, and --resume
#           goes on from there.
#   onnx    a model: {onnx: ...} CNN (python3-onnx writes it) trains under
#           -np 2 exactly as on one process (77 without python3-onnx).
#   share   distributed.share: each worker one more tenant of its device's
#           lanes beside a graph tenant and an MLP chain tenant under fair.
#           -np 2 (batch norm) and -np 3 (2 workers, no batch norm) end with
#           the same losses and checkpoint byte for byte as the unshared
#           runs; every tenant ran all its iterations, and under fair the
#           graph tenant took its turns in the worker's lane.
#   configs configs/cluster-inception.yaml and configs/cluster-resnet.yaml
#           on a slice (6 iterations) under -np 3: their transfers (47 and
#           65 parameter tensors), a positive comp_comm_ratio, an
#           evaluation (77 without Debian's Fashion-MNIST); Inception's
#           worker runs each block's pool branch first and TAC sends its
#           weights first, also when the file lists the pool branches last.
set -uo pipefail
MPIEXEC=$1 bin=$2 py=$3 src=$4 case=$5
work=$(mktemp -d /tmp/accelrt_dgraph_XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT; echo "work: $work"
fail() { echo "FAIL: $*" >&2; cat "$work"/out*.txt 2>/dev/null | tail -30 >&2; exit 1; }
"$py" -c 'import numpy' 2>/dev/null || { echo "skipped: numpy is not installed for $py"; exit 77; }
export ACCELRT_DIST_TIMEOUT=30
mpi() { # mpi NP ARGS...
  local np=$1; shift
  timeout 200 "$MPIEXEC" --oversubscribe -n "$np" "$bin" "$@"
}
cd "$work" || exit 1
# server_spans(trace.json): the server's (rank 0, pid 1) spans per
# iteration: when its last gradient came in, when its first parameter send
# began, when its optimizer began.
cat > server_spans.py <<'PY'
import json


def server_spans(path):
    last, first, opt = {}, {}, {}
    for e in json.load(open(path))["traceEvents"]:
        if e.get("pid") != 1 or e.get("ph") != "X":
            continue
        it = e.get("args", {}).get("iteration")
        if e.get("cat") == "grad":
            last[it] = max(last.get(it, 0.0), e["ts"] + e["dur"])
        elif e.get("cat") == "param":
            first[it] = min(first.get(it, float("inf")), e["ts"])
        elif e.get("cat") == "optimizer":
            opt[it] = e["ts"]
    return last, first, opt
PY
"$py" - <<'PY' || fail "could not write the data"
import os
import numpy as np
rng = np.random.default_rng(1)
for split, n in (("train", 256), ("test", 64)):
    y = rng.integers(0, 4, n)
    x = rng.normal(0, 1, (n, 1, 8, 8)).astype(np.float32)
    for i in range(n):  # the class: which quadrant is bright
        r, c = (y[i] // 2) * 4, (y[i] % 2) * 4
        x[i, 0, r:r + 4, c:c + 4] += 1.5
    os.makedirs(split, exist_ok=True)
    np.save(split + "/x.npy", x)
    np.save(split + "/y.npy", y.astype(np.int64))
PY
cat > job.yaml <<'YAML'
name: gcnn
device: host
seed: 4
model:
  input: {image: [1, 8, 8]}
  layers:
    - {name: c1, conv: 8, kernel: 3, padding: 1, bias: false}
    - {name: bn1, op: batchnorm, activation: relu}
    - {name: c2, conv: 8, kernel: 3, padding: 1}
    - {name: sum, op: add, inputs: [c2, bn1]}
    - {name: r, op: relu}
    - {name: pool, op: global_avgpool}
    - {name: out, dense: 4, activation: softmax}
data: {format: npy, train: train, test: test}
train: {batch: 32, iterations: 12, threads: 1, log_every: 1, eval_every: 6,
        optimizer: {sgd: {lr: 0.1, momentum: 0.9}}}
output: {dir: single}
YAML
dist() { cat job.yaml; printf 'distributed: {servers: %s, order: %s, trace_iterations: 2}\n' "$1" "$2"; }
dist 1 tac > d1.yaml
dist 2 tac > d2.yaml
sed 's/- {name: bn1, op: batchnorm, activation: relu}/- {name: bn1, op: relu}/' job.yaml > nobn.yaml
{ cat nobn.yaml; printf 'distributed: {servers: 1, order: tac, trace_iterations: 2}\n'; } > dnobn.yaml
# A block of three branches whose max pool (no parameters) is listed after
# the 1x1 and 3x3 branches (issue 17, docs/graph.md "Forward order").
"$py" - <<'PY' || fail "could not write br.yaml"
t = open("job.yaml").read()  # its c2 .. r replaced by the block
a, b = t.index("    - {name: c2,"), t.index("    - {name: pool,")
open("br.yaml", "w").write(t[:a].replace("name: gcnn", "name: br") + """\
    - {name: a, conv: 4, kernel: 1, activation: relu, inputs: [bn1]}
    - {name: b, conv: 4, kernel: 3, padding: 1, activation: relu, inputs: [bn1]}
    - {name: p, op: maxpool, kernel: 3, stride: 1, padding: 1, inputs: [bn1]}
    - {name: pp, conv: 4, kernel: 1, activation: relu}
    - {name: cat, op: concat, axis: 1, inputs: [a, b, pp]}
""" + t[b:])
PY
{ cat br.yaml; printf 'distributed: {servers: 1, order: tac, trace_iterations: 2}\n'; } > dbr.yaml

# losses A B TOL: B's iteration lines against A's train lines.  TOL 0:
# the single process logs its loss as a float32, the distributed run the
# double it rounds from, printed to 10 digits: they agree within one
# float32 step (a double printed near the midpoint of two floats can round
# either way once read back); the parameters themselves are compared byte
# for byte by `same`.  Otherwise TOL is a relative tolerance.
losses() {
  "$py" - "$@" <<'PY'
import json, math, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"kind": "train"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"kind": "iteration"' in l]
tol = float(sys.argv[3])
assert len(a) == len(b) == 12, (len(a), len(b))
worst = 0.0
for x, y in zip(a, b):
    assert x["iteration"] == y["iteration"]
    lim = tol * abs(x["train_loss"]) if tol > 0 else math.ulp(abs(x["train_loss"])) * 2**29
    d = abs(x["train_loss"] - y["train_loss"])
    worst = max(worst, d / abs(x["train_loss"]))
    assert d <= lim, ("iteration", x["iteration"], x["train_loss"], y["train_loss"], lim)
print("  %s vs %s: 12 losses, largest relative difference %.3g" % (sys.argv[1], sys.argv[2], worst))
PY
}
# same A B: the checkpoints' positions and tensors (not the header's
# training seconds, not the checksum over them) are identical.
same() {
  "$py" - "$@" <<'PY'
import sys
a = open(sys.argv[1], "rb").read()
b = open(sys.argv[2], "rb").read()
assert len(a) == len(b), (len(a), len(b))
assert a[:16] == b[:16] and a[16:56] == b[16:56], "positions differ"
assert a[64:-4] == b[64:-4], "tensors differ"
PY
}

case $case in
exact)
  for opt in sgd adam adamw; do
    set_opt=(--set "train.optimizer={sgd: {lr: 0.1, momentum: 0.9}}")
    [ $opt = adam ] && set_opt=(--set "train.optimizer={adam: {lr: 0.01, weight_decay: 0.01}}")
    [ $opt = adamw ] && set_opt=(--set "train.optimizer={adam: {lr: 0.01, weight_decay: 0.05, decoupled: true}}"
                                 --set "train.schedule={kind: cosine, warmup: 3}")
    "$bin" run job.yaml --quiet --set output.dir=s_$opt "${set_opt[@]}" > out_s.txt 2>&1 ||
      fail "$opt: single process"
    # adamw over two servers and one worker: the shards come together.
    np=2 file=d1.yaml
    [ $opt = adamw ] && np=3 file=d2.yaml
    mpi $np run $file --quiet --set output.dir=d_$opt "${set_opt[@]}" > out_d.txt 2>&1 ||
      fail "$opt: -np $np"
    losses s_$opt/metrics.jsonl d_$opt/metrics.jsonl 0 || fail "$opt: -np $np losses differ"
    same s_$opt/checkpoint.bin d_$opt/checkpoint.bin || fail "$opt: -np $np checkpoints differ"
    grep -q '"kind": "eval"' d_$opt/metrics.jsonl || fail "$opt: rank 0 did not evaluate"
    [ "$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["top1"])' d_$opt/summary.json)" = \
      "$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["top1"])' s_$opt/summary.json)" ] ||
      fail "$opt: top1 differs from the single process's"
    echo "$opt: -np $np equals one process"
  done
  # Attention (a token model) over two servers and one worker: the same.
  "$bin" gen-data --out tok --shape tokens --seq 12 --vocab 16 --train-points 512 \
    --test-points 64 --seed 5 > /dev/null || fail "gen-data --shape tokens"
  cat > tok.yaml <<'YAML'
name: tok
device: host
seed: 3
model:
  input: {tokens: 12, vocab: 16}
  layers:                  # a pre-norm attention block
    - {name: emb, op: embedding, width: 16}
    - {name: pos, op: posembed}
    - {name: ln, op: layernorm}
    - {name: att, op: attention, heads: 4}
    - {name: res, op: add, inputs: [pos, att]}
    - {name: pool, op: mean, axis: 1}
    - {name: out, dense: 2, activation: softmax}
data: {format: npy, train: tok/train, test: tok/test}
train: {batch: 16, iterations: 12, optimizer: {adam: {lr: 0.003}}, log_every: 1, threads: 1}
output: {dir: s_tok}
YAML
  { cat tok.yaml; printf 'distributed: {servers: 2, order: tac, trace_iterations: 2}\n'; } > dtok.yaml
  "$bin" run tok.yaml --quiet > out_s.txt 2>&1 || fail "tokens: single process"
  mpi 3 run dtok.yaml --quiet --set output.dir=d_tok > out_d.txt 2>&1 || fail "tokens: -np 3"
  losses s_tok/metrics.jsonl d_tok/metrics.jsonl 0 || fail "tokens: losses differ"
  same s_tok/checkpoint.bin d_tok/checkpoint.bin || fail "tokens: checkpoints differ"
  echo "attention: -np 3 (2 servers) equals one process"
  # Branches (issue 17): the max pool, listed after the 1x1 and 3x3
  # branches, waits for no parameter, so the worker's forward runs it (and
  # its 1x1) right after bn1 (check prints that order); only the forward
  # moves, the backward keeps the list order, so the run is still the
  # single process's byte for byte.
  "$bin" check dbr.yaml > out_c.txt 2>&1 || fail "branches: check"
  grep -q "^  forward order (distributed: .*): c1, bn1, p, pp, a, b, cat, pool, out, loss$" \
    out_c.txt || { cat out_c.txt; fail "branches: the pool does not go first"; }
  "$bin" run br.yaml --quiet --set output.dir=s_br > out_s.txt 2>&1 ||
    fail "branches: single process"
  mpi 2 run dbr.yaml --quiet --set output.dir=d_br > out_d.txt 2>&1 || fail "branches: -np 2"
  losses s_br/metrics.jsonl d_br/metrics.jsonl 0 || fail "branches: losses differ"
  same s_br/checkpoint.bin d_br/checkpoint.bin || fail "branches: checkpoints differ"
  echo "branches, the pool moved first: -np 2 equals one process"
  # Two workers, no batch norm: within floating-point rounding.
  "$bin" run nobn.yaml --quiet --set output.dir=s_nobn > out_s.txt 2>&1 || fail "no-bn single"
  mpi 3 run dnobn.yaml --quiet --set output.dir=d_nobn > out_d.txt 2>&1 || fail "no-bn -np 3"
  losses s_nobn/metrics.jsonl d_nobn/metrics.jsonl 1e-5 || fail "-np 3 losses off"
  # Two workers with batch norm: trains; worker 0's running statistics.
  mpi 3 run d1.yaml --quiet --set output.dir=d3 --set train.iterations=40 > out_d.txt 2>&1 ||
    fail "-np 3 with batch norm"
  "$py" - d3 <<'PY' || fail "-np 3 with batch norm did not train"
import json, sys
d = sys.argv[1]
lines = [json.loads(l) for l in open(d + "/metrics.jsonl") if '"kind": "iteration"' in l]
first = sum(l["train_loss"] for l in lines[:5]) / 5
last = sum(l["train_loss"] for l in lines[-5:]) / 5
assert last < first, ("loss did not fall", first, last)
PY
  "$py" - d3/checkpoint.bin "$src" <<'PY' || fail "-np 3: rank 0 lacks worker 0's statistics"
import sys
sys.path.insert(0, sys.argv[2] + "/python")
from accelrt import read_checkpoint
t = read_checkpoint(sys.argv[1])
names = list(t.keys())
mean = [n for n in names if "bn1" in n and "mean" in n]
var = [n for n in names if "bn1" in n and "var" in n]
assert mean and var, names
import numpy as np
m, v = np.asarray(t[mean[0]]), np.asarray(t[var[0]])
assert np.abs(m).max() > 1e-3, "running mean still zero"
assert np.abs(v - 1).max() > 1e-3, "running variance still one"
print("  running statistics of worker 0: mean", m[:3], "var", v[:3])
PY
  ;;
orders)
  for o in random tic tac; do
    dist 1 $o > o.yaml
    printf '  schedule: sched.txt\n' >> o.yaml
    sed -i 's/^distributed: {\(.*\)}$/distributed: {\1, schedule: sched_'$o'.txt}/' o.yaml
    sed -i '/^  schedule: sched.txt$/d' o.yaml
    mpi 3 run o.yaml --quiet --set output.dir=o_$o > out_o.txt 2>&1 ||
      fail "order $o under -np 3"
    n=$(grep -c '"kind": "iteration"' o_$o/metrics.jsonl)
    [ "$n" = 12 ] || fail "order $o: $n iteration lines"
    [ -s o_$o/trace.json ] || fail "order $o: no trace.json"
    echo "$o: 12 iterations under -np 3"
  done
  # tac: the schedule lists the 7 parameter tensors (c1.w, bn1's two, c2's
  # two, out's two); the oracle has their ops and the net's nodes.
  [ "$(grep -vc '^#\|^order' sched_tac.txt)" = 7 ] || { cat sched_tac.txt; fail "tac schedule"; }
  grep -q '^order tac' sched_tac.txt || fail "the schedule's order"
  grep -q 'fwd.c2' o_tac/oracle.tsv && grep -q 'bwd.c1' o_tac/oracle.tsv ||
    fail "the oracle lacks the nodes' ops"
  # A batch the workers cannot split evenly: refused at set-up, named.
  mpi 3 run d1.yaml --quiet --set output.dir=uneven --set train.batch=33 > out_u.txt 2>&1 &&
    fail "train.batch 33 over 2 workers was accepted"
  grep -q "train.batch 33 does not divide among the 2 workers" out_u.txt ||
    fail "uneven batch: no message naming the batch and the workers"
  # A graph model's workers are host-only under distributed: (MPI would read
  # device memory unstaged): cuda:N is refused at set-up, named.
  mpi 3 run d1.yaml --quiet --set output.dir=gpu --set device=cuda:0 > out_g.txt 2>&1 &&
    fail "a graph job on cuda:0 workers was accepted"
  grep -q "device cuda:0: a graph model's distributed workers run on the host" out_g.txt ||
    { cat out_g.txt; fail "graph job on cuda workers: no message"; }
  # tac again over a slow emulated link (2.9 KB of parameters at 62.5
  # KB/s): the gradients' deliveries are milliseconds apart.
  mpi 3 run d1.yaml --quiet --set output.dir=o_link --set distributed.link.gbps=0.0005 \
    > out_o.txt 2>&1 || fail "tac over an emulated link"
  "$py" - o_tac/trace.json o_link/trace.json <<'PY' || fail "trace.json of a graph job"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e.get("name") for e in ev}
for t in ("c1.w", "bn1.gamma", "out.w"):
    assert any(t in (n or "") for n in names), (t, sorted(n for n in names if n)[:40])
# Early update: rank 0's optimizer (the server, pid 1) begins when a
# tensor's gradients are all in, before the iteration's last gradient
# (c1.w's, the first layer's, last of the backward) has arrived; waiting
# for all of them would start it after.  Most iterations show it; a
# server woken late by a busy machine may find several due at once.
from server_spans import server_spans
last, first, opt = server_spans(sys.argv[2])
early = [i for i in opt if i in last and opt[i] < last[i]]
print("  early updates in %d of %d iterations" % (len(early), len(opt)))
assert len(opt) == 12 and len(early) >= len(last) // 2, (len(early), opt, last)
PY
  # The server's out port sends a worker a node's tensors in one turn
  # (bn1's two, c2's two, out's two: adjacent on the wire), then the other
  # worker's copies: taken one tensor each, worker 0 had bn1.gamma at once
  # and bn1.beta only after worker 1's bn1.gamma.
  "$py" - o_link/trace.tsv <<'PY' || fail "a node's tensors split on the out port"
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if not l.startswith("#")]
head, its = rows[0], {}
for r in rows[1:]:
    x = dict(zip(head, r))
    if x["kind"] == "recv" and x["warmup"] == "0":  # warm-up: as ready, no schedule
        its.setdefault(x["iteration"], []).append((float(x["wire_s"]), x["worker"], x["op"]))
checked = 0
for it, sends in its.items():
    sends.sort()
    seq = [(w, op.rsplit(".", 1)[0]) for _, w, op in sends]
    assert len(seq) == 14, (it, seq)
    for key in set(seq):
        at = [i for i, k in enumerate(seq) if k == key]
        assert at == list(range(at[0], at[0] + len(at))), (it, key, seq)
        checked += len(at) > 1
print("  out port: each node's tensors to a worker adjacent, %d groups in %d iterations"
      % (checked, len(its)))
assert checked >= 6 * len(its) and len(its) >= 3, (checked, len(its))
PY
  # accelrt simulate models the graph job from the run's trace: the nodes'
  # compute times (fwd.*, bwd.*) set from it, a row per order.
  "$bin" simulate d1.yaml --workers 2 --gbps 0.0005 --latency-us 50 \
    --trace o_link/trace.tsv > out_sim.txt 2>&1 || { cat out_sim.txt; fail "simulate --trace"; }
  grep -q "compute times: medians of 1[0-9] ops from o_link/trace.tsv" out_sim.txt ||
    { cat out_sim.txt; fail "simulate --trace: the nodes' times not read"; }
  grep -q "^tac  *[0-9]" out_sim.txt || { cat out_sim.txt; fail "simulate: no tac row"; }
  # The simulator runs the worker's forward order (docs/graph.md "Forward
  # order"), also for a file without distributed:.  Op times from an
  # oracle: the branch block's max pool 0.5 s, every other op 1-2 ms, a
  # 10 kbit/s link (b's 1.2 KB of weights take about 1 s): the pool runs
  # while b's weights arrive, so the worker hardly waits beyond the stream
  # (E near 1); run as listed, after b, it would follow the stream (E 0.57).
  for x in c1 bn1 a b pp cat pool out loss; do
    printf 'fwd.%s compute 0.001\nbwd.%s compute 0.002\n' $x $x
  done > br_oracle.tsv
  printf 'fwd.p compute 0.5\nbwd.p compute 0.002\n' >> br_oracle.tsv
  for f in br dbr; do
    "$bin" simulate $f.yaml --workers 1 --servers 1 --gbps 0.00001 --oracle br_oracle.tsv \
      --json > sim_$f.txt 2>&1 || { cat sim_$f.txt; fail "simulate $f.yaml"; }
  done
  "$py" - sim_br.txt sim_dbr.txt <<'PY' || fail "simulate: the pool does not run while b's weights arrive"
import json, sys
a, b = ({p["order"]: p for p in map(json.loads, open(f))}["tac"] for f in sys.argv[1:3])
print("  simulate, tac: E %.3f, makespan %.3f s (no distributed:) and %.3f s"
      % (a["efficiency"], a["makespan_s"], b["makespan_s"]))
assert a["efficiency"] > 0.9, a
assert abs(a["makespan_s"] - b["makespan_s"]) < 1e-3 * b["makespan_s"], (a, b)
PY
  ;;
overlap)
  # Iterations overlap at the server: a parameter updated for iteration i
  # leaves for i + 1 at once, in i + 1's order.  Random orders over a slow
  # emulated link (2.9 KB at 62.5 KB/s), one server, one worker: when i + 1's
  # order does not begin with c1.w, whose gradient is the last of i (tic,
  # tac and none do begin with it), the tensors the backward finished first
  # are updated and sent for i + 1 while c1.w's gradient is still on the
  # link; and the training is still exactly one process's (i + 1 reads the
  # parameters after update i).
  "$bin" run job.yaml --quiet --set output.dir=s_ov > out_s.txt 2>&1 || fail "single process"
  dist 1 random > drandom.yaml
  mpi 2 run drandom.yaml --quiet --set output.dir=ov --set distributed.link.gbps=0.0005 \
    > out_ov.txt 2>&1 || fail "order random over an emulated link"
  losses s_ov/metrics.jsonl ov/metrics.jsonl 0 || fail "overlap: losses differ"
  same s_ov/checkpoint.bin ov/checkpoint.bin || fail "overlap: checkpoints differ"
  "$py" - ov/trace.json <<'PY' || fail "trace.json shows no overlap"
import sys
from server_spans import server_spans
last, first, opt = server_spans(sys.argv[1])
ov = [i for i in last if i + 1 in first and first[i + 1] < last[i]]
print("  iteration i + 1's first parameter sent before i's last gradient came in "
      "%d of %d iterations" % (len(ov), len(last) - 1))
assert len(last) >= 6 and ov, (first, last)
PY
  # TicTac's C is computation busy time: each update counts as its own
  # span, not the stretch from the server's first update to its last (its
  # `optimizer` span in trace.json), which on this slow link is mostly the
  # server waiting for gradients still on the wire.
  "$py" - ov/metrics.jsonl ov/trace.json <<'PY' || fail "comp_busy_s counts the update window"
import json, statistics, sys
its = {}
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d.get("kind") == "iteration" and not d["warmup"]:
        its[d["iteration"]] = d["comp_busy_s"]
ops, window = {}, {}
for e in json.load(open(sys.argv[2]))["traceEvents"]:
    it = e.get("args", {}).get("iteration")
    if e.get("ph") != "X" or it not in its:
        continue
    if e["pid"] == 2 and e.get("cat") in ("forward", "backward"):
        ops[it] = ops.get(it, 0.0) + e["dur"] / 1e6
    elif e["pid"] == 1 and e.get("cat") == "optimizer":
        window[it] = e["dur"] / 1e6
both = sorted(set(ops) & set(window))
assert len(both) >= 3, (sorted(its), sorted(ops), sorted(window))
extra = statistics.median(its[i] - ops[i] for i in both)
win = statistics.median(window[i] for i in both)
print("  C beyond the worker's ops %.2f ms, the server's update window %.2f ms (%d iterations)"
      % (1e3 * extra, 1e3 * win, len(both)))
assert extra < 0.5 * win, (extra, win)
PY
  ;;
resume)
  sed -e 's/eval_every: 6,/eval_every: 6, checkpoint_every: 3,/' d1.yaml > r.yaml
  mpi 2 run r.yaml --quiet --set output.dir=straight > out_r.txt 2>&1 || fail "straight"
  mpi 2 run r.yaml --quiet --set output.dir=halves --set train.iterations=6 > out_r.txt 2>&1 ||
    fail "first half"
  mpi 2 run r.yaml --quiet --set output.dir=halves --resume > out_r.txt 2>&1 || fail "resume"
  grep -q "resumed from" out_r.txt || true
  same straight/checkpoint.bin halves/checkpoint.bin || fail "resumed run differs from straight"
  n=$(grep -c '"kind": "iteration"' halves/metrics.jsonl)
  [ "$n" = 12 ] || fail "resumed metrics: $n iteration lines"
  echo "resume: 6 + 6 equals 12 straight"
  # A worker killed at iteration 5 (-np 3): a clear error, no hang.
  ACCELRT_DIST_FAULT=2:5 ACCELRT_DIST_TIMEOUT=10 timeout 150 \
    "$MPIEXEC" --oversubscribe -n 3 "$bin" run r.yaml --quiet --set output.dir=killed \
    > out_k.txt 2>&1
  rc=$?
  [ $rc -eq 124 ] && fail "killed worker: the job hung"
  [ $rc -eq 0 ] && fail "killed worker: exit status 0"
  grep -q "rank 2" out_k.txt || fail "killed worker: no message names rank 2"
  mpi 3 run r.yaml --quiet --set output.dir=killed --resume > out_k2.txt 2>&1 ||
    fail "resuming after the killed worker"
  grep -q '"iterations": 12' killed/summary.json || fail "the resumed run did not reach 12"
  echo "killed worker: reported, resumed to the end"
  # SIGTERM to worker 1 (rank 2): the ranks stop together at one N, rank 0
  # writes the checkpoint and an interrupted
  # summary, and --resume continues to N + 5.
  "$MPIEXEC" --oversubscribe -n 3 "$bin" run r.yaml --quiet --set output.dir=stop \
    --set train.iterations=10000000 > out_t.txt 2>&1 &
  mp=$!
  lines() { n=$(grep -c '"kind": "iteration"' stop/metrics.jsonl 2>/dev/null); echo "${n:-0}"; }
  for _ in $(seq 1200); do [ "$(lines)" -ge 20 ] && break; sleep 0.1; done
  [ "$(lines)" -ge 20 ] || { kill -KILL $mp; fail "SIGTERM: the job did not train"; }
  worker=
  for p in $(ps -o pid= --ppid "$mp"); do
    grep -qxz OMPI_COMM_WORLD_RANK=2 "/proc/$p/environ" 2>/dev/null && worker=$p
  done
  [ -n "$worker" ] || { kill -KILL $mp; fail "SIGTERM: cannot find rank 2"; }
  kill -TERM "$worker"
  for _ in $(seq 1200); do kill -0 "$mp" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$mp" 2>/dev/null && { kill -KILL $mp; fail "SIGTERM: the ranks did not stop in 120 s"; }
  wait "$mp" && fail "SIGTERM: exit status 0"
  n=$("$py" -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["interrupted"]; print(s["iterations"])' \
      stop/summary.json) || fail "SIGTERM: no interrupted summary"
  [ "$(lines)" = "$n" ] || fail "SIGTERM: $(lines) metrics lines, summary says $n"
  mpi 3 run r.yaml --quiet --set output.dir=stop --resume --set train.iterations=$((n + 5)) \
    > out_t2.txt 2>&1 || fail "SIGTERM: resuming"
  [ "$(lines)" = $((n + 5)) ] || fail "SIGTERM: $(lines) lines after resuming, not $((n + 5))"
  echo "SIGTERM: stopped at $n together, resumed to $((n + 5))"
  ;;
onnx)
  "$py" -c 'import onnx' 2>/dev/null || { echo "skipped: python3-onnx is not installed"; exit 77; }
  "$py" - <<'PY' || fail "could not write the ONNX model"
import numpy as np, onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh
rng = np.random.default_rng(2)
init = [nh.from_array((rng.normal(0, 0.3, (6, 1, 3, 3))).astype(np.float32), "cw"),
        nh.from_array(np.zeros(6, np.float32), "cb"),
        nh.from_array((rng.normal(0, 0.3, (4, 6))).astype(np.float32), "gw"),
        nh.from_array(np.zeros(4, np.float32), "gb")]
nodes = [h.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         h.make_node("Relu", ["c"], ["r"], name="relu"),
         h.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
         h.make_node("Flatten", ["p"], ["f"], name="flat"),
         h.make_node("Gemm", ["f", "gw", "gb"], ["y"], transB=1, name="fc")]
g = h.make_graph(nodes, "cnn", [h.make_tensor_value_info("x", T.FLOAT, ["N", 1, 8, 8])],
                 [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])], init)
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 13)]), "cnn.onnx")
PY
  cat > ox.yaml <<'YAML'
name: ox
device: host
seed: 4
model: {input: {image: [1, 8, 8]}, onnx: cnn.onnx}
data: {format: npy, train: train, test: test}
train: {batch: 32, iterations: 12, threads: 1, log_every: 1,
        optimizer: {sgd: {lr: 0.1, momentum: 0.9}}}
output: {dir: single}
YAML
  { cat ox.yaml; printf 'distributed: {servers: 1, order: tac, trace_iterations: 2}\n'; } > dox.yaml
  "$bin" run ox.yaml --quiet > out_s.txt 2>&1 || fail "onnx single"
  mpi 2 run dox.yaml --quiet --set output.dir=dox > out_d.txt 2>&1 || fail "onnx -np 2"
  losses single/metrics.jsonl dox/metrics.jsonl 0 || fail "onnx -np 2 losses differ"
  same single/checkpoint.bin dox/checkpoint.bin || fail "onnx -np 2 checkpoints differ"
  echo "onnx: -np 2 equals one process"
  ;;
configs)
  fm=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
  [ -r "$fm" ] || { echo "skipped: $fm is not installed (dataset-fashion-mnist)"; exit 77; }
  # The Inception file with each block's pool branch (pool, 1x1) moved
  # after its 5x5: the same network (the concat keeps its inputs' order).
  "$py" - "$src/configs/cluster-inception.yaml" cluster-inception_last.yaml <<'PY' ||
import re, sys
lines, out, j = open(sys.argv[1]).read().split("\n"), [], 0
while j < len(lines):
    m = re.match(r"\s*- \{name: (i\d)_pool,", lines[j])
    if not m:
        out.append(lines[j])
        j += 1
        continue
    branch, j = lines[j:j + 2], j + 2
    while "name: %s_5x5" % m.group(1) not in lines[j]:
        out.append(lines[j])
        j += 1
    out += [lines[j]] + branch
    j += 1
assert len(out) == len(lines) and out != lines
open(sys.argv[2], "w").write("\n".join(out))
PY
    fail "could not write the pool-last Inception file"
  cp "$src/configs/cluster-inception.yaml" cluster-inception.yaml
  cp "$src/configs/cluster-resnet.yaml" cluster-resnet.yaml
  for cfg in inception:47 resnet:65 inception_last:47; do
    name=${cfg%:*} want=${cfg#*:}
    mpi 3 run cluster-$name.yaml --quiet --set output.dir=c_$name \
      --set train.iterations=6 --set train.eval_points=256 --set distributed.trace_iterations=2 \
      > out_c.txt 2>&1 || fail "cluster-$name.yaml under -np 3"
    "$py" - c_$name/summary.json "$want" <<'PY' || fail "cluster-$name: summary"
import json, math, sys
s = json.load(open(sys.argv[1]))
assert s["transfers"] == int(sys.argv[2]), ("transfers", s["transfers"])
assert s["iterations"] == 6 and s["workers"] == 2 and s["order"] == "tac", s
r = s["comp_comm_ratio"]
assert isinstance(r, float) and math.isfinite(r) and r > 0, ("comp_comm_ratio", r)
assert 0 <= s["top1"] <= 100, s["top1"]
print("  %s: %d transfers, comp_comm_ratio %.2f" % (sys.argv[1], s["transfers"], r))
PY
  done
  # Inception: the worker is one CPU running the nodes one at a time, and
  # each block's max pool (its longest op without parameters) must run
  # while the convolutions' weights arrive; run as listed last it ran
  # after them (in the last block after the whole parameter stream,
  # neither link direction busy: E 0.948).  The file lists the pool
  # branches first; the worker's forward order (ready nodes that wait for
  # no parameter first, then the branch it began) runs them first however
  # they are listed.  Checked where it happens: the worker's forward
  # spans, and the gate's TAC order on the server (the pool branch's
  # weights before the other branches').
  for name in inception inception_last; do
  "$py" - c_$name/trace.json $name <<'PY' || fail "cluster-$name: the pool branches do not go first"
import json, sys
fwd, order = {}, {}
for e in json.load(open(sys.argv[1]))["traceEvents"]:
    it = e.get("args", {}).get("iteration")
    if e.get("ph") != "X" or it is None:
        continue
    if e["pid"] == 2 and e.get("cat") == "forward":
        fwd.setdefault(it, {})[e["name"].split(" ", 1)[1]] = e["ts"]
    elif e["pid"] == 1 and e.get("cat") == "param" and "priority" in e["args"]:
        order.setdefault((it, e["tid"]), {})[e["name"]] = e["args"]["order"]
assert fwd and order, "no forward spans or no TAC-ordered sends in trace.json"
for b in ("i1", "i2", "i3"):
    later = [b + x for x in ("_1x1", "_3r", "_3x3", "_5r", "_5x5")]
    for it, t in fwd.items():
        assert max(t[b + "_pool"], t[b + "_pp"]) < min(t[x] for x in later), (it, b, t)
    for key, o in order.items():
        assert o[b + "_pp.w"] < min(o[x + ".w"] for x in later), (key, b, o)
print("  cluster-%s: each block's pool branch first on the worker (%d iterations) "
      "and in TAC's order (%d channels x iterations)" % (sys.argv[2], len(fwd), len(order)))
PY
  done
  ;;
share)
  cat > tenants.yaml <<'YAML'
name: tenants
device: host
seed: 2
runtime: {policy: fair, memory: 256MiB}
output: {dir: tenants}
jobs:
  - name: tg
    model:
      input: {image: [1, 8, 8]}
      layers:
        - {name: c1, conv: 4, kernel: 3, padding: 1}
        - {name: pool, op: global_avgpool}
        - {name: out, dense: 4, activation: softmax}
    data: {format: npy, train: train, test: test}
    train: {batch: 16, iterations: 20, threads: 1, optimizer: {adam: {lr: 0.01}}}
  - name: tm               # an MLP chain on generated XC data
    model: {input: {sparse: 500}, layers: [{dense: 16, activation: relu},
                                           {dense: 50, activation: softmax}]}
    data: {generate: {train_points: 256, test_points: 32, features: 500, labels: 50, nnz: 10}}
    train: {batch: 16, iterations: 20, threads: 1, optimizer: {adam: {lr: 0.001}}}
YAML
  "$py" - tenants.yaml "$work" <<'PY' || fail "could not place the tenants' data"
import sys
p, w = sys.argv[1:3]
t = open(p).read().replace("train: train, test: test", f"train: {w}/train, test: {w}/test")
open(p, "w").write(t)
PY
  for f in d1 dnobn; do
    np=2
    [ $f = dnobn ] && np=3
    mpi $np run $f.yaml --quiet --set output.dir=a_$f > out_a.txt 2>&1 || fail "$f: -np $np alone"
    # The workers pause after their last iteration (ACCELRT_DIST_LINGER):
    # worker 0 still reads its block then (its running statistics to rank
    # 0), which the lanes must not free, or hand back to the kernel, before
    # the worker closed its model (the checkpoint's statistics were zeros).
    ACCELRT_DIST_LINGER=0.5 \
      mpi $np run $f.yaml --quiet --set output.dir=b_$f --set distributed.share=tenants.yaml \
      > out_b.txt 2>&1 || fail "$f: -np $np shared"
    "$py" - a_$f/metrics.jsonl b_$f/metrics.jsonl <<'PY' || fail "$f: the shared run's losses differ"
import json, sys
a, b = ([json.loads(l)["train_loss"] for l in open(p) if '"kind": "iteration"' in l]
        for p in sys.argv[1:3])
assert len(a) == 12 and a == b, (a, b)
PY
    same a_$f/checkpoint.bin b_$f/checkpoint.bin || fail "$f: the shared run's checkpoint differs"
    # Listing the workers tells check how the batch divides (mpiexec's -n
    # does not reach it; alone it plans a worker taking the whole batch).
    ws="[{}]"
    [ $np = 3 ] && ws="[{}, {}]"
    "$bin" check $f.yaml --set distributed.share=tenants.yaml --set "distributed.workers=$ws" \
      > check_$f.txt 2>&1 ||
      fail "$f: check with distributed.share: $(tail -3 check_$f.txt)"
    "$py" - b_$f $((np - 1)) check_$f.txt <<'PY' || fail "$f: the tenants' records"
import json, re, sys
d, workers = sys.argv[1], int(sys.argv[2])
# accelrt check's row for the worker: the sizes its tenant was admitted on.
row = re.search(r"^  \(the worker\)\s+(\d\S* \S+)\s+(\d\S* \S+)\s", open(sys.argv[3]).read(), re.M)
assert row, "no worker row in accelrt check's admission table"


def human(n):  # ar_lanes_fmt_bytes
    units, v, u = ["B", "KiB", "MiB", "GiB"], float(n), 0
    while v >= 1024.0 and u < 3:
        v, u = v / 1024.0, u + 1
    return "%d B" % n if u == 0 else ("%.1f %s" if v < 10.0 else "%.0f %s") % (v, units[u])


for w in range(workers):
    t = json.load(open(f"{d}/share/worker{w}/summary.json"))
    jobs = {j["name"]: j for j in t["jobs"]}
    me = jobs.pop(f"gcnn.worker{w}")
    assert set(jobs) == {"tg", "tm"}, jobs
    assert me["status"] == "done" and me["iterations"] == 12, me
    assert all(j["status"] == "done" and j["iterations"] == 20 for j in jobs.values()), jobs
    # fair: the graph tenant takes turns in the worker's lane, not after it
    assert jobs["tg"]["lane"] == me["lane"] and jobs["tg"]["queue_s"] < me["jct_s"], (me, jobs)
    # Admitted on its plan with the training set it holds (256 8x8 float
    # images: 64 KiB); a worker opens no test split.
    ev = [json.loads(l) for l in open(f"{d}/share/worker{w}/metrics.jsonl")]
    ev = {l["name"]: l for l in ev if l.get("event") == "job"}[f"gcnn.worker{w}"]
    assert ev["persistent_bytes"] > 256 * 64 * 4 and ev["ephemeral_bytes"] > 0, ev
    assert row.groups() == (human(ev["persistent_bytes"]), human(ev["ephemeral_bytes"])), (
        row.groups(), ev)
PY
    echo "$f: -np $np shared equals alone"
  done
  ;;
*)
  fail "unknown case $case"
  ;;
esac
echo ok
