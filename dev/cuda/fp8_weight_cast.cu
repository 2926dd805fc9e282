/* fp8_weight_cast: the e4m3 casts of an FP8 model's block weights (q and q^T of each linear's bf16
   weight, the delayed recipe's scale, the amax), one launch a weight against one launch for several.
   A weight's cast is a pass of 4 bytes an element over a tensor of 2.6M to 10M elements (d48), where
   a launch's ramp and tail are a larger share than for the activations' casts: in the model they cost
   ~1.8 ms of d48 B 8's step (bench/RESULTS.md#fp8, made free: +1.5%). The weights are all known once
   the update has written them, so one launch can take several.
     v0  bt_k_fp8_cast once a weight: what ships (4 launches a GPT-2 layer)
     v1  one launch a layer: the 64 x 64 tiles of its 4 weights in one index space, each block
         walking its tiles in order and finding the weight by a running index; the vector cast's
         per-tile body (the same multiply, rounding, packing and transpose store), the amax one
         block reduction and atomic a weight a block
     v2  v1's kernel over all the layers' weights in one launch
     v3  one launch a weight as v0, a body with fewer instructions: the tile index in 32 bits (a 64-bit
         division is a ~70-instruction call, once a tile) and the transpose's gather by byte
         permutes (3 prmt a word of q^T where shifts and masks take ~13)
     v4  v3's body over all the layers' weights in one launch (v2 with v3's body)
     copy  cudaMemcpy of the model's bf16 weights (2 bytes read, 2 written an element, as a cast)
   Then v0 against v3 by weight shape (the 48 or 12 weights of a shape in turn) and at activation
   shapes (8 tensors in turn, out of L2), with a copy of the same bytes.
   Each version's q, q^T, scales used and amaxes are checked against v0's byte for byte on fresh
   random weights, and timed with CUDA events (the median of 50 calls of a whole step's casts).
   Measured (H200, 2026-12-04, v0 the library of commit 25796c8), us a step's weight casts (a layer):
   d48 v0 2,487.5 (51.8), v1 2,303.3 (48.0), v2 2,241.0 (46.7), v3 2,712.3 (56.5), v4 2,084.4 (43.4),
   copy 1,387.2 (28.9: 4.25 TB/s where v0 moves 2.37); d12 v0 301.0 (25.1), v1 194.2 (16.2), v2 139.5
   (11.6), v3 342.6 (28.5), v4 117.3 (9.8), copy 87.6 (7.3). v3 alone is slower than v0 (its
   descriptor reads and walk cost a launch of one weight more than its leaner body saves), v4 the
   fastest. The leaner body put into the library's vector cast and byte transpose instead (the same
   day, bench_kernels' fp8 rows alternating with the library before): no faster (activation [8192,
   1600] 19.7 against 19.6-19.9 us, hidden [8192, 6400] 63.6 against 63.8, GELU 70.8 against 71.3-
   71.7), d48 B 8 end to end +0.3% and d12 -0.2% (within the runs' spread); with, in addition, the bf16
   amax taken on 16-bit lanes (__vmaxu2) and the column sums compiled out where unused, every cast 11-
   14% slower (activation 22.1, hidden 71.6, GELU 79.9 us): neither kept. One launch for several
   weights was not taken either: at d48 it saves ~0.2-0.4 ms a step in isolation (the weights' casts
   are not launch-bound there: each is 2.6-10M elements), at d12 ~0.2 ms, and it needs the ops to
   take weights cast before them (a per-state cache keyed by the weight's storage) and, for one
   launch a step, every layer's q held from the step's start to its forward.
   Build: make dev (build/dev/fp8_weight_cast); run: build/dev/fp8_weight_cast */
#include "common.cuh"
#include <vector>
typedef __nv_bfloat16 T;

