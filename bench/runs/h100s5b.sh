#!/usr/bin/env bash
# H100 call (2026-11-23, fifth session, final): the GPU tests of the merged main (no sanitizer: the
# attention branches ran memcheck in their own calls), the no-argument default run twice, the
# attention sweep with cuDNN, then train_gpt2 vs PyTorch eager (2 alternating rounds) and
# torch.compile at B=16 in bf16, and bf16 B=16 with --recompute gelu (memory vs llm.c -r 1).
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
source bench/runs/med.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
NOBUILD=1 SAN=0 timeout 240 bash bench/gpu_session.sh test > $OUT/test.txt 2>&1; echo "gpu tests: exit $?"; el
for r in 1 2; do timeout 60 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 2>&1 | med | sed "s/^/default r$r: /"; done; el
BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=1 BT_BENCH_SWEEP=0,1,2,3 timeout 90 build/bench_kernels > $OUT/attn.txt 2>&1; echo "attention sweep: exit $?"; el
OUT=$OUT/b16 B=16 PRECS=bf16 STEPS=12 ROUNDS=2 NOBUILD=1 timeout 240 bash bench/gpu_session.sh bench > $OUT/b16.txt 2>&1; echo "bench B=16: exit $?"; el
for rc in none gelu; do
  timeout 40 ./build/train_gpt2_cuda -e d12 -b 16 -t 1024 -d 16384 -x 12 -v 0 -g 0 --precision bf16 --recompute $rc -o $OUT/rc_$rc > /dev/null 2>&1
  tail -1 $OUT/rc_$rc/log.jsonl | sed "s/^/B=16 --recompute $rc: /" | cut -c1-260
done
el
echo "=== tests"; sed -n '/^=== summary/,$p' $OUT/test.txt
echo "=== attention (T 1024 rows)"; grep -E "^\| attention sweep" $OUT/attn.txt | head -24
echo "=== B=16"; tail -12 $OUT/b16.txt
