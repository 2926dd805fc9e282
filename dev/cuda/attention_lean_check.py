"""attention_lean_check.py - checks, without a GPU, that the lean steps of the wgmma attention forward
(bt_attention.cuh at D 64; LEAN in dev/cuda/attention_forward.cu) compute the same addresses, descriptors
and masks as the plain code: bt__k_wg_load_lean against bt__k_wg_load (the set of (shared offset, global
element offset, bytes) copies of the producer's 128 threads), bt__k_wg_desc_at offsets of one base descriptor
against bt__k_wg_kmaj / bt__k_wg_mnmaj built for each address, and bt__k_att_fwd_mask_lean against
bt__k_att_masked, for the tile sizes, stages, k steps, rows and sequence ends the kernel uses. The
formulas are transcribed from the header. Prints the number of mismatches (0 expected).
Usage: python3 dev/cuda/attention_lean_check.py"""
def sw(r, c, R):                                   # bt__k_sw
    return (c >> 3) * R * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4)
def wg_load(R, D, r0, Tn, st):                     # bt__k_wg_load, 128 threads
    CPR, out = D // 8, set()
    for t in range(128):
        for c in range(t, R * CPR, 128):
            r, ch = divmod(c, CPR)
            ok = r0 + r < Tn
            out.add((sw(r, ch, R), (r0 + r) * st + ch * 8 if ok else 0, 16 if ok else 0))
    return out
def lean_load(R, D, r0, Tn, st):                   # bt__k_wg_load_lean
    CPR = D // 8; RP = 128 // CPR; N = R // RP; out = set()
    for t in range(128):
        rr, ch = divmod(t, CPR)
        dst, src, step = sw(rr, ch, R), (r0 + rr) * st + ch * 8, RP * st
        for i in range(N):
            ok = r0 + R <= Tn or r0 + rr + i * RP < Tn
            out.add((dst + i * RP * 128, src + i * step if ok else 0, 16 if ok else 0))
    return out
M64 = (1 << 64) - 1
def desc(addr, lbo):                               # bt__k_wg_desc
    return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((1024 >> 4) << 32) | (1 << 62)
def kmaj(tile, R, r0, kd): return desc(tile + (kd >> 2) * R * 128 + r0 * 128 + (kd & 3) * 32, 16)
def mnmaj(tile, R, kk): return desc(tile + kk * 2048, R * 128)
def desc_at(d, b): return (d & 0xFFFFFFFF00000000) | (((d & 0xFFFFFFFF) + (b >> 4)) & 0xFFFFFFFF)
def masked(causal, T, key, row): return key > row if causal else key >= T   # bt__k_att_masked
def mask_lean(causal, T, i, k0, r0, tg):          # bt__k_att_fwd_mask_lean, score i
    if causal: return (i >> 2) * 8 + (i & 1) - ((i >> 1) & 1) * 8 > r0 - k0 - 2 * tg
    return (i >> 2) * 8 + (i & 1) > T - 1 - k0 - 2 * tg
bad = 0
for D in (64, 128):
    for r0, Tn in ((0, 1), (0, 63), (0, 128), (128, 200), (896, 1000), (896, 1024), (3968, 4096), (128, 129)):
        for st in (D, 3 * 12 * D, 3 * 37 * D + 8):
            if wg_load(128, D, r0, Tn, st) != lean_load(128, D, r0, Tn, st): bad += 1
for D, ST in ((64, 3), (128, 2)):                  # the forward's shared layout: 2 Q tiles, ST K, ST V
    TILE = QT = 128 * D * 2
    for base in (1024, 2048, 9216):               # the dynamic window's 1024-aligned start
        sK = base + 2 * QT; sV = sK + ST * TILE
        for qb in (0, 1):
            for w in (0, 1):
                sQ = base + qb * QT; dq = kmaj(sQ, 128, 64 * w, 0); dk = kmaj(sK, 128, 0, 0)
                for s in range(ST):
                    for kd in range(D // 16):
                        off = (kd >> 2) * 128 * 128 + (kd & 3) * 32
                        if desc_at(dq, off) != kmaj(sQ, 128, 64 * w, kd): bad += 1
                        if desc_at(desc_at(dk, s * TILE), off) != kmaj(sK + s * TILE, 128, 0, kd): bad += 1
        dv = mnmaj(sV, 128, 0)
        for sp in range(ST):
            for kk in range(8):
                if desc_at(dv, sp * TILE + kk * 2048) != mnmaj(sV + sp * TILE, 128, kk): bad += 1
        assert sV + ST * TILE < 1 << 18
for causal in (1, 0):
    for T in (1, 63, 200, 1000, 1024, 4096):
        for k0 in range(0, T, 128):
            for qt in range((T + 127) // 128):
                for w in (0, 1):
                    for wq in range(4):
                        for g in range(8):
                            r0 = qt * 128 + 64 * w + 16 * wq + g
                            for tg in range(4):
                                for i in range(64):
                                    key, row = k0 + (i >> 2) * 8 + 2 * tg + (i & 1), r0 + ((i >> 1) & 1) * 8
                                    if masked(causal, T, key, row) != mask_lean(causal, T, i, k0, r0, tg): bad += 1
print("attention_lean_check: mismatches", bad)
