#!/usr/bin/env bash
# accelrt study end to end.
#   study.sh ACCELRT_BINARY SOURCE_DIR CASE
# Exit 0 pass, 1 fail, 77 skipped.
set -uo pipefail
bin=$1 src=$2 case=$3
py=${ACCELRT_PYTHON:-/usr/bin/python3} # Debian's, not a pyenv's
work=$(mktemp -d /tmp/accelrt-study-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
rows() { echo $(( $(wc -l < "$1") - 1 )); } # data rows of a CSV with a header
has_all() { # has_all FILE LINE...: every line (fixed text) is in FILE
  local f=$1 want; shift
  for want; do
    grep -qF "$want" "$f" || fail "missing '$want' in: $(cat "$f")"
  done
}

small_job() { # a job of a fraction of a second in $work/job.yaml
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
  generate: {train_points: 3000, test_points: 300, features: 2000, labels: 200, nnz: 20,
             labels_per_point: 2, noise: 0.1}
train: {batch: 64, iterations: 20, threads: 1, eval_every: 10, optimizer: {adam: {lr: 0.003}}}
output: {dir: $work/job-out}
YAML
}

dist_job() { # a distributed job of 6 iterations (1 server, 2 workers) in $work/job.yaml
  cat > "$work/job.yaml" <<YAML
name: dist
device: host
seed: 2
model:
  input: {dense: 32}
  layers:
    - {name: h, dense: 48, activation: relu}
    - {name: out, dense: 16, activation: softmax}
data: {generate: {train_points: 400, test_points: 0, features: 32, labels: 16, nnz: 6, labels_per_point: 2}}
train: {batch: 32, iterations: 6, optimizer: {adam: {lr: 0.01}}}
output: {dir: $work/job-out}
distributed: {servers: 1, order: tac, trace_iterations: 2}
YAML
}

small_study() { # 2 x 2 x 2 over the small job, output $work/out
  small_job
  cat > "$work/study.yaml" <<YAML
name: small-study
base: job.yaml
factors:
  train.batch: [32, 128]
  model.layers.hidden.dense: [32, 96]
response: samples_per_s
replicates: 2
seed: 3
output: $work/out
YAML
}

case $case in
quickstart)
  # The quick-start job, shrunk by fixed overrides: 2 factors x 2 levels x
  # 2 replicates, every output written, the data generated once.
  cat > "$work/study.yaml" <<YAML
name: qs
base: $src/configs/quickstart.yaml
set:
  data.generate.train_points: 3000
  data.generate.test_points: 300
  train.iterations: 12
  train.eval_every: 6
  train.threads: 1
  model.layers.hidden.dense: 32
  model.layers.out.dense: 200
  data.generate.labels: 200
factors:
  train.batch: [32, 64]
  train.optimizer: [adam, sgd]
response: samples_per_s
replicates: 2
seed: 1
YAML
  cd "$work" || exit 1
  "$bin" study study.yaml > "$work/stdout" 2> "$work/stderr" || fail "study exited $?: $(cat "$work/stderr")"
  o=$work/runs/studies/qs
  [ "$(rows "$o/runs.csv")" = 8 ] || fail "runs.csv: $(cat "$o/runs.csv")"
  [ "$(grep -c ',ok,' "$o/runs.csv")" = 8 ] || fail "not every run ok: $(cat "$o/runs.csv")"
  grep -q '^run,cell,replicate,order,train.batch,train.optimizer,samples_per_s,status,wall_s,started_unix,note$' <<<"$(head -1 "$o/runs.csv")" \
    || fail "header: $(head -1 "$o/runs.csv")"
  for t in ',train.batch,A,1,' ',train.optimizer,B,1,' ',train.batch x train.optimizer,AB,2,'; do
    grep -q "^effect$t" "$o/effects.csv" || fail "effects.csv lacks $t: $(cat "$o/effects.csv")"
  done
  grep -q '<svg' "$o/report.html" || fail "no SVG in the report"
  ! grep -qi '<script' "$o/report.html" || fail "the report has a script"
  ! grep -Eq '(src|href)=.(https?:)?//' "$o/report.html" || fail "the report loads something"
  grep -q 'is additive\|is synergistic\|is antagonistic' "$work/stdout" || fail "no verdict printed: $(cat "$work/stdout")"
  # One data set for all runs, linked from each run folder.
  [ "$(ls "$o/data" | wc -l)" = 1 ] || fail "data generated more than once: $(ls "$o/data")"
  [ -L "$o/runs/A0B0-r1/data" ] || fail "run folder does not link the shared data"
  [ ! -e "$o/runs/A0B0-r1/checkpoint.bin" ] || fail "checkpoint kept without keep_checkpoints"
  ;;
