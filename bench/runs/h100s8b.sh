#!/usr/bin/env bash
# H100 call (2026-11-23, eighth session): the weight-gradient GEMMs (M x N outputs small against the
# 132 SMs, K = B T rows long) timed with their rows split into parts (a strided batch, then the parts
# added into the fp32 gradient) and with cuBLASLt's own split-K configs (bench_gemm); and the
# default run's per-step overhead (8 micro-batches a step against the default 4).
source bench/runs/prelude.sh
timeout 400 build/bench_gemm 128 10672 > $OUT/gemm.txt 2>&1; echo "bench_gemm: exit $?"
grep -E "^\| |per micro-step" $OUT/gemm.txt
grep -E "^(split|plain|bwd)|=>|\+ sum|splitK #" $OUT/gemm.txt | grep -E "^(split|plain|bwd .*dW)|=>|\+ sum" | head -80
grep -E "splitK #" $OUT/gemm.txt | sort -t: -k2 -n | head -5; el
for r in 1 2; do
  for d in 524288 1048576; do
    timeout 90 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 -d $d > $OUT/def_d${d}_$r.txt 2>&1
    echo "default -d $d r$r: $(med < $OUT/def_d${d}_$r.txt | sed 's/, fwd+bwd.*//')"
  done
done; el
cd $OUT && tar -cJf /tmp/s8b.tar.xz . && rm -rf $OUT/* && mv /tmp/s8b.tar.xz $OUT/
