#!/usr/bin/env bash
# H100 call B of session 11 (2026-11-24): the whole GPU suite (every tests/*_gpu binary, PyTorch parity
# fixtures; no sanitizer) on binaries built at commit 37ca5b1 (this session's bt_alloc.h / bt_dist.h /
# train_gpt2.c; 94b4fbf differs from it in comments only).
source bench/runs/prelude.sh
NOBUILD=1 SAN=0 timeout 560 bash bench/gpu_session.sh test > $OUT/suite.txt 2>&1; echo "suite exit $?"
sed -n '/=== summary/,$p' $OUT/suite.txt | head -30; el
cd $OUT && tar -czf /tmp/h100s11b.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s11b.tgz $OUT/
