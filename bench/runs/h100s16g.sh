#!/usr/bin/env bash
# H100 call G of session 16 (2026-11-24): the output staged in an O tile of its own (build/v/os: the Q
# tile goes back after the warpgroup's last S, the producer's warps copy O out) against base, three
# alternating rounds (fwd / bwd us at T 512 / 1024 / 4096); SASS counts.
source bench/runs/prelude.sh
for r in 1 2 3; do for v in base os; do echo "r$r $v: $(att_row timeout 60 build/v/$v)"; done; done; el
F=_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184EEv10bt__k_attp14bt__k_att_maps
for v in os; do cuobjdump -sass -fun $F build/v/$v > $OUT/$v.sass 2>&1; echo "$v: $(wc -l < $OUT/$v.sass) lines, BSSY $(grep -c BSSY $OUT/$v.sass), WARPSYNC $(grep -c WARPSYNC $OUT/$v.sass), STL $(grep -c STL $OUT/$v.sass)"; done; el
