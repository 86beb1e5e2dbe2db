#!/usr/bin/env bash
# tests/tenancy/security.sh ACCELRT: `accelrt serve` attacked by local users.
# Run as root; the attacker is `nobody` (setpriv) and a uid with no passwd
# entry (12345).  Each case is an attack from the issue on the service's
# security, with what must happen instead:
#   state    a state folder planted by a user, one with a foreign entry, a
#            symlink, a group-writable one: refused at start; a user's own
#            server defaults to XDG paths, never /tmp; a socket in /tmp is
#            refused; the journal: a damaged or forged entry is not run
#   read     root-only data through a 0700 folder, a 0600 file and a
#            symlink swapped in a loop: never read (kernel says no as the
#            submitter), and no byte of it reaches the submitter
#   special  /dev/zero, a FIFO, a file without newlines: refused at once;
#            the server's memory does not grow
#   conns    one uid trickling bytes over many connections: cut at the
#            request deadline and capped, while another uid and root are
#            served
#   outputs  outputs belong to the submitter and land where they asked; a
#            folder they cannot write fails the job; links planted in an
#            output folder are not written through (serve and run)
#   quota    --max-queued, --max-generated; generated data removed with
#            its job unless --keep-generated
#   caps     the server runs with no capability
#   ckpt     a corrupted checkpoint after a restart fails the job (it is
#            not reported done)
# Skipped (77) when not root; under CI=true a skip is a failure.
set -euo pipefail
bin=$(readlink -f "$1")
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root to act as other users"
command -v setpriv >/dev/null || skip "setpriv (util-linux) missing"
# The system's python: the attacker cannot run root's (a pyenv shim, say).
py=/usr/bin/python3
[ -x "$py" ] || skip "/usr/bin/python3 missing"
t=$(mktemp -d)
chmod 755 "$t"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$t"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; "$bin" ps --socket "$sock" 2>/dev/null; for f in "$t"/serve*.log; do echo "--- $f"; cat "$f"; done; exit 1; }
as_nobody() { (cd "$t/nob" && setpriv --reuid nobody --regid nogroup --clear-groups "$@"); }
as_12345() { (cd "$t/u12345" && setpriv --reuid 12345 --regid 12345 --clear-groups "$@"); }
mkdir -p "$t/nob" "$t/u12345"
chown nobody:nogroup "$t/nob"
chown 12345:12345 "$t/u12345"
sock=$t/run/s.sock
st=$t/state
mkdir -m 755 "$t/run"

# start NAME [serve options...]: a server on $sock/$st; waits until it answers.
start() {
  local log=$t/serve-$1.log
  shift
  "$bin" serve --state "$st" --socket "$sock" --device host --policy fifo --memory 256MiB \
    --threads 1 "$@" >>"$log" 2>&1 &
  spid=$!
  pids+=("$spid")
  for _ in $(seq 300); do
    "$bin" ps --socket "$sock" >/dev/null 2>&1 && return 0
    kill -0 "$spid" 2>/dev/null || fail "the server exited: $(cat "$log")"
    sleep 0.05
  done
  fail "the server did not come up"
}
stop() { kill -TERM "$spid"; wait "$spid" || fail "the server exited with $?"; }
submit() { "$bin" submit --socket "$sock" "$@"; }

# A small valid data set and job anyone may read.
mkdir -m 755 "$t/pub"
python3 - "$t/pub/train.txt" <<'PY'
import sys, random
r = random.Random(1)
with open(sys.argv[1], "w") as f:
    f.write("200 50 10\n")
    for i in range(200):
        l = r.randrange(10)
        f.write("%d %s\n" % (l, " ".join("%d:1" % ((l * 5 + k) % 50) for k in range(4))))
PY
chmod 644 "$t/pub/train.txt"
cat >"$t/pub/job.yaml" <<YAML
name: sec
device: host
model:
  input: {sparse: 50}
  layers:
    - {name: hidden, dense: 16, activation: relu}
    - {name: out, dense: 10, activation: softmax}
data: {train: train.txt}
train: {batch: 20, iterations: 20, threads: 1, checkpoint_every: 5,
        optimizer: {adam: {lr: 0.01}}}
