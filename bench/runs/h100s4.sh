#!/usr/bin/env bash
# H100 call (2026-11-23, fourth session): every GPU test on the merged main (layernorm backward into
# the residual gradient, the unserialized fused attention backward, DDP graphs), memcheck of the
# layernorm and attention kernel tests, the no-argument default run, and B=16 bf16 vs torch.compile.
# Run from the repository root with .carry/bins.tar.xz (bench/carry_bins.sh) and .carry/data carried.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
NOBUILD=1 SAN=0 timeout 330 bash bench/gpu_session.sh test > $OUT/session.txt 2>&1; echo "gpu_session test: exit $?"
el
for g in layernorm attention; do
  BT_TEST_QUICK=1 BT_TEST_ONLY=$g timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels_gpu > $OUT/san_$g.txt 2>&1
  echo "memcheck test_kernels_gpu ($g, quick): exit $? $(grep 'ERROR SUMMARY' $OUT/san_$g.txt) $(tail -1 $OUT/san_$g.txt)"
done
el; echo "== default run: ./build/train_gpt2_cuda -x 8 -v 0 -g 0"
timeout 150 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 2>&1 | grep -E "auto micro|cuda graph|recompute|^step|error" | tail -7
el; echo "== B=16 bf16: train_gpt2 vs PyTorch eager and torch.compile (12 steps)"
./build/train_gpt2_cuda -e d12 -b 16 -t 1024 -d 16384 -x 12 -v 0 -g 0 --precision bf16 -o $OUT/bt_bf16_r1 --quiet 2>&1 | tail -1
P="bench/bench_gpt2_torch.py --config d12 --B 16 --T 1024 --precision bf16 --steps 12 --warmup 3 --json-out $OUT/torch.jsonl"
timeout 90 python3 $P 2>&1 | tail -1 | cut -c1-60
timeout 150 python3 $P --compile 2>&1 | tail -1 | cut -c1-60
python3 bench/summarize.py $OUT 2>&1 | tail -6
el; echo "== test summary"; sed -n '/=== summary/,$p' $OUT/session.txt | head -30
