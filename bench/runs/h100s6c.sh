#!/usr/bin/env bash
# H100 call (2026-11-23, sixth session): the forward's end-aligned causal query tiles (BT_ATT_FWD_QEND,
# default 1): attention tests, memcheck (quick), the causal sweep rows with QEND on and off in
# alternating processes, attn_modes at T 1024, and the default run (its losses must not move: a
# row's keys and their order are the same either way).
source bench/runs/prelude.sh
BT_TEST_ONLY=attention timeout 150 build/tests/test_kernels_gpu > $OUT/test_attention.txt 2>&1; echo "attention tests: exit $?: $(tail -1 $OUT/test_attention.txt)"
grep -E "FAIL" $OUT/test_attention.txt | head -5; el
BT_TEST_QUICK=1 BT_TEST_ONLY=attention timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/mc.txt 2>&1
echo "memcheck: exit $? $(grep 'ERROR SUMMARY' $OUT/mc.txt)"; el
for r in 1 2; do
  for q in 1 0; do
    BT_ATT_FWD_QEND=$q BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,2,3 timeout 90 build/bench_kernels > $OUT/v.txt 2>&1
    printf "r%d QEND=%d causal T 512 1024 2048 4096 fwd, bwd: %s\n" $r $q "$(grep -E '^attention sweep' $OUT/v.txt | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}')"
  done
done
for q in 1 0 1 0; do echo "attn_modes QEND=$q: $(BT_ATT_FWD_QEND=$q timeout 60 build/attn_modes 25 | grep -E '^place (alloc|pad130|vmm) ' | awk '{printf "%s %.1f/%.1f  ", $2, $4, $6}')"; done; el
timeout 90 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 2>&1 | tee $OUT/default.txt | med | sed "s/^/default: /"
grep -E "^step +8/" $OUT/default.txt; el
