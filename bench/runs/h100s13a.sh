#!/usr/bin/env bash
# H100 call A of session 13 (2026-11-24): the whole GPU suite (every tests/*_gpu binary, PyTorch parity
# fixtures; no sanitizer) on the binaries `make test` built at session 12's final bt_kernels.cuh (the
# attention forward's loads by TMA), then the forward's two-warpgroup variants re-timed now that the
# loads cost the producer nothing (BT_ATT_FWD_WG3=0: two warpgroups taking turns, as cuDNN; BT_ATT_FWD_SKIP=1:
# the O rescale skipped while no row max moves by 2^8; against the default;
# 3 alternating rounds, B16 H12 D64 causal T1024 / T4096), then cuDNN's rows in the process.
source bench/runs/prelude.sh
NOBUILD=1 SAN=0 timeout 560 bash bench/gpu_session.sh test > $OUT/suite.txt 2>&1; echo "suite exit $?"
sed -n '/=== summary/,$p' $OUT/suite.txt | head -30; el
row() { env BT_BENCH_ONLY=attention_sweep BT_BENCH_TORCH=0 BT_BENCH_SWEEP=1,3 "$@" > $OUT/v.txt 2>&1
  grep -E '^attention sweep' $OUT/v.txt | grep -v colsums | awk '{for (i = 1; i <= NF; i++) if ($i == "us") printf "%s ", $(i-1)}'; }
echo "rows: fwd, bwd at T1024, T4096 (us)"
for r in 1 2 3; do
  echo "r$r default:       $(row timeout 60 build/bench_kernels)"
  echo "r$r wg2 turns:     $(row BT_ATT_FWD_WG3=0 BT_ATT_FWD_TURNS=1 timeout 60 build/bench_kernels)"
  echo "r$r skip:          $(row BT_ATT_FWD_SKIP=1 timeout 60 build/bench_kernels)"
done; el
BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 timeout 150 build/bench_kernels > $OUT/torch.txt 2>&1
echo "with torch:"; grep -E "^\| T1024 D64 causal" $OUT/torch.txt; el
cd $OUT && tar -czf /tmp/h100s13a.tgz *.txt && rm -rf $OUT/* && mv /tmp/h100s13a.tgz $OUT/
