#!/usr/bin/env bash
# H100 call C of session 15 (2026-11-24): the wait for P V kept below the softmax by a branch that
# depends on every exponential (the row sums, never negative): build/v/s4 a nanosleep under it,
# s5 a trap; against build/kept (no branch), build/cand (session 14's candidate) and build/v/s1 (a
# never-taken trap on p.T < 0, call B's best); SASS and three alternating rounds (fwd, bwd us).
source bench/runs/prelude.sh
V="kept cand v/s1 v/s4 v/s5"
bin() { case $1 in v/*) echo build/$1 ;; *) echo build/$1/bench_kernels ;; esac; }
for v in $V; do
  cuobjdump -sass $(bin $v) 2>/dev/null | awk '/Function : .*bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi56E/{f=1;next} /Function :/{f=0} f' > $OUT/sass_${v//\//_}.txt
  echo "$v: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' $OUT/sass_${v//\//_}.txt) instr, MUFU.EX2 $(grep -c 'MUFU.EX2' $OUT/sass_${v//\//_}.txt), LDL/STL $(grep -cE 'LDL|STL' $OUT/sass_${v//\//_}.txt)"
done; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do for v in $V; do
  echo "r$r $v: $(row BT_ATT_FWD_MTURNS=0 timeout 60 $(bin $v))"
done; done; el
cd $OUT && tar -czf /tmp/h100s15c.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s15c.tgz $OUT/
