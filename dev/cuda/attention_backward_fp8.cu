/* attention_backward_fp8: the FP8 qkv projection's gradient bytes written by the fused attention
   backward itself (bt_k_attention_backward_fp8, BT_FUSE_FP8_GRAD) against the backward writing
   bf16 then the projection's gradient cast (bt_k_fp8_cast_act with BT_FP8_ACT_X: q, q^T and the
   bias's column sums in one pass), at GPT-2 d12's shapes (H 12, D 64, T 1024, causal, bf16, rows
   of the packed [B T, 3 C] qkv gradient):
     v0  the path that ships without the fusion: the backward (no column sums) writes gqkv in bf16,
         the cast reads it and writes q, q^T and the 64-row column sums
     v1  the fusion: the backward writes q (e5m2) and its column sums, the byte transpose makes q^T
     v2  v1's backward alone, without the column sums
     v3  v0's backward alone; v4 v0's backward with the column sums (what bf16 training runs)
     c   the cast alone; t the transpose alone
   v1's q, q^T and amax are checked against v0's, every byte. Timed with CUDA events (the median of
   50 calls).
   Build: make dev (build/dev/attention_backward_fp8); run: build/dev/attention_backward_fp8 [B] */
#include "common.cuh"

typedef __nv_bfloat16 T;

int main(int argc, char **argv) {
    bt_k_init(0);
    cudaStream_t s = (cudaStream_t)0;
    const int64_t B = argc > 1 ? atoll(argv[1]) : 64, H = 12, D = 64, Tn = 1024, C = H * D, W = 3 * C, R = B * Tn;
    T *qkv, *o, *go, *g16;
    uint8_t *q[2], *qt[2];
    float *lse, *cs, *cparts, *f;
    CK(cudaMalloc(&qkv, R * W * 2)); CK(cudaMalloc(&g16, R * W * 2)); CK(cudaMalloc(&o, R * C * 2)); CK(cudaMalloc(&go, R * C * 2));
    for (int k = 0; k < 2; k++) { CK(cudaMalloc(&q[k], R * W)); CK(cudaMalloc(&qt[k], R * W)); }
    CK(cudaMalloc(&lse, B * H * Tn * 4)); CK(cudaMalloc(&cs, W * 4)); CK(cudaMalloc(&cparts, (R + 63) / 64 * W * 4));
    CK(cudaMalloc(&f, 16 * sizeof(float)));
    fill_bf16(qkv, R * W, 3, -2.f, 2.f);
    fill_bf16(go, R * C, 5, -1e-3f, 1e-3f);
    const int64_t sp[3] = {Tn * W, D, W}, so[3] = {Tn * C, D, C};
    const float scale = 0.125f;
    bt_k_attention_strided(BT_BF16, o, so, lse, qkv, sp, qkv + C, sp, qkv + 2 * C, sp, B, H, H, Tn, D, scale, 1, BT_MATMUL_FP32, s);
    /* f [4 k ..]: path k's scale, scale used, amax bits */
    float init[16] = {0.f};
    for (int k = 0; k < 2; k++) { init[4 * k] = 1.f / 4096.f; init[4 * k + 1] = -1.f; }
    auto bwd16 = [&](float *colsum) {
        bt_k_attention_backward_colsum(BT_BF16, g16, sp, g16 + C, sp, g16 + 2 * C, sp, go, so, qkv, sp, qkv + C, sp, qkv + 2 * C, sp, o, so,
                                       lse, B, H, H, Tn, D, scale, 1, BT_MATMUL_FP32, colsum, s);
    };
    auto bwd8 = [&](float *colsum) {
        if (!bt_k_attention_backward_fp8(BT_BF16, q[1], sp, q[1] + C, sp, q[1] + 2 * C, sp, go, so, qkv, sp, qkv + C, sp, qkv + 2 * C, sp, o,
                                         so, lse, B, H, Tn, D, scale, colsum, f + 4, f + 5, f + 6, s)) {
            fprintf(stderr, "bt_k_attention_backward_fp8 did not run (needs the fused Hopper backward)\n");
            exit(1);
        }
    };
    auto cast = [&] { bt_k_fp8_cast_act(BT_BF16, BT_F8E5M2, BT_FP8_ACT_X, q[0], qt[0], cparts, g16, NULL, R, W, NULL, f, f + 1, f + 2, s); };
    auto tr = [&] { bt_k_fp8_transpose(qt[1], q[1], R, W, s); };
    auto run = [&](int ver) {
        if (ver == 0) { bwd16(NULL); cast(); }
        else if (ver == 1) { bwd8(cs); tr(); }
        else if (ver == 2) bwd8(NULL);
        else if (ver == 3) bwd16(NULL);
        else bwd16(cs);
    };
    CK(cudaMemcpy(f, init, sizeof init, cudaMemcpyHostToDevice));
    run(0); run(1);
    CK(cudaDeviceSynchronize());
    const long dq = differ(q[0], q[1], R * W), dqt = differ(qt[0], qt[1], R * W), df = differ(f + 1, f + 5, 8);
    printf("B %lld (rows %lld, qkv gradient [%lld, %lld]): v1 against v0: q %s, q^T %s, scale used and amax %s\n", (long long)B, (long long)R,
           (long long)R, (long long)W, dq ? "DIFFERS" : "the same bytes", dqt ? "DIFFERS" : "the same bytes", df ? "DIFFER" : "the same bits");
    const char *what[5] = {"bf16 backward, then the cast (q, q^T, column sums)", "e5m2 backward with column sums, then the transpose",
                           "e5m2 backward alone", "bf16 backward alone", "bf16 backward with column sums"};
    for (int ver = 0; ver < 5; ver++) printf("  v%d  %8.1f us  %s\n", ver, median_us([&] { run(ver); }, s), what[ver]);
    printf("  c   %8.1f us  the cast alone\n", median_us(cast, s));
    printf("  t   %8.1f us  the transpose alone\n", median_us(tr, s));
    CK(cudaFree(qkv)); CK(cudaFree(g16)); CK(cudaFree(o)); CK(cudaFree(go)); CK(cudaFree(lse)); CK(cudaFree(cs)); CK(cudaFree(cparts));
    CK(cudaFree(f));
    for (int k = 0; k < 2; k++) { CK(cudaFree(q[k])); CK(cudaFree(qt[k])); }
    return (dq || dqt || df) ? 1 : 0;
}
