#!/bin/sh
# distributed.share (issue 7, Salus x TicTac): each worker of
# `mpiexec -n 3 accelrt run configs/cluster.yaml` is one more tenant of its
# device's lanes next to configs/shared-device.yaml's jobs.
#  - sharing changes when iterations run, never what they compute: the final
#    loss equals the unshared run's bit for bit;
#  - under fair the co-tenants run in the worker's lane between its
#    iterations (same lane, no queueing) and under fifo they wait for it;
#    every job ran all its iterations, each worker has its own records;
#  - a worker that stages its tensors through host buffers as a GPU worker
#    does (ACCELRT_DIST_STAGE=1) works as a tenant too: the same loss bit
#    for bit, the summary counting the staged workers;
#  - distributed.share_tenants: steady keeps the co-tenants
#    training for exactly the worker's job: in a 5- and a 20-iteration run
#    every co-tenant ends (done, its outputs written) only after the
#    worker's last iteration, restarted past its file's iterations, and
#    runs at least one more iteration for each further iteration of the
#    worker's (under once, the default, they run
#    their 12 and 16 whatever the job's length and end long before the
#    20-iteration job does);
#  - the worker's turns report its waits for its peers: fair charges it
#    less device time than its turns took (its co-tenants all of theirs);
#  - a missing share file and one without jobs fail on every rank with a
#    message naming the file, a non-zero exit, no hang.
# usage: share.sh MPIEXEC ACCELRT SOURCE_DIR
set -u
MPIEXEC=$1
ACCELRT=$2
SRC=$3
dir=$(mktemp -d /tmp/accelrt_dist_share_XXXXXX)
fail() {
  echo "FAIL: $*"
  cat "$dir/out.txt" 2>/dev/null
  exit 1
}
run() { # OUT [extra --set ...]
  out=$1
  shift
  timeout 240 "$MPIEXEC" --oversubscribe -n 3 "$ACCELRT" run "$SRC/configs/cluster.yaml" \
    --quiet --set train.iterations=8 --set train.batch=256 --set "output.dir=$dir/$out" "$@" \
    > "$dir/out.txt" 2>&1
}
# The tenants train 12 and 16 iterations instead of the file's 150 and 200
# (most of this test's time): enough to interleave with the worker's 8.
tenants() { # POLICY
  sed -e "s/policy: [a-z]*/policy: $1/" -e 's/iterations: 150,/iterations: 12,/' \
    -e 's/iterations: 200,/iterations: 16,/' "$SRC/configs/shared-device.yaml" > "$dir/$1.yaml"
  grep -q 'iterations: 12,' "$dir/$1.yaml" && grep -q 'iterations: 16,' "$dir/$1.yaml" ||
    fail "configs/shared-device.yaml no longer has the tenants' 150 and 200 iterations"
}
tenants fair
tenants fifo
once="distributed.share_tenants=once"
run alone || fail "the unshared run failed"
run fair --set "distributed.share=$dir/fair.yaml" --set $once ||
  fail "the run shared under fair failed"
run fifo --set "distributed.share=$dir/fifo.yaml" --set $once ||
  fail "the run shared under fifo failed"
export ACCELRT_DIST_STAGE=1
run staged --set "distributed.share=$dir/fair.yaml" --set $once ||
  fail "the staged run shared under fair failed"
unset ACCELRT_DIST_STAGE
for n in 5 20; do
  run steady$n --set train.iterations=$n --set "distributed.share=$dir/fair.yaml" \
    --set distributed.share_tenants=steady ||
    fail "the $n-iteration run with steady co-tenants failed"
done

