#!/usr/bin/env bash
# Runs a command with the SQS-compatible test server up: installs the server (moto, pinned)
# into a venv under target/ on first use, starts it on 127.0.0.1 on a free port, exports its
# address as SQS_TEST_ENDPOINT, runs the command, and stops the server.
#   scripts/with-sqs-server.sh cargo test
set -euo pipefail
cd "$(dirname "$0")/.."

MOTO_VERSION=5.2.5
venv=target/moto-venv
mkdir -p target

if ! "$venv/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null; then
  echo "installing moto $MOTO_VERSION into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
fi

port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$venv/bin/moto_server" -H 127.0.0.1 -p "$port" > target/moto.log 2>&1 &
server_pid=$!
stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
}
trap stop_server EXIT

# Wait (at most 30 s) until the server answers.
"$venv/bin/python" - "$port" <<'PY'
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/moto-api/reset"
for _ in range(150):
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=1)
        sys.exit(0)
    except Exception:
        time.sleep(0.2)
sys.exit("the SQS test server did not start; see target/moto.log")
PY

export SQS_TEST_ENDPOINT="http://127.0.0.1:$port"
"$@"