resume)
  # Stopped after 2 runs (as if interrupted): exit 1 with how to resume,
  # 2 rows; again: the 6 others run, the first 2 are not redone.
  small_study
  ACCELRT_STUDY_STOP_AFTER=2 "$bin" study "$work/study.yaml" > "$work/o1" 2> "$work/e1"; rc=$?
  [ $rc = 1 ] || fail "stopped study exit $rc, want 1"
  grep -q "resume with 'accelrt study" "$work/e1" || fail "no resume hint: $(cat "$work/e1")"
  [ "$(rows "$work/out/runs.csv")" = 2 ] || fail "want 2 rows: $(cat "$work/out/runs.csv")"
  [ ! -e "$work/out/report.html" ] || fail "a stopped study wrote the report"
  first=$(sed -n 2,3p "$work/out/runs.csv")
  ids=$(sed -n '2,3s/,.*//p' "$work/out/runs.csv")
  # An unfinished run's folder (left by a crash) is cleared and redone.
  third=$("$bin" study "$work/study.yaml" --dry-run | awk '$1 == 3 {print $2}')
  mkdir -p "$work/out/runs/$third" && touch "$work/out/runs/$third/stale"
  # A row cut short by a crash is dropped.
  printf '%s' "${third},A" >> "$work/out/runs.csv"
  "$bin" study "$work/study.yaml" --resume > "$work/o2" 2> "$work/e2" || fail "resume failed: $(cat "$work/e2")"
  grep -q "2 done before" "$work/o2" || fail "$(cat "$work/o2")"
  grep -q "dropped a partial last line" "$work/e2" || fail "partial line not reported: $(cat "$work/e2")"
  [ "$(rows "$work/out/runs.csv")" = 8 ] || fail "want 8 rows: $(cat "$work/out/runs.csv")"
  [ "$(sed -n 2,3p "$work/out/runs.csv")" = "$first" ] || fail "finished rows changed"
  [ "$(grep -c '^\[' "$work/o2")" = 6 ] || fail "resume ran other than 6 runs: $(cat "$work/o2")"
  for id in $ids; do
    ! grep -q "\] $id " "$work/o2" || fail "finished run $id redone"
  done
  [ ! -e "$work/out/runs/$third/stale" ] || fail "the unfinished run's folder was not cleared"
  [ "$(cut -d, -f1 "$work/out/runs.csv" | sort | uniq -d)" = "" ] || fail "a run recorded twice"
  # Complete: a third start runs nothing.
  "$bin" study "$work/study.yaml" > "$work/o3" 2>&1 || fail "third start failed"
  grep -q "8 done before" "$work/o3" && ! grep -q '^\[' "$work/o3" || fail "$(cat "$work/o3")"
  # A changed design is refused, not mixed with the old rows.
  sed -i 's/replicates: 2/replicates: 3/' "$work/study.yaml"
  "$bin" study "$work/study.yaml" > /dev/null 2> "$work/e4"; rc=$?
  [ $rc = 1 ] && grep -q "holds another study" "$work/e4" || fail "changed design: exit $rc $(cat "$work/e4")"
  ;;
sigint)
  # SIGINT while a run is running: the child is stopped, runs.csv stays
  # valid, exit non-zero with how to resume; resuming completes the study.
  small_study
  sed -i 's/iterations: 20/iterations: 400/' "$work/job.yaml"
  "$bin" study "$work/study.yaml" > "$work/o1" 2> "$work/e1" &
  pid=$!
  for _ in $(seq 1 600); do
    [ -f "$work/out/runs.csv" ] && [ "$(rows "$work/out/runs.csv")" -ge 1 ] && break
    sleep 0.1
  done
  sleep 0.3
  kill -INT $pid
  wait $pid; rc=$?
  [ $rc -ne 0 ] || fail "interrupted study exited 0"
  grep -q "resume with" "$work/e1" || fail "no resume hint: $(cat "$work/e1")"
  n=$(rows "$work/out/runs.csv")
  [ "$n" -ge 1 ] && [ "$n" -lt 8 ] || fail "rows after SIGINT: $n"
  [ "$(tail -c 1 "$work/out/runs.csv" | od -An -c | tr -d ' ')" = '\n' ] || fail "last row cut"
  awk -F, 'NF != 11 { exit 1 }' "$work/out/runs.csv" || fail "a row of another width"
  ! grep -q ',failed,\|,timeout,' "$work/out/runs.csv" || fail "the stopped run was recorded"
  "$bin" study "$work/study.yaml" > "$work/o2" 2> "$work/e2" || fail "resume failed: $(cat "$work/e2")"
  [ "$(rows "$work/out/runs.csv")" = 8 ] || fail "resume did not complete"
  ;;
jobs)
  # A jobs: base (lanes): the policy as a factor, JCT as the response, each
  # job's data shared, the timeline as queued/running spans.
  cat > "$work/jobs.yaml" <<YAML
name: tenants
device: host
seed: 3
runtime: {policy: fifo, memory: 512MiB}
output: {dir: $work/jobs-out}
jobs:
  - name: long
    model: {input: {sparse: 1000}, layers: [{name: h, dense: 64, activation: relu}, {name: out, dense: 300}]}
    data: {generate: {train_points: 2000, test_points: 100, features: 1000, labels: 300, nnz: 10}}
    train: {batch: 64, iterations: 40, threads: 1}
  - name: short
    arrival: 0.01
    model: {input: {sparse: 1000}, layers: [{name: out, dense: 100}]}
    data: {generate: {train_points: 1000, test_points: 100, features: 1000, labels: 100, nnz: 10}}
    train: {batch: 32, iterations: 10, threads: 1}
    repeat: 2
YAML
  cat > "$work/study.yaml" <<YAML
base: jobs.yaml
factors:
  runtime.policy: [fifo, srtf]
  jobs.long.train.batch: [32, 64]
response: jct_s
replicates: 2
output: $work/out
YAML
  "$bin" study "$work/study.yaml" > "$work/stdout" 2> "$work/stderr" || fail "study exited $?: $(cat "$work/stderr")"
  [ "$(grep -c ',ok,' "$work/out/runs.csv")" = 8 ] || fail "runs: $(cat "$work/out/runs.csv")"
  grep -q "class='running'" "$work/out/report.html" || fail "no job spans in the timeline"
  [ -L "$work/out/runs/A0B0-r1/long/data" ] || fail "job data not shared: $(ls -R "$work/out/runs/A0B0-r1" | head)"
  ;;
eval)
  # eval: after each run, accelrt eval on its checkpoint: eval.json in each
  # run's folder, the response read from it; linked keys (a layer's width
  # and the label count) as one factor; a run stopped before its eval is
  # redone whole.
  small_job
  cat > "$work/study.yaml" <<YAML
name: eval-study
base: job.yaml
factors:
  model.layers.out.sparse.mode: [dense, lsh]
  model.layers.out.dense+data.generate.labels: [200, 400]
