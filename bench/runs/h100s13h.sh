#!/usr/bin/env bash
# H100 call H of session 13 (2026-11-24): the whole GPU suite (every tests/*_gpu binary, PyTorch parity
# fixtures; no sanitizer) on the binaries `make test` built with the forward's new default (turns at the
# tensor cores in causal items of at least 7 key tiles, BT_ATT_FWD_TURNS=7), then 3 alternating rounds
# of it against BT_ATT_FWD_TURNS=0 (the previous default) at B16 H12 D64 causal T512 / T1024 / T4096,
# cuDNN's rows in the process, and the default training run (two rounds).
source bench/runs/prelude.sh
NOBUILD=1 SAN=0 timeout 400 bash bench/gpu_session.sh test > $OUT/suite.txt 2>&1; echo "suite exit $?"
sed -n '/=== summary/,$p' $OUT/suite.txt | head -30; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=0,1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T512, T1024, T4096 (us)"
for r in 1 2 3; do
  echo "r$r default (K=7): $(row timeout 60 build/bench_kernels)"
  echo "r$r K=0:           $(row BT_ATT_FWD_TURNS=0 timeout 60 build/bench_kernels)"
done; el
BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 build/bench_kernels > $OUT/torch.txt 2>&1
echo "with torch:"; grep -E "^\| T1024 D64 causal" $OUT/torch.txt; el
for r in 1 2; do
  timeout 60 ./build/train_gpt2_cuda -x 8 -v 0 -g 0 > $OUT/default$r.txt 2>&1
  echo "default run r$r: $(med < $OUT/default$r.txt | sed 's/, fwd+bwd.*//') | $(grep -E '^step +8/' $OUT/default$r.txt | cut -c1-28)"
done; el
cd $OUT && tar -czf /tmp/h100s13h.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s13h.tgz $OUT/
