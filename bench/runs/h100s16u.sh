#!/usr/bin/env bash
# H100 call U of session 16 (2026-11-24): the output staged in an O tile of its own and stored by the
# same warp under the next item's first S, a per-warp named barrier (bar.sync 4 + warp, 32) for the __syncwarps (build/v/nb) against 007d4a8 (build/v/final1), three
# alternating rounds (fwd / bwd us at T 512 / 1024 / 2048 / 4096); SASS counts.
source bench/runs/prelude.sh
for r in 1 2 3; do for v in final1 nb; do echo "r$r $v: $(att_row BT_BENCH_SWEEP=0,1,2,3 timeout 60 build/v/$v)"; done; done; el
F=_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184EEv10bt__k_attp14bt__k_att_maps
for v in nb; do cuobjdump -sass -fun $F build/v/$v > $OUT/$v.sass 2>&1; echo "$v: $(wc -l < $OUT/$v.sass) lines, BSSY $(grep -c BSSY $OUT/$v.sass), WARPSYNC $(grep -c WARPSYNC $OUT/$v.sass), STL $(grep -c STL $OUT/$v.sass), LDL $(grep -c LDL $OUT/$v.sass)"; done; el
