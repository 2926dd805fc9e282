#!/usr/bin/env bash
# bench_cpu_val6.sh - wall time of the default CPU training run to its first validation loss below 6.0
#   bash bench/bench_cpu_val6.sh [BINARY [ARGS...]]      (make bench-cpu; BINARY defaults to ./train_gpt2)
# Runs BINARY --device cpu ARGS (the default CPU configuration unless ARGS change it), prints its
# header and each validation line with the seconds since the start (VERBOSE=1: every step line),
# stops the run at the first "val" below VAL_TARGET (default 6.0), then prints one summary line:
# the step, the time, the load averages before and after. OMP_NUM_THREADS and OMP_WAIT_POLICY pass
# through from the environment (on a shared machine OMP_WAIT_POLICY=passive matters: mk/cpu.mk).
set -u
bin=${1:-./train_gpt2}
[ $# -gt 0 ] && shift
target=${VAL_TARGET:-6.0}
[ -x "$bin" ] || { echo "bench_cpu_val6.sh: $bin is not an executable (make CPU=1 train_gpt2)" >&2; exit 2; }
load0=$(cut -d' ' -f1-3 /proc/loadavg)
fifo=$(mktemp -u /tmp/bench_cpu_val6.XXXXXX)
mkfifo "$fifo"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -f "$fifo"' EXIT
trap 'exit 130' INT TERM
t0=$EPOCHREALTIME
"$bin" --device cpu "$@" > "$fifo" 2>&1 &
pid=$!
hit=""
while IFS= read -r line; do
    t=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    case "$line" in
        *"| val "*) printf '%7s s  %s\n' "$t" "$line" ;;
        step*) [ "${VERBOSE:-0}" = 1 ] && printf '%7s s  %s\n' "$t" "$line" ;;
        *) printf '           %s\n' "$line" ;;
    esac
    if [[ $line =~ \|\ val\ ([0-9.]+) ]] && awk -v v="${BASH_REMATCH[1]}" -v g="$target" 'BEGIN { exit !(v < g) }'; then
        hit="$t s at $(echo "$line" | awk '{print $2}') (val ${BASH_REMATCH[1]})"
        break
    fi
done < "$fifo"
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pid=""
load1=$(cut -d' ' -f1-3 /proc/loadavg)
if [ -n "$hit" ]; then
    echo "time to val < $target: $hit; load average before $load0, after $load1; $(nproc) cores"
else
    echo "val < $target not reached; load average before $load0, after $load1"
    exit 1
fi