output: {dir: out}
YAML
chmod 644 "$t/pub/job.yaml"
# The secret: root-only, and marked, so that a leak of any byte shows.
secret_text="7 50 10
SECRETTOKEN 1:1"
mkdir -m 700 "$t/private"
printf '%s\n' "$secret_text" >"$t/private/data.txt"
chmod 644 "$t/private/data.txt" # readable, but behind a 0700 folder
printf '%s\n' "$secret_text" >"$t/rootonly.txt"
chmod 600 "$t/rootonly.txt"

# ---- state --------------------------------------------------------------------
echo "# state"
# A state folder a user made first, with links to root's files and a forged
# journal entry (uid 0, queued, output folder of their choosing).
as_nobody mkdir -p "$t/nob/planted/jobs/1" "$t/nob/planted/runner"
as_nobody ln -s /etc/shadow "$t/nob/planted/runner/metrics.jsonl"
as_nobody sh -c "printf 'id 1\nuid 0\nstate queued\nout /root/x\n' > $t/nob/planted/jobs/1/meta"
as_nobody cp "$t/pub/job.yaml" "$t/nob/planted/jobs/1/job.yaml"
shadow_before=$(sha256sum /etc/shadow)
rc=0
"$bin" serve --state "$t/nob/planted" --socket "$sock" --device host >"$t/refused.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "a planted state folder was used (rc $rc)"
grep -q "belongs to uid 65534" "$t/refused.log" || fail "planted state: $(cat "$t/refused.log")"
[ "$(sha256sum /etc/shadow)" = "$shadow_before" ] || fail "/etc/shadow changed"
# Root's own folder holding something the server did not write.
mkdir -m 700 "$t/st2" "$t/st2/jobs"
ln -s /etc "$t/st2/jobs/3"
rc=0
"$bin" serve --state "$t/st2" --socket "$sock" --device host >"$t/refused.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "jobs/3 is a symbolic link" "$t/refused.log" ||
  fail "a symlink in the state: $(cat "$t/refused.log")"
rm "$t/st2/jobs/3"
mkdir "$t/st2/jobs/4"
chown nobody "$t/st2/jobs/4"
rc=0
"$bin" serve --state "$t/st2" --socket "$sock" --device host >"$t/refused.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "jobs/4 belongs to uid 65534" "$t/refused.log" ||
  fail "a foreign entry in the state: $(cat "$t/refused.log")"
# The state folder itself a link, or group-writable.
ln -s "$t/st2" "$t/st-link"
rc=0
"$bin" serve --state "$t/st-link" --socket "$sock" --device host >"$t/refused.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "symbolic link" "$t/refused.log" || fail "state link: $(cat "$t/refused.log")"
mkdir -m 770 "$t/st3"
chmod 770 "$t/st3"
rc=0
"$bin" serve --state "$t/st3" --socket "$sock" --device host >"$t/refused.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "group or others may write" "$t/refused.log" ||
  fail "group-writable state: $(cat "$t/refused.log")"
# A socket in a folder every user may write.
rc=0
"$bin" serve --state "$t/st4" --socket "/tmp/accelrt-test-$$.sock" --device host \
  >"$t/refused.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "nobody else may write" "$t/refused.log" ||
  fail "socket in /tmp: $(cat "$t/refused.log")"
# A user's own server: XDG paths by default, and none when they are unset.
mkdir -p "$t/nob/home" "$t/nob/rt"
chown nobody "$t/nob/home" "$t/nob/rt"
chmod 700 "$t/nob/rt"
rc=0
(cd "$t/nob" && env -u ACCELRT_STATE -u ACCELRT_SOCKET -u XDG_RUNTIME_DIR HOME="$t/nob/home" \
  setpriv --reuid nobody --regid nogroup --clear-groups "$bin" serve --device host \
  >"$t/refused.log" 2>&1) || rc=$?
[ "$rc" -eq 2 ] && grep -q "XDG_RUNTIME_DIR is not set" "$t/refused.log" ||
  fail "a user's server without XDG_RUNTIME_DIR (rc $rc): $(cat "$t/refused.log")"
(cd "$t/nob" && exec env -u ACCELRT_STATE -u ACCELRT_SOCKET XDG_RUNTIME_DIR="$t/nob/rt" \
  HOME="$t/nob/home" setpriv --reuid nobody --regid nogroup --clear-groups \
  "$bin" serve --device host --memory 64MiB --threads 1 >"$t/serve-user.log" 2>&1) &