struct wdesc {                        /* one weight [rows, cols]: rows % 16 == 0, cols % 8 == 0, 16-byte aligned */
    const T *x;
    uint8_t *q, *qt;
    const float *scale_in;            /* the delayed scale */
    float *scale_used;
    unsigned *amax_acc;
    int64_t rows, cols, tile0;        /* tile0: the first of its tiles in the launch's index space */
};
/* the amax m of a block's tiles of weight d: one block reduction, one atomic */
__device__ __forceinline__ void flush_amax(const wdesc &d, unsigned m) {
    m = bt__k_block_umax(m);
    if (threadIdx.x == 0 && m) atomicMax(d.amax_acc, m);
}
__global__ void __launch_bounds__(256) multi_cast(const wdesc *ds, int nd, int64_t ntiles) {
    __shared__ uint32_t tile[64][17];
    const int t = threadIdx.x, cx = t & 7, ry = t >> 3, tcol = t >> 2, tk = t & 3;
    int k = 0;
    unsigned m = 0;
    float r = 0.f;
    for (int64_t tt = blockIdx.x; tt < ntiles; tt += gridDim.x) {
        int k0 = k;
        while (k + 1 < nd && ds[k + 1].tile0 <= tt) k++;            /* uniform over the block */
        if (k != k0 || tt == blockIdx.x) {
            if (k != k0) { flush_amax(ds[k0], m); m = 0; }
            r = 1.f / *ds[k].scale_in;
        }
        const wdesc &d = ds[k];
        const int64_t lt = tt - d.tile0, tc = (d.cols + 63) / 64, r0 = lt / tc * 64, c0 = lt % tc * 64;
        if (lt == 0 && t == 0) *d.scale_used = *d.scale_in;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int lr = ry + 32 * h;
            const int64_t i = r0 + lr, c = c0 + cx * 8;
            uint2 w = make_uint2(0u, 0u);
            if (i < d.rows && c < d.cols) {
                float fv[8];
                bt__k_fp8_vals8<T, BT_FP8_ACT_X>(fv, d.x, NULL, i, c, d.cols);
                w = bt__k_fp8_pack8<0>(fv, r, m);
                *reinterpret_cast<uint2 *>(d.q + i * d.cols + c) = w;
            }
            tile[lr][2 * cx] = w.x; tile[lr][2 * cx + 1] = w.y;
        }
        __syncthreads();
        bt__k_fp8_tile_col(d.qt, tile, r0, c0, d.rows, d.cols, tcol, tk);
        __syncthreads();
    }
    if (blockIdx.x < ntiles) flush_amax(ds[k], m);
}

/* v3's transpose store: bt__k_fp8_tile_col's bytes with the gather by byte permutes: each 16-byte
   store's 4 words from 16 tile words, 3 permutes a word (2 bytes of 2 rows, then the two pairs) */
__device__ __forceinline__ void tile_col_prmt(uint8_t *qt, const uint32_t (*tile)[17], int64_t r0, int64_t c0, int64_t rows, int64_t cols,
                                              int tcol, int tk) {
    const int64_t c = c0 + tcol, i0 = r0 + 16 * tk;
    if (c >= cols || i0 >= rows) return;
    const unsigned b = tcol & 3, sel = b | (b + 4) << 4;            /* byte b of the first word, then of the second */
    uint32_t o[4];
#pragma unroll
    for (int a = 0; a < 4; a++) {
        const uint32_t *w0 = &tile[16 * tk + 4 * a][tcol >> 2];
        const uint32_t lo = __byte_perm(w0[0], w0[17], sel), hi = __byte_perm(w0[34], w0[51], sel);
        o[a] = __byte_perm(lo, hi, 0x5410);
    }
    *reinterpret_cast<uint4 *>(qt + c * rows + i0) = make_uint4(o[0], o[1], o[2], o[3]);
}
/* v3 / v4: multi_cast with 32-bit tile index math (a launch's tiles < 2^31) and tile_col_prmt */
__global__ void __launch_bounds__(256) multi_cast32(const wdesc *ds, int nd, int ntiles) {
    __shared__ uint32_t tile[64][17];
    const int t = threadIdx.x, cx = t & 7, ry = t >> 3, tcol = t >> 2, tk = t & 3;
    int k = 0;
    unsigned m = 0, tc = 0, lt0 = 0;
    float r = 0.f;
    for (int tt = blockIdx.x; tt < ntiles; tt += gridDim.x) {
        int k0 = k;
        while (k + 1 < nd && ds[k + 1].tile0 <= tt) k++;            /* uniform over the block */
        if (k != k0 || tt == (int)blockIdx.x) {
            if (k != k0) { flush_amax(ds[k0], m); m = 0; }
            r = 1.f / *ds[k].scale_in;
            tc = (unsigned)((ds[k].cols + 63) / 64); lt0 = (unsigned)ds[k].tile0;
        }
        const wdesc &d = ds[k];
        const unsigned lt = (unsigned)tt - lt0, rb = lt / tc;
        const int64_t r0 = (int64_t)rb * 64, c0 = (int64_t)(lt - rb * tc) * 64;
        if (lt == 0 && t == 0) *d.scale_used = *d.scale_in;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int lr = ry + 32 * h;
            const int64_t i = r0 + lr, c = c0 + cx * 8;
            uint2 w = make_uint2(0u, 0u);
            if (i < d.rows && c < d.cols) {
                float fv[8];
                bt__k_fp8_vals8<T, BT_FP8_ACT_X>(fv, d.x, NULL, i, c, d.cols);
                w = bt__k_fp8_pack8<0>(fv, r, m);
                *reinterpret_cast<uint2 *>(d.q + i * d.cols + c) = w;
            }
            tile[lr][2 * cx] = w.x; tile[lr][2 * cx + 1] = w.y;
        }
        __syncthreads();
        tile_col_prmt(d.qt, tile, r0, c0, d.rows, d.cols, tcol, tk);
        __syncthreads();
    }
    if ((int)blockIdx.x < ntiles) flush_amax(ds[k], m);
}

