#!/usr/bin/env bash
# End-to-end tests of the accelrt command line.
#   cli.sh ACCELRT_BINARY SOURCE_DIR CASE
# Exit 0 pass, 1 fail, 77 skipped.
set -uo pipefail
bin=$1 src=$2 case=$3
work=$(mktemp -d /tmp/accelrt-e2e-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
json_num() { # json_num FILE KEY -> the number
  sed -n "s/.*\"$2\": \([-0-9.eE+]*\).*/\1/p" "$1" | head -1
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }

small_job() { # a quick generated job in $work/job.yaml
  cat > "$work/job.yaml" <<YAML
name: small
device: host
seed: 5
model:
  input: {sparse: 2000}
  layers:
    - {name: hidden, dense: 64, activation: relu}
    - {name: out, dense: 200, activation: softmax}
data:
  generate: {train_points: 4000, test_points: 500, features: 2000, labels: 200, nnz: 20,
             labels_per_point: 2, noise: 0.1}
train: {batch: 64, epochs: 3, threads: 2, eval_every: 50, checkpoint_every: 40,
        optimizer: {adam: {lr: 0.003}}}
output: {dir: $work/out}
YAML
}

# Every entry under a folder: path, type, size, mode, mtime, and the
# content of every file (md5), sorted; two equal snapshots mean nothing was
# created, removed or modified there.
snapshot() {
  (cd "$1" && find . -printf '%p %y %s %m %T@\n' | LC_ALL=C sort \
    && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r md5sum)
}

plan_num() { # plan_num FILE LABEL -> the bytes of a "LABEL: N (...)" line of check's output
  sed -n "s/^$2: \([0-9]*\).*/\1/p" "$1" | head -1
}

case $case in
golden)
  # The golden run: trains, writes every output, and learns the planted
  # structure (P@1 far above the 0.5% of chance).
  small_job
  "$bin" run "$work/job.yaml" > "$work/stdout" 2> "$work/stderr" || fail "run exited $?: $(cat "$work/stderr")"
  grep -q "P@1 P@3 P@5" "$work/stdout" || fail "no final metrics printed"
  s=$work/out/summary.json
  for k in samples_per_s loss p_at_1 p_at_3 p_at_5 iterations epochs wall_s peak_rss_bytes threads; do
    [ -n "$(json_num "$s" $k)" ] || fail "summary.json lacks $k"
  done
  grep -q '"device": "host"' "$s" || fail "summary.json lacks device"
  p1=$(json_num "$s" p_at_1)
  ge "$p1" 40 || fail "P@1 $p1 below 40"
  [ "$(json_num "$s" iterations)" = 189 ] || fail "3 epochs of 63 batches should be 189 iterations"
  [ "$(wc -l < "$work/out/metrics.jsonl")" -ge 4 ] || fail "metrics.jsonl too short"
  [ -s "$work/out/checkpoint.bin" ] || fail "no checkpoint"
  # Off a terminal, progress is plain lines, never carriage returns.
  ! grep -q $'\r' "$work/stderr" || fail "carriage return in non-terminal progress"
  ;;
tty)
  # On a terminal the bar is redrawn in place (carriage returns, a bar).
  command -v script > /dev/null || { echo "skipped: no script(1)"; exit 77; }
  small_job
  TERM=xterm script -qec "'$bin' run '$work/job.yaml' --set train.epochs=1" "$work/typescript" > /dev/null 2>&1 \
    || fail "run under a terminal failed"
  grep -q $'\r' "$work/typescript" || fail "no in-place redraw on a terminal"
  grep -Eq '\[[#>.]{30}\]' "$work/typescript" || fail "no progress bar on a terminal"
  grep -q "ETA" "$work/typescript" || fail "no ETA on the bar"
  ;;
stream)
  # A data file is streamed, never loaded: training on a file several times
  # larger than the process's peak memory.
  cat > "$work/job.yaml" <<YAML
model:
  input: {sparse: 1000}
  layers: [{name: out, dense: 50}]
data: {train: $work/big/train.txt, shuffle_window: 256}
train: {batch: 32, iterations: 50, threads: 1}
output: {dir: $work/out}
YAML
  "$bin" gen-data --out "$work/big" --train-points 200000 --test-points 0 --features 1000 \
    --labels 50 --nnz 150 > /dev/null || fail "gen-data failed"
  size=$(stat -c %s "$work/big/train.txt")
  [ "$size" -gt 100000000 ] || fail "test file only $size bytes"
  "$bin" run "$work/job.yaml" --quiet 2> "$work/err" || fail "run failed: $(cat "$work/err")"
  rss=$(json_num "$work/out/summary.json" peak_rss_bytes)
  echo "file $size bytes, peak RSS $rss bytes"
  [ "$rss" -lt $((size / 3)) ] || fail "peak RSS $rss is not far below the file size $size"
  ;;
quiet)
  small_job
  "$bin" run "$work/job.yaml" --quiet --set train.epochs=1 > "$work/stdout" 2> "$work/stderr" || fail "run failed"
  [ ! -s "$work/stdout" ] && ! grep -q "iter" "$work/stderr" || fail "--quiet printed progress"
  [ "$(json_num "$work/out/summary.json" iterations)" = 63 ] || fail "--set train.epochs=1 not applied"
  ;;
bad_job)
  # All errors of a file are reported, each as FILE:LINE:COL: error: KEY: ...
  small_job
  sed -i 's/batch: 64/bacth: 64/; s/dense: 64, activation: relu/dense: -3, activation: relu/' "$work/job.yaml"
  "$bin" run "$work/job.yaml" > /dev/null 2> "$work/err"; rc=$?
  [ $rc = 2 ] || fail "exit $rc, want 2"
  grep -Eq "job.yaml:[0-9]+:[0-9]+: error: train.bacth: .*batch" "$work/err" || fail "no did-you-mean: $(cat "$work/err")"
  grep -Eq "job.yaml:[0-9]+:[0-9]+: error: model.layers\[0\].dense" "$work/err" || fail "range error missing: $(cat "$work/err")"
  [ ! -e "$work/out" ] || fail "a rejected job wrote output"
  "$bin" run "$work/nope.yaml" 2> "$work/err"; rc=$?
  [ $rc = 2 ] || fail "missing job file: exit $rc"
  "$bin" run --bogus 2> /dev/null; rc=$?
  [ $rc = 2 ] || fail "bad option: exit $rc"
  "$bin" frobnicate 2> /dev/null; rc=$?
  [ $rc = 2 ] || fail "unknown command: exit $rc"
  ;;
missing_data)
  printf 'model: {input: {sparse: 10}, layers: [{dense: 3}]}\ndata: {train: nothere.txt}\ntrain: {iterations: 1}\n' > "$work/job.yaml"
  "$bin" run "$work/job.yaml" 2> "$work/err"; rc=$?
  [ $rc = 2 ] || fail "exit $rc, want 2"
  grep -q "data.train" "$work/err" && grep -q "nothere.txt" "$work/err" || fail "$(cat "$work/err")"
  ;;
