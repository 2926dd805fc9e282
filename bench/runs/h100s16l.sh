#!/usr/bin/env bash
# H100 call L of session 16 (2026-11-24): the work item's decode in 32 bits (build/v/dec: two inline
# divisions instead of two calls of the 64-bit one at every item's start) against base (36ac268),
# three alternating rounds (fwd / bwd us at T 512 / 1024 / 4096); SASS counts of the default forward.
source bench/runs/prelude.sh
for r in 1 2 3; do for v in base dec; do echo "r$r $v: $(att_row timeout 60 build/v/$v)"; done; done; el
F=_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184EEv10bt__k_attp14bt__k_att_maps
for v in dec; do cuobjdump -sass -fun $F build/v/$v > $OUT/$v.sass 2>&1; echo "$v: $(wc -l < $OUT/$v.sass) lines, BSSY $(grep -c BSSY $OUT/$v.sass), WARPSYNC $(grep -c WARPSYNC $OUT/$v.sass), CALL $(grep -c CALL $OUT/$v.sass)"; done; el
