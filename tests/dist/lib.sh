# tests/dist/lib.sh: the prologue that the mpiexec shell tests share,
# sourced as  name=NAME; . "$(dirname "$0")/lib.sh"  by a script whose
# arguments are MPIEXEC ACCELRT (sh's "." passes no arguments of its own).
# Sets MPIEXEC and ACCELRT, a fresh folder $dir (/tmp/accelrt_NAME_XXXXXX),
# mp (the backgrounded mpiexec's pid, if a test sets it) and fail MESSAGE,
# which prints the runs' out*.txt and kills $mp.
MPIEXEC=$1
ACCELRT=$2
dir=$(mktemp -d "/tmp/accelrt_${name}_XXXXXX")
[ -d "$dir" ] || { echo "FAIL: mktemp"; exit 1; }
mp=
fail() {
  echo "FAIL: $*"
  echo "---- output ----"
  cat "$dir"/out*.txt 2>/dev/null
  [ -n "$mp" ] && kill -KILL "$mp" 2>/dev/null
  exit 1
}
# dist_job NAME SEED HIDDEN TRAIN: $dir/job.yaml, a 3-rank job (1 server) of
# a 32 -> HIDDEN relu -> 16 softmax model on generated data, TRAIN its
# train: mapping, output in $dir/run.
dist_job() {
  cat > "$dir/job.yaml" <<YAML
name: $1
seed: $2
device: host
model:
  input: {dense: 32}
  layers:
    - {name: h, dense: $3, activation: relu}
    - {name: out, dense: 16, activation: softmax}
data: {generate: {train_points: 400, test_points: 0, features: 32, labels: 16, nnz: 6, labels_per_point: 2}}
train: $4
output: {dir: '$dir/run'}
distributed: {servers: 1, order: tac, trace_iterations: 2}
YAML
}
