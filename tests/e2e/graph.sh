#!/usr/bin/env bash
# Graph models end to end (label e2e): a token dataset from gen-data, a
# graph job that trains on it, resumes from its checkpoint, and refuses bad
# graphs and bad data with located errors; Fashion-MNIST's CNN on a slice
# when Debian's dataset-fashion-mnist is installed (else that part skips).
#   graph.sh ACCELRT SRC CASE
set -uo pipefail
bin=$1 src=$2 case=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
json() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }

tokens_job() {
  cat > "$work/tok.yaml" <<YAML
name: tok
device: host
seed: 3
model:
  input: {tokens: 12, vocab: 16}
  layers:
    - {name: emb, op: embedding, width: 16}
    - {name: pos, op: posembed}
    - {name: att, op: attention, heads: 2, inputs: [pos]}
    - {name: res, op: add, inputs: [pos, att]}
    - {name: pool, op: mean, axis: 1}
    - {name: hid, dense: 32, activation: relu}
    - {name: out, dense: 2, activation: softmax}
data: {format: npy, train: tok/train, test: tok/test}
train: {batch: 32, iterations: 60, optimizer: {adam: {lr: 0.003}}, log_every: 10,
        checkpoint_every: 30, threads: 2}
output: {dir: out}
YAML
}

# A jobs: file on device $1 mixing two graph models and a chain model,
# run and checked: each is admitted on its plan and runs to the end.
jobs_run() {
  cat > jobs.yaml <<YAML
name: jt
device: $1
seed: 7
runtime: {policy: fair, memory: 1GiB}
output: {dir: out}
jobs:
  - name: a
    model:
      input: {tokens: 12, vocab: 16}
      layers:
        - {name: emb, op: embedding, width: 16}
        - {name: bag, op: mean, axis: 1}
        - {name: out, dense: 2, activation: softmax}
    data: {format: npy, generate: {train_points: 512, test_points: 128, features: 12, labels: 2}}
    train: {batch: 32, iterations: 30}
  - name: b
    model:
      input: {tokens: 12, vocab: 16}
      layers:
        - {name: emb, op: embedding, width: 16}
        - {name: att, op: attention, heads: 2}
        - {name: pool, op: mean, axis: 1}
        - {name: out, dense: 2, activation: softmax}
    data: {format: npy, generate: {train_points: 512, test_points: 128, features: 12, labels: 2}}
    train: {batch: 32, iterations: 30}
  - name: c
    model:
      input: {sparse: 100}
      layers:
        - {name: out, dense: 10, activation: softmax}
    data: {generate: {train_points: 512, test_points: 64, features: 100, labels: 10}}
    train: {batch: 32, iterations: 30}
YAML
  "$bin" run jobs.yaml --quiet || fail "a jobs: file with graph models"
  python3 - <<'PY' || fail "jobs summary"
import json
d = json.load(open("out/summary.json"))
assert d["failed"] == 0, d
assert [j["status"] for j in d["jobs"]] == ["done"] * 3, d["jobs"]
assert all(j["iterations"] == 30 for j in d["jobs"]), d["jobs"]
for name in ("a", "b"):
    s = json.load(open("out/%s/summary.json" % name))
    assert "top1" in s and s["iterations"] == 30, s
assert "p_at_3" in json.load(open("out/c/summary.json"))
PY
}

case $case in
tokens)
  "$bin" gen-data --out "$work/tok" --shape tokens --seq 12 --vocab 16 --train-points 1024 \
    --test-points 256 --seed 5 >/dev/null || fail "gen-data --shape tokens"
  tokens_job
  cd "$work" || exit 1
  "$bin" check tok.yaml > check.txt || fail "check of a graph job"
  grep -q "attention" check.txt || fail "the model summary lists no attention node"
  grep -q "memory plan: persistent" check.txt || fail "check prints no plan"
  "$bin" run tok.yaml --quiet || fail "training a graph model"
  [ "$(json out/summary.json iterations)" = 60 ] || fail "60 iterations expected"
  top1=$(json out/summary.json top1)
  python3 -c "import sys; t=float(sys.argv[1]); sys.exit(0 if 0 <= t <= 100 else 1)" "$top1" \
    || fail "top1 $top1 is not a percentage"
  n=$(grep -c '"kind": "train"' out/metrics.jsonl)
  [ "$n" = 6 ] || fail "log_every 10 over 60 iterations: 6 train lines, got $n"
  # accelrt eval on the checkpoint scores the test split as the run's last
  # evaluation did.
  "$bin" eval tok.yaml > eval.txt || fail "accelrt eval of a graph model"
  [ "$(json out/eval.json top1)" = "$top1" ] || fail "eval top1 $(json out/eval.json top1) != run's $top1"
  grep -q "top-1" eval.txt || fail "eval prints no top-1"
  # Resume: 30 more iterations continue from the checkpoint's position.
  "$bin" run tok.yaml --quiet --resume --set train.iterations=90 || fail "resume"
  [ "$(json out/summary.json iterations)" = 90 ] || fail "resumed run did not reach 90"
  # Exact resume on one thread: 40 iterations straight and 20 + 20 resumed
  # end with the same tensors, bit for bit (the checkpoint after its 64-byte
  # header, which holds the training seconds, and before its checksum).
  "$bin" run tok.yaml --quiet --set train.iterations=40 --set train.threads=1 \
    --set output.dir=straight || fail "straight run"
  "$bin" run tok.yaml --quiet --set train.iterations=20 --set train.threads=1 \
    --set output.dir=halves || fail "first half"
  "$bin" run tok.yaml --quiet --resume --set train.iterations=40 --set train.threads=1 \
    --set output.dir=halves || fail "second half"
  python3 - <<'PY' || fail "resumed tensors differ from the straight run's"
