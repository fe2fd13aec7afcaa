#!/usr/bin/env bash
# The whole benchmark in one command: every Nexmark query (benches/nexmark/q*.sql) at
# parallelism 1 and 2, against the generator, the bid source alone and DataFusion in
# batch, with peak memory, state size and checkpoint durations. Rewrites the generated
# section of docs/benchmarks.md and docs/nexmark-throughput.svg.
#   scripts/bench.sh                               # 4 000 000 events per query
#   EDDY_BENCH_EVENTS=1000000 scripts/bench.sh     # fewer events
#   scripts/bench.sh q5 q7                         # some queries only
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/eddy-target}"
export EDDY_BENCH_REPORT="${EDDY_BENCH_REPORT:-$PWD/docs/benchmarks.md}"
cargo bench --locked --bench nexmark -- "$@"
