#!/usr/bin/env bash
# accelrt onnx-test over ONNX's own backend tests from Debian's
# libonnx-testdata (label e2e; skipped, 77, when it is not installed):
#   - node: no folder fails (skips are allowed and counted); every test of
#     tests/onnx/listed_node_tests.txt (those that use only the ops and
#     element types issue 16 lists) passes except the ones
#     tests/onnx/known_skips.txt names, and at least 240 of them pass (the
#     issue's floor);
#   - pytorch-converted, pytorch-operator (mostly opset 6, outside the
#     7..17 imported): run, their counts printed, no floor.
#   conformance.sh ACCELRT SRC
set -uo pipefail
bin=$1 src=$2
data=${ONNX_TESTDATA:-/usr/share/libonnx-testdata/data}
if [ ! -d "$data/node" ]; then
  echo "skipped: $data/node is missing (install libonnx-testdata: ci/setup --tests)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bin" onnx-test "$data/node" > "$work/node.txt" 2> "$work/node.err"
rc=$?
tail -1 "$work/node.txt"
grep '^fail ' "$work/node.txt"
[ $rc -eq 0 ] || fail "accelrt onnx-test exited $rc on the node tests ($(cat "$work/node.err"))"
grep -q '^[0-9]* passed, 0 failed, [0-9]* skipped$' "$work/node.txt" || fail "no summary line"

listed=0 passed=0
while read -r t; do
  [ -n "$t" ] || continue
  listed=$((listed + 1))
  line=$(grep -E "^(pass|fail|skip) $t(:|\$)" "$work/node.txt")
  [ -n "$line" ] || fail "$t was not run"
  case $line in
    pass*) passed=$((passed + 1)) ;;
    *) grep -q "^$t " "$src/tests/onnx/known_skips.txt" ||
         fail "$t is listed and not a known skip: $line" ;;
  esac
done < "$src/tests/onnx/listed_node_tests.txt"
echo "node tests using only the listed ops and element types: $passed of $listed pass"
[ "$passed" -ge 240 ] || fail "only $passed of the listed node tests pass (floor 240)"

# The runner's own verdicts: a reference that differs fails (exit 1) with
# the errors, a folder without data sets is skipped, and one run names each.
mkdir -p "$work/own"
cp -r "$data/node/test_relu" "$work/own/test_wrong"
cp "$data/node/test_abs/test_data_set_0/output_0.pb" "$work/own/test_wrong/test_data_set_0/"
mkdir -p "$work/own/test_nodata"
cp "$data/node/test_relu/model.onnx" "$work/own/test_nodata/"
"$bin" onnx-test "$work/own" > "$work/own.txt" 2>&1
rc=$?
cat "$work/own.txt"
[ $rc -eq 1 ] || fail "a folder that differs gave exit $rc, not 1"
grep -q "^fail test_wrong: output 0 'y': .* elements differ (max abs error" "$work/own.txt" ||
  fail "no fail line with the errors for test_wrong"
grep -q "^skip test_nodata: no test_data_set_N folders" "$work/own.txt" || fail "no skip line"
grep -q "^0 passed, 1 failed, 1 skipped$" "$work/own.txt" || fail "wrong counts"
"$bin" onnx-test "$work/missing" > /dev/null 2>&1
[ $? -eq 2 ] || fail "a missing folder is not a usage error (exit 2)"

for d in pytorch-converted pytorch-operator; do
  [ -d "$data/$d" ] || continue
  "$bin" onnx-test "$data/$d" > "$work/$d.txt" 2>&1
  rc=$?
  [ $rc -le 1 ] || fail "accelrt onnx-test exited $rc on $d"
  echo "$d: $(tail -1 "$work/$d.txt")"
done
exit 0
