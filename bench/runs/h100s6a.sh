#!/usr/bin/env bash
# H100 call (2026-11-23, sixth session, third): the forward's L2 sections at the new default
# (BT_ATT_L2_ONE_MB 16: sections of 16 MiB of K and V even where all heads would fit in 48):
# attention tests, section sizes timed in alternating processes (build/attn_modes), the attention
# sweep next to cuDNN, the default run twice, and an ncu profile of one B = 128 micro-step.
source bench/runs/prelude.sh
BT_TEST_ONLY=attention timeout 150 build/tests/test_kernels_gpu > $OUT/test_attention.txt 2>&1; echo "attention tests: exit $?: $(tail -1 $OUT/test_attention.txt)"; el
line() { grep -E "^place (alloc|pad130|vmm) " | awk '{printf "%s %.1f/%.1f  ", $2, $4, $6} END {print ""}'; }
for r in 1 2; do
  for c in new ONE_MB=48 L2_MB=8 L2_MB=12 L2_MB=24 L2_MB=32; do
    e=(); case $c in ONE_MB=*) e=(BT_ATT_L2_ONE_MB=${c#*=});; L2_MB=*) e=(BT_ATT_L2_ONE_MB=0 BT_ATT_L2_MB=${c#*=});; esac
    echo "r$r $c: $(env "${e[@]}" timeout 60 build/attn_modes 25 | line)"
  done
done; el
BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=1 timeout 200 build/bench_kernels > $OUT/sweep.txt 2>&1; echo "attention sweep: exit $?"; el
for r in 1 2; do timeout 90 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 2>&1 | tee $OUT/default$r.txt | med | sed "s/^/default r$r: /"; done; el
if command -v ncu > /dev/null; then
  timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size --csv \
    ./build/train_gpt2_cuda -e d12 -b 128 -t 1024 -d 131072 -x 3 -v 0 -g 0 --precision bf16 --quiet 2>/dev/null > $OUT/ncu_b128.csv
  echo "ncu B=128: exit $?"
  python3 bench/fold_profile.py $OUT/ncu_b128.csv > $OUT/profile_b128.txt 2>&1; xz -T4 $OUT/ncu_b128.csv
fi
el
echo "=== attention sweep"; sed -n '/^| attention bf16, B16 H12/,$p' $OUT/sweep.txt | head -16
echo "=== profile B=128"; head -40 $OUT/profile_b128.txt
grep -E "auto micro|peak" $OUT/default1.txt | head -3
