# tests/tenancy/lib.sh: what the service's shell tests share; sourced after
# they set `bin` (the accelrt binary), `sock` and a `fail` function.

# new_tmp: a fresh folder $t (mode 0755, so other users may enter it),
# removed at exit, when the server $spid (if any) is killed too.
new_tmp() {
  t=$(mktemp -d)
  chmod 755 "$t"
  spid=
  trap 'if [ -n "$spid" ]; then kill -9 "$spid" 2>/dev/null || true; fi; rm -rf "$t"' EXIT
}
# skip WHY: 77 (skipped), except under CI=true, where a skip is a failure.
skip() {
  if [ "${CI:-}" = true ]; then echo "FAIL: cannot run under CI: $*"; exit 1; fi
  echo "skipped: $*"; exit 77
}
# until_ok CMD...: retries for up to 60 s (a hang guard, not a timing check).
until_ok() {
  for _ in $(seq 600); do "$@" && return 0; sleep 0.1; done
  fail "timed out waiting for: $*"
}
# state_of ID: the job's state as ps prints it.
state_of() { "$bin" ps --socket "$sock" | awk -v id="$1" '$1 == id {print $3}'; }
# until_state ID STATE: waits (up to 60 s, a hang guard) for a job's state.
until_state() {
  for _ in $(seq 600); do [ "$(state_of "$1")" = "$2" ] && return 0; sleep 0.1; done
  fail "job $1 is $(state_of "$1"), not $2"
}
# svc_job FILE NAME [TRAIN_KEYS]: the small generated job of
# tests/jobs/small.yaml for 30 iterations on one thread (a few hundred ms),
# TRAIN_KEYS added to its train: mapping.
svc_job() {
  {
    printf 'name: %s\ndevice: host\n' "$2"
    cat "$(dirname "$0")/../jobs/small.yaml"
    echo "train: {batch: 32, iterations: 30, threads: 1, optimizer: {adam: {lr: 0.001}}${3:+, $3}}"
  } >"$1"
  chmod 644 "$1"
}
