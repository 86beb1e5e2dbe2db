#!/usr/bin/env bash
# tests/e2e/slurm.sh ACCELRT SOURCE_DIR: accelrt under a real single-node
# Slurm that this test starts itself (munged, slurmctld, slurmd as root, in
# the foreground, every file in a temporary folder), as docs/cluster.md
# says to run it:
#   sbatch     `sbatch --wait` of configs/slurm/accelrt.sbatch (the script
#              docs/cluster.md shows) on a 3-rank distributed job: its
#              summary; threads follow SLURM_CPUS_PER_TASK (accelrt info
#              under srun -c 2)
#   srun       `srun -n 3 accelrt run` directly (MpiDefault=pmix)
#   sigterm    the script's job gets SIGTERM (scancel --batch, as
#              --signal=B:TERM@120 sends it): the ranks stop together,
#              rank 0 writes the checkpoint, the script requeues the job,
#              and the next start resumes from it to the end
#   study      accelrt study inside an allocation, its distributed runs
#              started by launcher: "srun --mpi=pmix -n {ranks}"
# Skipped (77) when not root; under CI=true every other reason to skip
# (Slurm, munge or PMIx missing, a daemon that does not start) is a
# failure: ci/setup --tests installs them on Debian 12.
set -uo pipefail
bin=$(readlink -f "$1")
src=$(readlink -f "$2")
skip() { echo "skipped: $*"; exit 77; }
need() {
  if [ "${CI:-}" = true ]; then echo "FAIL: cannot run under CI: $*"; exit 1; fi
  echo "skipped: $*"; exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root: slurmd and munged run as root here"
for p in munged slurmctld slurmd sbatch srun scancel scontrol sinfo squeue; do
  command -v "$p" >/dev/null ||
    need "$p missing (apt-get install slurmctld slurmd slurm-client munge; ci/setup --tests)"
done
ls /usr/lib/*/slurm-wlm/mpi_pmix*.so >/dev/null 2>&1 ||
  need "Slurm's PMIx plugin (mpi_pmix.so, package slurm-wlm-basic-plugins) missing"
# Captured first: ompi_info piped into grep -q dies of SIGPIPE when grep
# exits at its match, and pipefail would then skip the test by chance.
ompi=$(ompi_info --parsable 2>/dev/null)
grep -q '^mca:pmix:ext' <<<"$ompi" ||
  need "Open MPI has no external PMIx (ompi_info lists no pmix ext component)"

t=$(mktemp -d /tmp/accelrt-slurm-XXXXXX)
chmod 755 "$t"
mkdir -p "$t/munge" "$t/state" "$t/spool" "$t/log"
chmod 700 "$t/munge"
export SLURM_CONF=$t/slurm.conf PATH=$(dirname "$bin"):$PATH
pids=()
stop_all() {
  # Jobs first (their slurmstepd outlive slurmd), then the daemons; then
  # any process still running under this test's slurm.conf.
  if [ "${#pids[@]}" -ge 2 ]; then
    scancel --quiet --partition=test 2>/dev/null
    for _ in $(seq 50); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  unset SLURM_CONF # so that the scan's own commands do not match
  for e in /proc/[0-9]*/environ; do
    grep -qxzF "SLURM_CONF=$t/slurm.conf" "$e" 2>/dev/null || continue
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" != $$ ] && [ "$p" != "$BASHPID" ] && kill -KILL "$p" 2>/dev/null
  done
  rm -rf "$t"
}
trap stop_all EXIT
fail() {
  echo "FAIL: $*"
  for f in "$t"/*.out "$t"/log/*; do [ -f "$f" ] && { echo "---- $f"; tail -n 30 "$f"; }; done
  exit 1
}
# until_ok WHAT CMD...: retries for up to 90 s (a hang guard, not a timing check).
until_ok() {
  local what=$1; shift
  for _ in $(seq 900); do "$@" && return 0; sleep 0.1; done
  fail "timed out waiting for $what"
}

# ---- the cluster: one node, this host ----------------------------------
free_port() { # a TCP port nothing listens on
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 30000))
    [ -z "$(ss -Htln "sport = :$p" 2>/dev/null)" ] && [ -z "$(ss -Htln "sport = :$((p + 1))" 2>/dev/null)" ] &&
      { echo "$p"; return; }
  done
  echo 0
}
port=$(free_port)
[ "$port" != 0 ] || need "no free TCP port for slurmctld"
node=$(hostname -s)
head -c 1024 /dev/urandom > "$t/munge/key"
chmod 400 "$t/munge/key"
# task/none, proctrack/linuxproc: no cgroups needed; CPUs=8 lets the
# documented 3 x 2 CPUs fit on a small machine (config_overrides).
cat > "$t/slurm.conf" <<EOF
ClusterName=accelrt-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$t/munge/sock
CredType=cred/munge
StateSaveLocation=$t/state
SlurmdSpoolDir=$t/spool
SlurmctldPidFile=$t/slurmctld.pid
SlurmdPidFile=$t/slurmd.pid
SlurmctldLogFile=$t/log/slurmctld.log
SlurmdLogFile=$t/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
MailProg=/bin/true
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
NodeName=$node NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
munged -F -f --key-file="$t/munge/key" --socket="$t/munge/sock" --pid-file="$t/munge/pid" \
  --seed-file="$t/munge/seed" --log-file="$t/log/munged.log" > "$t/log/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$t/munge/sock" ] && break; sleep 0.1; done
[ -S "$t/munge/sock" ] || need "munged did not start: $(tail -n 3 "$t/log/munged.out")"
slurmctld -D -f "$t/slurm.conf" > "$t/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$t/slurm.conf" -N "$node" > "$t/log/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 300); do [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break; sleep 0.1; done
[ "$(sinfo -h -o %T 2>/dev/null)" = idle ] ||
  need "slurmctld/slurmd did not bring the node up: $(tail -n 3 "$t"/log/slurm*.out | tr '\n' ' ')"

# ---- the job: 1 server, 2 workers; threads from the CPUs it is given ------
job() { # job NAME ITERATIONS: $t/NAME.yaml writing $t/NAME
  cat > "$t/$1.yaml" <<EOF
name: $1
seed: 4
device: host
model:
  input: {sparse: 400}
  layers:
    - {name: h, dense: 32, activation: relu}
    - {name: out, dense: 40, activation: softmax}
data: {generate: {train_points: 1200, test_points: 200, features: 400, labels: 40, nnz: 10, labels_per_point: 2}}
train: {batch: 32, iterations: $2, eval_every: 0, optimizer: {adam: {lr: 0.01}}}
output: {dir: '$t/$1'}
distributed: {servers: 1, order: tac, trace_iterations: 2}
EOF
}
json_num() { sed -n "s/.*\"$2\": \([-0-9.e+]*\).*/\1/p" "$1"; }
iteration_lines() { grep -c '"kind": "iteration"' "$1"; }
script=$src/configs/slurm/accelrt.sbatch

# The script docs/cluster.md shows is the one tested here.
awk '/^<!-- configs\/slurm\/accelrt.sbatch -->$/ {on = 1; getline; next} on && /^```$/ {exit} on' \
  "$src/docs/cluster.md" > "$t/doc.sbatch"
diff -u "$script" "$t/doc.sbatch" > "$t/doc.diff" ||
  fail "docs/cluster.md's sbatch script differs from configs/slurm/accelrt.sbatch: $(cat "$t/doc.diff")"

# sbatch --wait of the documented script.
job a 30
(cd "$t" && timeout 150 sbatch --wait --output="$t/a.out" "$script" "$t/a.yaml") > "$t/sbatch-a.txt" 2>&1 ||
  fail "sbatch --wait exited $?: $(cat "$t/sbatch-a.txt")"
[ -f "$t/a/summary.json" ] || fail "the sbatch job wrote no summary"
[ "$(json_num "$t/a/summary.json" iterations)" = 30 ] || fail "sbatch: $(cat "$t/a/summary.json")"
[ "$(json_num "$t/a/summary.json" workers)" = 2 ] || fail "sbatch: not 2 workers: $(cat "$t/a/summary.json")"
grep -q '"interrupted": false' "$t/a/summary.json" || fail "sbatch: $(cat "$t/a/summary.json")"
grep -q "error" "$t/a.out" && fail "sbatch: the job printed an error"

# Threads follow SLURM_CPUS_PER_TASK.
srun -n 1 -c 2 accelrt info > "$t/info.out" 2>&1 || fail "srun accelrt info: $(cat "$t/info.out")"
# ("capped at the 1 CPU of the mask" follows under a one-CPU mask.)
grep -q "by default (SLURM_CPUS_PER_TASK=2" "$t/info.out" ||
  fail "srun -c 2: accelrt info does not take SLURM_CPUS_PER_TASK: $(grep 'by default' "$t/info.out")"

# srun -n 3 directly.
job b 20
timeout 120 srun -n 3 accelrt run "$t/b.yaml" --quiet > "$t/b.out" 2>&1 || fail "srun -n 3 exited $?"
[ "$(json_num "$t/b/summary.json" iterations)" = 20 ] || fail "srun: $(cat "$t/b/summary.json")"

# SIGTERM to the script: checkpoint, requeue, resume.  The job is long so
# that the signal always comes mid-run; while the requeued job waits for
# its begin time (Slurm delays a requeued start), its iterations are cut
# to 20 past the checkpoint (a resume may change train.iterations) and
# the start is moved to now, but not within the second of the requeue:
# slurmd revoked the stopped start's credential at that second and refuses
# any credential made in it or before (it compares whole seconds), so a
# start allocated that soon fails with "Job credential revoked" (seen once
# at load 35: requeued at 10:25:12.24, allocated again at 12.77).
job c 10000000
jid=$(cd "$t" && sbatch --parsable --output="$t/c.out" "$script" "$t/c.yaml") || fail "sbatch: $jid"
has_iterations() { [ -f "$t/c/metrics.jsonl" ] && [ "$(iteration_lines "$t/c/metrics.jsonl")" -ge 5 ]; }
until_ok "job c to train" has_iterations
scancel --batch --signal=TERM "$jid" || fail "scancel --batch --signal=TERM failed"
job_state() { scontrol show job "$jid" 2>/dev/null | grep -o 'JobState=[A-Z]*'; }
requeued() { [ "$(job_state)" = JobState=PENDING ]; }
until_ok "job c to be requeued" requeued
requeued_at=$(date +%s)
grep -q "requeueing job $jid" "$t/c.out" || fail "the script did not requeue"
n=$(sed -n "s/.*interrupted at iteration \([0-9]*\), every rank with it.*/\1/p" "$t/c.out")
[ -n "$n" ] || fail "no rank wrote 'interrupted at iteration N'"
[ "$(grep -c "stopped at iteration $n with the other ranks" "$t/c.out")" = 2 ] ||
  fail "the two workers did not stop at iteration $n"
[ -f "$t/c/checkpoint.bin" ] || fail "no checkpoint after SIGTERM"
grep -q '"interrupted": true' "$t/c/summary.json" || fail "the summary does not say interrupted"
[ "$(json_num "$t/c/summary.json" iterations)" = "$n" ] || fail "summary: $(cat "$t/c/summary.json")"
want=$((n + 20))
sed -i "s/iterations: 10000000/iterations: $want/" "$t/c.yaml"
while [ "$(date +%s)" -le $((requeued_at + 1)) ]; do sleep 0.1; done
scontrol update JobId="$jid" StartTime=now || fail "scontrol update StartTime=now failed"
finished() { [[ "$(job_state)" =~ ^JobState=(COMPLETED|FAILED|CANCELLED)$ ]]; }
until_ok "the requeued job c to end" finished
[ "$(job_state)" = JobState=COMPLETED ] || fail "the requeued job: $(job_state)"
grep -q "resumed from $t/c/checkpoint.bin at iteration $n " "$t/c.out" ||
  fail "the requeued start did not resume at iteration $n"
[ "$(json_num "$t/c/summary.json" iterations)" = "$want" ] || fail "resumed: $(cat "$t/c/summary.json")"
grep -q '"interrupted": false' "$t/c/summary.json" || fail "resumed: $(cat "$t/c/summary.json")"
[ "$(iteration_lines "$t/c/metrics.jsonl")" = "$want" ] ||
  fail "metrics.jsonl has $(iteration_lines "$t/c/metrics.jsonl") iteration lines, not $want"

# accelrt study in an allocation, each distributed run a job step.
job d 10
cat > "$t/s.yaml" <<EOF
base: d.yaml
ranks: 3
launcher: "srun --mpi=pmix -n {ranks}"
factors: {distributed.order: [random, tac]}
response: samples_per_s
replicates: 1
output: '$t/study'
EOF
(cd "$t" && timeout 150 sbatch --wait -n 3 --output="$t/s.out" --wrap "accelrt study s.yaml") \
  > "$t/sbatch-s.txt" 2>&1 || fail "the study's sbatch exited $?: $(cat "$t/sbatch-s.txt")"
grep -q "each run starts under srun --mpi=pmix -n 3 (launcher: in the study file)" "$t/s.out" ||
  fail "the study does not name its launcher"
[ "$(grep -c ',ok,' "$t/study/runs.csv")" = 2 ] || fail "study: $(cat "$t/study/runs.csv")"
echo "ok: sbatch, srun -n 3, SIGTERM at iteration $n then resume to $want, study under srun"