a = open("straight/checkpoint.bin", "rb").read()
b = open("halves/checkpoint.bin", "rb").read()
assert len(a) == len(b), (len(a), len(b))
assert a[:16] == b[:16] and a[16:56] == b[16:56], "positions differ"
assert a[64:-4] == b[64:-4], "tensors differ"
PY
  ;;
recsys)
  # configs/recsys-slide.yaml (fields -> embedding, the fields side by side
  # and their bag -> relu MLP -> layer norm -> LSH-sampled softmax) on a 500-item slice of
  # its generated set, 2 epochs: it learns far above chance (0.2%; measured
  # 98% top-1) with the output layer sampled, not scored whole.  One thread:
  # on two the sampled layer's updates interleave differently each run, and
  # the bound would hold on a figure that moves.
  cd "$work" || exit 1
  "$bin" run "$src/configs/recsys-slide.yaml" --quiet --set model.layers.out.dense=500 \
    --set data.generate.labels=500 --set data.generate.train_points=9600 \
    --set data.generate.test_points=500 --set train.batch=64 --set train.epochs=2 \
    --set train.threads=1 --set train.eval_points=500 --set train.optimizer.adam.lr=0.003 \
    --set output.dir=rec || fail "training configs/recsys-slide.yaml on a slice"
  python3 - <<'PY' || fail "the recommendation model did not learn"
import json
s = json.load(open("rec/summary.json"))
print(f"# top-1 {s['top1']} ({s['out.lsh_active_mean']:.0f} of 500 items active)")
assert s["top1"] > 50, s["top1"]
assert s["out.lsh_active_mean"] < 250, s["out.lsh_active_mean"]
PY
  ;;
sampled_small)
  # A sampled head at a small active fraction (issue 17): 1,000 classes
  # written as two digits, active 0.05 (50 neurons retrieved per input).
  # The transformer's class-token vectors start nearly alike, so the tables
  # retrieve the same few classes for every input; the batch's uniformly
  # drawn negatives (sparse.negatives, default at least 256) with the log-Q
  # correction must bring top-1 within 4 points of the dense head's after
  # the same 200 iterations at the same seed (measured: dense 11.4, sampled
  # 21.5, the same in three runs; on two threads the sampled head's updates
  # interleave differently each run: 21.7-22.4 in three).  One thread, so
  # that both figures repeat.  (An earlier build measured dense 25.0,
  # sampled 25.5; retrieval alone, `negatives: 0, correction: none`, 7.0.)
  "$bin" gen-data --out "$work/tok" --shape tokens --seq 8 --vocab 36 --labels 1000 \
    --train-points 12800 --test-points 1000 --seed 5 >/dev/null || fail "gen-data --labels 1000"
  cat > "$work/s.yaml" <<YAML
name: small
device: host
seed: 3
model:
  input: {tokens: 8, vocab: 36}
  layers:
    - {name: m, op: mask, inputs: [input]}
    - {name: emb, op: embedding, width: 32, inputs: [input]}
    - {name: pos, op: posembed}
    - {name: att, op: attention, heads: 2, inputs: [pos, m]}
    - {name: r1, op: add, inputs: [pos, att]}
    - {name: n1, op: layernorm}
    - {name: cls, op: slice, axis: 1, begin: 0, end: 1}
    - {name: flat, op: flatten}
    - name: out
      dense: 1000
      activation: softmax
      sparse: {mode: lsh, active: 0.05}
data: {format: npy, train: tok/train, test: tok/test}
train: {batch: 64, iterations: 200, optimizer: {adam: {lr: 0.005}}, threads: 1}
output: {dir: out}
YAML
  cd "$work" || exit 1
  "$bin" run s.yaml --quiet --set output.dir=dense --set model.layers.out.sparse.mode=dense \
    || fail "training the dense head"
  "$bin" run s.yaml --quiet --set output.dir=lsh || fail "training the sampled head"
  python3 - <<'PY' || fail "the sampled head trails the dense one"
