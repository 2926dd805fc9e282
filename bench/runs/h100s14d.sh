#!/usr/bin/env bash
# H100 call D of session 14 (2026-11-24): the forward's P(j-1) V(j-1) issued one HGMMA before each 8 of
# the softmax's 64 2^x (-DBT_EXP_ILV=1: build/ilv; traces build/abl_ilv), because the traces of call C
# showed a warpgroup blocked ~560 cycles issuing its 12 products (an HGMMA issue waits for the one
# before it to start) and ptxas placing the wait for P V before the 2^x. SASS order of the step, traces
# at T 1024 / 4096, three alternating rounds against build/base (44667e3) and build/nofence.
source bench/runs/prelude.sh
cuobjdump -sass build/ilv/bench_kernels | awk '/Function : .*bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi56E/{f=1} /Function :/{if(!/Li64ELi56E/)f=0} f' > $OUT/ilv56.sass
echo "ilv SASS order (H HGMMA, M MUFU, D DEPBAR, B BAR): $(grep -oE 'HGMMA|MUFU|DEPBAR|BAR\.[A-Z]+' $OUT/ilv56.sass | sed 's/HGMMA/H/;s/MUFU/M/;s/DEPBAR/D/;s/BAR\..*/B/' | tr -d '\n')"
for T in 1024 4096; do
  sw=$([ $T = 1024 ] && echo 1 || echo 3)
  BT_ATT_TRACE=$T BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=$sw timeout 60 build/abl_ilv/bench_kernels > $OUT/trace$T.txt 2>&1
  echo "trace T$T (exit $?):"; grep -E "att_fwd (steps|step 2[0-3])" $OUT/trace$T.txt | cut -c1-220
done; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  for b in base ilv nofence; do echo "r$r $b: $(row timeout 60 build/$b/bench_kernels)"; done
done; el
cd $OUT && tar -czf /tmp/h100s14d.tgz *.txt *.sass && rm -rf $OUT/* && mv /tmp/h100s14d.tgz $OUT/
