#!/usr/bin/env bash
# The command line's help and its "did you mean" messages.
#   usage.sh ACCELRT_BINARY SOURCE_DIR CASE
#   help     accelrt --help lists every command; `accelrt CMD --help`, -h
#            and `accelrt help CMD` print CMD's usage with its options on
#            stdout and exit 0, for every command --help lists;
#   suggest  an unknown command, an unknown option of each command, an
#            ambiguous or valueless option, an unknown --set key and an
#            unknown job-file key each get a message naming the nearest
#            match and exit 2.
# Exit 0 pass, 1 fail.
set -uo pipefail
bin=$1 src=$2 case=$3
work=$(mktemp -d /tmp/accelrt-usage-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
all="run check eval info gen-data study simulate serve submit ps logs cancel schema"

# expect_error WANT ARGS...: exit 2, and stderr holds WANT (a fixed string).
expect_error() {
  local want=$1
  shift
  "$bin" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  [ $rc = 2 ] || fail "accelrt $*: exit $rc, want 2 ($(cat "$work/err"))"
  grep -qF -- "$want" "$work/err" || fail "accelrt $*: stderr lacks \"$want\": $(cat "$work/err")"
}

case $case in
help)
  "$bin" --help >"$work/help" || fail "--help exited $?"
  listed=$(sed -n 's/^  \([a-z][a-z-]*\)\( .*\)\{0,1\}$/\1/p' "$work/help" | grep -v '^help$')
  for c in $all; do
    grep -qx "$c" <<<"$listed" || fail "--help does not list '$c': $(cat "$work/help")"
  done
  "$bin" help | cmp -s - "$work/help" || fail "'accelrt help' differs from --help"
  for c in $listed; do
    for h in --help -h; do
      "$bin" "$c" $h >"$work/out" 2>"$work/err" || fail "accelrt $c $h exited $?"
      [[ "$(head -1 "$work/out")" == "usage: accelrt $c"* ]] || fail "accelrt $c $h: $(cat "$work/out")"
      [ ! -s "$work/err" ] || fail "accelrt $c $h wrote to stderr: $(cat "$work/err")"
    done
    "$bin" help "$c" | cmp -s - "$work/out" || fail "'accelrt help $c' differs from $c --help"
  done
  # The options each client command takes are in its help. Each help is
  # captured before it is searched: `accelrt X --help | grep -q` under
  # pipefail fails by chance when grep exits at its match while accelrt
  # still writes (SIGPIPE).
  has() { local out; out=$("$bin" "$1" --help) && grep -qF -- "$2" <<<"$out"; }
  has ps --json || fail "ps --help lacks --json"
  has logs --json && has logs --follow || fail "logs --help lacks its options"
  has cancel "cancel ID..." || fail "cancel --help lacks ID..."
  has submit --keep-generated || fail "submit --help"
  has run --resume || fail "run --help"
  ;;
suggest)
  expect_error "accelrt: unknown command 'sumbit'; did you mean 'submit'?" sumbit x.yaml
  expect_error "accelrt: unknown command 'lgos'; did you mean 'logs'?" lgos 3
  expect_error "accelrt: unknown command 'frobnicate'" frobnicate
  grep -q "^  submit" "$work/err" || fail "an unknown command without a near one lists them"
  expect_error "accelrt: unknown command 'sumbit'; did you mean 'submit'?" help sumbit
  job=$src/configs/quickstart.yaml
  expect_error "accelrt run: unknown option '--reusme'; did you mean '--resume'?" run --reusme "$job"
  expect_error "accelrt check: unknown option '--sett'; did you mean '--set'?" check --sett a=1 "$job"
  expect_error "accelrt eval: unknown option '--checkpiont'; did you mean '--checkpoint'?" \
    eval --checkpiont x "$job"
  expect_error "accelrt info: unknown option '--hlep'; did you mean '--help'?" info --hlep
  expect_error "accelrt schema: unknown option '--hlep'; did you mean '--help'?" schema --hlep
  expect_error "accelrt gen-data: unknown option '--sede'; did you mean '--seed'?" \
    gen-data --out "$work/g" --sede 3
  expect_error "accelrt study: unknown option '--dryrun'; did you mean '--dry-run'?" \
    study --dryrun x.yaml
  expect_error "accelrt simulate: unknown option '--wrokers'; did you mean '--workers'?" \
    simulate --wrokers 2 "$job"
  expect_error "accelrt serve: unknown option '--polcy'; did you mean '--policy'?" \
    serve --polcy fifo
  expect_error "accelrt submit: unknown option '--keep-generatd'; did you mean '--keep-generated'?" \
    submit --keep-generatd "$job"
  expect_error "accelrt ps: unknown option '--jsno'; did you mean '--json'?" ps --jsno
  expect_error "accelrt logs: unknown option '--fllow'; did you mean '--follow'?" logs --fllow 3
  expect_error "accelrt cancel: unknown option '--sockte'; did you mean '--socket'?" \
    cancel --sockte /x 3
  expect_error "accelrt ps: unknown option '--zzz'; see 'accelrt ps --help'" ps --zzz
  expect_error "accelrt ps: unknown option '-x'; see 'accelrt ps --help'" ps -x
  expect_error "accelrt submit: option '--s' is ambiguous: --socket, --set" submit --s a=1 "$job"
  expect_error "accelrt check: option '--set' needs a value" check "$job" --set
  expect_error "accelrt run: option '--quiet' takes no value" run --quiet=yes "$job"
  expect_error "accelrt ps: option '--json' takes no value" ps --json=1
  # --set keys and job-file keys: the nearest key of the schema.
  expect_error "unknown key 'bach'; did you mean 'batch'?" check "$job" --set train.bach=64
  expect_error "unknown key 'tarin'; did you mean 'train'?" check "$job" --set tarin.batch=64
  sed 's/^train:/trian:/' "$job" >"$work/job.yaml"
  expect_error "unknown key 'trian'; did you mean 'train'?" check "$work/job.yaml"
  ;;
*)
  fail "unknown case $case"
  ;;
esac
echo ok
