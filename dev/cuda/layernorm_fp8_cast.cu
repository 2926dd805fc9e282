/* layernorm_fp8_cast: the layernorm whose output an FP8 linear reads, with that output's e4m3 cast
   (q [rows, C] and its transpose qt [C, rows], the delayed recipe's scale given, the amax measured)
   in the norm's own kernel, so the bf16 output is never written and read back. The ladder:
     v0  bt_k_layernorm, then bt_k_fp8_cast of its output: what ships (8 bytes an element of traffic)
     v1  one kernel: the norm's rows (a warp a row for C <= 1024, a group of S threads a row above,
         as bt_k_layernorm's two fast paths, with its per-row math bt__k_ln_row, so the same bits),
         16 rows a block, each row's e4m3 bytes to q and to a shared tile, the tile's columns to qt
         as 16-byte stores (4 bytes an element); each warp or group takes its rows in turn
     v2  v1 with 32-row tiles (qt written in whole 32-byte sectors) and the tile's x prefetched to
         L2 before its rows
     v3  v2 with two rows' loads in flight per warp or group (both rows in registers, then the norm
         of each: the same bt__k_ln_row calls, so the same bits)
     v4  v2 with four rows in flight
     v5  the norm writing q alone (v1's rows, no tile: the output's bf16 never written, its e4m3
         bytes once), then bt_k_fp8_transpose for qt: 3 + 2 bytes an element in two kernels that
         each keep their own access pattern, where v0 moves 8 and v1 4
     v6  v2 without the prefetch (32-row tiles)
     v7  64-row tiles (qt in 64-byte pieces, as bt_k_fp8_cast's tiles)
     v8  v1 again, last: the clock's drift over the run
   Each call takes the next of 8 copies of x, y, q and qt (400 MB at the two smaller shapes, past
   the 50 MB L2), so x is read from memory as in a training step at the default run's
   micro-batches (a norm's input there is 0.4 GB); an earlier form of this ladder reused one copy, x then stayed in L2 and the one-kernel
   versions looked 3-4 us faster than they are. Measured cold (H200, 2026-12-04, two runs in two
   calls, the second's), us at [8192, 1600] / [16384, 768]: v0 44.0 / 36.0, v1 41.2 / 30.0, v2
   46.3 / 31.8, v3 56.2 / 33.4, v4 56.4 / 36.2, v5 39.7 / 30.1, v6 43.0 / 30.5, v7 58.3 / 35.9, v1
   again 41.0 / 30.2; every version the pair's bytes. So v1 and v5 save 3-4 us a norm at d48's
   shape and 6 at d12 B 16's. Rows in flight lose (ptxas: v3 72 registers on the block rows, 100
   on the warp path; v4 118, and 128 with spills); wider tiles lose too.
   At a d12 default-run micro-batch's [262144, 768] (a third call, the same day): v0 434.8, v1 634.2, v2 419.1,
   v3 414.8, v4 499.0, v5 352.2, v6 398.7, v7 399.7, v1 again 634.2 us. There qt (201 MB) is far past
   L2, and the tile versions' 16- or 32-byte pieces of its far-apart rows go to memory as partial
   sectors; at the two smaller shapes all of qt stays in L2. v1 in the library (commit 8672b85) was
   thus no faster end to end (the default d12 run -1.1%); v5 is the fastest at every shape and is
   what bt_fp8.cuh section 4 ships (+0.3% for the default run, bench/RESULTS.md#fp8).
   Each version is checked against v0 on fresh random inputs (q, qt, mean, rstd, the scale used and
   the amax, every byte) and timed with CUDA events (the median of 50 calls), at GPT-2 1.5B's
   [8192, 1600] (the block-row path), GPT-2 124M B 16's [16384, 768] (the warp path) and the
   default run's [262144, 768].
   Build: make dev (build/dev/layernorm_fp8_cast); run: build/dev/layernorm_fp8_cast */
#include "common.cuh"