bad_data)
  # A malformed line: FILE:LINE: error, exit 1, nothing written over.
  printf '3 10 3\n0 1:1 2:1\n1,2 3:1 x4:1\n2 5:1\n' > "$work/train.txt"
  printf 'model: {input: {sparse: 10}, layers: [{dense: 3}]}\ndata: {train: train.txt}\ntrain: {iterations: 1}\noutput: {dir: %s/out}\n' "$work" > "$work/job.yaml"
  "$bin" run "$work/job.yaml" 2> "$work/err"; rc=$?
  [ $rc = 1 ] || fail "exit $rc, want 1"
  grep -q "train.txt:3: error" "$work/err" || fail "$(cat "$work/err")"
  # A label beyond the output layer.
  printf '2 10 3\n0 1:1\n7 3:1\n' > "$work/train.txt"
  "$bin" run "$work/job.yaml" 2> "$work/err"; rc=$?
  [ $rc = 1 ] && grep -q "train.txt:3: error" "$work/err" || fail "label range: $(cat "$work/err")"
  ;;
interrupt_resume)
  # SIGINT stops at an iteration boundary with a checkpoint; --resume ends
  # the job where an uninterrupted one would.
  small_job
  sed -i 's/epochs: 3/epochs: 40/' "$work/job.yaml"
  "$bin" run "$work/job.yaml" --quiet --set train.threads=1 & pid=$!
  for _ in $(seq 1 100); do [ -s "$work/out/checkpoint.bin" ] && break; sleep 0.1; done
  kill -INT $pid; wait $pid; rc=$?
  [ $rc = 1 ] || fail "interrupted run exited $rc, want 1"
  grep -q '"interrupted": true' "$work/out/summary.json" || fail "summary does not say interrupted"
  it=$(json_num "$work/out/summary.json" iterations)
  "$bin" run "$work/job.yaml" --quiet --resume --set train.iterations=$((it + 5)) 2> "$work/err" || fail "resume failed: $(cat "$work/err")"
  [ "$(json_num "$work/out/summary.json" iterations)" = $((it + 5)) ] || fail "resume did not continue from $it"
  ;;
corrupt_checkpoint)
  # A damaged checkpoint is refused by run --resume and by eval, with an
  # exit code (never a signal) and a message naming the file; so is a
  # truncated one and one whose iteration count reads as done.
  small_job
  "$bin" run "$work/job.yaml" --quiet --set train.epochs=1 2> "$work/err" || fail "run failed: $(cat "$work/err")"
  ck=$work/out/checkpoint.bin
  cp "$ck" "$work/good.bin"
  flip() { # flip FILE OFFSET: inverts one byte in place
    local b; b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    printf "\\$(printf %03o $((b ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
  }
  refused() { # refused WHAT CMD...: exits 1..127 and names the checkpoint
    "${@:2}" > /dev/null 2> "$work/err"; local rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "$1: exit $rc: $(cat "$work/err")"
    grep -q "$ck" "$work/err" || fail "$1: the message does not name $ck: $(cat "$work/err")"
  }
  for off in 23 $(( $(stat -c %s "$work/good.bin") / 2 )) $(( $(stat -c %s "$work/good.bin") - 1 )); do
    cp "$work/good.bin" "$ck"
    flip "$ck" "$off"
    refused "byte $off, run --resume" "$bin" run "$work/job.yaml" --quiet --resume --set train.epochs=2
    grep -q "checksum" "$work/err" || fail "byte $off: $(cat "$work/err")"
    refused "byte $off, eval" "$bin" eval "$work/job.yaml" --reps 1
    grep -q "checksum" "$work/err" || fail "byte $off: $(cat "$work/err")"
  done
  head -c 50 "$work/good.bin" > "$ck"
  refused "truncated, run --resume" "$bin" run "$work/job.yaml" --quiet --resume
  grep -q "truncated" "$work/err" || fail "truncated: $(cat "$work/err")"
  refused "truncated, eval" "$bin" eval "$work/job.yaml" --reps 1
  # The intact file still resumes and evaluates.
  cp "$work/good.bin" "$ck"
  "$bin" run "$work/job.yaml" --quiet --resume --set train.epochs=2 2> "$work/err" || fail "resume: $(cat "$work/err")"
  "$bin" eval "$work/job.yaml" --reps 1 > /dev/null 2> "$work/err" || fail "eval: $(cat "$work/err")"
  ;;
resume_missing)
  # --resume before any checkpoint (a requeued job that never reached its
  # first one) starts from the beginning and says so, --quiet or not.
  small_job
  "$bin" run "$work/job.yaml" --resume --quiet --set train.epochs=1 2> "$work/err"; rc=$?
  [ $rc = 0 ] || fail "exit $rc: $(cat "$work/err")"
  grep -q "no checkpoint at '$work/out/checkpoint.bin' yet; job 'small' starts from the beginning" \
    "$work/err" || fail "no word of starting afresh: $(cat "$work/err")"
  [ "$(json_num "$work/out/summary.json" iterations)" = 63 ] || fail "did not train from 0 to 63"
  ;;
resume_seed)
  # --resume with another seed than the run's (its job.resolved.yaml) is
  # refused, naming both seeds and the file, before anything is written:
  # it would go on training on other generated data.  The same seed goes on.
  small_job
  "$bin" run "$work/job.yaml" --quiet --set train.epochs=0 --set train.iterations=45 \
    2> "$work/err" || fail "first run: $(cat "$work/err")"
  cp -a "$work/out" "$work/before"
  "$bin" run "$work/job.yaml" --quiet --resume --set seed=6 --set train.epochs=0 \
    --set train.iterations=60 2> "$work/err"; rc=$?
  [ $rc != 0 ] || fail "--resume with seed 6 on a seed-5 run was accepted"
  grep -q "run in '$work/out' was started with seed 5 ($work/out/job.resolved.yaml) but this job has seed 6" \
    "$work/err" && grep -q -- "--set seed=5" "$work/err" || fail "the message: $(cat "$work/err")"
  for f in checkpoint.bin metrics.jsonl job.resolved.yaml summary.json run.json; do
    cmp -s "$work/before/$f" "$work/out/$f" || fail "$f changed by the refused resume"
  done
  "$bin" run "$work/out/job.resolved.yaml" --quiet --resume --set train.epochs=0 \
    --set train.iterations=60 2> "$work/err" || fail "--resume with the run's seed: $(cat "$work/err")"
  [ "$(json_num "$work/out/summary.json" iterations)" = 60 ] || fail "did not go on to 60"
  ;;
