#!/usr/bin/env bash
# Installs what building and testing Eddy needs from the system, if it is missing:
# libclang (the rocksdb crate generates its bindings with it), the psql client, a JDK and
# the PostgreSQL JDBC driver (client tests), a PostgreSQL server (the PostgreSQL sink's
# tests). Safe to run again: it does nothing when
# everything is present.
set -euo pipefail

need=()
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
command -v psql >/dev/null 2>&1 || need+=(postgresql-client)
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
[[ -f /usr/share/java/postgresql.jar ]] || need+=(libpostgresql-jdbc-java)
# The PostgreSQL server the PostgreSQL sink's tests write to.
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)

if ((${#need[@]})); then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
