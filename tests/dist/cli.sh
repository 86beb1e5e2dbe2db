#!/bin/sh
# The CLI end to end: `mpiexec -n 3 accelrt run configs/cluster.yaml` (a
# few iterations, link emulated) writes the distributed summary keys, and
# `accelrt simulate` predicts the four orders from the run's time oracle.
# usage: cli.sh MPIEXEC ACCELRT SOURCE_DIR
set -u
MPIEXEC=$1
ACCELRT=$2
SRC=$3
dir=$(mktemp -d /tmp/accelrt_dist_cli_XXXXXX)
fail() {
  echo "FAIL: $*"
  cat "$dir/out.txt" 2>/dev/null
  exit 1
}
timeout 240 "$MPIEXEC" --oversubscribe -n 3 "$ACCELRT" run "$SRC/configs/cluster.yaml" --quiet \
  --set train.iterations=5 --set train.batch=64 --set "output.dir=$dir/run" \
  > "$dir/out.txt" 2>&1 || fail "mpiexec accelrt run failed"
for k in order iteration_s_median warmup_s efficiency_median comm_busy_s_median \
         comp_busy_s_median schedule_ms straggler_s_median samples_per_s iterations; do
  grep -q "\"$k\":" "$dir/run/summary.json" || fail "summary.json lacks $k"
done
grep -q '"iterations": 5' "$dir/run/summary.json" || fail "not 5 iterations"
grep -q '"order": "tac"' "$dir/run/summary.json" || fail "order is not tac"
[ -s "$dir/run/oracle.tsv" ] || fail "no oracle.tsv"
# Rank 0 describes the run; a second run into its folder is refused on
# every rank (exit 2), and a --resume before any checkpoint starts afresh
# on every rank (rank 0 decides: only it reads checkpoints).
[ -s "$dir/run/run.json" ] && grep -q '^distributed:' "$dir/run/job.resolved.yaml" ||
  fail "rank 0 wrote no run.json or job.resolved.yaml"
timeout 240 "$MPIEXEC" --oversubscribe -n 3 "$ACCELRT" run "$SRC/configs/cluster.yaml" --quiet \
  --set train.iterations=5 --set train.batch=64 --set "output.dir=$dir/run" > "$dir/out.txt" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "already holds a finished run" "$dir/out.txt" ||
  fail "a rerun into the finished run's folder exited $rc, want 2"
timeout 240 "$MPIEXEC" --oversubscribe -n 3 "$ACCELRT" run "$SRC/configs/cluster.yaml" --quiet \
  --resume --set train.iterations=3 --set train.batch=64 --set "output.dir=$dir/fresh" \
  > "$dir/out.txt" 2>&1 || fail "--resume without a checkpoint failed"
grep -q "no checkpoint at '$dir/fresh/checkpoint.bin' yet" "$dir/out.txt" &&
  grep -q '"iterations": 3' "$dir/fresh/summary.json" || fail "--resume without a checkpoint"
"$ACCELRT" simulate "$SRC/configs/cluster.yaml" --workers 2 --servers 1 --gbps 1 \
  --oracle "$dir/run/oracle.tsv" --set train.batch=64 > "$dir/out.txt" 2>&1 ||
  fail "accelrt simulate failed"
for o in none random tic tac; do
  grep -q "^$o " "$dir/out.txt" || fail "simulate printed no row for $o"
done
# Calibrated from the run's trace: compute times from the traced
# iterations after warm-up (ar_dist_read_trace, commsched's calibration).
[ -s "$dir/run/trace.tsv" ] || fail "no trace.tsv"
"$ACCELRT" simulate "$SRC/configs/cluster.yaml" --workers 2 --servers 1 --gbps 1 \
  --trace "$dir/run/trace.tsv" --set train.batch=64 > "$dir/out.txt" 2>&1 ||
  fail "accelrt simulate --trace failed"
grep -q "compute times: medians of [1-9][0-9]* ops from" "$dir/out.txt" ||
  fail "simulate --trace set no compute time from the trace"
grep -q "^tac " "$dir/out.txt" || fail "simulate --trace printed no row for tac"
"$ACCELRT" simulate "$SRC/configs/cluster.yaml" --workers 0 --gbps 1 > "$dir/out.txt" 2>&1
[ $? -eq 2 ] || fail "simulate --workers 0 is not a usage error"
echo ok
rm -rf "$dir"
