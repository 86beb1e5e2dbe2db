#!/bin/sh
# SIGTERM to one rank of a 3-rank job (as a scheduler's scancel or time
# limit sends it, here to a worker alone): every rank finishes its
# iteration, they stop together at one iteration N, rank 0 writes the
# checkpoint and a summary marked interrupted, every rank exits non-zero
# naming N; --resume then continues from N to the end (N + 10).  Also a
# job that leaves train.threads at 0 (the ranks agree on their machine's
# ranks at set-up: the workers alone used to wait for the servers there).
# usage: stop.sh MPIEXEC ACCELRT
set -u
name=stop
. "$(dirname "$0")/lib.sh"
dist_job stop 3 48 "{batch: 32, iterations: 10000000, optimizer: {adam: {lr: 0.01}}}"
lines() { n=$(grep -c '"kind": "iteration"' "$dir/run/metrics.jsonl" 2>/dev/null); echo "${n:-0}"; }

# train.threads 0 (the default): sets up and trains.
timeout 120 "$MPIEXEC" --oversubscribe -n 3 "$ACCELRT" run "$dir/job.yaml" --quiet \
  --set train.iterations=3 > "$dir/out0.txt" 2>&1 || fail "a job with train.threads 0 failed or hung"
grep -q '"iterations": 3,' "$dir/run/summary.json" || fail "threads 0: not 3 iterations"
rm -rf "${dir:?}/run"

"$MPIEXEC" --oversubscribe -n 3 "$ACCELRT" run "$dir/job.yaml" --quiet --set train.threads=1 \
  > "$dir/out1.txt" 2>&1 &
mp=$!
for _ in $(seq 1200); do [ "$(lines)" -ge 20 ] && break; sleep 0.1; done
[ "$(lines)" -ge 20 ] || fail "the job did not train"
worker=
for p in $(ps -o pid= --ppid "$mp"); do
  # -z reads the NUL-separated entries in place: tr piped into grep -q
  # could die of SIGPIPE at the match, and pipefail then missed the rank.
  grep -qxz OMPI_COMM_WORLD_RANK=2 "/proc/$p/environ" 2>/dev/null && worker=$p
done
[ -n "$worker" ] || fail "cannot find rank 2 among mpiexec's children"
kill -TERM "$worker"
for _ in $(seq 1200); do kill -0 "$mp" 2>/dev/null || break; sleep 0.1; done
kill -0 "$mp" 2>/dev/null && fail "the ranks did not stop within 120 s of SIGTERM"
wait "$mp"
rc=$?
mp=
[ "$rc" -ne 0 ] || fail "exit status 0 after SIGTERM"
# Every rank says where it stopped before the ranks' last barrier (so
# before any exits and mpiexec kills the rest): rank 0's line is required,
# and each line that came out must name the summary's N.  The workers'
# lines are not required: rank 0 may exit first, and mpiexec may drop a
# killed rank's output that it had not forwarded yet.
n=$(grep -o '"iterations": [0-9]*' "$dir/run/summary.json" | grep -o '[0-9]*$')
[ -n "$n" ] || fail "no summary.json with the iterations"
said0=$(sed -n "s/.*interrupted at iteration \([0-9]*\), every rank with it; checkpoint written to '.*checkpoint.bin'.*/\1/p" "$dir/out1.txt")
[ -n "$said0" ] || fail "rank 0 did not say where it stopped"
said=$(sed -n "s/.*rank [12] stopped at iteration \([0-9]*\) with the other ranks.*/\1/p" "$dir/out1.txt")
for m in $said0 $said; do
  [ "$m" = "$n" ] || fail "a rank said it stopped at iteration $m, the summary says $n"
done
[ -f "$dir/run/checkpoint.bin" ] || fail "no checkpoint.bin"
grep -q '"interrupted": true' "$dir/run/summary.json" || fail "summary.json not marked interrupted"
grep -q "\"iterations\": $n," "$dir/run/summary.json" || fail "summary.json: not $n iterations"
[ "$(lines)" -eq "$n" ] || fail "metrics.jsonl has $(lines) iteration lines, not $n"

want=$((n + 10))
timeout 120 "$MPIEXEC" --oversubscribe -n 3 "$ACCELRT" run "$dir/job.yaml" --resume \
  --set train.threads=1 --set train.iterations=$want > "$dir/out2.txt" 2>&1 || fail "--resume failed"
grep -q "\"iterations\": $want," "$dir/run/summary.json" || fail "resumed: not $want iterations"
grep -q '"interrupted": false' "$dir/run/summary.json" || fail "resumed: still interrupted"
[ "$(lines)" -eq "$want" ] || fail "resumed: $(lines) iteration lines, not $want"
echo "ok: stopped together at iteration $n, resumed to $want"
rm -rf "$dir"
