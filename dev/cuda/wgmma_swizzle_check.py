"""wgmma_swizzle_check.py - checks, without a GPU, that the shared-memory tiles bt_attention.cuh's
wgmma kernels write (bt__k_sw: [R][64] column blocks, 16-byte chunk c of row r at c ^ (r & 7)) are the
elements its descriptors name (bt__k_wg_kmaj / bt__k_wg_mnmaj), reading the descriptors as the
canonical 128-byte-swizzle GMMA layouts (K-major: 8 rows of 128 B, groups SBO = 1024 B apart; MN-major:
64-element blocks LBO = R * 128 B apart, 8-row groups SBO apart) with the swizzle as the XOR of byte
address bits [4:6] with [7:9] on 1024-byte aligned tiles. Prints the number of mismatches (0 expected).
Usage: python3 dev/cuda/wgmma_swizzle_check.py"""
def loader(r, c, R):          # byte offset of element (r, c) in a tile of R rows
    blk, cc = divmod(c, 64); ch, e = divmod(cc, 8)
    return blk * R * 128 + r * 128 + ((ch ^ (r & 7)) << 4) + e * 2
def swz(a): return a ^ (((a >> 7) & 7) << 4)
def kmaj(R, r0, kd, rows):    # element (mn, k) of a K-major operand, k step kd
    start = (kd >> 2) * R * 128 + r0 * 128 + (kd & 3) * 32
    sbo = 1024
    bad = 0
    for mn in range(rows):
        for k in range(16):
            lin = start + 2 * ((mn % 8) * 64 + k) + (mn // 8) * sbo
            if swz(lin) != loader(r0 + mn, 16 * kd + k, R): bad += 1
    return bad
def mnmaj(R, kk, N):          # element (k, n) of an MN-major operand (tile rows = k), k step kk
    start = kk * 2048; lbo = R * 128; sbo = 1024
    bad = 0
    for k in range(16):
        for n in range(N):
            a, rest = n % 8, n // 8; b, c = rest % 8, rest // 8
            d, e = k % 8, k // 8
            lin = start + 2 * (a + 8 * b + d * 64) + c * lbo + e * sbo
            if swz(lin) != loader(16 * kk + k, n, R): bad += 1
    return bad
tot = 0
for D in (64, 128):
    for R in (64, 128):
        for kd in range(D // 16):
            for r0 in (0, 64) if R == 128 else (0,):
                tot += kmaj(R, r0, kd, 64)          # A: 64 rows
            tot += kmaj(R, 0, kd, R)                # B: R rows
        for kk in range(R // 16):
            tot += mnmaj(R, kk, D)
print("mismatches:", tot)
