#!/usr/bin/env bash
# Runs a command with the SQS-compatible test server up: installs the server (moto, pinned)
# into a venv under target/ on first use, starts it on 127.0.0.1 on a free port, exports its
# address as SQS_TEST_ENDPOINT (and SQS_TEST_SERVER=moto; moto's DynamoDB at the same address
# as DYNAMODB_TEST_ENDPOINT), runs the command, and stops the server.
#   scripts/with-sqs-server.sh cargo test -- --include-ignored
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/server-common.sh

MOTO_VERSION=5.2.5
venv=target/moto-venv
mkdir -p target

if ! "$venv/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null; then
  echo "installing moto $MOTO_VERSION into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
fi

port=$(free_port "$venv/bin/python")
start_server target/moto.log "$venv/bin/moto_server" -H 127.0.0.1 -p "$port"
wait_until_up "$venv/bin/python" target/moto.log POST "http://127.0.0.1:$port/moto-api/reset"
run_against moto "$port" "$@"
