#!/usr/bin/env bash
# Mutation testing with cargo-mutants (installed at a pinned version by scripts/cargo-tool.sh
# the first time, a build of about two minutes; so is cargo-nextest, which runs the tests, if
# the machine has none): each mutant is one small change to a module that carries a
# promise (.cargo/mutants.toml lists them), built and run against the tests that need no
# server; a mutant the tests let pass is "missed". contributing/mutants.md gives the
# figures of the last full run and a reason for every mutant left alive. Slow (one build
# per mutant: a whole run takes hours), so not part of the test command. Arguments go to
# cargo-mutants:
#   scripts/mutants.sh --list                     the mutants, without running them
#   scripts/mutants.sh --shard 3/64               one sixty-fourth of them
#   scripts/mutants.sh -f src/rate_limit.rs       one module
#   scripts/mutants.sh --in-diff <(git diff HEAD~1)   only the lines the last commit touched
# Results go to mutants.out/ (outcomes.json, caught.txt, missed.txt, timeout.txt, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
mutants=$(scripts/cargo-tool.sh cargo-mutants 27.1.0)
if ! cargo nextest --version >/dev/null 2>&1; then
  nextest=$(scripts/cargo-tool.sh cargo-nextest 0.9.143)
  export PATH="$(dirname "$nextest"):$PATH"
fi
exec "$mutants" mutants "$@"