/* v1..v7: TR rows a tile (16, 32 or 64), RIF rows in flight per warp or group, PF: the tile prefetched to L2;
   QT 0 (v5): q alone, no tile (qt by bt_k_fp8_transpose after) */
template <typename T, int NV, int WARP, int TR, int RIF, int PF, int QT = 1>
__global__ void __launch_bounds__(512) norm_cast(uint8_t *q, uint8_t *qt, float *mean, float *rstd, const T *x, const T *w, const T *b,
                                                 int64_t rows, int C, float eps, int S, const float *scale_in, float *scale_used,
                                                 unsigned *amax_acc) {
    extern __shared__ __align__(16) uint8_t sh[];
    uint8_t *tile = sh;                               /* [TR, C] bytes (QT), then 32 floats a group */
    float *gsh = reinterpret_cast<float *>(sh + (QT ? TR * C : 0));
    const int VE = 16 / sizeof(T), nvec = C / VE, G = blockDim.x / S, grp = threadIdx.x / S, t = threadIdx.x - grp * S;
    const float r = 1.f / *scale_in;
    unsigned m = 0;
    for (int64_t r0 = (int64_t)blockIdx.x * TR; r0 < rows; r0 += (int64_t)gridDim.x * TR) {
        const int n = rows - r0 < TR ? (int)(rows - r0) : TR, per = n / G;   /* rows % 16 == 0; G divides 16 */
        if (PF) {
            const char *xt = reinterpret_cast<const char *>(x + r0 * C);
            for (int64_t off = (int64_t)threadIdx.x * 128; off < (int64_t)n * C * (int64_t)sizeof(T); off += (int64_t)blockDim.x * 128)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(xt + off));
        }
        for (int k0 = 0; k0 < per; k0 += RIF) {      /* the same count for every group: the group sums' barriers */
            float v[RIF][NV][VE];
#pragma unroll
            for (int j = 0; j < RIF; j++)
                if (k0 + j < per) bt__k_vecs_ld<T, NV>(v[j], x + (r0 + grp + (int64_t)G * (k0 + j)) * C, nvec, t, S);
#pragma unroll
            for (int j = 0; j < RIF; j++) {
                if (k0 + j >= per) continue;          /* uniform over the block */
                const int lr = grp + G * (k0 + j);
                const int64_t row = r0 + lr;
                float mu, rs;
                if (WARP) bt__k_ln_row<T, NV, 0>(v[j], w, b, nvec, t, 32, C, eps, bt__k_warp_sum(), mu, rs);
                else bt__k_ln_row<T, NV, 0>(v[j], w, b, nvec, t, S, C, eps, bt__k_group_sum{gsh + 32 * grp, S >> 5, grp}, mu, rs);
#pragma unroll
                for (int i = 0; i < NV; i++) {
                    const int c = t + S * i;
                    if (c >= nvec) continue;
                    float f[VE];
#pragma unroll
                    for (int e = 0; e < VE; e++) {
                        f[e] = bt__k_tof(bt__k_from<T>(v[j][i][e]));
                        m = max(m, bt__abs_bits(f[e]));
                    }
                    uint32_t wd[2] = {0u, 0u};
#pragma unroll
                    for (int e = 0; e < VE; e += 2)
                        wd[e >> 2] |= (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(f[e], r), __fmul_rn(f[e + 1], r)), __NV_SATFINITE,
                                                                         __NV_E4M3) << (8 * (e & 3));
                    if (VE == 8) {
                        *reinterpret_cast<uint2 *>(q + row * C + c * 8) = make_uint2(wd[0], wd[1]);
                        if (QT) *reinterpret_cast<uint2 *>(tile + lr * C + c * 8) = make_uint2(wd[0], wd[1]);
                    } else {
                        *reinterpret_cast<uint32_t *>(q + row * C + c * 4) = wd[0];
                        if (QT) *reinterpret_cast<uint32_t *>(tile + lr * C + c * 4) = wd[0];
                    }
                }
                if (t == 0) { mean[row] = mu; rstd[row] = rs; }
            }
        }
        if (!QT) continue;                            /* uniform: a template constant */
        __syncthreads();
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            for (int h = 0; h < n; h += 16) {
                uint32_t o[4];
#pragma unroll
                for (int a = 0; a < 4; a++) {
                    uint32_t wv = 0;
#pragma unroll
                    for (int k = 0; k < 4; k++) wv |= (uint32_t)tile[(h + 4 * a + k) * C + c] << (8 * k);
                    o[a] = wv;
                }
                *reinterpret_cast<uint4 *>(qt + (int64_t)c * rows + r0 + h) = make_uint4(o[0], o[1], o[2], o[3]);
            }
        __syncthreads();                              /* the next rows overwrite the tile */
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) *scale_used = *scale_in;
    m = bt__k_block_umax(m);
    if (threadIdx.x == 0 && m) atomicMax(amax_acc, m);
}

