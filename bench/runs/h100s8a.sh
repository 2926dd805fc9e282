#!/usr/bin/env bash
# H100 call (2026-11-23, eighth session): where the default run's step goes in the real run (not
# ncu's serialised kernels): SM clock and power sampled during it, an Nsight Systems timeline of it
# when nsys is there (it was not: the branch did not run, and its trace reader was then dropped), and
# the micro-batch 64 against the default 128 in alternating processes. Outputs in one tar.
source bench/runs/prelude.sh
which nsys || ls -d /opt/nvidia/nsight-systems*/bin /usr/local/cuda*/bin/nsys* 2>/dev/null
NSYS=$(which nsys 2>/dev/null || ls /opt/nvidia/nsight-systems*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $OUT/smi.csv 2>&1 &
SMI=$!
sleep 2
timeout 90 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 > $OUT/default_smi.txt 2>&1
sleep 1; kill $SMI
echo "default (sampled): $(med < $OUT/default_smi.txt)"
python3 - $OUT/smi.csv <<'PY'
import sys, csv
rows = [r for r in csv.reader(open(sys.argv[1])) if r and not r[0].startswith("timestamp")]
clk = [float(r[1].split()[0]) for r in rows if len(r) > 4 and "MHz" in r[1]]
pw = [float(r[3].split()[0]) for r in rows if len(r) > 4 and "W" in r[3] and r[3].split()[0].replace('.','').isdigit()]
busy = [(c, p) for c, p in zip(clk, pw) if p > 200]
print("samples %d, busy (>200 W) %d: SM clock median %s MHz (min %s max %s), power median %s W, limit %s" % (
    len(rows), len(busy), sorted(c for c, p in busy)[len(busy)//2] if busy else "-", min((c for c, p in busy), default="-"),
    max((c for c, p in busy), default="-"), sorted(p for c, p in busy)[len(busy)//2] if busy else "-", rows[-1][4] if rows else "-"))
from collections import Counter
print("throttle reasons while busy:", Counter(r[6].strip() for r, (p) in zip(rows, pw) if p > 200).most_common(4))
PY
el
if [ -n "$NSYS" ]; then
  timeout 200 $NSYS profile -t cuda --cuda-graph-trace=node -o /tmp/def -f true ./build/train_gpt2_cuda -x 8 -v 0 -g 0 > $OUT/default_nsys.txt 2>&1
  echo "nsys run: exit $? $(med < $OUT/default_nsys.txt)"
  timeout 200 $NSYS stats -r cuda_gpu_trace -f csv -o /tmp/def /tmp/def.nsys-rep > /dev/null 2>&1; ls /tmp/def*
  python3 bench/nsys_gaps.py /tmp/def_cuda_gpu_trace.csv 3 7 > $OUT/gaps.txt 2>&1; head -60 $OUT/gaps.txt
  xz -c /tmp/def_cuda_gpu_trace.csv > $OUT/trace.csv.xz
fi; el
for r in 1 2; do
  for b in 128 64; do
    timeout 90 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 -b $b > $OUT/def_b${b}_$r.txt 2>&1
    echo "default -b $b r$r: $(med < $OUT/def_b${b}_$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/def_b${b}_$r.txt | cut -c1-28)"
  done
done; el
cd $OUT && tar -cJf /tmp/s8a.tar.xz . && rm -rf $OUT/* && mv /tmp/s8a.tar.xz $OUT/
