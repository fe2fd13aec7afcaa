#!/usr/bin/env bash
# A same-run before/after comparison of the Nexmark benchmark: builds the bench at a base
# commit (in a git worktree) and in this checkout, runs them alternately (base, new,
# base, new) on the named queries, and prints each query's mean events/s and the ratio.
#   scripts/bench-compare.sh 061d5c2 q4 q5 q7          # 1 000 000 events per query
#   EDDY_BENCH_EVENTS=4000000 scripts/bench-compare.sh HEAD~3 q5
# The worktree stays in $EDDY_BENCH_BASE_DIR (default /tmp/eddy-bench-base) so that a
# second comparison against the same base reuses its build.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: $0 <base commit> [query ...]" >&2
  exit 2
fi
base=$1
shift
scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/eddy-target}"
export EDDY_BENCH_EVENTS="${EDDY_BENCH_EVENTS:-1000000}"
base_dir="${EDDY_BENCH_BASE_DIR:-/tmp/eddy-bench-base}"

if [ -d "$base_dir" ]; then
  git -C "$base_dir" checkout -q --detach "$base"
else
  git worktree add -q --detach "$base_dir" "$base"
fi

# The path of the bench executable cargo builds in a checkout.
bench_binary() {
  (cd "$1" && cargo bench --locked --no-run --bench nexmark 2>&1) |
    sed -n 's/.*Executable benches\/nexmark.rs (\(.*\))/\1/p' | tail -1
}
base_bin=$(bench_binary "$base_dir")
new_bin=$(bench_binary "$PWD")
if [ -z "$base_bin" ] || [ -z "$new_bin" ]; then
  echo "building the benchmarks failed" >&2
  exit 1
fi

results=$(mktemp)
for round in 1 2; do
  for side in base new; do
    bin=$base_bin
    [ "$side" = new ] && bin=$new_bin
    echo "round $round: $side" >&2
    "$bin" --bench "$@" 2>&1 |
      awk -v side="$side" '/^generator / {print side, "generator", "-", $3}
                           /^q[0-9]+ / {print side, $1, $3, $4}' >>"$results"
  done
done

echo "| query | parallelism | before ($base) | after | after / before |"
echo "| --- | ---: | ---: | ---: | ---: |"
awk '{sum[$1" "$2" "$3] += $4; n[$1" "$2" "$3]++; if (!seen[$2" "$3]++) order[++count] = $2" "$3}
     END {
       for (i = 1; i <= count; i++) {
         split(order[i], k, " ")
         b = sum["base " order[i]] / n["base " order[i]]
         a = sum["new " order[i]] / n["new " order[i]]
         printf "| %s | %s | %.0f | %.0f | %.2f |\n", k[1], k[2], b, a, a / b
       }
     }' "$results"
rm -f "$results"