response: inference_samples_per_s
eval: {points: 200, reps: 2}
replicates: 2
seed: 4
output: $work/out
YAML
  "$bin" study "$work/study.yaml" --dry-run > "$work/dry" 2> "$work/err" || fail "dry run: $(cat "$work/err")"
  grep -qF "after each run: accelrt eval --points 200 --reps 2" "$work/dry" || fail "$(cat "$work/dry")"
  # Stopped after one run; then a run that trained but was stopped before
  # its eval (a folder with a summary and no row) is cleared and redone.
  ACCELRT_STUDY_STOP_AFTER=1 "$bin" study "$work/study.yaml" > /dev/null 2> "$work/e1"; rc=$?
  [ $rc = 1 ] || fail "stopped study exit $rc, want 1: $(cat "$work/e1")"
  first=$(sed -n '2s/,.*//p' "$work/out/runs.csv")
  [ -f "$work/out/runs/$first/eval.json" ] || fail "no eval.json in $first: $(ls "$work/out/runs/$first")"
  second=$("$bin" study "$work/study.yaml" --dry-run | awk '$1 == 2 {print $2}')
  mkdir -p "$work/out/runs/$second"
  cp "$work/out/runs/$first/summary.json" "$work/out/runs/$second/"
  "$bin" study "$work/study.yaml" > "$work/stdout" 2> "$work/stderr" || fail "study exited $?: $(cat "$work/stderr")"
  o=$work/out
  [ "$(rows "$o/runs.csv")" = 8 ] || fail "runs.csv: $(cat "$o/runs.csv")"
  [ "$(grep -c ',ok,' "$o/runs.csv")" = 8 ] || fail "not every run ok: $(cat "$o/runs.csv")"
  grep -q '^run,cell,replicate,order,model.layers.out.sparse.mode,model.layers.out.dense+data.generate.labels,inference_samples_per_s,status,' <<<"$(head -1 "$o/runs.csv")" \
    || fail "header: $(head -1 "$o/runs.csv")"
  [ "$(grep -c "\] $second " "$work/stdout")" = 1 ] || fail "the half-done run $second was not redone: $(cat "$work/stdout")"
  for d in "$o"/runs/*; do
    [ -f "$d/eval.json" ] || fail "no eval.json in $d"
    grep -q '"points": 200' "$d/eval.json" || fail "eval --points not passed: $(cat "$d/eval.json")"
    grep -q 'all labels scored' "$d/log.txt" || fail "the eval's output is not in $d/log.txt"
    [ ! -e "$d/checkpoint.bin" ] || fail "checkpoint kept in $d"
    case $(basename "$d") in
    A0*) ! grep -q lsh_samples_per_s "$d/eval.json" || fail "a dense run has LSH figures" ;;
    A1*) grep -q lsh_samples_per_s "$d/eval.json" || fail "a sampled run lacks LSH figures: $(cat "$d/eval.json")" ;;
    esac
  done
  # The linked factor set both keys: 400 labels in the wide cells' data.
  grep -q '"p_at_1"' "$o/runs/A1B1-r1/eval.json" || fail "$(cat "$o/runs/A1B1-r1/eval.json")"
  [ "$(ls "$o/data" | wc -l)" = 2 ] || fail "want one data set per width: $(ls "$o/data")"
  # The note says which path was measured, per row.
  [ "$(grep -c '^A0B[01]-r[12],.*inference scoring every label (eval.json samples_per_s)' "$o/runs.csv")" = 4 ] \
    || fail "dense rows' notes: $(cat "$o/runs.csv")"
  [ "$(grep -c '^A1B[01]-r[12],.*inference by LSH candidates (eval.json lsh_samples_per_s)' "$o/runs.csv")" = 4 ] \
    || fail "sampled rows' notes: $(cat "$o/runs.csv")"
  grep -q '^effect,model.layers.out.sparse.mode x model.layers.out.dense+data.generate.labels,AB,2,' "$o/effects.csv" \
    || fail "effects.csv: $(cat "$o/effects.csv")"
  # Any number of eval.json as the response.
  cat > "$work/s2.yaml" <<YAML
base: job.yaml
factors: {train.batch: [32, 64]}
response: {eval: p_at_1}
eval: {points: 100, reps: 1}
replicates: 2
output: $work/out2
YAML
  "$bin" study "$work/s2.yaml" > "$work/stdout2" 2> "$work/stderr2" || fail "study exited $?: $(cat "$work/stderr2")"
  grep -q ',train.batch,eval.p_at_1,status,' <<<"$(head -1 "$work/out2/runs.csv")" || fail "header: $(head -1 "$work/out2/runs.csv")"
  [ "$(grep -c ',ok,' "$work/out2/runs.csv")" = 4 ] || fail "runs: $(cat "$work/out2/runs.csv")"
  ;;
bad_study)
  # Each problem as FILE:LINE:COL: error: KEY: ..., exit 2, nothing run.
  small_job
  cat > "$work/study.yaml" <<YAML
name: bad
base: job.yaml
factors:
  train.batch: [64, -3]
  train.bogus: [1, 2]
response: samples_per_s
replicates: 2
output: $work/out
YAML
  "$bin" study "$work/study.yaml" > /dev/null 2> "$work/err"; rc=$?
  [ $rc = 2 ] || fail "exit $rc, want 2"
  grep -Eq "study.yaml:4:21: error: factors.train.batch\[1\]: level '-3' is not valid" "$work/err" \
    || fail "bad level: $(cat "$work/err")"
  grep -Eq "study.yaml:5:3: error: factors.train.bogus: the base job refuses this key at every level: train.bogus: unknown key" "$work/err" \
    || fail "unknown path: $(cat "$work/err")"
  [ ! -e "$work/out" ] || fail "a rejected study wrote output"
  printf 'base: nothere.yaml\nfactors: {train.batch: [1, 2]}\nresponse: samples_per_s\n' > "$work/s2.yaml"
  "$bin" study "$work/s2.yaml" 2> "$work/err"; rc=$?
  [ $rc = 2 ] && grep -q "s2.yaml:1:7: error: base: cannot read the base job 'nothere.yaml'" "$work/err" \
    || fail "missing base: exit $rc $(cat "$work/err")"
  printf 'base: job.yaml\nfactors: {train.batch: 64}\nresponse: speed\nreplicates: 0\nfraction: [C=AB]\nbogus: 1\n' > "$work/s3.yaml"
  "$bin" study "$work/s3.yaml" 2> "$work/err"; rc=$?
  [ $rc = 2 ] || fail "exit $rc"
  has_all "$work/err" "s3.yaml:2:24: error: factors.train.batch: expected a list" \
    "s3.yaml:3:11: error: response: unknown response 'speed'" \
    "s3.yaml:4:13: error: replicates: expected a whole number from 1" \
    "s3.yaml:6:1: error: unknown key 'bogus'"
  # A response the base job does not write.
  printf 'base: job.yaml\nfactors: {train.batch: [32, 64]}\nresponse: makespan_s\n' > "$work/s4.yaml"
  "$bin" study "$work/s4.yaml" 2> "$work/err"; rc=$?
  [ $rc = 2 ] && grep -q "makespan_s is not available for a single job" "$work/err" || fail "$(cat "$work/err")"
  # A bad eval: block and eval responses without one, or that the job
  # cannot give.
  printf 'base: job.yaml\nfactors: {train.batch: [32, 64]}\nresponse: {eval: p_at_2}\neval: {points: -1, reps: 2, bogus: 1}\n' > "$work/s5.yaml"
  "$bin" study "$work/s5.yaml" 2> "$work/err"; rc=$?
  [ $rc = 2 ] || fail "bad eval: exit $rc, want 2: $(cat "$work/err")"
  has_all "$work/err" "s5.yaml:3:18: error: response.eval: 'p_at_2' is not a number accelrt eval writes" \
    "s5.yaml:4:16: error: eval.points: expected a whole number from 0" \
    "s5.yaml:4:29: error: eval: unknown key 'bogus'"
  printf 'base: job.yaml\nfactors: {train.batch: [32, 64]}\nresponse: inference_samples_per_s\neval: [1]\n' > "$work/s6.yaml"
  "$bin" study "$work/s6.yaml" 2> "$work/err"; rc=$?
  [ $rc = 2 ] && grep -qF "s6.yaml:4:7: error: eval: expected {points: N, reps: N}" "$work/err" \
    && grep -qF "s6.yaml:3:11: error: response: inference_samples_per_s is read from eval.json" "$work/err" \
    || fail "eval list: exit $rc $(cat "$work/err")"
  printf 'base: job.yaml\nfactors: {train.batch: [32, 64]}\nresponse: {eval: lsh_samples_per_s}\neval: true\n' > "$work/s7.yaml"
  "$bin" study "$work/s7.yaml" 2> "$work/err"; rc=$?
  [ $rc = 2 ] && grep -qF "s7.yaml:3:18: error: response: eval.json has lsh_samples_per_s only when the output layer runs LSH-sampled" "$work/err" \
    || fail "lsh response of a dense job: exit $rc $(cat "$work/err")"
  printf 'base: job.yaml\nfactors: {model.layers.out.dense+: [32, 64]}\nresponse: samples_per_s\n' > "$work/s8.yaml"
  "$bin" study "$work/s8.yaml" 2> "$work/err"; rc=$?
  [ $rc = 2 ] && grep -qF "s8.yaml:2:11: error: factors.model.layers.out.dense+: 'model.layers.out.dense+' is not a factor" "$work/err" \
    || fail "bad linked keys: exit $rc $(cat "$work/err")"
  ;;
fraction)
  # A half fraction of four factors: the design and its aliases.
  small_job
  cat > "$work/study.yaml" <<YAML
base: job.yaml
factors:
  train.batch: [32, 64]
  model.layers.hidden.dense: [32, 64]
  train.optimizer.adam.lr: [0.001, 0.003]
  seed: [1, 2]
fraction: [D=ABC]
response: samples_per_s
replicates: 2
YAML
  "$bin" study "$work/study.yaml" --dry-run > "$work/out" 2> "$work/err" || fail "$(cat "$work/err")"
  has_all "$work/out" "fraction: 2^(4-1) = 8 of 16 cells" "defining relation: I = ABCD (resolution 4)" \
    "  D = ABC" "  AB = CD" "  AC = BD" "  AD = BC" "runs: 16 in this order"
  # Every planned cell has D's level = the product of A, B and C's.
  grep -E '^ +[0-9]+  A[01]B[01]C[01]D[01]-r' "$work/out" | awk '{
    c = $2; a = substr(c,2,1); b = substr(c,4,1); cc = substr(c,6,1); d = substr(c,8,1)
    p = (a==1?1:-1) * (b==1?1:-1) * (cc==1?1:-1); if ((d==1?1:-1) != p) exit 1 }' \
    || fail "a cell outside the fraction"
  ;;
log_scale)
  # scale: log: the fit is of ln(samples_per_s), effects and intervals are
  # ratios; effects.csv gains scale and ratio columns; the report draws log
  # axes.  A run whose response is 0 is named and left out; a bad scale is
  # a FILE:LINE:COL error, exit 2.
  small_study
  echo 'scale: log' >> "$work/study.yaml"
  "$bin" study "$work/study.yaml" --dry-run > "$work/dry" 2> "$work/err" || fail "dry run: $(cat "$work/err")"
  grep -qF "analysed on a log scale (effects as ratios)" "$work/dry" || fail "$(cat "$work/dry")"
  "$bin" study "$work/study.yaml" > "$work/stdout" 2> "$work/stderr" || fail "study exited $?: $(cat "$work/stderr")"
  o=$work/out
  [ "$(grep -c ',ok,' "$o/runs.csv")" = 8 ] || fail "runs: $(cat "$o/runs.csv")"
  grep -qx 'kind,term,letters,order,level,estimate,se,ci_low,ci_high,verdict,confounded_with,sentence,scale,ratio,ratio_ci_low,ratio_ci_high' <<<"$(head -1 "$o/effects.csv")" \
    || fail "effects.csv header: $(head -1 "$o/effects.csv")"
  grep -q '^effect,train.batch,A,1,.*multiplies samples_per_s by [0-9.]*x (95% CI [0-9.]*x to [0-9.]*x).*,log,[0-9.e+-]*,[0-9.e+-]*,[0-9.e+-]*$' "$o/effects.csv" \
    || fail "main effect as a ratio: $(cat "$o/effects.csv")"
  grep -q '^effect,train.batch x model.layers.hidden.dense,AB,2,.*interaction ratio.*,log,' "$o/effects.csv" \
    || fail "interaction as a ratio: $(cat "$o/effects.csv")"
  # Each ratio is exp of its ln-scale estimate (a main effect: exp(estimate)).
  awk -F, '$1 == "effect" && $4 == 1 { e = exp($6); if (e / $(NF-2) > 1.0001 || e / $(NF-2) < 0.9999) exit 1 }' "$o/effects.csv" \
    || fail "ratio is not exp(estimate): $(cat "$o/effects.csv")"
  [ "$(grep -c '^level_mean,.*,log,' "$o/effects.csv")" = 4 ] || fail "level means: $(cat "$o/effects.csv")"
  grep -q 'analysed on a log scale' "$work/stdout" && grep -q 'multiplies samples_per_s by' "$work/stdout" \
    || fail "stdout: $(cat "$work/stdout")"
  has_all "$o/report.html" "Analysed on a log scale:" "ratio (log scale)" ">log scale</text>" "geometric mean" \
    "<th>ratio</th>"
  # A response of 0 has no logarithm: runs.csv keeps it, the analysis
  # names the run and leaves it out.
  zero=$(sed -n '2s/,.*//p' "$o/runs.csv")
  awk -F, -v OFS=, 'NR == 2 { $7 = 0 } { print }' "$o/runs.csv" > "$work/runs.csv" && cp "$work/runs.csv" "$o/runs.csv"
  "$bin" study "$work/study.yaml" --analyze > "$work/stdout2" 2> "$work/stderr2" || fail "analyze: $(cat "$work/stderr2")"
  grep -qF "not analysable on a log scale: $zero (samples_per_s 0): left out" "$work/stdout2" \
    || fail "zero response: $(cat "$work/stdout2")"
  grep -qF "8 of 8 runs gave samples_per_s; analysed on a log scale" "$work/stdout2" || fail "$(cat "$work/stdout2")"
  grep -qF "$zero: not analysable on the log scale" "$o/report.html" || fail "the report does not name $zero"
  # The same runs on the linear scale: the old columns only, the zero kept.
  sed -i '/^scale: log$/d' "$work/study.yaml"
  "$bin" study "$work/study.yaml" --analyze > "$work/stdout3" 2>&1 || fail "linear analyze: $(cat "$work/stdout3")"
  grep -qx 'kind,term,letters,order,level,estimate,se,ci_low,ci_high,verdict,confounded_with,sentence' <<<"$(head -1 "$o/effects.csv")" \
    || fail "linear effects.csv header: $(head -1 "$o/effects.csv")"
  grep -qF "8 of 8 runs gave samples_per_s" "$work/stdout3" || fail "$(cat "$work/stdout3")"
  # A bad scale.
  printf 'base: job.yaml\nfactors: {train.batch: [32, 64]}\nresponse: samples_per_s\nscale: logarithmic\n' > "$work/s2.yaml"
  "$bin" study "$work/s2.yaml" 2> "$work/err"; rc=$?
  [ $rc = 2 ] && grep -qF "s2.yaml:4:8: error: scale: expected linear or log, got 'logarithmic'" "$work/err" \
    || fail "bad scale: exit $rc $(cat "$work/err")"
  ;;
