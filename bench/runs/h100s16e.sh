#!/usr/bin/env bash
# H100 call E of session 16 (2026-11-24): the copy by the producer's warps with the consumers' staging
# on p.out16 alone (uniform; build/v/oc3) against base, three alternating rounds (fwd / bwd us at T 512 /
# 1024 / 4096); its SASS's convergence barriers (BSSY) and WARPSYNCs against base's.
source bench/runs/prelude.sh
for r in 1 2 3; do echo "r$r base: $(att_row timeout 60 build/v/base)"; echo "r$r oc3: $(att_row timeout 60 build/v/oc3)"; done; el
F=_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184EEv10bt__k_attp14bt__k_att_maps
for v in oc3 base; do cuobjdump -sass -fun $F build/v/$v > $OUT/$v.sass 2>&1; echo "$v: $(wc -l < $OUT/$v.sass) lines, BSSY $(grep -c BSSY $OUT/$v.sass), WARPSYNC $(grep -c WARPSYNC $OUT/$v.sass), STL $(grep -c STL $OUT/$v.sass)"; done; el