lsh_settings)
  # A sampled layer's training settings that sparse Adam cannot honour are
  # refused at the layer's item (FILE:LINE:COL, model.layers[i]), on the
  # chain engine as on the graph engine: SGD (which keeps the job on the
  # chain), and under ACCELRT_CHAIN_ENGINE=chain weight decay and
  # catch_up with beta1 >= sqrt(beta2); accelrt check refuses SGD too.
  small_job
  refused_at() { # WHAT ENGINE GREP --set...
    local what=$1 eng=$2 want=$3; shift 3
    ACCELRT_CHAIN_ENGINE=$eng "$bin" run "$work/job.yaml" --quiet --set train.epochs=0 \
      --set train.iterations=2 --set 'model.layers.out.sparse={mode: lsh, catch_up: 5}' "$@" \
      2> "$work/err" && fail "$what was accepted"
    grep -q "^accelrt run: error: $work/job.yaml:8:7: error: model.layers\[1\]: .*$want" "$work/err" ||
      fail "$what: $(cat "$work/err")"
  }
  refused_at "SGD" "" "LSH-sampled, which trains with Adam only" \
    --set 'train.optimizer={sgd: {lr: 0.1}}'
  refused_at "weight decay" chain "whose sparse Adam has no weight decay" \
    --set 'train.optimizer={adam: {lr: 0.003, weight_decay: 0.01}}'
  refused_at "catch_up with beta1 0.99, beta2 0.9" chain "beta1 < sqrt(beta2) (beta1 0.99, beta2 0.9" \
    --set 'train.optimizer={adam: {lr: 0.003, beta1: 0.99, beta2: 0.9}}'
  ACCELRT_CHAIN_ENGINE=chain "$bin" run "$work/job.yaml" --quiet --set train.epochs=0 \
    --set train.iterations=2 --set 'model.layers.out.sparse={mode: lsh, catch_up: 5}' \
    2> "$work/err" || fail "catch_up with the default betas: $(cat "$work/err")"
  # accelrt check refuses what run refuses (the chain's plan checks it).
  "$bin" check "$work/job.yaml" --set 'model.layers.out.sparse={mode: lsh}' \
    --set 'train.optimizer={sgd: {lr: 0.1}}' > "$work/out.txt" 2> "$work/err" &&
    fail "check accepted SGD for a sampled layer"
  grep -q "^accelrt check: error: $work/job.yaml:8:7: error: model.layers\[1\]: .*Adam only" \
    "$work/err" || fail "check: $(cat "$work/err")"
  ;;
refuse_finished)
  # A finished run's folder is refused (exit 2, naming the folder and both
  # options) and left as it was; --overwrite removes the run's own files
  # (not the generated data, not the user's) and runs; --resume continues;
  # the two together are a usage error.  A stopped run (summary.json with
  # interrupted: true) is refused the same way.
  small_job
  "$bin" run "$work/job.yaml" --quiet --set train.epochs=1 2> "$work/err" || fail "run: $(cat "$work/err")"
  echo "my notes" > "$work/out/notes.txt"
  before=$(snapshot "$work/out")
  "$bin" run "$work/job.yaml" --quiet --set train.epochs=1 > /dev/null 2> "$work/err"; rc=$?
  [ $rc = 2 ] || fail "a rerun into a finished run's folder exited $rc, want 2"
  grep -q "$work/out already holds a finished run" "$work/err" && grep -q -- "--resume" "$work/err" \
    && grep -q -- "--overwrite" "$work/err" || fail "unclear refusal: $(cat "$work/err")"
  [ "$before" = "$(snapshot "$work/out")" ] || fail "the refused run changed $work/out"
  "$bin" run "$work/job.yaml" --quiet --resume --overwrite > /dev/null 2> "$work/err"; rc=$?
  [ $rc = 2 ] || fail "--resume with --overwrite exited $rc, want 2"
  # --overwrite clears before the job opens: a job whose plan is then
  # refused leaves the folder without the old run's files.
  gen=$(snapshot "$work/out/data")
  : > "$work/out/trace.json"
  : > "$work/out/eval.json" # accelrt eval's, of the old run
  "$bin" run "$work/job.yaml" --quiet --overwrite --set 'model.layers[0].dense=1000000000' \
    > /dev/null 2> "$work/err"; rc=$?
  [ $rc = 1 ] || fail "--overwrite with a plan too big: exit $rc: $(cat "$work/err")"
  for f in summary.json metrics.jsonl checkpoint.bin trace.json eval.json; do
    [ ! -e "$work/out/$f" ] || fail "--overwrite left the old $f"
  done
  grep -q "dense: 1000000000" "$work/out/job.resolved.yaml" || fail "job.resolved.yaml is the old one"
  [ "$(cat "$work/out/notes.txt")" = "my notes" ] || fail "--overwrite touched a file it does not own"
  [ "$gen" = "$(snapshot "$work/out/data")" ] || fail "--overwrite touched the generated data"
  "$bin" run "$work/job.yaml" --quiet --set train.iterations=10 2> "$work/err" \
    || fail "a run into the cleared folder: $(cat "$work/err")"
  [ "$(json_num "$work/out/summary.json" iterations)" = 10 ] || fail "did not run 10 iterations"
  "$bin" run "$work/job.yaml" --quiet --resume --set train.iterations=20 2> "$work/err" \
    || fail "--resume: $(cat "$work/err")"
  [ "$(json_num "$work/out/summary.json" iterations)" = 20 ] || fail "--resume did not continue"
  "$bin" run "$work/job.yaml" --quiet --overwrite --set train.iterations=5 2> "$work/err" \
    || fail "--overwrite: $(cat "$work/err")"
  [ "$(json_num "$work/out/summary.json" iterations)" = 5 ] || fail "--overwrite did not start afresh"
  # Interrupted: the folder holds a checkpoint worth keeping.
  sed -i 's/"interrupted": false/"interrupted": true/' "$work/out/summary.json"
  "$bin" run "$work/job.yaml" --quiet > /dev/null 2> "$work/err"; rc=$?
  [ $rc = 2 ] || fail "a rerun into a stopped run's folder exited $rc, want 2"
  ;;
resolved_rerun)
  # output.dir describes the run: job.resolved.yaml (every --set applied,
  # defaults filled in, data paths absolute) runs again from another folder
  # to the same final metrics (one thread); run.json has the version, the
  # build features, the command line, the engine and the start time.
  mkdir -p "$work/jobs" "$work/elsewhere"
  "$bin" gen-data --out "$work/data" --train-points 3000 --test-points 300 --features 2000 \
    --labels 100 > /dev/null || fail "gen-data failed"
  cat > "$work/jobs/file.yaml" <<YAML
device: host
model:
  input: {sparse: 2000}
  layers: [{name: hidden, dense: 32}, {name: out, dense: 100}]
data: {train: ../data/train.txt, test: ../data/test.txt}
train: {batch: 32, epochs: 1, eval_every: 30}
YAML
  cd "$work"
  "$bin" run jobs/file.yaml --quiet --set train.threads=1 --set model.layers.hidden.dense=48 \
    --set output.dir=first 2> "$work/err" || fail "run: $(cat "$work/err")"
  r=$work/first/job.resolved.yaml
  [ -s "$r" ] && [ -s "$work/first/run.json" ] || fail "no job.resolved.yaml or run.json"
  grep -q "^name: file$" "$r" && grep -q "^    dense: 48$" "$r" && grep -q "^  threads: 1$" "$r" \
    && grep -q "^  train: $work/data/train.txt$" "$r" && grep -q "^  shuffle_window: 65536$" "$r" \
    || fail "job.resolved.yaml: $(cat "$r")"
  "$bin" check jobs/file.yaml --print --set train.threads=1 --set model.layers.hidden.dense=48 \
    --set output.dir=first > "$work/printed" 2> "$work/err" || fail "check --print: $(cat "$work/err")"
  diff "$r" "$work/printed" > /dev/null || fail "check --print differs: $(diff "$r" "$work/printed")"
  py=/usr/bin/python3; [ -x $py ] || py=python3
  $py - "$work/first/run.json" "$bin" <<'PY' || fail "run.json: $(cat "$work/first/run.json")"
