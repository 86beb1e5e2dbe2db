#!/usr/bin/env bash
# Lanes on mixed models (label e2e): the CNN, the ResNet-20, the token
# transformer and extreme-classification MLPs sharing one device.
#   lanes_mixed.sh ACCELRT SRC CASE
# slice: configs/multi-tenant-mixed.yaml cut small (every item once, 3
#   iterations of batch 16, 256 Fashion-MNIST images) under srtf and fifo:
#   every job ends done, memory never above capacity, and each job admitted
#   on its plan (the runner's bytes are the engine's plan, which accelrt
#   check prints).  77 without dataset-fashion-mnist.
# random: seeded random mixes of small graph and MLP jobs arriving at once,
#   with a capacity that holds the largest alone but not the mix, under
#   each policy: all done, the arena never above capacity, lanes disjoint.
# admit: a Fashion CNN (the whole dataset in memory), a token transformer
#   and an XC MLP chain: accelrt check's admission table gives each job the
#   bytes the runner admitted it on (the run's metrics.jsonl job lines, the
#   graph jobs' datasets included), its "all at once" figure is theirs to
#   the byte, and a capacity just under it (far above the figure without
#   the datasets) is reported as not holding every job at once.  77
#   without dataset-fashion-mnist.
# All need python3-yaml (ci/setup --tests); 77 without it.
# Exit 0 pass, 1 fail, 77 skipped.
set -uo pipefail
bin=$1 src=$2 case=$3
py=${ACCELRT_PYTHON:-/usr/bin/python3}
work=$(mktemp -d /tmp/accelrt-lanes-mixed-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
helper() { "$py" "$src/tests/e2e/lanes_mixed.py" "$@"; }
"$py" -c "import yaml" 2>/dev/null || { echo "skipped: $py has no yaml module (python3-yaml)"; exit 77; }

case $case in
slice)
  d=/usr/share/datasets/fashion-mnist
  [ -f "$d/train-images-idx3-ubyte.gz" ] || { echo "skipped: $d is not installed"; exit 77; }
  helper slice "$src/configs/multi-tenant-mixed.yaml" "$work" || fail "could not cut the slice"
  for policy in srtf fifo; do
    "$bin" check "$work/slice.yaml" --set runtime.policy=$policy > "$work/check.txt" 2>&1 ||
      fail "check: $(tail -5 "$work/check.txt")"
    "$bin" run "$work/slice.yaml" --quiet --overwrite --set runtime.policy=$policy \
      > "$work/run.txt" 2>&1 || fail "$policy run: $(tail -5 "$work/run.txt")"
    helper check-slice "$work" $policy "$work/check.txt" || fail "$policy: the records"
  done
  ;;
admit)
  d=/usr/share/datasets/fashion-mnist
  [ -f "$d/train-images-idx3-ubyte.gz" ] || { echo "skipped: $d is not installed"; exit 77; }
  helper admit "$src/configs/multi-tenant-mixed.yaml" "$work" || fail "could not write the jobs"
  "$bin" check "$work/admit.yaml" > "$work/check.txt" 2>&1 || fail "check: $(tail -5 "$work/check.txt")"
  "$bin" run "$work/admit.yaml" --quiet > "$work/run.txt" 2>&1 || fail "run: $(tail -5 "$work/run.txt")"
  below=$(helper check-admit "$work" "$work/check.txt") || fail "the admission figures"
  "$bin" check "$work/admit.yaml" --set runtime.memory=$below > "$work/check2.txt" 2>&1 ||
    fail "check at $below: $(tail -5 "$work/check2.txt")"
  grep -q '^  all at once: .*; every job fits at the same time' "$work/check2.txt" &&
    fail "check at $below says every job fits at once: $(grep 'all at once' "$work/check2.txt")"
  grep -q '^  all at once: ' "$work/check2.txt" || fail "check at $below: no all-at-once line"
  grep -q '^  all at once: .*; every job fits at the same time' "$work/check.txt" ||
    fail "check at 1 GiB does not say every job fits at once"
  ;;
random)
  for seed in ${ACCELRT_TEST_SEEDS:-1 2 3 4}; do
    rm -rf "$work/out"
    helper random "$seed" "$work" || fail "seed $seed: could not write the mix"
    "$bin" check "$work/random.yaml" > "$work/check.txt" 2>&1 ||
      fail "seed $seed: check: $(tail -5 "$work/check.txt")"
    cap=$(helper capacity "$work/check.txt") || fail "seed $seed: no capacity"
    "$bin" run "$work/random.yaml" --quiet --set runtime.memory=${cap}MiB > "$work/run.txt" 2>&1 ||
      fail "seed $seed: run: $(tail -5 "$work/run.txt")"
    helper check-random "$work" "$cap" || fail "seed $seed: the records"
  done
  ;;
*) fail "unknown case $case" ;;
esac
echo "ok: $case"