struct model_w {
    int L;
    std::vector<wdesc> d[2];          /* [0] v0's outputs, [1] the candidate's */
    wdesc *dev[2];
    T *w;                             /* all the weights, one buffer (as flat_lowp) */
    int64_t n;
};
static int64_t tiles_of(const wdesc &d) { return (d.rows + 63) / 64 * ((d.cols + 63) / 64); }
static void make_model(model_w &m, int L, int64_t C, uint64_t seed) {
    const int64_t shp[4][2] = {{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}};
    m.L = L; m.n = 0;
    for (int l = 0; l < L; l++) for (int j = 0; j < 4; j++) m.n += shp[j][0] * shp[j][1];
    CK(cudaMalloc(&m.w, (size_t)m.n * 2));
    fill_bf16(m.w, m.n, seed, -0.08f, 0.08f);
    for (int v = 0; v < 2; v++) {
        uint8_t *q, *qt;
        float *f;
        CK(cudaMalloc(&q, (size_t)m.n)); CK(cudaMalloc(&qt, (size_t)m.n)); CK(cudaMalloc(&f, sizeof(float) * 8 * 4 * L));
        std::vector<float> init(8 * 4 * L, 0.f);
        for (int i = 0; i < 4 * L; i++) init[8 * i] = 0.09f / 448.f * (1.f + 0.1f * (i % 7));   /* a primed state's scale (near enough) */
        CK(cudaMemcpy(f, init.data(), sizeof(float) * init.size(), cudaMemcpyHostToDevice));
        int64_t off = 0;
        for (int l = 0; l < L; l++)
            for (int j = 0; j < 4; j++) {
                wdesc d;
                d.x = m.w + off; d.q = q + off; d.qt = qt + off;
                float *slot = f + 8 * (4 * l + j);
                d.scale_in = slot; d.scale_used = slot + 1; d.amax_acc = (unsigned *)(slot + 2);
                d.rows = shp[j][0]; d.cols = shp[j][1]; d.tile0 = 0;
                m.d[v].push_back(d);
                off += d.rows * d.cols;
            }
        CK(cudaMalloc(&m.dev[v], sizeof(wdesc) * m.d[v].size()));
    }
}
/* the tile offsets of ds[k0 .. k0 + n) in one index space, uploaded at dev + k0 */
static int64_t index_space(model_w &m, int v, int k0, int n) {
    int64_t tiles = 0;
    for (int k = k0; k < k0 + n; k++) { m.d[v][k].tile0 = tiles; tiles += tiles_of(m.d[v][k]); }
    CK(cudaMemcpy(m.dev[v] + k0, &m.d[v][k0], sizeof(wdesc) * n, cudaMemcpyHostToDevice));
    return tiles;
}
static void run(const char *ver, model_w &m, int v, cudaStream_t s) {
    const int nw = 4 * m.L;
    if (!strcmp(ver, "v0")) {
        for (int k = 0; k < nw; k++) {
            const wdesc &d = m.d[v][k];
            bt_k_fp8_cast(BT_BF16, BT_F8E4M3, d.q, d.qt, d.x, d.rows, d.cols, NULL, d.scale_in, (float *)d.scale_used, (float *)d.amax_acc, s);
        }
    } else if (!strcmp(ver, "v1")) {
        for (int l = 0; l < m.L; l++) {
            int64_t tiles = 0;
            for (int k = 4 * l; k < 4 * l + 4; k++) tiles += tiles_of(m.d[v][k]);
            multi_cast<<<bt__k_blocks(tiles * 256, 256), 256, 0, s>>>(m.dev[v] + 4 * l, 4, tiles);
        }
    } else if (!strcmp(ver, "v3")) {                               /* the descriptors: each weight its own index space */
        for (int k = 0; k < nw; k++) {
            const int64_t tiles = tiles_of(m.d[v][k]);
            multi_cast32<<<bt__k_blocks(tiles * 256, 256), 256, 0, s>>>(m.dev[v] + k, 1, (int)tiles);
        }
    } else if (!strcmp(ver, "v4")) {
        int64_t tiles = 0;
        for (int k = 0; k < nw; k++) tiles += tiles_of(m.d[v][k]);
        multi_cast32<<<bt__k_blocks(tiles * 256, 256), 256, 0, s>>>(m.dev[v], nw, (int)tiles);
    } else if (!strcmp(ver, "v2")) {
        int64_t tiles = 0;
        for (int k = 0; k < nw; k++) tiles += tiles_of(m.d[v][k]);
        multi_cast<<<bt__k_blocks(tiles * 256, 256), 256, 0, s>>>(m.dev[v], nw, tiles);
    } else {                                                         /* copy: the weights into q and q^T's bytes */
        CK(cudaMemcpyAsync(m.d[v][0].q, m.w, (size_t)m.n, cudaMemcpyDeviceToDevice, s));
        CK(cudaMemcpyAsync(m.d[v][0].qt, (const char *)m.w + m.n, (size_t)m.n, cudaMemcpyDeviceToDevice, s));
    }
    CK(cudaGetLastError());
}