import json
d = json.load(open("dense/summary.json"))
s = json.load(open("lsh/summary.json"))
print(f"# top-1 dense {d['top1']}, sampled {s['top1']} ({s['out.lsh_active_mean']:.0f} active)")
assert d["top1"] > 10, d["top1"]  # the task is learnable in the budget (chance 0.1)
assert s["top1"] >= d["top1"] - 4, (s["top1"], d["top1"])
assert s["out.lsh_active_mean"] < 500, s  # a sample, not the whole layer
PY
  ;;
slide_2k)
  # configs/tokens-slide.yaml as shipped (a transformer body, the head
  # LSH-sampled at active 0.005 with min_active 500) against its dense twin
  # at 2,000 classes, 300 iterations, the same seed: top-1 within 2 points
  # (issue 17's floor).  Measured (seeds 1-3): dense 9.8, 8.0, 10.9;
  # sampled 10.6, 8.7, 9.6; without min_active (10 classes retrieved per
  # example) 2.9 at seed 1.  With L: 32 (2026-12-02; L: 16 before):
  # dense 6.6, sampled 6.7 at seed 1 (6.8 with L: 16); with L: 50,
  # rescore: 4 (the same day) sampled 6.4.
  cd "$work" || exit 1
  for side in dense lsh; do
    cfg=tokens-slide.yaml
    [ "$side" = dense ] && cfg=tokens-slide-dense.yaml
    "$bin" run "$src/configs/$cfg" --quiet --set model.layers.out.dense=2000 \
      --set data.generate.labels=2000 --set data.generate.train_points=19200 \
      --set data.generate.test_points=1000 --set train.iterations=300 --set train.threads=1 \
      --set train.eval_points=1000 --set train.checkpoint_every=0 --set output.dir=$side \
      || fail "training $cfg at 2,000 classes"
  done
  python3 - <<'PY' || fail "the sampled head trails the dense one by more than 2 points"
import json
d = json.load(open("dense/summary.json"))
s = json.load(open("lsh/summary.json"))
print(f"# top-1 dense {d['top1']}, sampled {s['top1']} ({s['out.lsh_active_mean']:.0f} of 2000 active)")
assert d["top1"] > 3, d["top1"]  # learnable in the budget (chance 0.05)
assert s["top1"] >= d["top1"] - 2, (s["top1"], d["top1"])
assert s["out.lsh_active_mean"] < 1000, s  # a sample, not the whole layer
PY
  ;;