old_runs)
  # runs.csv as the previous version of accelrt study wrote it (tests/study/
  # data/runs-v1.csv: rows of every status from real runs of this design,
  # the failed one written by hand, and a timed-out run done again later)
  # loads unchanged: --analyze reads every status, a run's later row
  # replaces its earlier one, resuming runs nothing and leaves the file as
  # it was; a row with a status no version writes is refused at its line.
  small_job
  cat > "$work/study.yaml" <<YAML
base: job.yaml
factors:
  train.batch: [32, 128]
  device: [host, "cuda:0"]
response: {time_to_p1: 1}
better: lower
replicates: 2
seed: 3
output: $work/out
YAML
  mkdir -p "$work/out" && cp "$src/tests/study/data/runs-v1.csv" "$work/out/runs.csv"
  "$bin" study "$work/study.yaml" --analyze > "$work/stdout" 2> "$work/stderr" \
    || fail "analyze exited $?: $(cat "$work/stderr")"
  grep -qF "2 of 8 runs gave time_to_p1_1; 2 planned cells without a result" "$work/stdout" \
    || fail "$(cat "$work/stdout")"
  has_all "$work/out/report.html" "A1B0-r2: not_reached" "A0B0-r2: no_response" \
    "A1B1-r1: failed" "A0B1-r1: skipped" "2 gave a response, 6 did not, 0 not run yet"
  ! grep -q "A0B0-r1: timeout" "$work/out/report.html" || fail "the earlier row of A0B0-r1 was kept"
  grep -q '^level_mean,train.batch,A,1,32,' "$work/out/effects.csv" || fail "$(cat "$work/out/effects.csv")"
  "$bin" study "$work/study.yaml" > "$work/o2" 2> "$work/e2" || fail "resume: $(cat "$work/e2")"
  grep -q "8 done before" "$work/o2" && ! grep -q '^\[' "$work/o2" || fail "$(cat "$work/o2")"
  cmp -s "$work/out/runs.csv" "$src/tests/study/data/runs-v1.csv" || fail "runs.csv was changed"
  sed -i '0,/,skipped,/s//,skiped,/' "$work/out/runs.csv"
  "$bin" study "$work/study.yaml" --analyze > /dev/null 2> "$work/e3"; rc=$?
  [ $rc = 1 ] && grep -qF "runs.csv:4: run 'A0B1-r1' has the unknown status 'skiped'" "$work/e3" \
    || fail "unknown status: exit $rc $(cat "$work/e3")"
  ;;
