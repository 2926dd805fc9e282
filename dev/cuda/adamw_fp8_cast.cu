/* adamw_fp8_cast: AdamW's update of an FP8 linear's weight with the weight's e4m3 cast folded in.
   An fp8 step casts each block linear's weight (its bf16 copy: the fp32 weights' high halves) to e4m3
   q and q^T in the forward, 4 bytes an element over a tensor the update wrote just before. With the
   delayed recipe the scale is known at the update (the states roll first, docs/fp8.md), so the
   update can write q and q^T itself: 2 bytes an element more in its pass, the cast's 4 gone. What
   that is worth end to end is bounded by bench/RESULTS.md#fp8 (the weights' casts made free: +1.3%
   to +1.5% at d48 B 8); this ladder measures what the fold costs the update.
     v0  bt_k_adamw (halves, bf16 gradient) then bt_k_fp8_cast of the new high halves (delayed
         scale: q, q^T, the scale used, the amax): what ships
     v1  one kernel: a block updates a 64 x 64 tile of the weight (each thread 8 consecutive
         elements of two rows: the halves, gradient, m and v as 16-byte loads), writes the halves, m,
         v and the 8 e4m3 bytes of each row, and q^T through a shared tile (bt__k_fp8_tile_col, the
         vector cast's transpose); the amax from the same values, one atomic a block
     adamw  bt_k_adamw alone (what v1 adds to it)
   Each v1 output (halves, m, v, q, q^T, the scale used, the amax) is checked against v0's byte for
   byte from the same state, and every version timed with CUDA events (the median of 50 calls;
   the state moves with each call, as in training) at GPT-2 1.5B's four weights a layer.
   Measured (H200, 2026-12-04), us, v0 / v1 / AdamW alone: qkv [4800, 1600] 71.5 / 62.6 / 59.2;
   attention projection [1600, 1600] 25.1 / 21.8 / 17.4; fc [6400, 1600] 91.6 / 81.3 / 76.1; MLP
   projection [1600, 6400] 91.2 / 81.2 / 76.1. Every v1 output the same bytes as v0's. A d48 layer:
   279.4 against 247.0 us (AdamW alone 228.7: the fold adds 18.3 us where the cast takes 50.7), 1.56
   ms a step less over 48 layers, at 3.3-3.5 TB/s. In the model the casts cost less than here
   (bench/RESULTS.md#fp8: made free, +1.3-1.5%, ~1.7 ms), so the fold would give ~+0.7% at d48.
   Not in the library. What it needs there: (1) one launch a gradient unit for its FP8 weights, the
   flat update skipping them (the unit's biases and norms lie between them: a launch per piece
   would cost ~0.6 ms at d48); (2) the forward taking q and q^T from the update; (3) memory: q and
   q^T live from the update to their layer's forward. A CUDA graph replays fixed addresses, so
   across the step boundary they would be buffers of their own, 1 byte a parameter more at the
   peak than the q^T the forward keeps now (1.4 GB at d48, where fp8 is 1.0 GB under bf16's peak):
   the update would have to run at the start of the next step's graph (its gradients held over the
   boundary, when no activation is), or keep only q^T (the forward transposing it into q: ~+0.4%).
   Build: make dev (build/dev/adamw_fp8_cast); run: build/dev/adamw_fp8_cast */
#include "common.cuh"
typedef __nv_bfloat16 T;

