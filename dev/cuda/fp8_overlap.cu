/* fp8_overlap: does a weight-gradient product leave the GPU room for a memory-bound kernel beside it?
   The FP8 backward's dw = g^T x (bt_k_matmul_fp8 of the e5m2 g^T [N, R] and the e4m3 x^T [K, R],
   split accumulation, bf16 out) at the default d12 run's micro-batch (R = 262,144 rows), for the
   qkv projection (N 2304, K 768) and fc (N 3072, K 768), each timed alone, then with a cast on a
   second stream (forked and joined with events, as a CUDA graph would hold them), then the two in
   one stream. Casts: the DGELU-folded one at [R, 3072] (bt_k_fp8_cast_act, q, q^T and the column
   sums) and the plain one at [R, 768]. If "together" is well under "one stream", the products
   leave SMs idle (their grids, their tails) that a second stream fills.
   Measured (H200, 2026-12-04; dw, cast, one stream, together, in us):
     qkv dw 521.1 with the DGELU cast 1,512.7: 2,010.8 in one stream, 2,225.6 together (214.8 slower)
     qkv dw 522.2 with the plain cast 239.8: 806.6, 800.8 (5.8 hidden)
     fc dw 748.0 with the DGELU cast 1,503.6: 2,225.1, 2,404.2 (179.1 slower)
     fc dw 740.5 with the plain cast 247.9: 1,019.7, 987.0 (32.7 hidden)
   Beside the DGELU cast both ran slower than one after the other; beside the plain cast little was
   hidden: no overlap to win in the FP8 backward this way.
   Build: make dev (build/dev/fp8_overlap); run: build/dev/fp8_overlap [R] */
#include "common.cuh"

typedef __nv_bfloat16 T;

int main(int argc, char **argv) {
    bt_k_init(0);
    const int64_t R = argc > 1 ? atoll(argv[1]) : 262144, C = 768, F = 3072;
    cudaStream_t s0 = bt_k_current_stream(0), s1, s2;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, j1, j2;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming)); CK(cudaEventCreateWithFlags(&j1, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&j2, cudaEventDisableTiming));
    uint8_t *gt, *xt, *q, *qt;
    T *dw, *x, *h;
    float *sc, *cs;
    CK(cudaMalloc(&gt, F * R)); CK(cudaMalloc(&xt, C * R)); CK(cudaMalloc(&dw, F * C * 2));
    CK(cudaMalloc(&x, R * F * 2)); CK(cudaMalloc(&h, R * F * 2)); CK(cudaMalloc(&q, R * F)); CK(cudaMalloc(&qt, R * F));
    CK(cudaMalloc(&sc, 16 * sizeof(float))); CK(cudaMalloc(&cs, (R + 63) / 64 * F * sizeof(float)));
    fill_bf16(x, R * F, 3, -1.f, 1.f);
    fill_bf16(h, R * F, 5, -2.f, 2.f);
    CK(cudaMemset(gt, 0x38, F * R)); CK(cudaMemset(xt, 0x30, C * R));   /* small finite fp8 values */
    const float one[16] = {1.f, 0.f, 0.f, 0.f, 1.f, 0.f, 0.f, 0.f, 1.f / 64, 0.f, 0.f, 0.f, 1.f / 64, 0.f, 0.f, 0.f};
    CK(cudaMemcpy(sc, one, sizeof one, cudaMemcpyHostToDevice));
    const int64_t Ns[2] = {2304, 3072};
    for (int pi = 0; pi < 2; pi++) {
        const int64_t N = Ns[pi];
        auto gemm = [&](cudaStream_t s) {
            bt_k_matmul_fp8(BT_BF16, dw, gt, BT_F8E5M2, sc, xt, BT_F8E4M3, sc + 4, NULL, NULL, N, C, R, 0, s);
        };
        for (int ci = 0; ci < 2; ci++) {
            auto cast = [&](cudaStream_t s) {
                if (ci == 0) bt_k_fp8_cast_act(BT_BF16, BT_F8E5M2, BT_FP8_ACT_DGELU, q, qt, cs, x, h, R, F, NULL, sc + 8, sc + 9, sc + 10, s);
                else bt_k_fp8_cast_act(BT_BF16, BT_F8E5M2, BT_FP8_ACT_X, q, qt, cs, x, NULL, R, C, NULL, sc + 12, sc + 13, sc + 14, s);
            };
            const double tg = median_us([&] { gemm(s0); }, s0), tc = median_us([&] { cast(s0); }, s0);
            const double ts = median_us([&] { gemm(s0); cast(s0); }, s0);
            const double tt = median_us([&] {
                CK(cudaEventRecord(fork, s0));
                CK(cudaStreamWaitEvent(s1, fork, 0)); CK(cudaStreamWaitEvent(s2, fork, 0));
                gemm(s1); cast(s2);
                CK(cudaEventRecord(j1, s1)); CK(cudaEventRecord(j2, s2));
                CK(cudaStreamWaitEvent(s0, j1, 0)); CK(cudaStreamWaitEvent(s0, j2, 0));
            }, s0);
            printf("dw [%lld, %lld] over %lld rows %8.1f us; %s cast %8.1f us; one stream %8.1f us; together %8.1f us (%.1f us hidden)\n",
                   (long long)N, (long long)C, (long long)R, tg, ci == 0 ? "DGELU [R, 3072]" : "plain [R, 768]  ", tc, ts, tt, ts - tt);
        }
    }
    CK(cudaFree(gt)); CK(cudaFree(xt)); CK(cudaFree(dw)); CK(cudaFree(x)); CK(cudaFree(h)); CK(cudaFree(q)); CK(cudaFree(qt));
    CK(cudaFree(sc)); CK(cudaFree(cs));
    return 0;
}