slide_bench)
  # bench/lsh/graph's accuracy run (--eval-every): each side's top-1 curve
  # from its metrics.jsonl, the samples and the training seconds of a run.
  # --iters past one pass over the data runs them all (the job files say
  # epochs: 1, which stopped the run after one pass: 8 iterations of 512
  # points here); a count that is not a whole number above 0 is a usage
  # error (2).
  b=$src/bench/lsh/graph
  ACCELRT_BIN=$bin "$b" --reps 1 --iters 12 --labels 2000 --threads 1 --eval-points 64 \
    --eval-every 6 --set data.generate.train_points=512 --set data.generate.test_points=64 \
    --set seed=3 --out "$work/b" > "$work/b.txt" 2>&1 || { cat "$work/b.txt" >&2; fail "bench/lsh/graph --eval-every 6"; }
  cat "$work/b.txt"
  for side in dense lsh; do
    grep -Eq "^    $side +6:[0-9.]+ 12:[0-9.]+\$" "$work/b.txt" || fail "no $side top-1 curve at iterations 6 and 12"
    [ "$(json "$work/b/$side/summary.json" iterations)" = 12 ] || fail "the $side run stopped before --iters 12"
  done
  grep -q "12 iterations (768 samples) a run" "$work/b.txt" || fail "no samples in the table's title"
  grep -q "train wall s  train cpu s" "$work/b.txt" || fail "no training seconds in the table"
  # --from-dense/--from-lsh: each side resumed from the runs above for 4
  # more iterations (their checkpoints copied; the sources left as they were;
  # their jobs, seed 3 included, run again).
  ACCELRT_BIN=$bin "$b" --reps 1 --iters 4 --labels 2000 --threads 1 --eval-points 64 \
    --set data.generate.train_points=512 --set data.generate.test_points=64 \
    --from-dense "$work/b/dense" --from-lsh "$work/b/lsh" --out "$work/c" > "$work/c.txt" 2>&1 \
    || { cat "$work/c.txt" >&2; fail "bench/lsh/graph --from-dense --from-lsh"; }
  cat "$work/c.txt"
  grep -q "each run resumed from a trained head: dense $work/b/dense" "$work/c.txt" || fail "no resumed line"
  grep -q "4 iterations (256 samples) a run" "$work/c.txt" || fail "a resumed run's iterations or samples miscounted"
  for side in dense lsh; do
    [ "$(json "$work/c/$side/summary.json" iterations)" = 16 ] || fail "the resumed $side run did not go on from 12 to 16"
    [ "$(json "$work/b/$side/summary.json" iterations)" = 12 ] || fail "the source $side run was changed"
    # The resumed side runs its source's job (seed 3, its data), not the
    # shipped file's seed 1.
    grep -q '^seed: 3$' "$work/c/$side/job.resolved.yaml" || fail "the resumed $side run did not take its source's seed"
  done
  ACCELRT_BIN=$bin "$b" --from-dense "$work/b/dense" --out "$work/c" > "$work/u.txt" 2>&1
  [ $? -eq 2 ] || fail "--from-dense alone did not exit 2"
  grep -q "give both --from-dense and --from-lsh" "$work/u.txt" || fail "--from-dense alone: $(cat "$work/u.txt")"
  ACCELRT_BIN=$bin "$b" --from-dense "$work" --from-lsh "$work/b/lsh" --out "$work/c" > "$work/u.txt" 2>&1
  [ $? -eq 2 ] || fail "--from-dense of a folder without a run did not exit 2"
  grep -q "holds no finished run" "$work/u.txt" || fail "--from-dense without a run: $(cat "$work/u.txt")"
  ACCELRT_BIN=$bin "$b" --eval-every 0 --out "$work/b" > "$work/u.txt" 2>&1
  [ $? -eq 2 ] || fail "--eval-every 0 did not exit 2"
  grep -q "'0' is not a whole number above 0" "$work/u.txt" || fail "--eval-every 0: $(cat "$work/u.txt")"
  # --model recsys: the recommendation job file against itself with its head
  # dense; only the lsh side's summary has the sampled layer's counters.
  ACCELRT_BIN=$bin "$b" --model recsys --reps 1 --iters 4 --labels 500 --threads 1 --eval-points 64 \
    --set data.generate.train_points=512 --set data.generate.test_points=64 \
    --out "$work/r" > "$work/r.txt" 2>&1 || { cat "$work/r.txt" >&2; fail "bench/lsh/graph --model recsys"; }
  cat "$work/r.txt"
  grep -q "issue 17: recsys-slide (500-class head) vs its dense twin, 4 iterations (512 samples)" "$work/r.txt" \
    || fail "no recsys-slide table"
  grep -q "out.lsh_active_mean" "$work/r/lsh/summary.json" || fail "the recsys lsh side did not sample its head"
  ! grep -q "out.lsh_" "$work/r/dense/summary.json" || fail "the recsys dense side sampled its head"
  ACCELRT_BIN=$bin "$b" --model mlp --out "$work/r" > "$work/u.txt" 2>&1
  [ $? -eq 2 ] || fail "--model mlp did not exit 2"
  grep -q "takes tokens or recsys, got 'mlp'" "$work/u.txt" || fail "--model mlp: $(cat "$work/u.txt")"
  ;;
sampled)
  # An LSH-sampled head (the last dense item's sparse section) on a 50-class
  # token set whose class is written as two digits at positions 1-2: the
  # plan lists its tables, training lowers the loss and reaches well above
  # chance (2%), evaluation scores every class, and a resume rebuilds the
  # tables from the checkpoint's rows (they are not stored).  One thread:
  # the bounds then hold on figures that repeat run to run.
  "$bin" gen-data --out "$work/tok" --shape tokens --seq 8 --vocab 12 --labels 50 \
    --train-points 4096 --test-points 512 --seed 5 >/dev/null || fail "gen-data --labels 50"
  python3 - "$work/tok/train/y.npy" <<'PY' || fail "gen-data --labels 50 wrote other classes"