upid=$!
pids+=("$upid")
until_ok test -S "$t/nob/rt/accelrt.sock"
[ -d "$t/nob/home/.local/state/accelrt/jobs" ] || fail "the user's server's state is not in XDG"
[ "$(stat -c %a "$t/nob/rt/accelrt.sock")" = 600 ] || fail "the user's socket is not 0600"
# It serves its user, and refuses others, root included.
(cd "$t/nob" && XDG_RUNTIME_DIR="$t/nob/rt" setpriv --reuid nobody --regid nogroup \
  --clear-groups "$bin" ps >/dev/null) || fail "the user's server does not serve its user"
ACCELRT_SOCKET="$t/nob/rt/accelrt.sock" "$bin" ps >"$t/out.txt" 2>&1 &&
  fail "root was served by nobody's server"
grep -q "serves only that user" "$t/out.txt" || fail "refusal: $(cat "$t/out.txt")"
kill -TERM "$upid"
wait "$upid" || fail "the user's server exited with $?"

# ---- caps and the journal ---------------------------------------------------------
echo "# caps"
start main --max-line 1MiB --max-conns-per-uid 4 --request-timeout 2 --max-queued 3 \
  --max-generated 2MiB --keep-ended 6
ncap=0
for task in /proc/"$spid"/task/*; do
  # A thread that ended since the listing has no status to read: skip it.
  cap=$(awk '/^CapEff/ {print $2}' "$task/status" 2>/dev/null) || continue
  [ -n "$cap" ] || continue
  [ "$cap" = 0000000000000000 ] || fail "server thread $task has capabilities $cap"
  ncap=$((ncap + 1))
done
[ "$ncap" -gt 0 ] || fail "no thread of the server $spid could be read"

# ---- read ---------------------------------------------------------------------------
echo "# read"
no_leak() { ! grep -rq SECRETTOKEN "$@" 2>/dev/null; }
for p in "$t/private/data.txt" "$t/rootonly.txt"; do
  as_nobody "$bin" submit --socket "$sock" "$t/pub/job.yaml" --set data.train="$p" \
    >"$t/out.txt" 2>&1 && fail "nobody trained on $p"
  grep -q "Permission denied" "$t/out.txt" || fail "reading $p: $(cat "$t/out.txt")"
  grep -q "$p" "$t/out.txt" || fail "the message does not name the file: $(cat "$t/out.txt")"
  no_leak "$t/out.txt" || fail "the secret leaked: $(cat "$t/out.txt")"
done
# A symlink swapped between nobody's own file and root's, while submitting.
cp "$t/pub/train.txt" "$t/nob/mine.txt"
chown nobody "$t/nob/mine.txt"
as_nobody "$py" - "$t/nob" "$t/rootonly.txt" <<'PY' &
import os, sys, time
d, secret = sys.argv[1], sys.argv[2]
end = time.time() + 60
while time.time() < end and not os.path.exists(d + "/stop"):
    for target in (d + "/mine.txt", secret):
        try:
            os.symlink(target, d + "/swap.tmp")
            os.replace(d + "/swap.tmp", d + "/swap.txt")
        except OSError:
            pass
PY
swapper=$!
pids+=("$swapper")
for i in $(seq 12); do
  as_nobody "$bin" submit --socket "$sock" "$t/pub/job.yaml" --set data.train="$t/nob/swap.txt" \
    --set output.dir="$t/nob/swap$i" --set train.iterations=1 >>"$t/swap.txt" 2>&1 || true
done
touch "$t/nob/stop"
wait "$swapper" || true
no_leak "$t/swap.txt" "$t/nob" "$st" || fail "the secret leaked through the swapped link"
grep -q "Permission denied" "$t/swap.txt" || echo "note: the swap never landed on root's file"

# ---- special files -------------------------------------------------------------------
echo "# special"
rss() { awk '/^VmRSS/ {print $2}' /proc/"$spid"/status; }
rss0=$(rss)
as_nobody mkfifo "$t/nob/fifo"
python3 -c "import sys; sys.stdout.write('1 ' * (3 << 20))" >"$t/nob/oneline.txt"
chown nobody "$t/nob/oneline.txt"
for p in /dev/zero "$t/nob/fifo" "$t/nob/oneline.txt"; do
  rc=0
  (cd "$t/nob" && timeout 30 setpriv --reuid nobody --regid nogroup --clear-groups \
    "$bin" submit --socket "$sock" "$t/pub/job.yaml" --set data.train="$p") >"$t/out.txt" 2>&1 ||
    rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "$p as data: rc $rc: $(cat "$t/out.txt")"
  case $p in
  /dev/zero) grep -q "is a character device" "$t/out.txt" || fail "$p: $(cat "$t/out.txt")" ;;
  *fifo) grep -q "is a FIFO" "$t/out.txt" || fail "$p: $(cat "$t/out.txt")" ;;
  *) grep -q "longer than 1048576 bytes" "$t/out.txt" || fail "$p: $(cat "$t/out.txt")" ;;
  esac
done
rss1=$(rss)
[ "$rss1" -lt $((rss0 + 65536)) ] || fail "the server grew from $rss0 to $rss1 KiB"
# Every refused job ended (none pending), and of the 17 refused or done so
# far, only the last 6 are kept (in memory and in the state folder).
"$bin" ps --socket "$sock" >"$t/ps.txt" || fail "ps exited $?"
grep -q pending "$t/ps.txt" && fail "a job is left pending: $(cat "$t/ps.txt")"
[ "$(grep -c nobody "$t/ps.txt")" -eq 6 ] || fail "--keep-ended 6 kept $(
  grep -c nobody "$t/ps.txt") jobs"
[ "$(ls "$st/jobs" | wc -l)" -eq 6 ] || fail "the state keeps $(ls "$st/jobs" | wc -l) jobs"

# ---- connections -------------------------------------------------------------------
echo "# conns"
cat >"$t/trickle.py" <<'PY'
import socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
socks = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    socks.append(s)
closed = 0
start = time.time()
# One byte a second on each: never a whole message.
while time.time() - start < 20 and closed < len(socks):
    closed = 0
    for s in socks:
        try:
            s.send(b"\x00")
            s.settimeout(0.01)
            if s.recv(4096) == b"":
                closed += 1
        except socket.timeout:
            pass
        except OSError:
            closed += 1
    time.sleep(1)
print(closed, len(socks))
PY
as_nobody "$py" "$t/trickle.py" "$sock" 12 >"$t/trickle.txt" &
tr=$!
pids+=("$tr")
sleep 0.5
# While nobody trickles: another uid and root are served.
as_12345 "$bin" ps --socket "$sock" >/dev/null || fail "uid 12345 was locked out"
"$bin" ps --socket "$sock" >/dev/null || fail "root was locked out"
wait "$tr"
read -r closed total <"$t/trickle.txt"
[ "$closed" = "$total" ] || fail "only $closed of $total trickling connections were cut"
grep -q "did not arrive in time" "$t/serve-main.log" || fail "no request deadline in the log"
grep -q "connections open, the most this server allows" "$t/serve-main.log" ||
  fail "the per-uid cap never refused"

# ---- outputs ---------------------------------------------------------------------------
echo "# outputs"
J=$(as_nobody "$bin" submit --socket "$sock" "$t/pub/job.yaml" --set output.dir=runs/a)
until_state "$J" done
[ "$(stat -c %U "$t/nob/runs/a/summary.json")" = nobody ] || fail "outputs do not belong to nobody"
[ "$(stat -c %U "$t/nob/runs/a/checkpoint.bin")" = nobody ] || fail "checkpoint owner"
as_nobody "$bin" submit --socket "$sock" "$t/pub/job.yaml" --set output.dir="$t/private/o" \
  >"$t/out.txt" 2>&1 && fail "nobody wrote into root's private folder"
grep -q "Permission denied" "$t/out.txt" || fail "private output: $(cat "$t/out.txt")"
[ ! -e "$t/private/o" ] || fail "a folder appeared in root's private folder"
# Links planted in the user's own output folder: not written through (the
# victim is a file nobody may write, so only the server could have).
printf 'precious\n' >"$t/victim"
chmod 644 "$t/victim"
mkdir -p "$t/nob/runs/b"
ln -s "$t/victim" "$t/nob/runs/b/metrics.jsonl"
ln -s "$t/victim" "$t/nob/runs/b/summary.json.tmp"
chown -R -h nobody "$t/nob/runs/b"
J=$(as_nobody "$bin" submit --socket "$sock" "$t/pub/job.yaml" --set output.dir=runs/b)
until_state "$J" failed
[ "$(cat "$t/victim")" = precious ] || fail "the victim was written through a planted link"
as_nobody "$bin" logs --socket "$sock" "$J" >"$t/logJ" || fail "logs J exited $?"
grep -q "symbolic link" "$t/logJ" || fail "planted link: $(cat "$t/logJ")"
# accelrt run: the same planted links, as root, in a folder another user
# controls.
mkdir -p "$t/nob/runs/c"
ln -s "$t/victim" "$t/nob/runs/c/checkpoint.bin.tmp"
ln -s "$t/victim" "$t/nob/runs/c/metrics.jsonl"
chown -R -h nobody "$t/nob/runs/c"
rc=0
"$bin" run "$t/pub/job.yaml" --set output.dir="$t/nob/runs/c" --quiet >"$t/out.txt" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "run wrote through a planted link (rc $rc)"
grep -q "symbolic link" "$t/out.txt" || fail "run: $(cat "$t/out.txt")"
[ "$(cat "$t/victim")" = precious ] || fail "run wrote through a planted link"

# ---- quotas --------------------------------------------------------------------------
echo "# quota"
cat >"$t/pub/gen.yaml" <<YAML
name: gen
device: host
model:
  input: {sparse: 100}
  layers:
    - {name: out, dense: 20, activation: softmax}
data:
  generate: {train_points: 300, test_points: 50, features: 100, labels: 20,
             nnz: 5, labels_per_point: 1, noise: 0.1}
train: {batch: 20, iterations: 10, threads: 1, optimizer: {adam: {lr: 0.01}}}
output: {dir: gen}
YAML
chmod 644 "$t/pub/gen.yaml"
as_nobody "$bin" submit --socket "$sock" "$t/pub/gen.yaml" --set output.dir=g1 \
  --set data.generate.train_points=2000000 >"$t/out.txt" 2>&1 && fail "over --max-generated"
grep -q "more than 2097152 bytes" "$t/out.txt" || fail "max-generated: $(cat "$t/out.txt")"
[ -z "$(ls -A "$t/nob/g1/data" 2>/dev/null)" ] || fail "refused generated data was left"
J=$(as_nobody "$bin" submit --socket "$sock" "$t/pub/gen.yaml" --set output.dir=g2)
K=$(as_nobody "$bin" submit --socket "$sock" "$t/pub/gen.yaml" --set output.dir=g3 --keep-generated)
until_state "$J" done
until_state "$K" done
[ ! -e "$t/nob/g2/data" ] || fail "generated data outlived its job: $(ls "$t/nob/g2/data")"
[ -s "$t/nob/g3/data/train.txt" ] || fail "--keep-generated did not keep the data"
Q=
for i in 1 2 3; do
  Q="$Q $(as_nobody "$bin" submit --socket "$sock" "$t/pub/job.yaml" --set output.dir=q$i \
    --set train.iterations=100000000)" || fail "queued job $i refused"
done
as_nobody "$bin" submit --socket "$sock" "$t/pub/job.yaml" --set output.dir=q4 \
  >"$t/out.txt" 2>&1 && fail "a 4th job beyond --max-queued 3"
grep -q "max-queued 3" "$t/out.txt" || fail "max-queued: $(cat "$t/out.txt")"
for q in $Q; do as_nobody "$bin" cancel --socket "$sock" "$q" >/dev/null; done
# root is not limited
R=$(submit "$t/pub/job.yaml" --set output.dir="$t/rootout" --set train.iterations=100000000)

# ---- checkpoints across a restart ----------------------------------------------------
echo "# ckpt"
until_ok test -f "$t/rootout/checkpoint.bin"
kill -9 "$spid"
wait "$spid" 2>/dev/null || true
# Damage the iteration count in the header (bytes 16-23): read before the
# checksum, it made the job look finished.
"$py" - "$t/rootout/checkpoint.bin" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[22] ^= 0x7F
open(p, "wb").write(bytes(b))
PY
# A forged journal entry in root's own state (as root could write one, but
# with a wrong crc): not run.
mkdir "$st/jobs/999"
printf 'id 999\nuid 0\nstate queued\nout /tmp/forged\ncrc 00000000\n' >"$st/jobs/999/meta"
cp "$t/pub/job.yaml" "$st/jobs/999/job.yaml"
chmod -R go-w "$st/jobs/999"
start again
until_state "$R" failed
"$bin" logs --socket "$sock" "$R" >"$t/logR" || fail "logs R exited $?"
grep -q "checksum" "$t/logR" || fail "corrupt checkpoint: $(cat "$t/logR")"
grep -q "job 999: its journal entry is not trusted" "$t/serve-again.log" ||
  fail "the forged entry was not refused"
[ ! -e /tmp/forged ] || fail "the forged job ran"
stop
echo "ok"
