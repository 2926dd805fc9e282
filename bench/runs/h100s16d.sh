#!/usr/bin/env bash
# H100 call D of session 16 (2026-11-24): the output copied by the producer's warps with plain loads
# and stores (build/v/oc1) against base (three alternating rounds, fwd / bwd us at T 512 / 1024 / 4096);
# the SASS of the default bf16 forward (M 184) of oc1 and of the TMA-store build (build/v/tma, 18%
# slower at T 4096 in call C) to see where their spills are.
source bench/runs/prelude.sh
for r in 1 2 3; do echo "r$r base: $(att_row timeout 60 build/v/base)"; echo "r$r oc1: $(att_row timeout 60 build/v/oc1)"; done; el
F=_Z16bt__k_att_fwd_wgI13__nv_bfloat16Li64ELi184EEv10bt__k_attp14bt__k_att_maps
for v in oc1 tma base; do cuobjdump -sass -fun $F build/v/$v > $OUT/$v.sass 2>&1; echo "$v: $(wc -l < $OUT/$v.sass) lines, STL $(grep -c STL $OUT/$v.sass), LDL $(grep -c LDL $OUT/$v.sass)"; done; el
