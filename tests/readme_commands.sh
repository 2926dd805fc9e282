#!/usr/bin/env bash
# readme_commands.sh - the README's commands, run as a reader would type them (make test; the GPU
# suite with --gpu). A fenced ```sh block of README.md whose first line is
#     # make test runs these lines
# holds one command a line (a trailing `# comment` allowed); each runs in a scratch directory that
# holds the repository's headers and examples/ (so what it writes stays there) and passes when it
# exits 0. A line with nvcc needs nvcc and a GPU: without --gpu, or without them, it is skipped.
# Prints "readme_commands: N passed, N failed, N skipped" last (tests/run_all.sh sums it).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
gpu=0; [ "${1:-}" = --gpu ] && gpu=1
have_gpu() { command -v nvcc >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }
scratch=$(mktemp -d /tmp/bt_readme.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
for f in "$repo"/bt_*.h "$repo"/bt_*.cuh "$repo"/gpt2*.h "$repo"/trainer.h "$repo/examples"; do ln -s "$f" "$scratch/"; done
export PATH="$PATH:/usr/local/cuda/bin"
passed=0; failed=0; skipped=0
# the marked blocks' lines, in order
mapfile -t lines < <(awk '/^```sh$/ { inblk = 1; first = 1; next } /^```/ { inblk = 0; take = 0; next }
                         inblk && first { first = 0; take = ($0 == "# make test runs these lines"); next }
                         inblk && take && NF { print }' "$repo/README.md")
[ ${#lines[@]} -gt 0 ] || { echo "  FAIL readme_commands: no block marked '# make test runs these lines' in README.md"; failed=1; }
for line in "${lines[@]}"; do
  cmd=${line%%  #*}
  if [[ "$cmd" == *nvcc* ]] && { [ $gpu = 0 ] || ! have_gpu; }; then
    echo "  SKIP readme_commands: $cmd (needs nvcc and a GPU: the GPU suite runs it)"; skipped=$((skipped + 1)); continue
  fi
  if (cd "$scratch" && bash -c "$cmd") > "$scratch/out.txt" 2>&1; then
    echo "ok $cmd"; passed=$((passed + 1))
  else
    echo "  FAIL readme_commands: $cmd exited non-zero; its output:"; sed 's/^/    /' "$scratch/out.txt" | tail -15
    failed=$((failed + 1))
  fi
done
echo "readme_commands: $passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
