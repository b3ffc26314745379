# Sourced by peer-bench.sh and round-trip-bench.sh, after server-common.sh and with a test
# server's address in SQS_TEST_ENDPOINT: the peer, fanferro 0.5.0 (a Python SQS consumer with a
# Rust core), installed here, pinned, into a venv under target/ with a Python >= 3.12 from PATH
# or pyenv; and the counting proxy (benches/peer/counting_proxy.py) both consumers go through.

FANFERRO_VERSION=0.5.0
venv=target/peer-venv

# install_peer: installs fanferro into $venv unless that version is there already; exits with
# status 3 without a Python >= 3.12.
install_peer() {
  if "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('fanferro') != '$FANFERRO_VERSION')" 2> /dev/null; then
    return 0
  fi
  local python
  if ! python=$(find_python 12); then
    echo "fanferro needs Python >= 3.12, and none was found (PATH, pyenv)" >&2
    exit 3
  fi
  echo "installing fanferro $FANFERRO_VERSION into $venv with $python"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "fanferro==$FANFERRO_VERSION"
}

# start_proxy [DELAY_MS]: starts the counting proxy in front of $SQS_TEST_ENDPOINT, every
# request delayed DELAY_MS (0), waits until it answers, and sets $proxy to its address. It is
# stopped (by its PID) when the calling script exits.
start_proxy() {
  local port
  port=$(free_port "$venv/bin/python")
  "$venv/bin/python" benches/peer/counting_proxy.py "$port" "$SQS_TEST_ENDPOINT" "${1:-0}" \
    > target/peer-proxy.log 2>&1 &
  proxy_pid=$!
  trap 'kill "$proxy_pid" 2> /dev/null || true; wait "$proxy_pid" 2> /dev/null || true' EXIT
  for _ in $(seq 50); do
    "$venv/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/__counts', timeout=1)" 2> /dev/null && break
    sleep 0.1
  done
  proxy="http://127.0.0.1:$port"
}
