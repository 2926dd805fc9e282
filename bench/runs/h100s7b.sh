#!/usr/bin/env bash
# H100 call (2026-11-23, seventh session, second): the cross-entropy kernel with the next row's loads
# in flight during this row's gradient, now one bulk copy (copy engine, mbarrier) a chunk of 32 KB
# (the first call's per-thread cp.async ran slower than the code before), and the broadcast add's
# vector kernel: tests (memcheck, racecheck, synccheck), kernel timings against the code before
# (build/old = commit ab6efee), and the default run, new and old in alternating processes.
source bench/runs/prelude.sh
tar -xJf .carry/old.tar.xz
cuobjdump --dump-resource-usage build/bench_kernels 2>/dev/null | grep -A1 "xent_fused" | grep -o "REG:[0-9]*\|SHARED:[0-9]*" | head -6 | tr '\n' ' '; echo
for g in cross_entropy binary; do
  BT_TEST_ONLY=$g timeout 120 build/tests/test_kernels_gpu > $OUT/test_$g.txt 2>&1; echo "tests $g: exit $?: $(tail -1 $OUT/test_$g.txt)"
done; el
BT_TEST_ONLY=cross_entropy timeout 200 compute-sanitizer --tool memcheck build/tests/test_kernels_gpu > $OUT/memcheck.txt 2>&1; echo "memcheck xent: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.txt | tail -1)"; el
BT_TEST_ONLY=cross_entropy timeout 200 compute-sanitizer --tool racecheck build/tests/test_kernels_gpu > $OUT/racecheck.txt 2>&1; echo "racecheck xent: exit $?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $OUT/racecheck.txt | tail -1)"; el
BT_TEST_ONLY=cross_entropy timeout 200 compute-sanitizer --tool synccheck build/tests/test_kernels_gpu > $OUT/synccheck.txt 2>&1; echo "synccheck xent: exit $?: $(grep -E 'ERROR SUMMARY' $OUT/synccheck.txt | tail -1)"; el
for r in 1 2 3; do
  for v in old new; do
    b=build/bench_kernels; [ $v = old ] && b=build/old/bench_kernels
    BT_BENCH_ONLY=cross_entropy timeout 60 $b > $OUT/xent_$v$r.txt 2>&1
    echo "r$r $v: $(grep -E '^cross_entropy_fused' $OUT/xent_$v$r.txt | sed 's/  */ /g' | cut -d' ' -f9-14) | ceil $(grep -o 'copy [0-9]* GB/s' $OUT/xent_$v$r.txt)"
  done
done
for v in old new; do
  b=build/bench_kernels; [ $v = old ] && b=build/old/bench_kernels
  BT_BENCH_ONLY=cross_entropy timeout 120 ncu --kernel-name regex:xent_fused -c 1 --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum $b > $OUT/ncu_xent_$v.txt 2>&1
  echo "ncu $v: $(grep -E 'gpu__time|dram__' $OUT/ncu_xent_$v.txt | awk '{print $1, $(NF-1), $NF}' | tr '\n' ' ')"
done; el
BT_BENCH_ONLY=bcast_add timeout 60 build/bench_kernels > $OUT/bcast.txt 2>&1; grep -E "^binary add" $OUT/bcast.txt; el
for r in 1 2 3; do
  for v in old new; do
    b=./build/train_gpt2_cuda; [ $v = old ] && b=./build/old/train_gpt2_cuda
    timeout 90 $b -x 8 -v 0 -g 0 > $OUT/default_$v$r.txt 2>&1
    echo "default r$r $v: $(med < $OUT/default_$v$r.txt) | $(grep -E '^step +8/' $OUT/default_$v$r.txt | cut -c1-40)"
  done
done; el
