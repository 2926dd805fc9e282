#!/usr/bin/env bash
# H100 call F of session 16 (2026-11-24): why the consumers' steps got convergence barriers (BSSY) once
# the producer's warps copy the output: v1 (the consumers' tail as before: __syncwarp inside the
# staging), v2 (v1 without the copy: a timing-only build, output wrong) against base; SASS counts.
source bench/runs/prelude.sh
for r in 1 2; do for v in base v1 v2; do echo "r$r $v: $(att_row timeout 60 build/v/$v)"; done; done; el
F=_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184EEv10bt__k_attp14bt__k_att_maps
for v in v1 v2; do cuobjdump -sass -fun $F build/v/$v > $OUT/$v.sass 2>&1; echo "$v: $(wc -l < $OUT/$v.sass) lines, BSSY $(grep -c BSSY $OUT/$v.sass), WARPSYNC $(grep -c WARPSYNC $OUT/$v.sass), STL $(grep -c STL $OUT/$v.sass)"; done; el