typedef __nv_bfloat16 T;
/* rows a tile of version ver */
static int tile_rows(int ver) { return ver == 1 || ver == 5 ? 16 : ver == 7 ? 64 : 32; }
/* one call of version ver (1..7; v8 is v1) on bf16 x [rows, C] (C <= 1024: the warp path, else the block rows) */
static void launch(int ver, uint8_t *q, uint8_t *qt, float *mean, float *rstd, const T *x, const T *w, const T *b, int64_t rows, int C,
                   const float *sc, float *used, float *amax, cudaStream_t s) {
    const int TR = tile_rows(ver), nvec = C / 8, warp = C <= 1024;
    const int S = warp ? 32 : (int)bt__k_brow_threads(nvec);
    int G = warp ? 8 : 1;
    if (!warp) while (2 * G * S <= 512 && G < 8) G *= 2;   /* a power of two, at most 8: 16 / G rows each in a short tile */
    const size_t shb = (size_t)(ver == 5 ? 0 : TR) * C + (size_t)G * 32 * sizeof(float);
    const int64_t tiles = (rows + TR - 1) / TR, cap = (int64_t)bt__k_cur()->sm_count * 16;
    const unsigned grid = (unsigned)std::min(tiles, cap), th = (unsigned)(G * S);
#define NC_LAUNCH(NV, WARP, TRV, RIF, PF, QT) do { \
        CK(cudaFuncSetAttribute(norm_cast<T, NV, WARP, TRV, RIF, PF, QT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shb)); \
        norm_cast<T, NV, WARP, TRV, RIF, PF, QT><<<grid, th, shb, s>>>(q, qt, mean, rstd, x, w, b, rows, C, 1e-5f, S, sc, used, (unsigned *)amax); \
    } while (0)