int main(void) {
    bt_k_init(0);
    cudaStream_t s = (cudaStream_t)0;
    struct { const char *what; int L; int64_t C; } cases[] = {{"GPT-2 1.5B (d48)", 48, 1600}, {"GPT-2 124M (d12)", 12, 768}};
    const char *vers[] = {"v0", "v1", "v2", "v3", "v4", "copy"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        model_w m;
        make_model(m, cases[c].L, cases[c].C, 11 + c);
        for (int v = 0; v < 2; v++) {                                 /* v1's index spaces: each layer's own */
            for (int l = 0; l < m.L; l++) index_space(m, v, 4 * l, 4);
        }
        printf("%s: %d layers' weights, %lld elements\n", cases[c].what, m.L, (long long)m.n);
        for (size_t k = 0; k < sizeof vers / sizeof vers[0]; k++) {
            const char *ver = vers[k];
            if (!strcmp(ver, "v2") || !strcmp(ver, "v4")) index_space(m, 1, 0, 4 * m.L);
            else if (!strcmp(ver, "v3")) for (int k = 0; k < 4 * m.L; k++) index_space(m, 1, k, 1);
            else if (!strcmp(ver, "v1")) for (int l = 0; l < m.L; l++) index_space(m, 1, 4 * l, 4);
            const char *check = "";
            if (strcmp(ver, "copy")) {
                for (int v = 0; v < 2; v++) {                         /* amaxes to 0, then one call each */
                    for (const wdesc &d : m.d[v]) { CK(cudaMemset(d.amax_acc, 0, 4)); CK(cudaMemset(d.scale_used, 0, 4)); }
                    CK(cudaMemset(m.d[v][0].q, 0, (size_t)m.n)); CK(cudaMemset(m.d[v][0].qt, 0, (size_t)m.n));
                }
                run("v0", m, 0, s);
                run(ver, m, 1, s);
                CK(cudaDeviceSynchronize());
                long bad = differ(m.d[0][0].q, m.d[1][0].q, (size_t)m.n) + differ(m.d[0][0].qt, m.d[1][0].qt, (size_t)m.n);
                for (size_t i = 0; i < m.d[0].size(); i++) bad += differ(m.d[0][i].scale_used, m.d[1][i].scale_used, 8);
                check = bad ? "DIFFERS from v0" : "the same bytes as v0 (q, q^T, scales, amaxes)";
            }
            const double us = median_us([&] { run(ver, m, 1, s); }, s);
            printf("  %-4s  %9.1f us a step  %6.1f us a layer  %6.0f GB/s  %s\n", ver, us, us / m.L, 4.0 * m.n / (us * 1e-6) / 1e9, check);
        }
        for (int k = 0; k < 4 * m.L; k++) index_space(m, 1, k, 1);  /* each weight alone: v0 against v3 by shape */
        for (int j = 0; j < 4; j++) {
            const wdesc &d = m.d[1][j];
            double us[2];
            for (int u = 0; u < 2; u++)
                us[u] = median_us([&] {
                    for (int l = 0; l < m.L; l++) {
                        const wdesc &e = m.d[1][4 * l + j];
                        if (!u) bt_k_fp8_cast(BT_BF16, BT_F8E4M3, e.q, e.qt, e.x, e.rows, e.cols, NULL, e.scale_in, e.scale_used, (float *)e.amax_acc, s);
                        else multi_cast32<<<bt__k_blocks(tiles_of(e) * 256, 256), 256, 0, s>>>(m.dev[1] + 4 * l + j, 1, (int)tiles_of(e));
                    }
                }, s);
            printf("  [%lld, %lld] x %d: v0 %6.1f us a weight (%4.0f GB/s), v3 %6.1f (%4.0f GB/s)\n", (long long)d.rows, (long long)d.cols, m.L,
                   us[0] / m.L, 4.0 * d.rows * d.cols * m.L / (us[0] * 1e-6) / 1e9, us[1] / m.L, 4.0 * d.rows * d.cols * m.L / (us[1] * 1e-6) / 1e9);
        }
    }
    {   /* activations' shapes, 8 tensors in turn (210 MB and more: out of L2), v0 against v3 */
        const int64_t shp[3][2] = {{8192, 1600}, {8192, 6400}, {16384, 768}};
        for (int j = 0; j < 3; j++) {
            const int64_t rows = shp[j][0], cols = shp[j][1], n = rows * cols, tiles = (rows / 64) * ((cols + 63) / 64);
            T *x;
            uint8_t *q, *qt;
            float *f;
            CK(cudaMalloc(&x, (size_t)n * 2 * 8)); CK(cudaMalloc(&q, (size_t)n * 8)); CK(cudaMalloc(&qt, (size_t)n * 8)); CK(cudaMalloc(&f, 64 * 4));
            fill_bf16(x, n * 8, 77 + j, -3.f, 3.f);
            const float init[16] = {3.f / 448.f, 0, 0, 0, 0, 0, 0, 0, 3.f / 448.f, 0, 0, 0, 0, 0, 0, 0};
            CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
            wdesc *dd;
            CK(cudaMalloc(&dd, sizeof(wdesc) * 8));
            wdesc hd[8];
            for (int b = 0; b < 8; b++) {
                hd[b].x = x + b * n; hd[b].q = q + b * n; hd[b].qt = qt + b * n; hd[b].scale_in = f + 8;
                hd[b].scale_used = f + 9; hd[b].amax_acc = (unsigned *)(f + 10); hd[b].rows = rows; hd[b].cols = cols; hd[b].tile0 = 0;
            }
            CK(cudaMemcpy(dd, hd, sizeof hd, cudaMemcpyHostToDevice));
            CK(cudaMemset(f + 2, 0, 4));
            bt_k_fp8_cast(BT_BF16, BT_F8E4M3, q + 7 * n, qt + 7 * n, x, rows, cols, NULL, f, f + 1, f + 2, s);   /* v0 of tensor 0 into slot 7 */
            multi_cast32<<<bt__k_blocks(tiles * 256, 256), 256, 0, s>>>(dd, 1, (int)tiles);
            CK(cudaDeviceSynchronize());
            long bad = differ(q + 7 * n, q, (size_t)n) + differ(qt + 7 * n, qt, (size_t)n) + differ(f + 1, f + 9, 8);
            double us[3];
            for (int u = 0; u < 3; u++)
                us[u] = median_us([&] {
                    for (int b = 0; b < 8; b++) {
                        if (u == 0) bt_k_fp8_cast(BT_BF16, BT_F8E4M3, q + b * n, qt + b * n, x + b * n, rows, cols, NULL, f, f + 1, f + 2, s);
                        else if (u == 1) multi_cast32<<<bt__k_blocks(tiles * 256, 256), 256, 0, s>>>(dd + b, 1, (int)tiles);
                        else CK(cudaMemcpyAsync(q + (b % 4) * 2 * n, x + b * n, (size_t)n * 2, cudaMemcpyDeviceToDevice, s));
                    }
                }, s);
            printf("activation [%lld, %lld] x 8 in turn: v0 %6.1f us (%4.0f GB/s), v3 %6.1f (%4.0f GB/s) %s, copy %6.1f (%4.0f GB/s)\n", (long long)rows,
                   (long long)cols, us[0] / 8, 4.0 * n * 8 / (us[0] * 1e-6) / 1e9, us[1] / 8, 4.0 * n * 8 / (us[1] * 1e-6) / 1e9,
                   bad ? "DIFFERS from v0" : "(the same bytes)", us[2] / 8, 4.0 * n * 8 / (us[2] * 1e-6) / 1e9);
            CK(cudaFree(x)); CK(cudaFree(q)); CK(cudaFree(qt)); CK(cudaFree(f)); CK(cudaFree(dd));
        }
    }
    return 0;
}
