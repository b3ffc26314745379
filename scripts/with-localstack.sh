#!/usr/bin/env bash
# Runs a command with LocalStack's SQS (its own implementation, not moto's) up on the host, no
# Docker: installs LocalStack and its pinned dependencies (scripts/localstack-requirements.txt)
# into a venv under target/ on first use, with a Python >= 3.13 found on PATH or in pyenv;
# starts it on 127.0.0.1 on a free port, exports its address as SQS_TEST_ENDPOINT, runs the
# command, and stops the server.
#   scripts/with-localstack.sh cargo test
# Without a Python >= 3.13 it says so and exits with status 3.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/localstack-venv
requirements=scripts/localstack-requirements.txt
mkdir -p target

find_python() {
  local candidates=(python3.13 python3.14 python3)
  if command -v pyenv > /dev/null 2>&1; then
    local root
    root=$(pyenv root)
    for dir in "$root"/versions/3.1[3-9]*; do
      [ -x "$dir/bin/python3" ] && candidates+=("$dir/bin/python3")
    done
  fi
  for python in "${candidates[@]}"; do
    if command -v "$python" > /dev/null 2>&1 \
      && "$python" -c 'import sys; sys.exit(sys.version_info < (3, 13))' 2> /dev/null; then
      command -v "$python"
      return 0
    fi
  done
  return 1
}

# Installed, and from today's requirements?
stamp="$venv/.requirements"
if ! cmp -s "$requirements" "$stamp" 2> /dev/null; then
  if ! python=$(find_python); then
    echo "LocalStack needs Python >= 3.13, and none was found (PATH, pyenv)" >&2
    exit 3
  fi
  echo "installing LocalStack into $venv with $python (about 3 minutes)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
fi

port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
home=target/localstack-home
rm -rf "$home"
mkdir -p "$home/tmp" "$home/fs"
env HOME="$PWD/$home" TMPDIR="$PWD/$home/tmp" FILESYSTEM_ROOT="$PWD/$home/fs" \
  SERVICES=sqs EAGER_SERVICE_LOADING=1 PERSISTENCE=0 \
  GATEWAY_LISTEN="127.0.0.1:$port" LOCALSTACK_HOST="127.0.0.1:$port" \
  SQS_ENDPOINT_STRATEGY=dynamic DNS_ADDRESS=0 DISABLE_EVENTS=1 SKIP_SSL_CERT_DOWNLOAD=1 \
  SQS_DISABLE_CLOUDWATCH_METRICS=1 \
  "$venv/bin/python" scripts/localstack_server.py > target/localstack.log 2>&1 &
server_pid=$!
stop_server() {
  kill "$server_pid" 2> /dev/null || true
  wait "$server_pid" 2> /dev/null || true
}
trap stop_server EXIT

# Wait (at most 60 s) until SQS is up.
"$venv/bin/python" - "$port" << 'PY'
import json, sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/_localstack/health"
for _ in range(300):
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:
            if json.load(answer)["services"].get("sqs") in ("running", "available"):
                sys.exit(0)
    except Exception:
        pass
    time.sleep(0.2)
sys.exit("LocalStack did not start; see target/localstack.log")
PY

export SQS_TEST_ENDPOINT="http://127.0.0.1:$port"
"$@"
