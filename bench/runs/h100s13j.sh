#!/usr/bin/env bash
# H100 call J of session 13 (2026-11-24), review mend: the forward producer's K and V tile loads through
# one helper (bt__k_att_fwd_tma_tile; same instructions intended), trace mark 7 by the loading thread.
# The whole GPU suite on the binaries `make test` built, then 3 alternating rounds against aa084d3's
# binary (build/k7), B16 H12 D64 causal T512 / T1024 / T4096 (fwd, bwd us), and the forward's SASS size.
source bench/runs/prelude.sh
NOBUILD=1 SAN=0 timeout 400 bash bench/gpu_session.sh test > $OUT/suite.txt 2>&1; echo "suite exit $?"
sed -n '/=== summary/,$p' $OUT/suite.txt | head -30; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  echo "r$r aa084d3: $(row timeout 60 build/k7/bench_kernels)"
  echo "r$r mended:  $(row timeout 60 build/bench_kernels)"
done; el
for b in build/k7/bench_kernels build/bench_kernels; do
  cuobjdump -sass $b 2>/dev/null | awk '/Function : .*bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi56E/{f=1;next} /Function :/{f=0} f' > $OUT/sass.txt
  echo "$b fwd (turns variant) SASS: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' $OUT/sass.txt) instr, LDL/STL $(grep -cE 'LDL|STL' $OUT/sass.txt)"
done
cd $OUT && tar -czf /tmp/h100s13j.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s13j.tgz $OUT/