launcher)
  # A distributed base: its runs start under launcher:, else
  # $ACCELRT_MPIEXEC, else mpiexec (Open MPI's flags only for that
  # default).  A fake launcher records its argv, then starts the ranks
  # with mpiexec, Open MPI's permissions coming from the environment so
  # that the record holds only what the study passed.
  command -v mpiexec > /dev/null || { echo "skipped: no mpiexec"; exit 77; }
  dist_job
  cat > "$work/fake" <<'SH'
#!/bin/sh
# fake LOG (-n N | --ntasks=N) CMD...: appends its argv to LOG, runs CMD on N ranks.
log=$1; shift
echo "$*" >> "$log"
case $1 in
  -n) n=$2; shift 2 ;;
  --ntasks=*) n=${1#--ntasks=}; shift ;;
  *) echo "fake launcher: no rank count first in: $*" >&2; exit 3 ;;
esac
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  exec mpiexec -n "$n" "$@"
SH
  chmod +x "$work/fake"
  dist_study() { # dist_study FILE OUT [LAUNCHER LINE]
    printf 'base: job.yaml\nranks: 3\nfactors: {distributed.order: [random, tac]}\nresponse: samples_per_s\nreplicates: 1\noutput: %s\n%s\n' \
      "$2" "${3:-}" > "$1"
  }
  ran_under() { # ran_under OUT LOG PREFIX: both runs ok, LOG has both runs' argv starting with PREFIX
    [ "$(grep -c ',ok,' "$1/runs.csv")" = 2 ] || fail "runs: $(cat "$1/runs.csv")"
    [ "$(wc -l < "$2")" = 2 ] || fail "the launcher ran $(wc -l < "$2") times, not 2: $(cat "$2")"
    local line exe
    exe=$(readlink -f "$bin")
    while read -r line; do
      case $line in
        "$3 $exe run $work/job.yaml --set distributed.order="*) ;;
        *) fail "launcher argv: $line" ;;
      esac
    done < "$2"
    grep -Eq -- '--oversubscribe|--allow-run-as-root' "$2" && fail "Open MPI flags added: $(cat "$2")"
    return 0
  }
  # 1. launcher: as a string, {ranks} inside a word.
  dist_study "$work/s1.yaml" "$work/o1" "launcher: \"$work/fake $work/log1 --ntasks={ranks}\""
  env -u ACCELRT_MPIEXEC "$bin" study "$work/s1.yaml" > "$work/out1" 2> "$work/err" ||
    fail "study under launcher: exited $?: $(cat "$work/err")"
  grep -qF "each run starts under $work/fake $work/log1 --ntasks=3 (launcher: in the study file)" "$work/out1" ||
    fail "the study does not name its launcher: $(cat "$work/out1")"
  ran_under "$work/o1" "$work/log1" "--ntasks=3"
  # 2. $ACCELRT_MPIEXEC with no {ranks}: -n RANKS appended.
  dist_study "$work/s2.yaml" "$work/o2"
  ACCELRT_MPIEXEC="$work/fake $work/log2" "$bin" study "$work/s2.yaml" > "$work/out2" 2> "$work/err" ||
    fail "study under ACCELRT_MPIEXEC: exited $?: $(cat "$work/err")"
  grep -qF "each run starts under $work/fake $work/log2 -n 3 (from \$ACCELRT_MPIEXEC)" "$work/out2" ||
    fail "$(cat "$work/out2")"
  ran_under "$work/o2" "$work/log2" "-n 3"
  # 3. The list form keeps a word with a blank whole; launcher: wins over
  #    the variable.
  dist_study "$work/s3.yaml" "$work/o3" "launcher: ['$work/fake', '$work/log 3', -n, '{ranks}']"
  ACCELRT_MPIEXEC="$work/fake $work/log2" "$bin" study "$work/s3.yaml" > "$work/out3" 2> "$work/err" ||
    fail "study under a list launcher: exited $?: $(cat "$work/err")"
  grep -qF "each run starts under $work/fake '$work/log 3' -n 3 (launcher: in the study file)" "$work/out3" ||
    fail "$(cat "$work/out3")"
  ran_under "$work/o3" "$work/log 3" "-n 3"
  [ "$(wc -l < "$work/log2")" = 2 ] || fail "ACCELRT_MPIEXEC was used although launcher: was given"
  # 4. The default: mpiexec, with Open MPI's flags when it is Open MPI's
  #    (and only then), so that it runs as root on a small machine without
  #    the environment's permission.
  want="mpiexec -n 3 (the default mpiexec)"
  if grep -Eq "Open MPI|OpenRTE" <<<"$(mpiexec --version 2>&1)"; then
    want="mpiexec --oversubscribe -n 3 (the default: Open MPI's"
    [ "$(id -u)" = 0 ] && want="mpiexec --oversubscribe --allow-run-as-root -n 3 (the default: Open MPI's"
  fi
  env -u ACCELRT_MPIEXEC -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
    -u OMPI_MCA_rmaps_base_oversubscribe "$bin" study "$work/s2.yaml" --out "$work/o4" \
    > "$work/out4" 2> "$work/err" || fail "study under the default mpiexec: exited $?: $(cat "$work/err")"
  grep -qF "each run starts under $want" "$work/out4" || fail "default launcher: $(cat "$work/out4")"
  [ "$(grep -c ',ok,' "$work/o4/runs.csv")" = 2 ] || fail "default launcher: $(cat "$work/o4/runs.csv")"
  # 5. Bad launchers, each at its place; exit 2, nothing run.
  dist_study "$work/b1.yaml" "$work/ob" 'launcher: "srun -n {rank}"'
  dist_study "$work/b2.yaml" "$work/ob" "launcher: [srun, {x: 1}, '']"
  dist_study "$work/b3.yaml" "$work/ob" "launcher: 'srun \"-n 3\"'"
  dist_study "$work/b4.yaml" "$work/ob" 'launcher: []'
  for b in b1 b2 b3 b4; do
    env -u ACCELRT_MPIEXEC "$bin" study "$work/$b.yaml" > /dev/null 2>> "$work/err_b"; rc=$?
    [ $rc = 2 ] || fail "$b: exit $rc, want 2: $(cat "$work/err_b")"
  done
  has_all "$work/err_b" \
    "b1.yaml:7:11: error: launcher: unknown placeholder '{rank}'; the only one is {ranks}" \
    "b2.yaml:7:18: error: launcher[1]: expected a single value, got a mapping" \
    "b2.yaml:7:26: error: launcher[2]: a word of the launcher is empty" \
    "b3.yaml:7:11: error: launcher: quotes and backslashes are not interpreted" \
    "b4.yaml:7:11: error: launcher: expected the command that starts the ranks"
  ACCELRT_MPIEXEC="srun -n {rank}" "$bin" study "$work/s2.yaml" > /dev/null 2> "$work/err"; rc=$?
  [ $rc = 2 ] && grep -qF "s2.yaml: error: the launcher in \$ACCELRT_MPIEXEC ('srun -n {rank}'): unknown placeholder" "$work/err" ||
    fail "bad ACCELRT_MPIEXEC: exit $rc: $(cat "$work/err")"
  small_job
  printf 'base: job.yaml\nfactors: {train.batch: [32, 64]}\nresponse: samples_per_s\nlauncher: srun\n' > "$work/b5.yaml"
  "$bin" study "$work/b5.yaml" > /dev/null 2> "$work/err"; rc=$?
  [ $rc = 2 ] && grep -qF "b5.yaml:4:11: error: launcher: launcher starts the ranks of a base job with a distributed: section; this base is a single job" "$work/err" ||
    fail "launcher with a single job: exit $rc: $(cat "$work/err")"
  [ ! -e "$work/ob" ] || fail "a rejected study wrote output"
  ;;
