#!/bin/sh
# A combined `parallel for simd` whose if clause has no directive name
# applies the condition to the simd construct as well (OpenMP 5.0): GCC 12
# then runs the loop scalar whenever the condition is false, as it was for
# every element-wise op of a one-thread team (nn_eltwise.c's EW_LOOP, 4-16x
# slower).  Every such if clause must say `if (parallel: ...)`.
# Usage: simd_if.sh SOURCE_DIR
src=${1:?usage: simd_if.sh SOURCE_DIR}
bad=$(grep -rnE --include='*.c' --include='*.h' --include='*.cu' \
        'omp[ \t]+(parallel[ \t]+)?(for[ \t]+)?simd[^"]*[ \t]if[ \t]*\(' \
        "$src/runtime" "$src/lanes" "$src/lsh" "$src/commsched" 2>/dev/null |
      grep -vE 'if[ \t]*\([ \t]*parallel[ \t]*:')
if [ -n "$bad" ]; then
  echo "simd loops whose if clause would also turn off vectorisation; write if (parallel: ...):"
  echo "$bad"
  exit 1
fi
echo "ok: every if clause on a simd loop names parallel"
