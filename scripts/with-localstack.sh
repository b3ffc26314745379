#!/usr/bin/env bash
# Runs a command with LocalStack's SQS (its own implementation, not moto's) and S3 up on the host, no
# Docker: installs LocalStack and its pinned dependencies (scripts/localstack-requirements.txt)
# into a venv under target/ on first use, with a Python >= 3.13 found on PATH or in pyenv;
# starts it on 127.0.0.1 on a free port, exports its address as SQS_TEST_ENDPOINT (and
# SQS_TEST_SERVER=localstack) and dynalite's, for the idempotency store's DynamoDB tests, as
# DYNAMODB_TEST_ENDPOINT (server-common.sh, start_dynalite); runs the command, and stops both.
#   scripts/with-localstack.sh cargo test
# Without a Python >= 3.13 it says so and exits with status 3.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/server-common.sh

venv=target/localstack-venv
requirements=scripts/localstack-requirements.txt
mkdir -p target

# Installed, and from today's requirements?
stamp="$venv/.requirements"
if ! cmp -s "$requirements" "$stamp" 2> /dev/null; then
  if ! python=$(find_python 13); then
    echo "LocalStack needs Python >= 3.13, and none was found (PATH, pyenv)" >&2
    exit 3
  fi
  echo "installing LocalStack into $venv with $python (about 3 minutes)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
fi

port=$(free_port "$venv/bin/python")
home=target/localstack-home
rm -rf "$home"
mkdir -p "$home/tmp" "$home/fs"
start_server target/localstack.log \
  env HOME="$PWD/$home" TMPDIR="$PWD/$home/tmp" FILESYSTEM_ROOT="$PWD/$home/fs" \
  SERVICES=sqs,s3 EAGER_SERVICE_LOADING=1 PERSISTENCE=0 \
  GATEWAY_LISTEN="127.0.0.1:$port" LOCALSTACK_HOST="127.0.0.1:$port" \
  SQS_ENDPOINT_STRATEGY=dynamic DNS_ADDRESS=0 DISABLE_EVENTS=1 SKIP_SSL_CERT_DOWNLOAD=1 \
  SQS_DISABLE_CLOUDWATCH_METRICS=1 \
  "$venv/bin/python" scripts/localstack_server.py
wait_until_up "$venv/bin/python" target/localstack.log GET \
  "http://127.0.0.1:$port/_localstack/health" sqs,s3
# LocalStack's DynamoDB fetches DynamoDB Local at run time: dynalite serves this half's instead.
start_dynalite "$venv/bin/python"
run_against localstack "$port" "$@"