struct hyper { float lr, b1, b2, eps, wd, bc1, bc2; };
/* v1: the tile (r0, c0) of a [rows, cols] weight per block iteration; cols % 8 == 0, rows % 16 == 0 */
__global__ void __launch_bounds__(256) adamw_cast(uint16_t *hi, uint16_t *lo, const T *g, float *m, float *v, uint8_t *q, uint8_t *qt,
                                                  int64_t rows, int64_t cols, hyper h, const float *scale_in, float *scale_used,
                                                  unsigned *amax_acc) {
    __shared__ uint32_t tile[64][17];
    const float s = *scale_in, r = 1.f / s;
    const int t = threadIdx.x, cx = t & 7, ry = t >> 3, tcol = t >> 2, tk = t & 3;
    const int64_t tc = (cols + 63) / 64, ntiles = (rows + 63) / 64 * tc;
    unsigned amax = 0;
    for (int64_t tt = blockIdx.x; tt < ntiles; tt += gridDim.x) {
        const int64_t r0 = tt / tc * 64, c0 = tt % tc * 64;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int lr = ry + 32 * half;
            const int64_t i = r0 + lr, c = c0 + cx * 8, at = i * cols + c;
            uint2 w = make_uint2(0u, 0u);
            if (i < rows && c < cols) {
                uint16_t hh[8], ll[8];
                T gg[8];
                float mm[8], vv[8], pp[8], f[8];
                *reinterpret_cast<uint4 *>(hh) = *reinterpret_cast<const uint4 *>(hi + at);
                *reinterpret_cast<uint4 *>(ll) = *reinterpret_cast<const uint4 *>(lo + at);
                bt__k_ld16(gg, g + at);
                *reinterpret_cast<float4 *>(mm) = *reinterpret_cast<const float4 *>(m + at);
                *reinterpret_cast<float4 *>(mm + 4) = *reinterpret_cast<const float4 *>(m + at + 4);
                *reinterpret_cast<float4 *>(vv) = *reinterpret_cast<const float4 *>(v + at);
                *reinterpret_cast<float4 *>(vv + 4) = *reinterpret_cast<const float4 *>(v + at + 4);
#pragma unroll
                for (int e = 0; e < 8; e++) {          /* bt__k_adamw_kernel's arithmetic, in its order */
                    pp[e] = bt__f32_join16(hh[e], ll[e]);
                    float gi = bt__k_tof(gg[e]) * 1.f;   /* no gradient scale: sc = 1 */
                    mm[e] = h.b1 * mm[e] + (1.f - h.b1) * gi;
                    vv[e] = h.b2 * vv[e] + (1.f - h.b2) * gi * gi;
                    pp[e] -= h.lr * ((mm[e] / h.bc1) / (sqrtf(vv[e] / h.bc2) + h.eps) + h.wd * pp[e]);
                    hh[e] = bt__f32_hi16(pp[e]); ll[e] = bt__f32_lo16(pp[e]);
                    f[e] = bt__k_tof(__ushort_as_bfloat16(hh[e]));   /* the bf16 weight the forward would cast */
                }
                *reinterpret_cast<uint4 *>(hi + at) = *reinterpret_cast<const uint4 *>(hh);
                *reinterpret_cast<uint4 *>(lo + at) = *reinterpret_cast<const uint4 *>(ll);
                *reinterpret_cast<float4 *>(m + at) = *reinterpret_cast<const float4 *>(mm);
                *reinterpret_cast<float4 *>(m + at + 4) = *reinterpret_cast<const float4 *>(mm + 4);
                *reinterpret_cast<float4 *>(v + at) = *reinterpret_cast<const float4 *>(vv);
                *reinterpret_cast<float4 *>(v + at + 4) = *reinterpret_cast<const float4 *>(vv + 4);
                w = bt__k_fp8_pack8<0>(f, r, amax);
                *reinterpret_cast<uint2 *>(q + at) = w;
            }
            tile[lr][2 * cx] = w.x; tile[lr][2 * cx + 1] = w.y;
        }
        __syncthreads();
        bt__k_fp8_tile_col(qt, tile, r0, c0, rows, cols, tcol, tk);
        __syncthreads();                                /* the next tile overwrites it */
    }
    if (blockIdx.x == 0 && t == 0) *scale_used = s;
    amax = bt__k_block_umax(amax);
    if (t == 0 && amax) atomicMax(amax_acc, amax);
}

