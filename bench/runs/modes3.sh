#!/usr/bin/env bash
# H100 call (2026-11-23, sixth session, fourth): bench_kernels reads the T 1024 attention in the slow
# mode (119.6 / 431.3 us at 16:37 UTC) while attn_modes reads 94 / 343 in the same call. attn_modes in
# bench mode replays bench_kernels' allocations (ceilings, the T 512 row, the T 1024 buffers through
# the caching allocator) and prints the buffers' addresses; AM_SKIP leaves steps out.
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT
tar -xJf .carry/bins.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; date -u
sum() { grep -E "^(place|ptrs)" | awk '/^place/ {printf "  %-7s f %6.1f b %6.1f g %5.1f c %5.1f\n", $2, $4, $6, $8, $10} /^ptrs/ {print "  " $0}'; }
for r in 1 2; do
  for sk in none ceil 512 ceil512; do
    echo "== r$r AM_SKIP=$sk"; AM_SKIP=$sk timeout 60 build/attn_modes 25 0 bench | sum
  done
  echo "== r$r bench_kernels T1024: $(BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1 timeout 60 build/bench_kernels | grep -E '^attention sweep' | cut -c36-80 | tr -s ' ' | tr '\n' ';')"
done