import json, subprocess, sys, time
d = json.load(open(sys.argv[1]))
assert set(d) == {"version", "features", "argv", "engine", "started"}, d
assert d["engine"] == "graph", d  # a dense chain over sparse input: lowered
info = subprocess.run([sys.argv[2], "info"], capture_output=True, text=True).stdout
assert d["version"] in info.splitlines()[0], d["version"]
for f in d["features"]:  # each as `accelrt info` lists it
    label = next(l for l in ["CUDA backend", "compiler", "SIMD", "OpenMP", "BLAS", "libyaml", "hwloc",
                             "zlib", "oneDNN", "serve --http"] if f.startswith(l + " "))
    assert any(line.split() == f.split() for line in info.splitlines()), f
assert d["argv"][1:] == ["run", "jobs/file.yaml", "--quiet", "--set", "train.threads=1", "--set",
                         "model.layers.hidden.dense=48", "--set", "output.dir=first"], d["argv"]
assert abs(d["started"] - time.time()) < 3600, d["started"]
PY
  cd "$work/elsewhere"
  "$bin" run "$r" --quiet --set output.dir="$work/second" 2> "$work/err" || fail "rerun: $(cat "$work/err")"
  for k in loss train_loss p_at_1 p_at_5 iterations; do
    a=$(json_num "$work/first/summary.json" $k); b=$(json_num "$work/second/summary.json" $k)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "$k: $a first, $b from job.resolved.yaml"
  done
  diff <(grep -v '^#' "$r" | grep -v '^  dir: ') <(grep -v '^#' "$work/second/job.resolved.yaml" \
    | grep -v '^  dir: ') || fail "the rerun resolved to another job"
  ;;
jobs_described)
  # A jobs: file: the run's folder has the whole file resolved, each job's
  # folder that job as a job file of its own; a rerun is refused while
  # any of them holds a finished run.
  cat > "$work/many.yaml" <<YAML
device: host
runtime: {policy: fair, memory: 256MiB}
output: {dir: $work/many}
jobs:
  - name: a
    model: {input: {sparse: 500}, layers: [{dense: 50}]}
    data: {generate: {train_points: 500, test_points: 50, features: 500, labels: 50}}
    train: {batch: 16, iterations: 4, threads: 1}
  - name: b
    repeat: 2
    model: {input: {sparse: 500}, layers: [{dense: 8}, {dense: 50}]}
    data: {generate: {train_points: 500, test_points: 50, features: 500, labels: 50}}
    train: {batch: 16, iterations: 3, threads: 1}
YAML
  "$bin" run "$work/many.yaml" --quiet 2> "$work/err" || fail "run: $(cat "$work/err")"
  for d in many many/a many/b-1 many/b-2; do
    [ -s "$work/$d/job.resolved.yaml" ] && [ -s "$work/$d/run.json" ] || fail "$d is not described"
  done
  grep -q "^  repeat: 2$" "$work/many/job.resolved.yaml" || fail "$(cat "$work/many/job.resolved.yaml")"
  grep -q "^name: b-2$" "$work/many/b-2/job.resolved.yaml" || fail "$(cat "$work/many/b-2/job.resolved.yaml")"
  "$bin" check "$work/many/b-2/job.resolved.yaml" > "$work/out.txt" 2> "$work/err" \
    && grep -q ": valid job$" "$work/out.txt" || fail "a job's own file: $(cat "$work/err")"
  rm "$work/many/summary.json"
  "$bin" run "$work/many.yaml" --quiet > /dev/null 2> "$work/err"; rc=$?
  [ $rc = 2 ] && grep -q "$work/many/a already holds a finished run" "$work/err" \
    || fail "exit $rc: $(cat "$work/err")"
  "$bin" run "$work/many.yaml" --quiet --overwrite 2> "$work/err" || fail "--overwrite: $(cat "$work/err")"
  [ -s "$work/many/summary.json" ] || fail "no summary after --overwrite"
  ;;
check)
  small_job
  "$bin" check "$work/job.yaml" > "$work/out.txt" || fail "check failed"
  grep -q "persistent bytes: " "$work/out.txt" && grep -q "ephemeral peak bytes: " "$work/out.txt" || fail "no plan"
  # Adam: 3 x params x 4 bytes, params = 2000*64+64 + 64*200+200.
  p=$(sed -n 's/^persistent bytes: \([0-9]*\).*/\1/p' "$work/out.txt")
  [ "$p" -ge $(( 3 * 4 * (2000*64 + 64 + 64*200 + 200) )) ] && [ "$p" -le $(( 3 * 4 * (2000*64 + 64 + 64*200 + 200) + 64*12 )) ] || fail "persistent $p"
  ;;
check_readonly)
  # accelrt check reads and never writes: the whole tree it runs in (the job
  # files' folder, the working directory, where output.dir points) is the
  # same before and after, for a data.generate job dense and LSH-sampled, a
  # jobs: file and a distributed file; their plans are still printed.
  t=$work/tree
  mkdir -p "$t/jobs"
  gen="generate: {train_points: 3000, test_points: 300, features: 2000, labels: 300, nnz: 20}"
  cat > "$t/jobs/one.yaml" <<YAML
name: one
device: host
model:
  input: {sparse: 2000}
  layers:
    - {name: hidden, dense: 32}
    - {name: out, dense: 300, activation: softmax}
data: {$gen}
train: {batch: 32, iterations: 5, threads: 1}
output: {dir: runs/one}
YAML
  cat > "$t/jobs/many.yaml" <<YAML
name: many
device: host
runtime: {policy: fair, memory: 256MiB}
output: {dir: runs/many}
jobs:
  - name: a
    model: {input: {sparse: 2000}, layers: [{dense: 300, activation: softmax}]}
    data: {$gen}
    train: {batch: 32, iterations: 5, threads: 1}
  - name: b
    model: {input: {sparse: 2000}, layers: [{dense: 16}, {dense: 300, activation: softmax}]}
    data: {$gen}
    train: {batch: 64, iterations: 5, threads: 1}
YAML
  sed 's/^name: one/name: dist/; $a distributed: {servers: 1}' "$t/jobs/one.yaml" > "$t/jobs/dist.yaml"
  before=$(snapshot "$t")
  cd "$t"
  "$bin" check jobs/one.yaml > "$work/c1" 2> "$work/e1" || fail "check one: $(cat "$work/e1")"
  "$bin" check jobs/one.yaml --set "model.layers.out.sparse={mode: lsh, active: 0.1}" \
    > "$work/c2" 2> "$work/e2" || fail "check lsh: $(cat "$work/e2")"
  "$bin" check jobs/many.yaml > "$work/c3" 2> "$work/e3" || fail "check jobs: $(cat "$work/e3")"
  "$bin" check jobs/dist.yaml > "$work/c4" 2> "$work/e4" || fail "check distributed: $(cat "$work/e4")"
  cd "$work"
  [ "$before" = "$(snapshot "$t")" ] || fail "check changed the tree: $(diff <(echo "$before") <(snapshot "$t"))"
  grep -q "run in memory (nothing written): train 3000 points, test 300 points" "$work/c1" || fail "$(cat "$work/c1")"
  grep -q "^total: " "$work/c1" && grep -q "host *out.lsh.tables" "$work/c2" || fail "no plan printed"
  grep -q "== job 2 of 2: b ==" "$work/c3" && grep -q "^admission (lanes, policy fair)" "$work/c3" \
    || fail "jobs file: $(cat "$work/c3")"
  grep -q "valid distributed job" "$work/c4" && grep -q "plan of one worker" "$work/c4" || fail "$(cat "$work/c4")"
  ;;
