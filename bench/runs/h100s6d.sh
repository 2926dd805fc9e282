#!/usr/bin/env bash
# H100 call (2026-11-23, sixth session, last): main with this session's attention changes (16 MiB
# L2 sections, end-aligned causal query tiles where the last would hold one live warpgroup, bench
# rows from an idle GPU): every GPU test (no sanitizer: the attention memcheck ran at 17:03 on the
# same kernel code), the attention group next to PyTorch's SDPA in one run, the default run.
source bench/runs/prelude.sh
NOBUILD=1 SAN=0 timeout 300 bash bench/gpu_session.sh test > $OUT/test.txt 2>&1; echo "gpu tests: exit $?"; el
BT_BENCH_ONLY=attention BT_BENCH_TORCH=1 timeout 200 build/bench_kernels > $OUT/attention.txt 2>&1; echo "attention group: exit $?"; el
timeout 90 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 2>&1 | tee $OUT/default.txt | med | sed "s/^/default: /"; grep -E "^step +8/" $OUT/default.txt; el
echo "=== tests"; sed -n '/^=== summary/,$p' $OUT/test.txt | head -30
echo "=== attention"; grep -E "^attention bf16|^attention (f32|tf32)" $OUT/attention.txt
sed -n '/^| attention bf16, B16 H12/,$p' $OUT/attention.txt | head -6
