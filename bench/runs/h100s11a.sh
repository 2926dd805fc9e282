#!/usr/bin/env bash
# H100 call A of session 11 (2026-11-24): the whole GPU suite on the code of this session (bt_alloc.h,
# bt_dist.h and train_gpt2.c changed for the copy-engine DDP buckets; every GPU test rebuilt on the dev
# machine and carried), PyTorch parity fixtures included, no sanitizer (NOBUILD=1 SAN=0
# bench/gpu_session.sh test); then the no-argument default run twice (8 steps).
source bench/runs/prelude.sh
NOBUILD=1 SAN=0 timeout 420 bash bench/gpu_session.sh test > $OUT/suite.txt 2>&1; echo "suite exit $?"
sed -n '/=== summary/,$p' $OUT/suite.txt | head -40
el
for r in 1 2; do
  timeout 60 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 > $OUT/default_$r.txt 2>&1
  echo "default r$r: $(med < $OUT/default_$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default_$r.txt | cut -c1-28)"
done
el; cd $OUT && tar -czf /tmp/h100s11a.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s11a.tgz $OUT/