check_equals_run)
  # The plan check prints is what run allocates: persistent, ephemeral and
  # host bytes (and a sampled layer's tables) equal the model's in
  # summary.json, for a dense and an LSH-sampled job with generated data.
  small_job
  for sparse in "" "{mode: lsh, hash: srp, active: 0.1}"; do
    set -- --set train.epochs=1 --set output.dir="$work/out"
    [ -n "$sparse" ] && set -- "$@" --set "model.layers.out.sparse=$sparse"
    "$bin" check "$work/job.yaml" "$@" > "$work/check" 2> "$work/err" || fail "check: $(cat "$work/err")"
    [ ! -e "$work/out" ] || fail "check wrote $work/out"
    "$bin" run "$work/job.yaml" "$@" --quiet 2> "$work/err" || fail "run: $(cat "$work/err")"
    s=$work/out/summary.json
    for k in persistent ephemeral host; do
      label=$k; [ $k = ephemeral ] && label="ephemeral peak"
      c=$(plan_num "$work/check" "$label bytes"); r=$(json_num "$s" ${k}_bytes)
      [ -n "$c" ] && [ "$c" = "$r" ] || fail "${sparse:-dense}: check says $k $c bytes, run allocated $r"
    done
    if [ -n "$sparse" ]; then
      c=$(sed -n 's/^ *host *out.lsh.tables *\([0-9]*\) B.*/\1/p' "$work/check")
      r=$(json_num "$s" out.lsh_tables_bytes)
      [ -n "$c" ] && [ "$c" = "$r" ] || fail "check says the tables take $c bytes, run's take $r"
      [ "$(plan_num "$work/check" "host bytes")" -gt 0 ] || fail "no host bytes for a sampled layer"
    fi
    echo "${sparse:-dense}: persistent $(json_num "$s" persistent_bytes), ephemeral $(json_num "$s" ephemeral_bytes), host $(json_num "$s" host_bytes) bytes, as check said"
    rm -rf "$work/out"
  done
  ;;
check_jobs)
  # A jobs: file: every job's plan and the admission picture, exit 0; a job
  # that can never be admitted (the lanes' whole capacity is too small)
  # fails check with the sizes and what to raise.
  cat > "$work/jobs.yaml" <<YAML
name: two
device: host
runtime: {policy: pack, memory: 64MiB}
output: {dir: $work/out}
jobs:
  - name: small
    model: {input: {sparse: 500}, layers: [{dense: 100, activation: softmax}]}
    data: {generate: {train_points: 500, test_points: 50, features: 500, labels: 100}}
    train: {batch: 16, iterations: 3, threads: 1}
  - name: wide
    model: {input: {sparse: 500}, layers: [{dense: 20000, activation: softmax}]}
    data: {generate: {train_points: 500, test_points: 50, features: 500, labels: 20000}}
    train: {batch: 16, iterations: 3, threads: 1}
YAML
  "$bin" check "$work/jobs.yaml" --set runtime.memory=1GiB > "$work/out.txt" 2> "$work/err" \
    || fail "check exited $?: $(cat "$work/err")"
  grep -q "capacity 1.0 GiB (runtime.memory)" "$work/out.txt" || fail "$(cat "$work/out.txt")"
  [ "$(grep -c "^  \(small\|wide\) .* yes$" "$work/out.txt")" = 2 ] || fail "$(tail -6 "$work/out.txt")"
  "$bin" check "$work/jobs.yaml" > "$work/out.txt" 2> "$work/err"; rc=$?
  [ $rc = 1 ] || fail "a job that can never fit: exit $rc, want 1"
  grep -q "^  wide .* NEVER$" "$work/out.txt" || fail "$(tail -6 "$work/out.txt")"
  grep -q "job 'wide' needs .*could never be admitted; raise runtime.memory" "$work/err" || fail "$(cat "$work/err")"
  [ ! -e "$work/out" ] || fail "check wrote the output folder"
  ;;
too_big)
  # A 10^9-wide layer is refused by the plan, before anything is allocated,
  # by run and by check, with the bytes, the limit, where it came from and
  # what to lower; sizes whose byte counts leave size_t are refused by the
  # plan with a message (no wrapped arithmetic: UBSan builds check it).
  small_job
  for cmd in check run; do
    "$bin" $cmd "$work/job.yaml" --set 'model.layers[0].dense=1000000000' > /dev/null 2> "$work/err"; rc=$?
    [ $rc = 1 ] || fail "$cmd: exit $rc, want 1: $(cat "$work/err")"
    grep -q "job 'small' needs .* but this host can give it .* (.* bytes, from .*), so nothing was allocated; the largest part is hidden.w .*: lower model.layers.hidden.dense" "$work/err" \
      || fail "$cmd: $(cat "$work/err")"
    ! grep -qi "cannot allocate" "$work/err" || fail "$cmd: an allocation was tried"
  done
  printf 'model: {input: {dense: 2147483647}, layers: [{name: a, dense: 2147483647}, {dense: 2147483647}]}\ndata: {train: x.txt}\ntrain: {iterations: 1}\n' > "$work/huge.yaml"
  printf '1 2147483647 2147483647\n0 1:1\n' > "$work/x.txt"
  "$bin" check "$work/huge.yaml" > /dev/null 2> "$work/err"; rc=$?
  [ $rc = 1 ] && grep -q "the memory plan overflows: a\." "$work/err" || fail "exit $rc: $(cat "$work/err")"
  ;;
