# Sourced by with-sqs-server.sh (moto) and with-localstack.sh: what starting a test server,
# waiting for it and stopping it have in common. Servers listen on 127.0.0.1 only.

# find_python MINOR: prints the path of a Python 3.MINOR or newer, from PATH or pyenv; fails
# if there is none.
find_python() {
  local minor=$1 candidates=()
  for m in $(seq "$minor" 19); do candidates+=("python3.$m"); done
  candidates+=(python3)
  if command -v pyenv > /dev/null 2>&1; then
    local root dir
    root=$(pyenv root)
    for dir in "$root"/versions/3.*; do
      [ -x "$dir/bin/python3" ] && candidates+=("$dir/bin/python3")
    done
  fi
  for python in "${candidates[@]}"; do
    if command -v "$python" > /dev/null 2>&1 \
      && "$python" -c "import sys; sys.exit(sys.version_info < (3, $minor))" 2> /dev/null; then
      command -v "$python"
      return 0
    fi
  done
  return 1
}

# free_port PYTHON: prints a free TCP port of 127.0.0.1.
free_port() {
  "$1" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server LOG COMMAND...: starts the server in the background, its output in LOG; it is
# stopped (by its PID) when the calling script exits. Its PID is exported as
# SQS_TEST_SERVER_PID, for the benches that read the server's CPU time.
start_server() {
  local log=$1
  shift
  "$@" > "$log" 2>&1 &
  server_pid=$!
  export SQS_TEST_SERVER_PID=$server_pid
  trap stop_server EXIT
}

stop_server() {
  kill "$server_pid" 2> /dev/null || true
  wait "$server_pid" 2> /dev/null || true
  if [ -n "${dynalite_pid:-}" ]; then
    kill "$dynalite_pid" 2> /dev/null || true
    wait "$dynalite_pid" 2> /dev/null || true
  fi
}

# start_dynalite PYTHON: installs dynalite (an in-memory DynamoDB, pinned by
# scripts/dynalite/package-lock.json) under target/ on first use, with the machine's Node.js
# and npm, starts it on 127.0.0.1 on a free port (stopped with the test server), and exports
# its address as DYNAMODB_TEST_ENDPOINT (and DYNAMODB_TEST_SERVER=dynalite).
start_dynalite() {
  local python=$1 dir=target/dynalite port
  if ! cmp -s scripts/dynalite/package-lock.json "$dir/package-lock.json" 2> /dev/null \
    || [ ! -d "$dir/node_modules/dynalite" ]; then
    echo "installing dynalite into $dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    cp scripts/dynalite/package.json scripts/dynalite/package-lock.json "$dir/"
    (cd "$dir" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error)
  fi
  port=$(free_port "$python")
  NODE_PATH="$dir/node_modules" node scripts/dynalite/server.js "$port" > target/dynalite.log 2>&1 &
  dynalite_pid=$!
  "$python" - "$port" << 'PY'
import socket, sys, time
for _ in range(300):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit("dynalite did not start within 60 s; see target/dynalite.log")
PY
  export DYNAMODB_TEST_SERVER=dynalite DYNAMODB_TEST_ENDPOINT="http://127.0.0.1:$port"
}

# wait_until_up PYTHON LOG METHOD URL [SERVICES]: polls URL with METHOD for at most 60 s until
# it answers (and, given SERVICES, comma-separated, until the JSON answer's "services" shows
# each of them running).
wait_until_up() {
  "$1" - "$2" "$3" "$4" "${5:-}" << 'PY'
import json, sys, time, urllib.request
log, method, url, service = sys.argv[1:5]
for _ in range(300):
    try:
        request = urllib.request.Request(url, method=method)
        with urllib.request.urlopen(request, timeout=1) as answer:
            states = json.load(answer)["services"] if service else {}
            if all(states.get(s) in ("running", "available") for s in service.split(",") if s):
                sys.exit(0)
    except Exception:
        pass
    time.sleep(0.2)
sys.exit(f"the test server did not start within 60 s; see {log}")
PY
}

# run_against NAME PORT COMMAND...: runs the command with the server's address in
# SQS_TEST_ENDPOINT and its name (moto, localstack) in SQS_TEST_SERVER. Moto serves DynamoDB
# at the same address (DYNAMODB_TEST_ENDPOINT, DYNAMODB_TEST_SERVER=moto) unless another
# DynamoDB is up already (start_dynalite).
run_against() {
  export SQS_TEST_SERVER=$1 SQS_TEST_ENDPOINT="http://127.0.0.1:$2"
  if [ "$1" = moto ] && [ -z "${DYNAMODB_TEST_ENDPOINT:-}" ]; then
    export DYNAMODB_TEST_SERVER=moto DYNAMODB_TEST_ENDPOINT=$SQS_TEST_ENDPOINT
  fi
  shift 2
  "$@"
}
