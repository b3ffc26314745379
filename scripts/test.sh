#!/usr/bin/env bash
# The test command. The whole suite with the first SQS-compatible test server (moto) up,
# twice: with every feature, then with none of the default ones (the library must build and
# pass both ways). Then the suite again with the second server (LocalStack) up, so that every
# server scenario, the fault and crash tests and the server tests run against both.
# LocalStack needs Python >= 3.13: without one the second half is skipped with a message,
# except under CI (CI=true), which requires both. Arguments go to every `cargo test` run.
# Between the two halves: the docs (warnings are errors) and the package a user would get.
# First, before anything is built for the tests: the format, the lints (warnings are
# errors), every dependency floor built with (scripts/floors.sh), and the licences, bans and
# sources of the dependency tree (scripts/deny.sh, deny.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== format, lints, dependency floors, licences =="
cargo fmt --check
cargo clippy --all-targets --all-features -- -D warnings
scripts/floors.sh
scripts/deny.sh
# The tests that need a server are ignored in a plain `cargo test`; here a server is up and
# every one of them runs (one that finds no server fails). Arguments after a `--` of the
# caller's go to the test binaries beside `--include-ignored`.
case " $* " in
  *" -- "*) set -- "$@" --include-ignored ;;
  *) set -- "$@" -- --include-ignored ;;
esac
scripts/with-sqs-server.sh bash -c \
  'cargo test --all-features "$@" && cargo test --no-default-features "$@"' test.sh "$@"

echo "== the benchmarks build, the docs and the package =="
cargo test --all-features --benches --no-run
RUSTDOCFLAGS="-D warnings" cargo doc --all-features --no-deps
cargo package --allow-dirty
ls -l target/package/sqs-consumer-*.crate

echo "== the suite again, against LocalStack =="
status=0
scripts/with-localstack.sh cargo test --all-features "$@" || status=$?
if [ "$status" -eq 3 ]; then
  if [ "${CI:-}" = true ]; then
    echo "CI runs the suite against both servers: install a Python >= 3.13" >&2
    exit 1
  fi
  echo "LocalStack half skipped: no Python >= 3.13 on this machine (moto half passed)" >&2
  exit 0
fi
exit "$status"