import sys
b = open(sys.argv[1], "rb").read()
n = int.from_bytes(b[8:10], "little")
ys = [int.from_bytes(b[10 + n + 8 * i:18 + n + 8 * i], "little", signed=True)
      for i in range((len(b) - 10 - n) // 8)]
assert min(ys) >= 0 and max(ys) < 50 and len(set(ys)) == 50, (min(ys), max(ys), len(set(ys)))
PY
  cat > "$work/s.yaml" <<YAML
name: s
device: host
seed: 3
model:
  input: {tokens: 8, vocab: 12}
  layers:
    - {name: emb, op: embedding, width: 16}
    - {name: pos, op: posembed}
    - {name: att, op: attention, heads: 2, inputs: [pos]}
    - {name: res, op: add, inputs: [pos, att]}
    - {name: flat, op: flatten}
    - {name: hid, dense: 64, activation: relu}
    - name: out
      dense: 50
      activation: softmax
      sparse: {mode: lsh, hash: srp, K: 3, L: 8, active: 0.2, rehash: {every: 20, growth: 1.2}}
data: {format: npy, train: tok/train, test: tok/test}
train: {batch: 32, iterations: 200, optimizer: {adam: {lr: 0.005}}, log_every: 25,
        checkpoint_every: 100, threads: 1}
output: {dir: out}
YAML
  cd "$work" || exit 1
  "$bin" check s.yaml > check.txt || fail "check of a sampled graph job"
  grep -q "out.lsh.tables" check.txt || { cat check.txt; fail "the plan lists no hash tables"; }
  "$bin" run s.yaml --quiet || fail "training a sampled head"
  python3 - <<'PY' || fail "the sampled head did not learn"
import json
lines = [json.loads(l) for l in open("out/metrics.jsonl")]
train = [l["train_loss"] for l in lines if l.get("kind") == "train"]
s = json.load(open("out/summary.json"))
print(f"# train loss {train[0]:.6f} -> {train[-1]:.6f}, top-1 {s['top1']}")
assert len(train) >= 4 and train[-1] < 0.5 * train[0], train
assert s["top1"] > 20, s["top1"]  # chance is 2
# a budget of 10 of 50 classes (active 0.2) plus the label: far from all 50
assert 5 <= s["out.lsh_active_mean"] <= 25, s["out.lsh_active_mean"]
assert s["out.lsh_rehashes"] >= 1 and s["out.lsh_tables_bytes"] > 0, s
PY
  "$bin" eval s.yaml > eval.txt || fail "accelrt eval of a sampled head"
  [ "$(json out/eval.json top1)" = "$(json out/summary.json top1)" ] || fail "eval top1 differs"
  cp out/summary.json first.json
  "$bin" run s.yaml --quiet --resume --set train.iterations=240 || fail "resume of a sampled head"
  [ "$(json out/summary.json iterations)" = 240 ] || fail "resumed run did not reach 240"
  python3 -c "import json,sys; t=json.load(open('out/summary.json'))['top1']; sys.exit(0 if t > 20 else 1)" \
    || fail "the resumed run lost what it learned"
  # The sampled statistics cover the resumed part only: rows updated per
  # step about as before, not that part's sum over every step of the run
  # (which read a third of it here).
  python3 - <<'PY' || fail "the resumed run's lsh_touched_mean is not per step of its own"
import json
a = json.load(open("first.json"))
b = json.load(open("out/summary.json"))
k = [k for k in a if k.endswith(".lsh_touched_mean")][0]
print(f"# rows updated per step: {a[k]:.1f} before the resume, {b[k]:.1f} after")
assert 0 < a[k] <= 50 and 0.6 * a[k] <= b[k] <= 50, (a[k], b[k])
PY
  # A sparse section on any other item, and a bad value in one, are refused
  # where they are written (exit 2, FILE:LINE:COL and the key).
  refused() { # refused NAME SED-EXPRESSION PATTERN
    sed "$2" s.yaml > "$1.yaml"
    "$bin" check "$1.yaml" > "$1.txt" 2>&1
    [ $? = 2 ] || { cat "$1.txt"; fail "$1: not a job-file error"; }
    grep -q "$3" "$1.txt" || { cat "$1.txt"; fail "$1: the error is not located"; }
  }
  refused hidden 's/- {name: hid, dense: 64, activation: relu}/- {name: hid, dense: 64, activation: relu, sparse: {mode: lsh}}/' \
    "hidden.yaml:[0-9]*:7: error: model.layers\[6\]: sparse: an LSH-sampled head reading an LSH-sampled item"
  refused add 's/- {name: res, op: add, inputs: \[pos, att\]}/- {name: res, op: add, inputs: [pos, att], sparse: {mode: lsh}}/' \
    "add.yaml:10:.*model.layers\[3\].sparse: only a dense item"
  refused badk 's/hash: srp, K: 3/hash: srp, K: 99/' "badk.yaml:16:.*model.layers\[6\].sparse.K"
  refused sgd 's/optimizer: {adam: {lr: 0.005}}/optimizer: {sgd: {lr: 0.1}}/' \
    "sgd.yaml:13:7: error: model.layers\[6\]: sparse: an LSH-sampled head trains with Adam"
  # Betas under which dense Adam's moves on skipped steps grow: catching
  # them up (sparse.catch_up) is refused there, the lazy step (the
  # default) allowed.
  refused betas 's/optimizer: {adam: {lr: 0.005}}/optimizer: {adam: {lr: 0.005, beta1: 0.99, beta2: 0.9}}/; s/hash: srp, K: 3/catch_up: 100, hash: srp, K: 3/' \
    "betas.yaml:13:7: error: model.layers\[6\]: sparse: catch_up needs .*beta1 < sqrt(beta2)"
  sed 's/optimizer: {adam: {lr: 0.005}}/optimizer: {adam: {lr: 0.005, beta1: 0.99, beta2: 0.9}}/' \
    s.yaml > lazy.yaml
  "$bin" check lazy.yaml > lazy.txt 2>&1 || { cat lazy.txt; fail "lazy Adam with beta1 > sqrt(beta2) refused"; }
  ;;
serve)
  # A graph job through accelrt serve (a user server on its own socket and
  # state): admitted on its plan into a lane, trained, its outputs where the
  # submitter asked.
  "$bin" gen-data --out "$work/tok" --shape tokens --seq 12 --vocab 16 --train-points 512 \
    --test-points 128 --seed 5 >/dev/null || fail "gen-data"
  tokens_job
  cd "$work" || exit 1
  mkdir -m 700 rt
  sock=$work/rt/s.sock
  "$bin" serve --socket "$sock" --state "$work/state" --device host --memory 1GiB \
    > serve.log 2>&1 &
  spid=$!
  trap 'kill $spid 2>/dev/null; wait $spid 2>/dev/null; rm -rf "$work"' EXIT
  for _ in $(seq 300); do [ -S "$sock" ] && break; sleep 0.1; done
  [ -S "$sock" ] || { cat serve.log; fail "the server did not start"; }
  id=$("$bin" submit --socket "$sock" tok.yaml --set train.iterations=20 \
    --set output.dir=sout) || fail "submit of a graph job"
  timeout 120 "$bin" logs --socket "$sock" -f "$id" > log.txt || { cat log.txt serve.log; fail "logs -f"; }
  grep -q "admitted to lane" log.txt || { cat log.txt; fail "the graph job was not admitted"; }
  grep -q "done: 20 iterations" log.txt || { cat log.txt; fail "the graph job did not finish"; }
  [ "$(json sout/summary.json iterations)" = 20 ] || fail "summary of the served graph job"
  [ -f sout/checkpoint.bin ] || fail "no checkpoint from the served graph job"
  ;;
study)
  # accelrt study over a graph job: each cell is a child run of the graph
  # engine and its response comes from that run's summary.
  "$bin" gen-data --out "$work/tok" --shape tokens --seq 12 --vocab 16 --train-points 512 \
    --test-points 128 --seed 5 >/dev/null || fail "gen-data"
  tokens_job
  cd "$work" || exit 1
  cat > st.yaml <<'YAML'