check_configs)
  # accelrt check on every *.yaml under configs/, found now (a new file is
  # covered without touching this test): each must be checked successfully
  # (a job, a jobs: file, a distributed job, or a study file validated)
  # without writing anything, or be listed below with the reason.  A listed
  # file that passes or no longer exists fails too, so the list stays true.
  # The copy keeps the configs' relative paths: ../../shared/data beside
  # it (ACCELRT_DATA_DIR or the project's shared folder), the studies'
  # share levels relative to the working directory (its root).
  declare -A listed=()
  data=${ACCELRT_DATA_DIR:-$src/../shared/data}
  t=$work/repo
  mkdir -p "$t" "$work/shared"
  cp -r "$src/configs" "$t/configs"
  ln -s "$(cd "$data" 2> /dev/null && pwd || echo "$data")" "$work/shared/data"
  cd "$t"
  n=0; bad=0
  while IFS= read -r f; do
    n=$((n + 1))
    before=$(snapshot "$t")
    "$bin" check "$f" > "$work/out.txt" 2> "$work/err"; rc=$?
    [ "$before" = "$(snapshot "$t")" ] || { echo "FAIL $f: check wrote: $(diff <(echo "$before") <(snapshot "$t") | head -5)"; bad=1; }
    if [ $rc = 0 ] && grep -q ": valid \(job\|jobs file\|distributed job\|study file\)" "$work/out.txt"; then
      if [ -n "${listed[$f]:-}" ]; then echo "FAIL $f: listed (${listed[$f]}) but checks fine: unlist it"; bad=1; fi
      echo "ok   $f: $(head -1 "$work/out.txt" | sed 's/^[^:]*: //' | cut -c1-40)$(grep -m1 '^total: ' "$work/out.txt" | sed 's/^/, /')"
    elif [ -n "${listed[$f]:-}" ]; then
      echo "skip $f: ${listed[$f]}"
    elif [ ! -d "$data" ] && grep -q "shared/data" "$work/err"; then
      echo "skip $f: needs the shared data folder ($data is absent; set ACCELRT_DATA_DIR)"
    else
      echo "FAIL $f: exit $rc: $(head -5 "$work/err")"; bad=1
    fi
  done < <(find configs -name '*.yaml' | LC_ALL=C sort)
  for f in "${!listed[@]}"; do
    [ -f "$f" ] || { echo "FAIL $f: listed but not in configs/ any more"; bad=1; }
  done
  [ $n -gt 0 ] || fail "no configs found under $src/configs"
  [ $bad = 0 ] || fail "some configs were not checked (see above)"
  echo "$n configs checked"
  ;;
info)
  "$bin" info > "$work/out.txt" || fail "info failed"
  grep -q "cores" "$work/out.txt" && grep -q "host" "$work/out.txt" && grep -qi "cuda" "$work/out.txt" || fail "$(cat "$work/out.txt")"
  ;;
topology)
  # A two-socket machine, replayed through hwloc's synthetic topologies, is
  # reported as such (the way hwloc tests exotic hardware without it).
  HWLOC_SYNTHETIC="pack:2 [numa(memory=1GiB)] l3:1(size=32MiB) core:8 l2:1(size=1MiB) l1d:1(size=32KiB) pu:2" \
    "$bin" info > "$work/out.txt" || fail "info failed"
  grep -q "packages 2, cores 16, processing units 32, NUMA nodes 2" "$work/out.txt" || fail "$(cat "$work/out.txt")"
  grep -q "L1d: 16 x 32 KiB" "$work/out.txt" && grep -q "L2: 16 x 1024 KiB" "$work/out.txt" \
    && grep -q "L3: 2 x 32768 KiB" "$work/out.txt" && grep -q "NUMA node 1: 1024 MiB" "$work/out.txt" \
    || fail "caches or NUMA memory misreported: $(cat "$work/out.txt")"
  ;;
