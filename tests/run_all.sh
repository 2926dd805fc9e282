#!/usr/bin/env bash
# Runs each test binary given, sums their "name: N passed, N failed, N skipped" lines and prints
# the one closing line of `make test`. A binary that crashes or prints no summary counts as failed.
passed=0; failed=0; skipped=0
for t in "$@"; do
  echo "== $t"
  out=$("$t" 2>&1); rc=$?
  printf '%s\n' "$out" | grep -E '^(FAILED|  FAIL|  SKIP|parity|info:)' | head -50
  line=$(printf '%s\n' "$out" | grep -E '^[A-Za-z0-9_]+: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' | tail -1)
  if [ -z "$line" ]; then
    echo "   $t crashed or printed no summary (exit $rc); last output:"; printf '%s\n' "$out" | tail -15
    failed=$((failed + 1)); continue
  fi
  echo "   $line"
  p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line"); f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
  s=$(sed -E 's/.* ([0-9]+) skipped.*/\1/' <<<"$line")
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "   $t exited $rc"; failed=$((failed + 1)); fi
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