name: st
base: tok.yaml
set: {train.iterations: 12, train.threads: 1, train.checkpoint_every: 0}
factors:
  model.layers.hid.dense: [16, 48]
response: p_at_1
replicates: 1
seed: 3
timeout_s: 120
YAML
  "$bin" study st.yaml --out st > st.txt 2>&1 || { cat st.txt; fail "study over a graph job"; }
  python3 - <<'PY' || fail "study runs.csv"
import csv
rows = list(csv.DictReader(open("st/runs.csv")))
assert len(rows) == 2, rows
assert sorted(r["model.layers.hid.dense"] for r in rows) == ["16", "48"], rows
for r in rows:
    assert r["status"] == "ok", r
    assert 0 <= float(r["p_at_1"]) <= 100, r
PY
  ;;
ready)
  # Every ready graph job of configs/ trains a few iterations as written
  # (only the length and the output folder changed); the Fashion ones skip
  # without Debian's dataset-fashion-mnist.
  cd "$work" || exit 1
  for cfg in tokens-transformer tokens-bow fashion-cnn fashion-resnet; do
    case $cfg in
      fashion-*) [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || continue ;;
    esac
    "$bin" run "$src/configs/$cfg.yaml" --quiet --set train.iterations=4 --set train.batch=16 \
      --set train.eval_points=256 --set output.dir="$cfg" \
      --set data.generate.train_points=2000 2> "$cfg.err" ||
    "$bin" run "$src/configs/$cfg.yaml" --quiet --set train.iterations=4 --set train.batch=16 \
      --set train.eval_points=256 --set output.dir="$cfg" 2> "$cfg.err" ||
      { cat "$cfg.err"; fail "$cfg did not run"; }
    python3 -c "import json,math,sys; s=json.load(open(sys.argv[1])); \
assert s['iterations'] == 4 and math.isfinite(s['train_loss']) and 'top1' in s, s" \
      "$cfg/summary.json" || fail "$cfg: summary"
  done
  ;;
cuda)
  # The ready graph jobs on cuda:0 for a few iterations (issue 15): each
  # step's training loss must follow the host's run of the same job (same
  # seed, same batches).  Skipped without a CUDA device; the Fashion jobs
  # without Debian's dataset-fashion-mnist.
  grep -q '^cuda:0:' <<<"$("$bin" info 2>/dev/null)" || { echo "no CUDA device: skipped"; exit 77; }
  cd "$work" || exit 1
  ran=0
  # tokens-sparse: the transformer with sparse embedding gradients.
  for cfg in fashion-cnn fashion-resnet tokens-transformer tokens-sparse; do
    extra=()
    job=$cfg
    case $cfg in
      fashion-*) [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || continue ;;
      tokens-sparse) job=tokens-transformer
        extra=(--set data.generate.train_points=2000 --set 'model.layers[1].sparse_grad=true') ;;
      tokens-*) extra=(--set data.generate.train_points=2000) ;;
    esac
    for dev in host cuda:0; do
      "$bin" run "$src/configs/$job.yaml" --quiet --set device="$dev" --set train.iterations=5 \
        --set train.log_every=1 --set train.eval_points=256 --set output.dir="$cfg-${dev%%:*}" \
        "${extra[@]}" 2> "$cfg.err" || { cat "$cfg.err"; fail "$cfg on $dev did not run"; }
    done
    python3 - "$cfg-host/metrics.jsonl" "$cfg-cuda/metrics.jsonl" <<'PY' || fail "$cfg: the losses on cuda:0 are not the host's"
