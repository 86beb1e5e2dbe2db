#!/bin/sh
# A worker (rank 2) kills itself at iteration 5 of a 3-rank job
# (ACCELRT_DIST_FAULT).  Checked:
#   1. plain mpiexec: the job ends (no hang), exits non-zero, rank 2 is
#      named, and the checkpoint left behind resumes to the end;
#   2. mpiexec --enable-recovery (the survivors keep running): each survivor
#      exits non-zero with an error naming rank 2 and the iteration.
# usage: killed_rank.sh MPIEXEC ACCELRT
set -u
name=killed
. "$(dirname "$0")/lib.sh"
dist_job killed 2 64 \
  "{batch: 32, iterations: 12, threads: 1, checkpoint_every: 2, optimizer: {adam: {lr: 0.01}}}"

# 1. Plain mpiexec.
ACCELRT_DIST_FAULT=2:5 ACCELRT_DIST_TIMEOUT=10 timeout 120 \
  "$MPIEXEC" --oversubscribe -n 3 "$ACCELRT" run "$dir/job.yaml" --quiet > "$dir/out1.txt" 2>&1
rc=$?
[ $rc -eq 124 ] && fail "plain mpiexec: the job hung"
[ $rc -eq 0 ] && fail "plain mpiexec: exit status 0 after a rank died"
grep -q "rank 2" "$dir/out1.txt" || fail "plain mpiexec: no message names rank 2"
# Under plain mpiexec the survivors are stopped by mpiexec's SIGTERM, which
# races with their own report of the dead peer; whether they print it first
# depends on the machine's load, so it is noted, not required (part 2, with
# the survivors left running, requires it).
survivors=$(grep -c "accelrt run: error: iteration 5: rank [01] " "$dir/out1.txt")
[ "$survivors" -ge 1 ] || echo "note: plain mpiexec stopped the survivors before they reported"
# The checkpoint of iteration 4 is valid: resuming finishes the job.  A
# line logged past the checkpoint (as a rank dying after logging iteration
# 5 would leave) is trimmed on resume, not kept beside the rerun's.
echo '{"iteration": 5, "kind": "iteration", "stale": true}' >> "$dir/run/metrics.jsonl"
printf '5\t0\t0\tstale\tcompute\t0\t0\t0\tnan\tnan\n' >> "$dir/run/trace.tsv"
timeout 120 "$MPIEXEC" --oversubscribe -n 3 "$ACCELRT" run "$dir/job.yaml" --resume --quiet \
  > "$dir/out2.txt" 2>&1 || fail "resuming from the last checkpoint failed"
grep -q '"iterations": 12' "$dir/run/summary.json" || fail "the resumed run did not reach 12"
grep -q stale "$dir/run/metrics.jsonl" && fail "resume kept metrics.jsonl lines past the checkpoint"
grep -q stale "$dir/run/trace.tsv" && fail "resume kept trace.tsv lines past the checkpoint"
n=$(grep -c '"kind": "iteration"' "$dir/run/metrics.jsonl")
[ "$n" -eq 12 ] || fail "metrics.jsonl has $n iteration lines after resuming, not 12"

# 2. With recovery: the survivors run on, find out and exit non-zero.
rm -rf "$dir/run"
ACCELRT_DIST_FAULT=2:5 ACCELRT_DIST_TIMEOUT=5 timeout 120 \
  "$MPIEXEC" --oversubscribe --enable-recovery -n 3 sh -c \
  '"$0" run "$1" --quiet; echo $? > "$2/rc.$OMPI_COMM_WORLD_RANK"' \
  "$ACCELRT" "$dir/job.yaml" "$dir" > "$dir/out3.txt" 2>&1
[ $? -eq 124 ] && fail "--enable-recovery: the job hung"
for r in 0 1; do
  [ -f "$dir/rc.$r" ] || fail "--enable-recovery: rank $r did not exit"
  [ "$(cat "$dir/rc.$r")" != 0 ] || fail "--enable-recovery: rank $r exited 0"
done
grep -q "iteration 5: rank 0 got no gradients from rank 2 (worker 1)" "$dir/out3.txt" ||
  fail "--enable-recovery: the server did not name rank 2"
grep -q "rank 2 (worker 1) failed (reported by rank 0" "$dir/out3.txt" ||
  fail "--enable-recovery: worker 0 did not name rank 2"
echo "ok"
cat "$dir/out3.txt" | grep "error:"
rm -rf "$dir"
