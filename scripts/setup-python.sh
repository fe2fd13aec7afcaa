#!/usr/bin/env bash
# Creates .venv with the Python client drivers the client tests use (from PyPI), or
# updates it when tests/clients/requirements.txt changed.
set -euo pipefail
cd "$(dirname "$0")/.."
req=tests/clients/requirements.txt
stamp=.venv/.requirements
if [[ -x .venv/bin/python && -f $stamp ]] && cmp -s "$req" "$stamp"; then
  exit 0
fi
echo "setup: creating .venv with the Python client drivers"
python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -r "$req"
cp "$req" "$stamp"