import json, math, sys
def losses(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return {r["iteration"]: r["train_loss"] for r in rows if r.get("kind") == "train"}
h, c = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(h) == sorted(c) == [1, 2, 3, 4, 5], (sorted(h), sorted(c))
for it in sorted(h):
    # Step 1 differs by rounding only; later steps by what Adam makes of it.
    tol = 1e-3 if it == 1 else 2e-2
    assert math.isfinite(c[it]) and abs(c[it] - h[it]) <= tol * abs(h[it]), (it, h[it], c[it])
    print(f"{sys.argv[1].split('-host')[0]} step {it}: host {h[it]:.6f} cuda {c[it]:.6f}")
PY
    # The evaluation after the last step: the CNNs' convs run folded with
    # their batch norms (net_fuse.c; ar_device_bn_fold on the GPU).
    python3 - "$cfg-host/summary.json" "$cfg-cuda/summary.json" <<'PY' || fail "$cfg: the evaluation on cuda:0 is not the host's"
import json, math, sys
h, c = (json.load(open(p)) for p in sys.argv[1:3])
assert math.isfinite(c["loss"]) and abs(c["loss"] - h["loss"]) <= 2e-2 * abs(h["loss"]), (h["loss"], c["loss"])
print(f"{sys.argv[1].split('-host')[0]} evaluation loss: host {h['loss']:.6f} cuda {c['loss']:.6f}")
PY
    ran=$((ran + 1))
  done
  [ "$ran" -gt 0 ] || { echo "no ready graph job could run here: skipped"; exit 77; }
  # A graph model over sparse input (sparse_dense, xent_multi): the chain's
  # kernels on both devices, so the same losses within rounding (spmm_t's
  # atomics on the GPU add a feature's rows in any order).
  "$bin" gen-data --out xc --shape delicious --train-points 1024 --test-points 256 --seed 1 \
    > /dev/null || fail "gen-data (sparse)"
  for dev in host cuda:0; do
    cat > "sparse-${dev%%:*}.yaml" <<YAML
name: sg
device: $dev
seed: 1
model:
  input: {sparse: 500}
  layers:
    - {name: hidden, dense: 64, activation: relu, inputs: [input]}
    - {name: out, dense: 983, activation: softmax}
data: {train: xc/train.txt, test: xc/test.txt, format: xc}
train: {batch: 128, iterations: 5, log_every: 1, optimizer: {adam: {lr: 0.001}},
        eval_every: 0, eval_points: 256}
output: {dir: sparse-${dev%%:*}}
YAML
    "$bin" run "sparse-${dev%%:*}.yaml" --quiet 2> sparse.err ||
      { cat sparse.err; fail "the sparse graph model on $dev did not run"; }
  done
  python3 - sparse-host sparse-cuda <<'PY' || fail "sparse graph model: cuda:0 is not the host"
import json, math, sys
def losses(d):
    return [json.loads(l)["train_loss"] for l in open(d + "/metrics.jsonl")
            if json.loads(l).get("kind", "train") == "train" and "train_loss" in json.loads(l)]
h, c = losses(sys.argv[1]), losses(sys.argv[2])
assert len(h) == len(c) > 0, (h, c)
for i, (a, b) in enumerate(zip(h, c)):
    # The first step differs by rounding only; later ones by what Adam makes of it.
    assert math.isfinite(b) and abs(a - b) <= (1e-3 if i == 0 else 2e-2) * abs(a), (h, c)
hs, cs = (json.load(open(d + "/summary.json")) for d in sys.argv[1:3])
assert abs(hs["loss"] - cs["loss"]) <= 2e-2 * abs(hs["loss"]), (hs["loss"], cs["loss"])
# P@1 over 256 points: a near tie may go the other way on one point.
assert abs(hs["p_at_1"] - cs["p_at_1"]) <= 100.0 / 256 + 1e-9, (hs["p_at_1"], cs["p_at_1"])
print(f"sparse graph model: train losses host {h} cuda {c}; P@1 {hs['p_at_1']} / {cs['p_at_1']}")
PY
  # Lanes on the GPU: the graph and chain models of a jobs: file share one
  # arena, each lane a stream with its cuBLAS and cuDNN handles.
  jobs_run cuda:0
  ;;
errors)
  "$bin" gen-data --out "$work/tok" --shape tokens --seq 12 --vocab 16 --train-points 256 \
    --test-points 64 --seed 5 >/dev/null || fail "gen-data"
  tokens_job
  cd "$work" || exit 1
  # An input name that does not exist: FILE:LINE:COL and the name.
  sed 's/inputs: \[pos, att\]/inputs: [pos, nope]/' tok.yaml > bad1.yaml
  "$bin" check bad1.yaml > /dev/null 2> err1.txt && fail "an unknown input name passed check"
  grep -q "bad1.yaml:10:7: error: model.layers\[3\]: inputs: no earlier item is named 'nope'" \
    err1.txt || { cat err1.txt; fail "unknown input: message"; }
  # Shapes that do not fit: attention over a width its heads do not divide.
  sed 's/heads: 2/heads: 5/' tok.yaml > bad2.yaml
  "$bin" check bad2.yaml > /dev/null 2> err2.txt && fail "heads 5 of width 16 passed check"
  grep -q "bad2.yaml:9:7: error: model.layers\[2\]: attention att" err2.txt \
    || { cat err2.txt; fail "shape error: message"; }
  grep -q "16" err2.txt || fail "shape error does not name the width"
  # A class id beyond the output: a clear error, no crash.
  sed 's/dense: 2, activation: softmax/dense: 1, activation: softmax/' tok.yaml > bad3.yaml
  "$bin" run bad3.yaml --quiet 2> err3.txt; rc=$?
  [ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "class id out of range: rc $rc"
  grep -q "class id 1, but the model's last layer has 1 outputs" err3.txt \
    || { cat err3.txt; fail "class id: message"; }
  # Token ids past the vocabulary: a clear error, no crash.
  sed 's/input: {tokens: 12, vocab: 16}/input: {tokens: 12, vocab: 8}/' tok.yaml > bad4.yaml
  "$bin" run bad4.yaml --quiet 2> err4.txt; rc=$?
  [ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "token id out of range: rc $rc"
  grep -q "outside model.input.vocab 8" err4.txt || { cat err4.txt; fail "token id: message"; }
  # A graph model under distributed: checks (the ranks train it, see
  # tests/dist/graph.sh); as a tenant of a shared device (distributed.share)
  # too (tests/dist/graph.sh share), whose file must list jobs.
  { cat tok.yaml; printf 'distributed: {servers: 1}\n'; } > dist5.yaml
  "$bin" check dist5.yaml > /dev/null 2> err5.txt || { cat err5.txt; fail "distributed graph model refused"; }
  # accelrt simulate times the net's nodes and simulates its DAG: a row per order.
  "$bin" simulate dist5.yaml --workers 2 --servers 1 --gbps 1 > out7.txt 2> err7.txt ||
    { cat err7.txt; fail "simulate of a graph model"; }
  for o in none random tic tac; do
    grep -q "^$o  *[0-9]" out7.txt || { cat out7.txt; fail "simulate of a graph model: no $o row"; }
  done
  printf 'jobs: []\n' > share.yaml
  { cat tok.yaml; printf 'distributed: {servers: 1, share: share.yaml}\n'; } > bad5.yaml
  "$bin" check bad5.yaml > /dev/null 2> err5.txt; rc=$?
  [ $rc -eq 2 ] || { cat err5.txt; fail "graph model with an empty distributed.share: check rc $rc"; }
  grep -q "share.yaml:1:7: error: jobs: needs at least 1 item" err5.txt ||
    { cat err5.txt; fail "graph model with an empty distributed.share: message"; }
  # A sampled head's rows would need the servers' sparse Adam: refused.
  sed 's/dense: 2, activation: softmax}/dense: 2, activation: softmax, sparse: {mode: lsh}}/' \
    dist5.yaml > bad8.yaml
  grep -q 'sparse: {mode: lsh}' bad8.yaml || fail "bad8.yaml: the sed did not apply"
  "$bin" check bad8.yaml > /dev/null 2> err8.txt; rc=$?
  [ $rc -eq 2 ] || { cat err8.txt; fail "distributed graph model with a sampled head: rc $rc"; }
  grep -q "bad8.yaml:[0-9]*:[0-9]*: error: distributed: a graph model with an LSH-sampled head" \
    err8.txt || { cat err8.txt; fail "distributed sampled head: message"; }
  ;;
jobs)
  # Two graph models and a chain model share the host through lanes.
  cd "$work" || exit 1
  jobs_run host
  ;;
fashion)
  d=/usr/share/datasets/fashion-mnist
  [ -f "$d/train-images-idx3-ubyte.gz" ] || { echo "skipped: $d is not installed"; exit 77; }
  cd "$work" || exit 1
  "$bin" run "$src/configs/fashion-cnn.yaml" --quiet --set train.iterations=30 \
    --set train.eval_points=1000 --set output.dir=fc || fail "fashion-cnn on a slice"
  top1=$(json fc/summary.json top1)
  # 30 Adam steps of the CNN reach about 79% (60 reach about 80%: the test
  # ran those, at twice the time); a broken gradient stays near 10%.
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 60 else 1)" "$top1" \
    || fail "fashion-cnn top-1 after 30 iterations is $top1, expected > 60"
  ;;
*) fail "unknown case $case" ;;
esac
echo "ok: $case"
