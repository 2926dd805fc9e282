/* layernorm_backward_fp8: the layernorm backward whose gx (a residual stream's gradient) the FP8 linear
   before the norm casts to e5m2 in its own backward, with that cast's q written by the norm backward
   itself (bt_k_layernorm_backward_fp8, BT_FUSE_FP8_GRAD) against the backward then the cast:
     v0  bt_k_layernorm_backward (gx added into the residual's gradient, gw, gb, gx's column sums),
         then bt_k_fp8_cast of gx to e5m2 q and q^T: what the linear's backward ran before
     v1  bt_k_layernorm_backward_fp8 (the same, and q), then the copy's amax into the state's row
         (bt_k_fp8_amax of one float) and bt_k_fp8_transpose for q^T, with the memset of the copy's
         [scale, amax] first: what runs with the fusion
     v2  bt_k_layernorm_backward alone, v3 bt_k_layernorm_backward_fp8 alone: what writing q costs
         the backward's kernel
   Traffic per element: the backward reads g, x and the residual's gradient and writes gx (8 bytes);
   the cast reads gx and writes q and q^T (4); v1 writes q in the backward (1) and the transpose
   reads it and writes q^T (2): 11 bytes where v0 moves 12.
   At the default d12 run's micro-batch [262144, 768] (the warp-a-row kernel; every tensor past the
   50 MB L2) and d48 B 8's [8192, 1600] (block-a-row; 26 MB tensors, warm in L2 here). Checked: v1's
   q, q^T, scale used and amax against v0's, every byte, from the same gx.
   Measured (H200, 2026-12-04, two runs in one call): [262144, 768] v0 681.3, v1 711.3, v2 453.7, v3
   585.2 us; [8192, 1600] v0 92.2, v1 112.8, v2 74.0, v3 96.3 (the same bytes). Writing q costs the
   backward's kernel 131 us where q's 201 MB at its own 3.55 TB/s would take 57, and the transpose
   takes ~115: the fused pair is 4% (d12) and 22% (d48) slower than the backward then the cast.
   Build: make dev (build/dev/layernorm_backward_fp8); run: build/dev/layernorm_backward_fp8 */
#include "common.cuh"

static void ladder(int64_t R, int64_t C) {
    cudaStream_t s = (cudaStream_t)0;
    const size_t n = (size_t)(R * C);
    __nv_bfloat16 *g, *x, *w, *gx, *gx0, *gw, *gb;
    float *mean, *rstd, *cs, *f;
    uint8_t *q[2], *qt[2];
    CK(cudaMalloc(&g, 2 * n)); CK(cudaMalloc(&x, 2 * n)); CK(cudaMalloc(&gx, 2 * n)); CK(cudaMalloc(&gx0, 2 * n));
    CK(cudaMalloc(&w, 2 * C)); CK(cudaMalloc(&gw, 2 * C)); CK(cudaMalloc(&gb, 2 * C));
    CK(cudaMalloc(&mean, 4 * R)); CK(cudaMalloc(&rstd, 4 * R)); CK(cudaMalloc(&cs, 4 * C)); CK(cudaMalloc(&f, 64 * 4));
    for (int v = 0; v < 2; v++) { CK(cudaMalloc(&q[v], n)); CK(cudaMalloc(&qt[v], n)); }
    fill_bf16(g, (int64_t)n, 3, -1e-3f, 1e-3f); fill_bf16(x, (int64_t)n, 5, -2.f, 2.f); fill_bf16(gx0, (int64_t)n, 7, -1e-3f, 1e-3f);
    fill_bf16(w, C, 11, 0.5f, 1.5f);
    CK(cudaMemset(gw, 0, 2 * C)); CK(cudaMemset(gb, 0, 2 * C));
    __nv_bfloat16 *y;
    CK(cudaMalloc(&y, 2 * n));
    bt_k_layernorm(BT_BF16, y, mean, rstd, x, w, NULL, R, C, 1e-5f, s);   /* mean, rstd of x */
    CK(cudaFree(y));
    /* f: [0] the state's row [amax, scale, ...], [8] v0's [scale used, amax], [12] v1's copy [scale used, amax] */
    float init[64] = {0.f};
    init[1] = 3e-3f / 57344.f;
    CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
    auto v0 = [&] {
        bt_k_layernorm_backward(BT_BF16, gx, 1, gw, gb, cs, g, x, w, mean, rstd, R, C, s);
        bt_k_fp8_cast(BT_BF16, BT_F8E5M2, q[0], qt[0], gx, R, C, NULL, f + 1, f + 8, f + 9, s);
    };
    auto v1 = [&] {
        CK(cudaMemsetAsync(f + 12, 0, 8, s));
        if (!bt_k_layernorm_backward_fp8(BT_BF16, BT_F8E5M2, q[1], f + 1, f + 12, f + 13, gx, 1, gw, gb, cs, g, x, w, mean, rstd, R, C, s)) {
            printf("  v1: the fused kernel did not take this shape\n");
            exit(1);
        }
        bt_k_fp8_amax(BT_F32, f, f + 13, 1, s);
        bt_k_fp8_transpose(qt[1], q[1], R, C, s);
    };
    /* the check: both from the same gx */
    CK(cudaMemcpy(gx, gx0, 2 * n, cudaMemcpyDeviceToDevice)); v0();
    CK(cudaMemcpy(gx, gx0, 2 * n, cudaMemcpyDeviceToDevice)); v1();
    CK(cudaDeviceSynchronize());
    float h[16];
    CK(cudaMemcpy(h, f + 8, sizeof h, cudaMemcpyDeviceToHost));
    printf("[%lld, %lld] bf16, e5m2: q %ld, q^T %ld bytes differ; scale used %g / %g, amax %g / %g (v0 / v1)\n", (long long)R,
           (long long)C, differ(q[0], q[1], n), differ(qt[0], qt[1], n), h[0], h[4], h[1], h[5]);
    printf("  v0 %8.1f us  (the backward, then the cast)\n", median_us(v0, s));
    printf("  v1 %8.1f us  (the backward writing q, the amax, the transpose)\n", median_us(v1, s));
    printf("  v2 %8.1f us  (the backward alone)\n",
           median_us([&] { bt_k_layernorm_backward(BT_BF16, gx, 1, gw, gb, cs, g, x, w, mean, rstd, R, C, s); }, s));
    printf("  v3 %8.1f us  (the backward writing q alone)\n", median_us([&] {
               bt_k_layernorm_backward_fp8(BT_BF16, BT_F8E5M2, q[1], f + 1, f + 12, f + 13, gx, 1, gw, gb, cs, g, x, w, mean, rstd, R, C, s);
           }, s));
    CK(cudaFree(g)); CK(cudaFree(x)); CK(cudaFree(gx)); CK(cudaFree(gx0)); CK(cudaFree(w)); CK(cudaFree(gw)); CK(cudaFree(gb));
    CK(cudaFree(mean)); CK(cudaFree(rstd)); CK(cudaFree(cs)); CK(cudaFree(f));
    for (int v = 0; v < 2; v++) { CK(cudaFree(q[v])); CK(cudaFree(qt[v])); }
}

int main(void) {
    bt_k_init(0);
    ladder(262144, 768);
    ladder(8192, 1600);
    return 0;
}
