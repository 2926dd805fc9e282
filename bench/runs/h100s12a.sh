#!/usr/bin/env bash
# H100 call A of session 12 (2026-11-24): cuDNN's attention forward beside ours, both under ncu --set
# full (one launch each, the GPT-2 shape B16 H12 T1024 D64 bf16 causal): the kernel's launch shape,
# registers, shared memory, instructions, issue and pipe use, and the SASS with per-instruction
# samples, to see where cuDNN's 6% come from. Ours: the build of 9ea9c87.
source bench/runs/prelude.sh
python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
timeout 200 ncu --set full --import-source no --profile-from-start off -o $OUT/cudnn python3 bench/ncu_sdpa_fwd.py cudnn > $OUT/ncu_cudnn.log 2>&1; echo "ncu cudnn: $?"; el
export BT_BENCH_ONLY=attention_sweep BT_BENCH_SWEEP=1 BT_BENCH_TORCH=0
timeout 200 ncu --set full --import-source no -k regex:bt__k_att_fwd_wg -s 3 -c 1 -o $OUT/ours build/bench_kernels > $OUT/ncu_ours.log 2>&1; echo "ncu ours: $?"; el
for k in cudnn ours; do
  ncu -i $OUT/$k.ncu-rep --page source --csv --print-source sass > $OUT/src_$k.csv 2>/dev/null
  ncu -i $OUT/$k.ncu-rep --page details > $OUT/det_$k.txt 2>&1
  ncu -i $OUT/$k.ncu-rep --page raw --csv > $OUT/raw_$k.csv 2>&1
  echo "== $k: $(grep -m1 -oE '[A-Za-z_0-9]*(fprop|fmha|sdpa|flash|att)[A-Za-z_0-9]*' $OUT/det_$k.txt | head -1)"
  grep -E "^ +(Duration|Issue Slots Busy|No Eligible|Executed Ipc Active|Registers Per Thread|Block Size|Grid Size|Dynamic Shared Memory Per Block|Static Shared Memory Per Block|Executed Instructions |DRAM Throughput|L2 Hit Rate|Compute \(SM\) Throughput|Achieved Occupancy|SM Frequency|Memory Throughput)" $OUT/det_$k.txt | head -24
done; el
cd $OUT && tar -cJf /tmp/s12a.tar.xz *.txt *.csv *.log && rm -rf $OUT/* && mv /tmp/s12a.tar.xz $OUT/
