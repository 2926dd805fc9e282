#!/usr/bin/env bash
# H100 call (2026-11-24, tenth session): some of the forward softmax's 2^x on the FMA pipe (a cubic,
# bt__k_ex2_fma) instead of the MUFU pipe, whose queue (stall "mio") and results (stall "wait")
# were a third of the step loop's samples (h100s9i.sh): every 8th (BT_ATT_FWD_EMU=1) or every 4th
# (=2) score; the T 512 / 1024 / 4096 causal rows of EMU 0, 1, 2 in alternating processes, then
# the forward group of tests with EMU=1 and EMU=2.
source bench/runs/prelude.sh
row() { env $2 BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 timeout 60 $1 > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
for r in 1 2 3; do
  echo "r$r emu0: $(row build/bench_kernels BT_ATT_FWD_EMU=0) | emu1: $(row build/bench_kernels BT_ATT_FWD_EMU=1) | emu2: $(row build/bench_kernels BT_ATT_FWD_EMU=2)"
done; el
for e in 1 2; do
  BT_ATT_FWD_EMU=$e BT_TEST_ONLY=attention_hopper timeout 150 build/tests/test_kernels_gpu > $OUT/test_emu$e.txt 2>&1; echo "hopper tests EMU=$e: exit $?: $(tail -1 $OUT/test_emu$e.txt)"
  grep -E "FAIL" $OUT/test_emu$e.txt | head -5; el
done
cd $OUT && tar -cJf /tmp/s10e.tar.xz *.txt && rm -rf $OUT/* && mv /tmp/s10e.tar.xz $OUT/
