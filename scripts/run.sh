#!/usr/bin/env bash
# Builds and starts the server on its embedded defaults: PostgreSQL wire protocol on
# 127.0.0.1:4566, database dev, user root, data under ./eddy-data. Extra arguments are
# passed to eddy (see `--help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/eddy-target}"
exec cargo run --locked --bin eddy -- "$@"
