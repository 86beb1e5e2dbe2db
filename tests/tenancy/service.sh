#!/usr/bin/env bash
# tests/tenancy/service.sh ACCELRT GARBAGE_PY: the execution service.
#  1. two users: root and nobody (through setpriv) submit; each sees and
#     cancels only their own jobs, root sees all;
#  2. garbage on the socket is refused and logged, the server keeps serving;
#  3. a server killed with SIGKILL restarts with its queue: the queued job
#     is still queued and the running one resumes from its checkpoint; a
#     queued job whose checkpoint is damaged fails (it is not reported
#     done, however large the iteration count its damaged bytes hold);
#  4. logs -f follows a job to its end; SIGTERM stops the server cleanly.
# Skipped (77) when not run as root or when setpriv is missing; under
# CI=true a skip is a failure.
set -euo pipefail
bin=$1
garbage=$2
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root to act as a second user"
command -v setpriv >/dev/null || skip "setpriv (util-linux) missing"
new_tmp
sock=$t/s.sock
st=$t/state
mkdir "$t/nobody"
chown nobody:nogroup "$t/nobody"
as_nobody() { (cd "$t/nobody" && setpriv --reuid nobody --regid nogroup --clear-groups "$@"); }
fail() { echo "FAIL: $*"; echo "--- server log"; cat "$t/serve.log" || true; exit 1; }
start() {
  "$bin" serve --state "$st" --socket "$sock" --device host --policy fifo --memory 256MiB \
    --threads 1 >>"$t/serve.log" 2>&1 &
  spid=$!
  for _ in $(seq 200); do
    "$bin" ps --socket "$sock" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  fail "the server did not come up"
}

svc_job "$t/job.yaml" svc "checkpoint_every: 10"
start

# 1. Two users.  fifo: the long root job runs, the others queue behind it.
A=$("$bin" submit --socket "$sock" "$t/job.yaml" --set output.dir="$t/outA" \
      --set train.iterations=100000000)
B=$(as_nobody "$bin" submit --socket "$sock" "$t/job.yaml")
[ -n "$A" ] && [ -n "$B" ] && [ "$A" != "$B" ] || fail "submit ids '$A' '$B'"
as_nobody "$bin" ps --socket "$sock" >"$t/ps.nobody"
grep -qE "^$B +nobody" "$t/ps.nobody" || fail "nobody does not see its job: $(cat "$t/ps.nobody")"
grep -qE "^$A " "$t/ps.nobody" && fail "nobody sees root's job"
"$bin" ps --socket "$sock" >"$t/ps.root"
grep -qE "^$A +root" "$t/ps.root" && grep -qE "^$B +nobody" "$t/ps.root" || fail "root sees all"
as_nobody "$bin" cancel --socket "$sock" "$A" 2>/dev/null && fail "nobody cancelled root's job"
as_nobody "$bin" logs --socket "$sock" "$A" >/dev/null 2>&1 && fail "nobody read root's log"
[ "$(state_of "$A")" = running ] || fail "root's job was touched: $(state_of "$A")"
as_nobody "$bin" cancel --socket "$sock" "$B" >/dev/null || fail "nobody cannot cancel its job"
until_state "$B" cancelled
as_nobody "$bin" logs --socket "$sock" "$B" >"$t/logB" || fail "logs B exited $?"
grep -q "cancel requested by uid 65534" "$t/logB" || fail "nobody's log: $(cat "$t/logB")"

# 2. Garbage: refused and logged; the server still answers.
python3 "$garbage" "$sock" >/dev/null || fail "garbage client"
grep -q "rejected" "$t/serve.log" || fail "garbage was not logged"
"$bin" ps --socket "$sock" >"$t/ps.after" && grep -qE "^$A " "$t/ps.after" ||
  fail "the server stopped answering"
kill -0 "$spid" || fail "the server died"

# 3. Crash: C queues behind A; A has a checkpoint; SIGKILL; restart.
C=$("$bin" submit --socket "$sock" "$t/job.yaml" --set output.dir="$t/outC")
D=$("$bin" submit --socket "$sock" "$t/job.yaml" --set output.dir="$t/outD")
until_ok test -f "$t/outA/checkpoint.bin"
[ "$(state_of "$C")" = queued ] || fail "C is not queued: $(state_of "$C")"
kill -9 "$spid"
wait "$spid" 2>/dev/null || true
spid=
# D gets a copy of A's checkpoint (the same model) whose iteration count
# has its top byte set: read without the checksum, D would look done.
mkdir -p "$t/outD"
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[23] ^= 0x40
open(sys.argv[2], "wb").write(b)' "$t/outA/checkpoint.bin" "$t/outD/checkpoint.bin"
start
[ "$(state_of "$C")" = queued ] || fail "after the restart C is $(state_of "$C"), not queued"
[ "$(state_of "$D")" = failed ] || fail "D, with a damaged checkpoint, is $(state_of "$D")"
"$bin" logs --socket "$sock" "$D" >"$t/logD" || fail "logs D exited $?"
grep -q "checksum" "$t/logD" || fail "D's log does not say why: $(cat "$t/logD")"
until_state "$A" running
"$bin" logs --socket "$sock" "$A" >"$t/logA" || fail "logs A exited $?"
grep -qF "resuming from $t/outA/checkpoint.bin" "$t/logA" ||
  fail "A did not resume from its checkpoint: $(cat "$t/logA")"
"$bin" cancel --socket "$sock" "$A" >/dev/null

# 4. logs -f follows C to its end.
"$bin" logs --socket "$sock" -f "$C" >"$t/logC"
grep -q "done: 30 iterations" "$t/logC" || fail "C's log: $(cat "$t/logC")"
[ "$(state_of "$A")" = cancelled ] || fail "A is $(state_of "$A")"
kill -TERM "$spid"
wait "$spid" || fail "the server exited with $?"
spid=
echo "ok"