#define NC_VERSIONS(NV, WARP) do { \
        if (ver == 1) NC_LAUNCH(NV, WARP, 16, 1, 0, 1); else if (ver == 2) NC_LAUNCH(NV, WARP, 32, 1, 1, 1); \
        else if (ver == 3) NC_LAUNCH(NV, WARP, 32, 2, 1, 1); else if (ver == 4) NC_LAUNCH(NV, WARP, 32, 4, 1, 1); \
        else if (ver == 6) NC_LAUNCH(NV, WARP, 32, 1, 0, 1); else if (ver == 7) NC_LAUNCH(NV, WARP, 64, 1, 0, 1); \
        else NC_LAUNCH(NV, WARP, 16, 1, 0, 0); } while (0)
    if (!warp) NC_VERSIONS(BT__K_BROW_NV, 0);
    else if (bt__k_pick_nv(nvec) <= 3) NC_VERSIONS(3, 1);     /* C 768: 96 vectors, 3 a lane */
    else NC_VERSIONS(4, 1);
    CK(cudaGetLastError());
    if (ver == 5) bt_k_fp8_transpose(qt, q, rows, C, s);
}
int main(void) {
    bt_k_init(0);
    cudaStream_t s = (cudaStream_t)0;
    const int64_t shapes[3][2] = {{8192, 1600}, {16384, 768}, {262144, 768}};
    enum { K = 8 };                                   /* copies taken in turn (cold): 8 x 4 bytes an element, 400 MB > L2 */
    for (int k = 0; k < 3; k++) {
        const int64_t rows = shapes[k][0], C = shapes[k][1], n = rows * C;
        T *x[K], *y[K], *w, *b;
        uint8_t *q[K + 1], *qt[K + 1];
        float *st[2], *f;
        for (int j = 0; j < K; j++) { CK(cudaMalloc(&x[j], n * 2)); CK(cudaMalloc(&y[j], n * 2)); fill_bf16(x[j], n, 11 + k + 7 * j, -3.f, 3.f); }
        for (int j = 0; j <= K; j++) { CK(cudaMalloc(&q[j], n)); CK(cudaMalloc(&qt[j], n)); }
        CK(cudaMalloc(&w, C * 2)); CK(cudaMalloc(&b, C * 2));
        for (int j = 0; j < 2; j++) CK(cudaMalloc(&st[j], 8 * rows));
        CK(cudaMalloc(&f, 8 * sizeof(float)));
        fill_bf16(w, C, 21, 0.5f, 1.5f); fill_bf16(b, C, 31, -0.2f, 0.2f);
        printf("[%lld, %lld] bf16\n", (long long)rows, (long long)C);
        for (int ver = 0; ver <= 8; ver++) {
            /* f: [0] the scale, [1] v0's scale used, [2] v0's amax, [4] the scale, [5] this version's used, [6] its amax */
            const float init[8] = {0.0371f, -1.f, 0.f, 0.f, 0.0371f, -1.f, 0.f, 0.f};
            CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
            bt_k_layernorm(BT_BF16, y[0], st[0], st[0] + rows, x[0], w, b, rows, C, 1e-5f, s);
            bt_k_fp8_cast(BT_BF16, BT_F8E4M3, q[K], qt[K], y[0], rows, C, NULL, f, f + 1, f + 2, s);
            if (ver) launch(ver == 8 ? 1 : ver, q[0], qt[0], st[1], st[1] + rows, x[0], w, b, rows, (int)C, f + 4, f + 5, f + 6, s);
            CK(cudaDeviceSynchronize());
            long bad = ver ? differ(q[K], q[0], n) + differ(qt[K], qt[0], n) + differ(st[0], st[1], 8 * rows) + differ(f + 1, f + 5, 8) : 0;
            int it = 0;
            const double us = median_us([&] {
                const int j = it++ % K;
                if (ver == 0) {
                    bt_k_layernorm(BT_BF16, y[j], st[0], st[0] + rows, x[j], w, b, rows, C, 1e-5f, s);
                    bt_k_fp8_cast(BT_BF16, BT_F8E4M3, q[j], qt[j], y[j], rows, C, NULL, f, f + 1, f + 2, s);
                } else launch(ver == 8 ? 1 : ver, q[j], qt[j], st[1], st[1] + rows, x[j], w, b, rows, (int)C, f + 4, f + 5, f + 6, s);
            }, s), bytes = 4.0 * (double)n;
            printf("  v%d  %7.1f us  %6.0f GB/s (x read once, q and qt written)  %s\n", ver, us, bytes / (us * 1e-6) / 1e9,
                   ver ? (bad ? "DIFFERS from v0" : "the same bytes as v0") : "");
        }
        for (int j = 0; j < K; j++) { CK(cudaFree(x[j])); CK(cudaFree(y[j])); }
        for (int j = 0; j <= K; j++) { CK(cudaFree(q[j])); CK(cudaFree(qt[j])); }
        CK(cudaFree(w)); CK(cudaFree(b)); CK(cudaFree(f));
        for (int j = 0; j < 2; j++) CK(cudaFree(st[j]));
    }
    return 0;
}