python3 - "$dir" <<'PY' || fail "records"
import json, sys
d = sys.argv[1]
alone = json.load(open(f"{d}/alone/summary.json"))
assert alone["staged_workers"] == 0, alone["staged_workers"]
staged = json.load(open(f"{d}/staged/summary.json"))
assert staged["staged_workers"] == 2, staged["staged_workers"]
assert staged["worker_devices"] == "host (staged),host (staged)", staged["worker_devices"]
for pol in ("fair", "fifo", "staged"):
    s = json.load(open(f"{d}/{pol}/summary.json"))
    assert s["loss"] == alone["loss"], (pol, s["loss"], alone["loss"])
    assert s["iterations"] == 8, s["iterations"]
    for w in (0, 1):
        t = json.load(open(f"{d}/{pol}/share/worker{w}/summary.json"))
        jobs = {j["name"]: j for j in t["jobs"]}
        assert set(jobs) == {f"cluster.worker{w}", "tenant-a", "tenant-b"}, jobs
        assert all(j["status"] == "done" for j in jobs.values()), jobs
        assert jobs[f"cluster.worker{w}"]["iterations"] == 8, jobs
        assert jobs["tenant-a"]["iterations"] == 12 and jobs["tenant-b"]["iterations"] == 16
        me, a = jobs[f"cluster.worker{w}"], jobs["tenant-a"]
        print("  %s worker%d: tenant-a queued %.3f s, the worker's job %.3f s (%.2f)"
              % (pol, w, a["queue_s"], me["jct_s"], a["queue_s"] / me["jct_s"]))
        if pol != "fifo":  # fair: one lane, turns between the worker's iterations
            assert a["lane"] == me["lane"] and a["queue_s"] < me["jct_s"], jobs
        else:  # fifo: the tenants wait for the worker to finish
            assert a["queue_s"] >= 0.9 * me["jct_s"], jobs
print("records ok")

# Steady co-tenants: the load lasts as long as the job.
iters = {}
for n in (5, 20):
    for w in (0, 1):
        t = json.load(open(f"{d}/steady{n}/share/worker{w}/summary.json"))
        jobs = {j["name"]: j for j in t["jobs"]}
        me = jobs.pop(f"cluster.worker{w}")
        assert me["status"] == "done" and me["iterations"] == n, me
        assert set(jobs) == {"tenant-a", "tenant-b"}, jobs
        for name, j in jobs.items():
            # stopped cleanly, after the worker's last iteration ended
            assert j["status"] == "done", (n, w, j)
            assert j["arrival_s"] + j["jct_s"] >= me["arrival_s"] + me["jct_s"], (n, w, j, me)
            last = json.load(open(f"{d}/steady{n}/share/worker{w}/{name}/summary.json"))
            assert last["iterations"] <= (12 if name == "tenant-a" else 16), last
            iters[n, w, name] = j["iterations"]
        # The worker's waits for its peers are not charged to fair as
        # device time (else its co-tenants get as much again, delaying it
        # and its peers in a spiral): device_s < busy_s for it alone.
        recs = {}
        for line in open(f"{d}/steady{n}/share/worker{w}/metrics.jsonl"):
            r = json.loads(line)
            if r.get("event") == "job":
                recs[r["name"]] = r
        me = recs.pop(f"cluster.worker{w}")
        assert 0 < me["device_s"] < me["busy_s"], (n, w, me)
        for r in recs.values():
            assert r["device_s"] == r["busy_s"], (n, w, r)
for w in (0, 1):
    short = iters[5, w, "tenant-a"] + iters[5, w, "tenant-b"]
    long = iters[20, w, "tenant-a"] + iters[20, w, "tenant-b"]
    # 15 more worker iterations: at least one more co-tenant iteration for
    # each (fair gives them a turn between the worker's); once they would
    # be 28 and 28. Not a ratio: the co-tenants also train through the
    # worker's start-up and its waits for its peer, a part that does not
    # grow with the job (a CI run under ASan: 71 and 137, about 49 of the
    # 71 from that part, 4.4 an iteration from the rest).
    assert long - short >= 15 and long > 28, (w, short, long, iters)
print("steady ok:", iters)
PY

run missing --set distributed.share=no-such-file.yaml && fail "a missing share file was accepted"
grep -q "no-such-file.yaml" "$dir/out.txt" || fail "the error does not name the share file"
printf 'name: x\ndevice: host\nmodel: {input: {dense: 4}, layers: [{dense: 2, activation: softmax}]}\ndata: {generate: {train_points: 10, test_points: 2, features: 4, labels: 2}}\ntrain: {batch: 2, iterations: 1}\noutput: {dir: /tmp}\n' > "$dir/nojobs.yaml"
run nojobs --set "distributed.share=$dir/nojobs.yaml" && fail "a share file without jobs was accepted"
grep -q "no \`jobs:\` list" "$dir/out.txt" || fail "the error does not say the file lacks jobs"
echo ok
rm -rf "$dir"
