#!/usr/bin/env bash
# x2 call E of session 11 (2026-11-24; NOT run: the two-GPU machine was no longer lent at 07:35 UTC): the final code (copy-engine exchange memory from bt_alloc):
# 3 alternating rounds of 1 GPU / 2 GPUs (copy engines, the default) / 2 GPUs NCCL (BT_DDP_CE=0), peak
# memory from rank 0's log (-o), test_dist_gpu, dist_parity and a kill -9. GPT-2 124M bf16, B 16, T 1024
# per GPU, 14 steps, medians of steps 4-14.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source bench/runs/prelude.sh
B=./build/train_gpt2_cuda; A="-e d12 -b 16 -t 1024 -x 14 -v 0 -g 0 --precision bf16"
export BT_STEP_TIMES=1
peak() { python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print('  peak reserved %.0f MiB, allocated %.0f MiB' % (r[-1]['peak_reserved_mib'], r[-1]['peak_allocated_mib']))" $1/log.jsonl; }
one() { local t=$1; shift; echo "-- $t"; timeout 40 "$@" -o $OUT/log 2>&1 | tee $OUT/last.txt | med; grep -m1 "data parallel" $OUT/last.txt; peak $OUT/log; }
for r in 1 2 3; do
  one "r$r 1 GPU" $B $A -d 16384
  one "r$r 2 GPUs (default: copy engines)" $B --nproc 2 $A -d 32768
  one "r$r 2 GPUs NCCL (BT_DDP_CE=0)" env BT_DDP_CE=0 $B --nproc 2 $A -d 32768
done
for z in zero1 zero2; do one "2 GPUs --dp $z" $B --nproc 2 --dp $z $A -d 32768; done
el; unset BT_STEP_TIMES
echo "== test_dist_gpu"; timeout 200 build/tests/test_dist_gpu > $OUT/test_dist.txt 2>&1; echo "exit $?: $(tail -1 $OUT/test_dist.txt)"; grep -E "FAIL" $OUT/test_dist.txt | head -8
el; echo "== dist_parity (defaults), 10 steps"; timeout 150 python3 tests/dist_parity.py $B $OUT/parity --steps 10 > $OUT/parity.txt 2>&1; echo "exit $?"; grep -E "PASS|FAIL" $OUT/parity.txt | tail -8
el; echo "== fault: kill -9 one rank (copy engines, graph)"
( $B --nproc 2 -e d12 -b 8 -t 1024 -d 16384 -x 100000 -v 0 -g 0 --nccl-timeout 30 > $OUT/fault.txt 2>&1; echo "exit $?" >> $OUT/fault.txt ) &
sleep 20; victim=$(pgrep -f "train_gpt2_cuda --nproc 2" | sort -n | tail -1)
t0=$(date +%s); kill -9 "$victim" 2>/dev/null; wait
echo "fault: the job ended $(( $(date +%s) - t0 )) s after the kill: $(tail -1 $OUT/fault.txt); $(grep -m1 'data parallel' $OUT/fault.txt); $(grep -m1 -E 'died|killed|failed' $OUT/fault.txt)"
el; rm -rf $OUT/parity $OUT/log; cd $OUT && tar -czf /tmp/x2s11e.tgz *.txt && rm -rf $OUT/* && mv /tmp/x2s11e.tgz $OUT/
