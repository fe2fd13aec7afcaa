#!/usr/bin/env bash
# Installs the Kafka-protocol broker the Kafka connector tests run against: tansu (from
# crates.io), into ~/.cache/eddy-tools so every clone and CI run reuses it. A debug build:
# the tests need a real broker, not a fast one, and it builds in half the time.
set -euo pipefail
TANSU_VERSION=0.6.0
root="${EDDY_TOOLS_DIR:-$HOME/.cache/eddy-tools}"
if [[ -x "$root/bin/tansu" ]] && "$root/bin/tansu" --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
  exit 0
fi
echo "setup: installing the tansu Kafka broker $TANSU_VERSION (a few minutes, once)"
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/eddy-target}/tansu" \
  cargo install --quiet --locked --debug tansu --version "$TANSU_VERSION" --features dynostore --root "$root"
