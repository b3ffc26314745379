#!/usr/bin/env bash
# The figures of the mutants shards kept under mutants/shard-*/ (and mutants/in-diff-*/),
# per module: caught, missed, unviable and timed out, as contributing/mutants.md gives them;
# written to contributing/mutants-record.txt, which is committed. Then the missed
# mutants, each of which the page must name with a reason or a test must kill. Shards run
# on different commits may overlap by a few mutants (the list shifts when code is added):
# a mutant named by several shards counts once, with the outcome of the highest shard.
#   scripts/mutants-figures.sh > contributing/mutants-record.txt
set -euo pipefail
cd "$(dirname "$0")/.."
echo "# The outcomes of the cargo-mutants runs, summed by scripts/mutants-figures.sh from the"
echo "# lists under mutants/ (contributing/mutants.md says how). The per-mutant lists are not tracked:"
echo "# those of the runs of 2026 are in git under mutants/ at 6733bf8."
echo
# One line per outcome: shard number, outcome, commit, mutant.
outcomes() {
  for d in mutants/shard-*/; do
    k=$(basename "$d" | cut -d- -f2)
    commit=$(cat "$d/commit")
    for o in caught missed unviable timeout; do
      [ -f "$d/$o.txt" ] || continue
      sed "s|^|$k\t$o\t$commit\t|" "$d/$o.txt"
    done
  done
}
latest=$(outcomes | sort -t$'\t' -k4,4 -k1,1nr | awk -F'\t' '$4 != last { print; last = $4 }')
printf '| module | caught | missed | unviable | timed out | shards (commit) |\n|---|---|---|---|---|---|\n'
printf '%s\n' "$latest" | awk -F'\t' '
  { split($4, at, ":"); m = at[1]; n[m, $2]++; mods[m] = 1; ran[m, $1] = $3 }
  END { for (m in mods) {
          shards = ""
          for (k = 0; k < 64; k++) if ((m, k) in ran) shards = shards " " k " (" ran[m, k] ")"
          printf "| `%s` | %d | %d | %d | %d |%s |\n", m, n[m, "caught"], n[m, "missed"],
            n[m, "unviable"], n[m, "timeout"], shards } }' | sort
echo
printf '%s\n' "$latest" | awk -F'\t' '{ n[$2]++ } END { printf "in all: %d caught, %d missed, %d unviable, %d timed out\n", n["caught"], n["missed"], n["unviable"], n["timeout"] }'
# How long the shards took: the fewest, the median and the most seconds, and the sum.
for d in mutants/shard-*/; do cat "$d/seconds"; done | sort -n | awk '
  { t[NR] = $1; sum += $1 }
  END { printf "%d shards took %d to %d s each, median %d s, %.1f hours in all\n", NR, t[1], t[NR],
          t[int((NR + 1) / 2)], sum / 3600 }'
echo
echo "missed:"
printf '%s\n' "$latest" | awk -F'\t' '$2 == "missed" { print $4 }'
for d in mutants/in-diff-*/; do
  [ -d "$d" ] || continue
  echo
  echo "missed in $(basename "$d"):"
  sed -e '$a\' "$d/missed.txt"
done