struct state { uint16_t *hi, *lo; float *m, *v; uint8_t *q, *qt; float *f; };   /* f: [0] scale, [1] scale used, [2] amax */
static void run(const char *ver, state st, const T *g, int64_t rows, int64_t cols, int step, cudaStream_t s) {
    const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    const int64_t n = rows * cols;
    if (!strcmp(ver, "v1")) {
        hyper h = {lr, b1, b2, eps, wd, (float)(1.0 - pow((double)b1, (double)step)), (float)(1.0 - pow((double)b2, (double)step))};
        int sms = 0;
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        const unsigned grid = (unsigned)std::min<int64_t>((rows + 63) / 64 * ((cols + 63) / 64), (int64_t)sms * 16);
        adamw_cast<<<grid, 256, 0, s>>>(st.hi, st.lo, g, st.m, st.v, st.q, st.qt, rows, cols, h, st.f, st.f + 1, (unsigned *)(st.f + 2));
        CK(cudaGetLastError());
        return;
    }
    bt_k_adamw(NULL, g, BT_BF16, st.m, st.v, n, lr, b1, b2, eps, wd, NULL, 0, 0, step, NULL, st.hi, st.lo, s);
    if (!strcmp(ver, "v0")) bt_k_fp8_cast(BT_BF16, BT_F8E4M3, st.q, st.qt, st.hi, rows, cols, NULL, st.f, st.f + 1, st.f + 2, s);
}
int main(void) {
    bt_k_init(0);
    cudaStream_t s = (cudaStream_t)0;
    struct { const char *what; int64_t rows, cols; } cases[] = {
        {"qkv [4800, 1600]", 4800, 1600}, {"attention projection [1600, 1600]", 1600, 1600},
        {"fc [6400, 1600]", 6400, 1600}, {"MLP projection [1600, 6400]", 1600, 6400},
    };
    const char *vers[] = {"v0", "v1", "adamw"};
    double sum[3] = {0, 0, 0};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int64_t rows = cases[k].rows, cols = cases[k].cols, n = rows * cols;
        T *g;
        float *wf;
        CK(cudaMalloc(&g, (size_t)n * 2)); CK(cudaMalloc(&wf, (size_t)n * 4));
        fill_bf16(g, n, 5 + k, -1e-2f, 1e-2f);
        state st[2];
        for (int j = 0; j < 2; j++) {
            CK(cudaMalloc(&st[j].hi, (size_t)n * 2)); CK(cudaMalloc(&st[j].lo, (size_t)n * 2));
            CK(cudaMalloc(&st[j].m, (size_t)n * 4)); CK(cudaMalloc(&st[j].v, (size_t)n * 4));
            CK(cudaMalloc(&st[j].q, (size_t)n)); CK(cudaMalloc(&st[j].qt, (size_t)n)); CK(cudaMalloc(&st[j].f, 16));
        }
        {   /* the same start for both: f32 weights ~U(-0.05, 0.05) split into halves, m and v from 3 updates */
            float *hw = (float *)malloc(sizeof(float) * (size_t)n);
            uint64_t x = 99 + k;
            for (int64_t i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; hw[i] = (float)((x >> 11) * (1.0 / 9007199254740992.0) - 0.5) * 0.1f; }
            CK(cudaMemcpy(wf, hw, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice));
            free(hw);
        }
        for (int j = 0; j < 2; j++) {
            bt_k_f32_split(wf, st[j].hi, st[j].lo, n, s);
            CK(cudaMemsetAsync(st[j].m, 0, (size_t)n * 4, s)); CK(cudaMemsetAsync(st[j].v, 0, (size_t)n * 4, s));
            for (int u = 1; u <= 3; u++) run("adamw", st[j], g, rows, cols, u, s);
            const float init[4] = {0.06f / 448.f, 0.f, 0.f, 0.f};
            CK(cudaMemcpy(st[j].f, init, sizeof init, cudaMemcpyHostToDevice));
        }
        run("v0", st[0], g, rows, cols, 4, s);
        run("v1", st[1], g, rows, cols, 4, s);
        CK(cudaDeviceSynchronize());
        long bad = differ(st[0].hi, st[1].hi, (size_t)n * 2) + differ(st[0].lo, st[1].lo, (size_t)n * 2) + differ(st[0].m, st[1].m, (size_t)n * 4) +
                   differ(st[0].v, st[1].v, (size_t)n * 4), badq = differ(st[0].q, st[1].q, (size_t)n) + differ(st[0].qt, st[1].qt, (size_t)n),
             badf = differ(st[0].f + 1, st[1].f + 1, 8);
        printf("%s: v1 against v0: %s (halves, m, v: %ld bytes differ; q, q^T: %ld; scale used, amax: %ld)\n", cases[k].what,
               bad || badq || badf ? "DIFFERS" : "the same bytes", bad, badq, badf);
        for (int i = 0; i < 3; i++) {
            int step = 5;
            const double us = median_us([&] { run(vers[i], st[0], g, rows, cols, step++, s); }, s);
            sum[i] += us;
            const int eb = vers[i][0] == 'a' ? 26 : vers[i][1] == '0' ? 30 : 28;   /* bytes an element moved */
            printf("  %-5s %7.1f us  %6.0f GB/s of %d bytes an element\n", vers[i], us, (double)n * eb / (us * 1e-6) / 1e9, eb);
        }
        CK(cudaFree(g)); CK(cudaFree(wf));
        for (int j = 0; j < 2; j++) {
            CK(cudaFree(st[j].hi)); CK(cudaFree(st[j].lo)); CK(cudaFree(st[j].m)); CK(cudaFree(st[j].v));
            CK(cudaFree(st[j].q)); CK(cudaFree(st[j].qt)); CK(cudaFree(st[j].f));
        }
    }
    printf("a d48 layer's four weights: v0 %.1f us, v1 %.1f us, AdamW alone %.1f us; x 48 layers: v0 %.2f ms, v1 %.2f ms (%.2f ms less)\n",
           sum[0], sum[1], sum[2], 48 * sum[0] / 1e3, 48 * sum[1] / 1e3, 48 * (sum[0] - sum[1]) / 1e3);
    return 0;
}