affinity)
  # The CPUs a job was given: its threads come from OMP_NUM_THREADS,
  # SLURM_CPUS_PER_TASK or the affinity mask, never more than the mask
  # holds, and its threads stay inside the mask (the old pinning bound
  # thread 0 to core 0 whatever the mask said).
  command -v taskset >/dev/null || { echo "skipped: taskset (util-linux) missing"; exit 77; }
  [ "$(taskset -c 0 nproc)" = 1 ] && [ "$(nproc)" -ge 2 ] ||
    { echo "skipped: needs 2 CPUs to give a job one of them"; exit 77; }
  small_job
  threads_of() { # threads_of ENV... -- ARGS...: the summary's thread count
    rm -rf "$work/out"
    env "$@" --set train.epochs=1 --quiet > "$work/stdout" 2> "$work/stderr" ||
      fail "run ($*) exited $?: $(cat "$work/stderr")"
    json_num "$work/out/summary.json" threads
  }
  job="$work/job.yaml"
  [ "$(threads_of -u OMP_NUM_THREADS taskset -c 1 "$bin" run "$job" --set train.threads=0)" = 1 ] ||
    fail "taskset -c 1 did not give one thread"
  [ "$(threads_of OMP_NUM_THREADS=1 "$bin" run "$job" --set train.threads=0)" = 1 ] ||
    fail "OMP_NUM_THREADS=1 was not followed"
  [ "$(threads_of -u OMP_NUM_THREADS SLURM_CPUS_PER_TASK=1 "$bin" run "$job" --set train.threads=0)" = 1 ] ||
    fail "SLURM_CPUS_PER_TASK=1 was not followed"
  [ "$(threads_of OMP_NUM_THREADS=8 taskset -c 0 "$bin" run "$job" --set train.threads=0)" = 1 ] ||
    fail "OMP_NUM_THREADS=8 under taskset -c 0 went past the mask"
  [ "$(threads_of -u OMP_NUM_THREADS taskset -c 0 "$bin" run "$job" --set train.threads=2)" = 1 ] ||
    fail "train.threads=2 under taskset -c 0 went past the mask"
  [ "$(threads_of -u OMP_NUM_THREADS "$bin" run "$job" --set train.threads=0)" = "$(nproc)" ] ||
    fail "the whole mask did not give one thread per core"
  "$bin" info > "$work/info.txt" && grep -q "this process may use CPUs" "$work/info.txt" ||
    fail "accelrt info does not say which CPUs: $(cat "$work/info.txt")"
  # Every thread of a job under taskset -c 1 stays on CPU 1.
  rm -rf "$work/out"
  taskset -c 1 "$bin" run "$job" --set train.threads=0 --set train.epochs=1000 --quiet \
    > /dev/null 2>&1 &
  pid=$!
  seen=
  for _ in $(seq 200); do
    [ -f "$work/out/metrics.jsonl" ] && break
    sleep 0.05
  done
  for s in /proc/$pid/task/*/status; do
    cpus=$(awk '/^Cpus_allowed_list/ {print $2}' "$s" 2>/dev/null) || continue
    [ -n "$cpus" ] || continue
    seen=1
    [ "$cpus" = 1 ] || { kill -9 $pid; fail "thread $s runs on CPUs $cpus, outside taskset -c 1"; }
  done
  kill -TERM $pid 2>/dev/null
  wait $pid 2>/dev/null
  [ -n "$seen" ] || fail "no thread of the job was seen"
  ;;
schema_docs)
  "$bin" schema > "$work/schema.md" || fail "schema failed"
  diff -u "$src/docs/job-file.md" "$work/schema.md" || fail "docs/job-file.md is stale: regenerate with 'accelrt schema > docs/job-file.md'"
  "$bin" schema --json > "$work/schema.json" || fail "schema --json failed"
  diff -u "$src/docs/job-file.schema.json" "$work/schema.json" \
    || fail "docs/job-file.schema.json is stale: regenerate with 'accelrt schema --json > docs/job-file.schema.json'"
  ;;
bibtex|delicious)
  # Real data: P@1 on the test split must reach the published-comparable bound.
  dir=$src/../shared/data
  [ -n "${ACCELRT_DATA_DIR:-}" ] && dir=$ACCELRT_DATA_DIR
  name=$case; Name=$( [ $case = bibtex ] && echo Bibtex || echo Delicious )
  bound=$( [ $case = bibtex ] && echo 60 || echo 65 )
  if [ ! -f "$dir/$Name/${name}_train.txt" ]; then echo "skipped: $dir/$Name not present"; exit 77; fi
  "$bin" run "$src/configs/$name.yaml" --quiet --set data.train="$dir/$Name/${name}_train.txt" \
    --set data.test="$dir/$Name/${name}_test.txt" --set output.dir="$work/out" 2> "$work/err" || fail "$(cat "$work/err")"
  p1=$(json_num "$work/out/summary.json" p_at_1)
  echo "$name: P@1 $p1 P@3 $(json_num "$work/out/summary.json" p_at_3) P@5 $(json_num "$work/out/summary.json" p_at_5)"
  ge "$p1" $bound || fail "$name P@1 $p1 below $bound"
  ;;
lsh)
  # The small job with an LSH-sampled output layer: learns, reports the
  # sampled statistics, and with one thread two runs are bit-identical.
  small_job
  sparse="{mode: lsh, hash: srp, active: 0.1}"
  for r in a b; do
    "$bin" run "$work/job.yaml" --quiet --set "model.layers.out.sparse=$sparse" --set train.threads=1 \
      --set output.dir="$work/$r" 2> "$work/err" || fail "lsh run exited $?: $(cat "$work/err")"
  done
  s=$work/a/summary.json
  p1=$(json_num "$s" p_at_1)
  ge "$p1" 40 || fail "LSH P@1 $p1 below 40"
  [ "$p1" = "$(json_num "$work/b/summary.json" p_at_1)" ] || fail "two one-thread runs differ"
  # Checkpoints equal but for the training time (bytes 56-63) and the checksum.
  part() { head -c 56 "$1" | md5sum; tail -c +65 "$1" | head -c -4 | md5sum; }
  [ "$(part "$work/a/checkpoint.bin")" = "$(part "$work/b/checkpoint.bin")" ] \
    || fail "two one-thread runs end with different parameters"
  act=$(json_num "$s" out.lsh_active_mean)
  [ -n "$act" ] || fail "summary.json lacks out.lsh_active_mean"
  # a budget of 20 of 200 plus about 2 labels: far from all 200
  ge 30 "$act" || fail "mean active $act: the layer is not sparse"
  ge "$act" 20 || fail "mean active $act below the budget of 20"
  grep -q '"out.lsh_rehashes": [1-9]' "$s" || fail "no table rebuild reported"
  grep -q 'out.lsh_query_cpu_s' "$work/a/metrics.jsonl" || fail "metrics.jsonl lacks the sampled statistics"
  # A sampled run resumes from its checkpoint, which holds no gradient rows
  # (zero between iterations) but the sparse Adam state.
  ! grep -aq "out.grad.w" "$work/a/checkpoint.bin" || fail "the checkpoint stores the zero gradient rows"
  grep -aq "out.lsh.last" "$work/a/checkpoint.bin" || fail "the checkpoint lacks the sparse Adam steps"
  "$bin" run "$work/job.yaml" --quiet --resume --set "model.layers.out.sparse=$sparse" --set train.threads=1 \
    --set output.dir="$work/a" --set train.epochs=4 2> "$work/err" || fail "lsh resume exited $?: $(cat "$work/err")"
  [ "$(json_num "$work/a/summary.json" iterations)" = 252 ] || fail "the resumed lsh run did not reach 4 epochs"
  # The same file on a GPU worker would run dense: mode auto below its width is dense here.
  "$bin" check "$work/job.yaml" --set "model.layers.out.sparse={mode: auto, auto_min_width: 1000}" \
    > "$work/check" || fail "check failed"
  ! grep -q "lsh.active" "$work/check" || fail "mode auto sampled a 200-wide layer below auto_min_width"
  "$bin" check "$work/job.yaml" --set "model.layers.out.sparse={mode: auto, auto_min_width: 100}" \
    > "$work/check" || fail "check failed"
  grep -q "out.lsh.active" "$work/check" || fail "mode auto did not sample a layer above auto_min_width"
  ;;
eval)
  # accelrt eval scores a checkpoint both ways and writes eval.json; a
  # missing checkpoint is a clear error.  One thread, as lsh_infer: on two
  # the sampled layer's updates interleave differently each run, and the
  # LSH P@1 bound would hold on a figure that moves.
  small_job
  sed -i 's/threads: 2,/threads: 1,/' "$work/job.yaml"
  sparse="{mode: lsh, hash: srp, active: 0.1}"
  "$bin" run "$work/job.yaml" --quiet --set "model.layers.out.sparse=$sparse" 2> "$work/err" \
    || fail "run exited $?: $(cat "$work/err")"
  "$bin" eval "$work/job.yaml" --set "model.layers.out.sparse=$sparse" --reps 1 > "$work/eval" 2> "$work/err" \
    || fail "eval exited $?: $(cat "$work/err")"
  grep -q "LSH candidates" "$work/eval" || fail "eval printed no LSH row: $(cat "$work/eval")"
  e=$work/out/eval.json
  [ "$(json_num "$e" p_at_1)" = "$(json_num "$work/out/summary.json" p_at_1)" ] \
    || fail "eval P@1 $(json_num "$e" p_at_1) differs from the run's $(json_num "$work/out/summary.json" p_at_1)"
  echo "eval: P@1 $(json_num "$e" p_at_1), LSH inference P@1 $(json_num "$e" lsh_p_at_1)"
  ge "$(json_num "$e" lsh_p_at_1)" 30 || fail "LSH inference P@1 $(json_num "$e" lsh_p_at_1) below 30"
  # The inference tables: K never above training's here (the search steps
  # down from it), a budget of at least one candidate; a K set in the job
  # file is kept as it is, with only the budget chosen.
  ka=$(json_num "$e" lsh_K_auto); k=$(json_num "$e" lsh_K)
  [ -n "$k" ] && [ "$k" -le "$ka" ] || fail "inference K $k above the automatic $ka"
  ge "$(json_num "$e" lsh_budget)" 1 || fail "no inference budget in eval.json"
  "$bin" eval "$work/job.yaml" --set "model.layers.out.sparse={mode: lsh, hash: srp, active: 0.1, K: 12}" \
    --reps 1 > /dev/null 2> "$work/err" || fail "eval with K set exited $?: $(cat "$work/err")"
  [ "$(json_num "$e" lsh_K)" = 12 ] && [ "$(json_num "$e" lsh_K_auto)" = 12 ] \
    || fail "a K set in the job file was changed: $(json_num "$e" lsh_K)"
  grep -q '"lsh_chosen": "L budget"' "$e" || fail "K set in the job file: only L and the budget are chosen"
  "$bin" eval "$work/job.yaml" --checkpoint "$work/nope.bin" > /dev/null 2> "$work/err"
  [ $? = 1 ] || fail "missing checkpoint should exit 1"
  grep -q "no checkpoint at" "$work/err" || fail "unclear message: $(cat "$work/err")"
  ;;
lsh_infer)
  # LSH inference's automatic choice of K, L and budget (lsh_infer.c), on a
  # 2,000-label layer: it reaches its recall target on the probe, no
  # hand-set K in 2..K0 is cheaper at that target or better in P@1 at the
  # job's budget by more than the margins below, it repeats exactly, and
  # bad hand-set values are usage errors.  One thread: training on two
  # updates the sampled layer in an order that varies from run to run, and
  # the test recall moved with it (0.89-0.98 over ten runs: one under the
  # 0.90 bound); on one thread the model, and so every figure, repeats.
  small_job
  sed -i -e 's/dense: 200, activation: softmax/dense: 2000, activation: softmax, sparse: {mode: lsh, hash: srp}/' \
    -e 's/labels: 200,/labels: 2000,/' -e 's/threads: 2,/threads: 1,/' "$work/job.yaml"
  "$bin" run "$work/job.yaml" --quiet 2> "$work/err" || fail "run exited $?: $(cat "$work/err")"
  e=$work/out/eval.json
  ev() { "$bin" eval "$work/job.yaml" --reps 1 "$@" > "$work/eval" 2> "$work/err" \
           || fail "eval $* exited $?: $(cat "$work/err")"; }
  ev
  cp "$e" "$work/auto.json"; a=$work/auto.json
  grep -q '"lsh_recall_reached": true' "$a" || fail "the recall target was not reached: $(cat "$a")"
  grep -q '"lsh_chosen": "K L budget"' "$a" || fail "the choice is not automatic: $(cat "$a")"
  ge "$(json_num "$a" lsh_probe_recall)" "$(json_num "$a" lsh_recall_target)" \
    || fail "probe recall $(json_num "$a" lsh_probe_recall) under the target"
  [ "$(json_num "$a" lsh_probe_points)" = 512 ] || fail "the probe did not take 512 training points"
  # On the test points the recall is measured, not chosen for: within 5 points of the target.
  ge "$(json_num "$a" lsh_recall_top1)" "$(awk -v t="$(json_num "$a" lsh_recall_target)" 'BEGIN{print t-0.05}')" \
    || fail "test recall of the exact top-1 $(json_num "$a" lsh_recall_top1) far under the target"
  K=$(json_num "$a" lsh_K); K0=$(json_num "$a" lsh_K_auto); B=$(json_num "$a" lsh_budget)
  L=$(json_num "$a" lsh_L)
  case $L in 50|100|200) ;; *) fail "L $L is not one of 50, 100, 200 (sparse.L x 1, 2, 4)" ;; esac
  [ "$K0" = 7 ] || fail "training's K for 2,000 outputs is 7 (log2(2000/16)), got $K0"
  ge "$B" 1 && ge 500 "$B" || fail "budget $B outside 1..500 (a quarter of the layer)"
  cost=$(json_num "$a" "lsh_tried_K${K}_L${L}_cost")
  p1=$(json_num "$a" lsh_p_at_1)
  grep -q "<- chosen" "$work/eval" || fail "eval did not print the settings tried"
  # Determinism: the same choice and the same P@1 again.
  ev
  for f in lsh_K lsh_L lsh_budget lsh_probe_recall lsh_p_at_1 lsh_recall_top1; do
    [ "$(json_num "$e" $f)" = "$(json_num "$a" $f)" ] || fail "$f differs between two evals"
  done
  # Hand-set K (L and budget chosen for it): when it reaches the target,
  # not more than 10% cheaper than the choice; at the job's budget (1% of
  # 2,000 = 20) no K beats the choice's P@1 by more than 1 point.
  for k in $(seq 2 "$K0"); do
    ev --lsh-K "$k"
    grep -q '"lsh_chosen": "L budget"' "$e" || fail "--lsh-K $k: not kept by hand"
    [ "$(json_num "$e" lsh_K)" = "$k" ] || fail "--lsh-K $k gave K $(json_num "$e" lsh_K)"
    c=$(json_num "$e" "lsh_tried_K${k}_L$(json_num "$e" lsh_L)_cost")
    if grep -q '"lsh_recall_reached": true' "$e"; then
      ge "$(awk -v c="$c" 'BEGIN{print c*1.1}')" "$cost" || fail "K=$k costs $c, the choice (K=$K) $cost"
    fi
    ev --lsh-K "$k" --lsh-budget 20
    [ "$(json_num "$e" lsh_budget)" = 20 ] || fail "--lsh-budget 20 gave $(json_num "$e" lsh_budget)"
    ge "$p1" "$(awk -v p="$(json_num "$e" lsh_p_at_1)" 'BEGIN{print p-1}')" \
      || fail "hand-set K=$k at budget 20 reaches P@1 $(json_num "$e" lsh_p_at_1), the choice $p1"
  done
  for bad in "--lsh-K 0" "--lsh-K 65" "--lsh-L 0" "--lsh-budget 0" "--lsh-budget 2001" \
             "--lsh-recall 0" "--lsh-recall 1.5" "--lsh-recall x" "--lsh-probe 0"; do
    # shellcheck disable=SC2086
    "$bin" eval "$work/job.yaml" --reps 1 $bad > /dev/null 2> "$work/err"
    [ $? = 2 ] || fail "eval $bad should exit 2"
    grep -q -- "${bad%% *}" "$work/err" || fail "eval $bad: the message does not name the option: $(cat "$work/err")"
  done
  # On a dense output layer the options are refused, not ignored.
  "$bin" eval "$work/job.yaml" --reps 1 --lsh-K 4 --set model.layers.out.sparse.mode=dense \
    > /dev/null 2> "$work/err"
  [ $? = 2 ] || fail "--lsh-K on a dense output layer should exit 2"
  grep -q "not LSH-sampled" "$work/err" || fail "unclear message: $(cat "$work/err")"
  ;;
delicious_lsh)
  # Real data: the LSH output layer within 2 points of the dense job's P@1.
  # Both on one thread: the configs take every CPU, and on more than one
  # the sampled layer's updates interleave differently each run, so the
  # bound would hold on a figure that moves.
  dir=$src/../shared/data
  [ -n "${ACCELRT_DATA_DIR:-}" ] && dir=$ACCELRT_DATA_DIR
  if [ ! -f "$dir/Delicious/delicious_train.txt" ]; then echo "skipped: $dir/Delicious not present"; exit 77; fi
  for c in delicious delicious-lsh; do
    "$bin" run "$src/configs/$c.yaml" --quiet --set data.train="$dir/Delicious/delicious_train.txt" \
      --set data.test="$dir/Delicious/delicious_test.txt" --set output.dir="$work/$c" \
      --set train.threads=1 2> "$work/err" || fail "$c: $(cat "$work/err")"
  done
  d=$(json_num "$work/delicious/summary.json" p_at_1)
  l=$(json_num "$work/delicious-lsh/summary.json" p_at_1)
  echo "delicious: dense P@1 $d, LSH P@1 $l, active $(json_num "$work/delicious-lsh/summary.json" out.lsh_active_mean) of 983"
  ge "$l" "$(awk -v d="$d" 'BEGIN { print d - 2 }')" || fail "LSH P@1 $l more than 2 points below dense $d"
  ;;
*) fail "unknown case $case" ;;
esac
echo "ok: $case"
