# tests/onnx/lib.sh: the prologue of the ONNX shell tests, sourced as
#   . "$(dirname "$0")/lib.sh" "$@"; need_python MODULE...
# with their arguments ACCELRT PYTHON: sets bin and py, a fresh folder $work
# (removed at exit) and fail MESSAGE.
bin=$1 py=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# need_python MODULE...: 77 (skipped) unless $py imports each, which the
# tests need to write their models and data (Debian's python3-MODULE).
need_python() {
  for m in "$@"; do
    "$py" -c "import $m" 2>/dev/null || { echo "skipped: python3-$m is not installed"; exit 77; }
  done
}
