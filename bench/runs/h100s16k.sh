#!/usr/bin/env bash
# H100 call K of session 16 (2026-11-24): the SASS of the default bf16 forward (M 184) of base, noout,
# hall, hlse, hstm (call J's builds) to compare their item loops (the hacks moved the time both ways:
# the code's shape, not the work removed, may be what changed).
source bench/runs/prelude.sh
F=_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184EEv10bt__k_attp14bt__k_att_maps
for v in base noout hall hlse hstm; do cuobjdump -sass -fun $F build/v/$v > $OUT/$v.sass 2>&1; echo "$v: $(wc -l < $OUT/$v.sass) lines, BSSY $(grep -c BSSY $OUT/$v.sass), WARPSYNC $(grep -c WARPSYNC $OUT/$v.sass), STL $(grep -c STL $OUT/$v.sass)"; done; el