base_factor)
  # factors: {base: [...]} (job files relative to the study file) and
  # alongside: [none, FILE] on single jobs: every run of the right base,
  # the job alongside started in its folder, design.txt holding each
  # base's hash, the analysis within each base; then bad base and
  # alongside levels, each at its place, exit 2, nothing written.
  small_job
  mkdir -p "$work/m"
  for w in 32 64 96; do
    sed -e "s/dense: 64, activation: relu/dense: $w, activation: relu/" -e "s/name: small/name: w$w/" \
      "$work/job.yaml" > "$work/m/w$w.yaml"
  done
  sed -e 's/iterations: 20/iterations: 400/' -e "s|$work/job-out|$work/side-out|" "$work/job.yaml" > "$work/side.yaml"
  cat > "$work/m/study.yaml" <<YAML
name: bases
factors:
  base: [w32.yaml, w64.yaml, w96.yaml]
  alongside: [none, ../side.yaml]
set: {train.iterations: 10}
response: samples_per_s
scale: log
replicates: 2
seed: 2
output: $work/out
YAML
  "$bin" study "$work/m/study.yaml" --dry-run > "$work/dry" 2> "$work/err" || fail "dry run: $(cat "$work/err")"
  has_all "$work/dry" "study bases: base jobs of factor A (single job)" \
    "A  base                         0=w32.yaml  1=w64.yaml  2=w96.yaml" \
    "B  alongside                    0=none  1=../side.yaml" "cells: 6 planned of 6"
  "$bin" study "$work/m/study.yaml" > "$work/stdout" 2> "$work/stderr" || fail "study exited $?: $(cat "$work/stderr")"
  o=$work/out
  [ "$(grep -c ',ok,' "$o/runs.csv")" = 12 ] || fail "runs: $(cat "$o/runs.csv")"
  grep -q '^run,cell,replicate,order,base,alongside,samples_per_s,status,' <<<"$(head -1 "$o/runs.csv")" \
    || fail "header: $(head -1 "$o/runs.csv")"
  for d in "$o"/runs/*; do
    c=$(basename "$d")
    w=$(sed -n 's/^name: //p' "$d/job.resolved.yaml" 2>/dev/null | head -1)
    case $c in
    A0*) want=w32 ;; A1*) want=w64 ;; A2*) want=w96 ;;
    esac
    [ "$w" = "$want" ] || fail "$c ran '$w', not $want"
    case $c in
    *B1-*) grep -q "accelrt study: alongside, start 1" "$d/alongside/log.txt" || fail "no job alongside in $c"
           # The run waited until the job alongside trained.
           [ -f "$d/alongside/metrics.jsonl" ] || fail "the job alongside wrote nothing in $c"
           ! grep -q "was not training" "$d/alongside/log.txt" || fail "the run in $c did not wait for the job alongside"
           grep -q "^$c,.*alongside started [1-9][0-9]* time" "$o/runs.csv" || fail "no alongside note for $c: $(cat "$o/runs.csv")" ;;
    *B0-*) [ ! -e "$d/alongside" ] || fail "a job alongside in $c" ;;
    esac
  done
  # Nothing of the jobs alongside outlives the study.
  ! pgrep -f "run $work/side.yaml" > /dev/null || fail "a job alongside is still running"
  grep -Eq "^factor A: base: \[$work/m/w32.yaml [0-9a-f]{16}\] \[$work/m/w64.yaml" "$o/design.txt" \
    || fail "design.txt: $(cat "$o/design.txt")"
  has_all "$work/stdout" "base: geometric means of samples_per_s w32.yaml" "alongside within each base: w32.yaml"
  grep -q '^within,alongside,B,1,w96.yaml,' "$o/effects.csv" || fail "effects.csv within: $(cat "$o/effects.csv")"
  grep -q '^across,alongside,B,1,w32.yaml vs w64.yaml,.*,\(same\|differs\),' "$o/effects.csv" \
    || fail "effects.csv across: $(cat "$o/effects.csv")"
  grep -q '^across,base,A,1,w32.yaml vs w96.yaml,' "$o/effects.csv" || fail "effects.csv level pairs: $(cat "$o/effects.csv")"
  has_all "$o/report.html" "Within each level of base" "across levels"
  # A changed base is a changed study: resuming refuses it.
  echo "# changed" >> "$work/m/w64.yaml"
  "$bin" study "$work/m/study.yaml" > /dev/null 2> "$work/err"; rc=$?
  [ $rc != 0 ] && grep -q "design.txt" "$work/err" || fail "a changed base was not noticed: exit $rc $(cat "$work/err")"
  # Bad levels: a missing base, base: beside the factor, one level, bases
  # of two kinds, a distributed job alongside, a missing job alongside.
  dist_job
  mv "$work/job.yaml" "$work/m/dist.yaml"
  bad() { # bad NAME FACTORS [EXTRA LINE]: the study file $work/m/NAME.yaml
    printf 'factors:\n%s\nresponse: samples_per_s\noutput: %s/bad\n%s\n' "$2" "$work" "${3:-}" > "$work/m/$1.yaml"
  }
  bad b1 '  base: [w32.yaml, nothere.yaml]'
  bad b2 '  base: [w32.yaml, w96.yaml]' 'base: w32.yaml'
  bad b3 '  base: [w32.yaml]'
  bad b4 '  base: [w32.yaml, dist.yaml]'
  bad b5 '  base: [w32.yaml, w96.yaml]\n  alongside: [none, dist.yaml]'
  bad b6 '  base: [w32.yaml, w96.yaml]\n  alongside: [none, gone.yaml]'
  bad b7 '  train.batch: [32, 64]'
  for b in b1 b2 b3 b4 b5 b6 b7; do
    sed -i 's/\\n/\n/' "$work/m/$b.yaml"
    "$bin" study "$work/m/$b.yaml" > /dev/null 2>> "$work/err_b"; rc=$?
    [ $rc = 2 ] || fail "$b: exit $rc, want 2: $(cat "$work/err_b")"
  done
  has_all "$work/err_b" \
    "b1.yaml:2:20: error: factors.base[1]: cannot read the base job 'nothere.yaml' ($work/m/nothere.yaml: No such file or directory); the path is relative to the study file" \
    "b2.yaml:5:7: error: base: the base job is a factor (factors.base at line 2): drop this base: or the factor" \
    "b3.yaml:2:9: error: factors.base: expected a list of two or more job files" \
    "b4.yaml:2:20: error: factors.base[1]: 'dist.yaml' is a distributed job but 'w32.yaml' is a single job" \
    "b5.yaml:3:21: error: factors.alongside[1]: level 'dist.yaml' is a distributed job" \
    "b6.yaml:3:21: error: factors.alongside[1]: cannot read the job file 'gone.yaml'" \
    "b7.yaml:1:1: error: base: missing: name the job every run runs"
  [ ! -e "$work/bad" ] || fail "a rejected study wrote output"
  ;;
architectures)
  # configs/studies/architectures.yaml as written (its three bases, every
  # level valid), then a tiny slice of it under mpiexec: the MLP, the
  # Inception CNN and the token transformer (configs/cluster-tokens.yaml,
  # 36 transfers) each with its device its own or shared with a job
  # alongside, one replicate; the analysis within each base.
  command -v mpiexec > /dev/null || { echo "skipped: no mpiexec"; exit 77; }
  fm=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
  [ -r "$fm" ] || { echo "skipped: $fm is not installed (dataset-fashion-mnist)"; exit 77; }
  "$bin" study "$src/configs/studies/architectures.yaml" --dry-run > "$work/dry" 2> "$work/err" ||
    fail "architectures.yaml: $(cat "$work/err")"
  has_all "$work/dry" "study architectures: base jobs of factor A (distributed job, 3 ranks" \
    "cells: 12 planned of 12" "runs: 36 in this order"
  small_job
  sed -i -e 's/iterations: 20/iterations: 2000/' -e "s|$work/job-out|$work/side-out|" "$work/job.yaml"
  cat > "$work/study.yaml" <<YAML
name: arch-slice
ranks: 3
set: {train.iterations: 3, train.batch: 64, train.eval_points: 64, distributed.trace_iterations: 1}
factors:
  base: [$src/configs/cluster.yaml, $src/configs/cluster-inception.yaml, $src/configs/cluster-tokens.yaml]
  alongside: [none, job.yaml]
response: samples_per_s
scale: log
replicates: 1
timeout_s: 120
output: $work/out
YAML
  "$bin" study "$work/study.yaml" > "$work/stdout" 2> "$work/stderr" || fail "study exited $?: $(cat "$work/stderr")"
  o=$work/out
  [ "$(grep -c ',ok,' "$o/runs.csv")" = 6 ] || fail "runs: $(cat "$o/runs.csv")"
  "$py" - "$o/runs" <<'PY' || fail "summaries"
import json, sys
want = {"A0": 40, "A2": 36}  # the MLP's and the transformer's transfers
for cell in ["A0B0", "A1B0", "A2B0", "A0B1", "A1B1", "A2B1"]:
    s = json.load(open("%s/%s-r1/summary.json" % (sys.argv[1], cell)))
    assert s["workers"] == 2 and s["iterations"] == 3, s
    if cell[:2] in want:
        assert s["transfers"] == want[cell[:2]], (cell, s["transfers"])
    assert s["comp_comm_ratio"] > 0, s
PY
  grep -q "accelrt study: alongside, start 1" "$o/runs/A2B1-r1/alongside/log.txt" || fail "no job alongside"
  has_all "$work/stdout" "base: geometric means of samples_per_s" "alongside within each base:"
  has_all "$o/report.html" "Within each level of base"
  ;;
chromium)
  # report.html rendered by headless Chromium: a screenshot of the right
  # size that holds a page's worth of drawing.
  chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
  [ -n "$chrome" ] || { echo "skipped: no chromium"; exit 77; }
  small_study
  "$bin" study "$work/study.yaml" > /dev/null 2> "$work/err" || fail "study failed: $(cat "$work/err")"
  HOME=$work timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$work/chrome" --screenshot="$work/shot.png" --window-size=1200,1600 \
    "file://$work/out/report.html" > "$work/chrome.log" 2>&1 || fail "chromium failed: $(tail -5 "$work/chrome.log")"
  python3 "$src/tests/study/png_stats.py" "$work/shot.png" > "$work/stats" || fail "cannot decode the screenshot"
  cat "$work/stats"
  read -r w h nonwhite colours < "$work/stats"
  [ "$w" = 1200 ] && [ "$h" = 1600 ] || fail "screenshot ${w}x$h, want 1200x1600"
  # Text, tables and charts: a blank or error page has almost no ink and
  # a few colours.
  [ "$nonwhite" -gt 30000 ] || fail "only $nonwhite non-white pixels"
  [ "$colours" -gt 50 ] || fail "only $colours colours"
  ;;
*)
  fail "unknown case $case"
  ;;
esac
echo "ok: $case"
