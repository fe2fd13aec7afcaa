#!/usr/bin/env bash
# The whole test suite: unit tests, and the integration tests that start real eddy
# servers and talk to them over the PostgreSQL wire protocol (sql-tests/*.slt included).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/setup-python.sh
scripts/setup-kafka.sh
# One target directory outside the clone, reused by every run and every clone.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/eddy-target}"
cargo test --locked "$@"
