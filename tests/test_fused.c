/* test_fused.c - the fused ops against the unfused ops they replace, forward and backward, on every
   device the binary sees (this file is also compiled as CUDA by test_fused_gpu.cu, where the GPU
   runs too): bt_linear_cross_entropy vs bt_cross_entropy(bt_linear(..)), with padded classes, an
   ignored target, chunks of several sizes, gradients into existing (sink) and fresh .grad. */
#ifndef TEST_FUSED_GPU
#ifndef TEST_FUSED_GPU   /* the CPU build reads an internal (bt__lxent_rows): it compiles the implementations itself */
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#endif
#include "bt_autograd.h"
#include "tests/bt_test.h"
#endif
#pragma GCC diagnostic ignored "-Wclobbered"   /* BT_EXPECT_ERROR's setjmp: a false positive */
#include <stdlib.h>
#include <stdint.h>

static uint64_t seed_ctr = 9000;
/* a random leaf on dev in dt, owned by the caller (values from the same Philox stream on every device) */
static bt_tensor *rleaf(bt_shape s, bt_dtype dt, bt_device dev, double std, int grad) {
    bt_scope_begin();
    bt_tensor *t = bt_keep(bt_cast(bt_to(bt_scale(bt_randn(s, BT_F32, bt_cpu(), seed_ctr++), std), dev), dt));
    bt_scope_end();
    if (t->grad_fn) bt_free_graph(t);
    if (grad) bt_set_requires_grad(t, 1);
    return t;
}
/* loss, dx, dw of the fused op and of the unfused pair on (dev, dt); chunk bytes set per case */
static void classifier_case(bt_device dev, bt_dtype dt, int64_t N, int64_t C, int64_t V, int64_t Vp, size_t chunk, int sink,
                            double tol) {
    bt_tensor *x1 = rleaf(bt_shape3(2, N / 2, C), dt, dev, 1.0, 1), *w1 = rleaf(bt_shape2(Vp, C), dt, dev, 0.3, 1);
    bt_tensor *x2 = rleaf(bt_shape3(2, N / 2, C), dt, dev, 1.0, 1), *w2 = rleaf(bt_shape2(Vp, C), dt, dev, 0.3, 1);
    bt_scope_begin();
    bt_copy_(x2, x1); bt_copy_(w2, w1);
    int32_t *t = (int32_t *)malloc(sizeof(int32_t) * (size_t)N);
    for (int64_t i = 0; i < N; i++) t[i] = (int32_t)(bt_philox_uniform(seed_ctr, (uint64_t)i) * (double)V);
    t[3] = -100;                                           /* an ignored row */
    bt_tensor *tg = bt_from_data(t, bt_shape2(2, N / 2), BT_I32, dev);
    if (sink) {                                            /* existing grads: the fused backward adds into them */
        bt_tensor *g1 = rleaf(bt_shape2(Vp, C), dt, dev, 0.01, 0), *g2 = rleaf(bt_shape2(Vp, C), dt, dev, 0.01, 0);
        bt_copy_(g2, g1);
        w1->grad = g1; w2->grad = g2;
    }
    size_t old = bt_linear_cross_entropy_chunk(chunk);
    bt_tensor *lf = bt_linear_cross_entropy(x1, w1, tg, V, -100);
    bt_linear_cross_entropy_chunk(old);
    bt_tensor *lu = bt_cross_entropy(bt_linear(x2, w2, NULL), tg, V, -100);
    double el = bt_test_relerr_t(lf, lu);
    bt_tensor *seed = bt_full(bt_shapev(0, NULL), 0.75, lf->dtype, dev);   /* an upstream gradient other than 1 */
    bt_backward_with(lf, seed); bt_backward_with(lu, seed);
    double ex = bt_test_relerr_t(x1->grad, x2->grad), ew = bt_test_relerr_t(w1->grad, w2->grad);
    char what[160];
    snprintf(what, sizeof what, "%s %s N %lld C %lld V %lld Vp %lld chunk %zu%s", bt_device_name(dev), bt_dtype_name(dt), (long long)N,
             (long long)C, (long long)V, (long long)Vp, chunk, sink ? " (sink)" : "");
    BT_CHECK(el < tol && ex < tol && ew < tol, "%s: loss %.3g dx %.3g dw %.3g (tolerance %.1g)", what, el, ex, ew, tol);
    if (bt_test_verbose()) printf("linear_cross_entropy %s: loss %.2e dx %.2e dw %.2e\n", what, el, ex, ew);
    free(t);
    bt_scope_end();
    bt_release(x1); bt_release(w1); bt_release(x2); bt_release(w2);
}

static void test_linear_cross_entropy(void) {
    int ndev = 1 + bt_cuda_device_count();
    for (int d = 0; d < ndev; d++) {
        bt_device dev = d == 0 ? bt_cpu() : bt_cuda_device(d - 1);
#ifdef TEST_FUSED_GPU
        if (d == 0) continue;                              /* the CPU test covers it */
#endif
        bt_dtype dts[2] = {dev.type == BT_CPU ? BT_F64 : BT_F32, BT_F32};
        for (int k = 0; k < 2; k++) {
            /* f64: the fused and unfused sums differ only in order; f32: chunked GEMMs on the GPU */
            double tol = dts[k] == BT_F64 ? BT_TOL_F64 : BT_TOL_F32;
            classifier_case(dev, dts[k], 40, 16, 50, 64, (size_t)64 * 8 * 7, 0, tol);   /* chunks of 7 (f64) or 14 (f32) rows */
            classifier_case(dev, dts[k], 40, 16, 64, 64, (size_t)1 << 30, 1, tol);          /* one chunk, sink */
            classifier_case(dev, dts[k], 40, 16, 50, 64, (size_t)1, 1, tol);                /* one row at a time */
        }
        if (dev.type == BT_GPU) {
            /* bf16: both sides round logits and their gradient to bf16; the GEMMs accumulate in fp32 */
            classifier_case(dev, BT_BF16, 512, 64, 1000, 1024, (size_t)1024 * 2 * 100, 1, BT_TOL_BF16);
            classifier_case(dev, BT_BF16, 512, 64, 1000, 1024, (size_t)1 << 30, 0, BT_TOL_BF16);
        }
    }
    /* errors */
    bt_scope_begin();
    bt_tensor *x = bt_randn(bt_shape2(4, 8), BT_F32, bt_cpu(), 1), *w = bt_randn(bt_shape2(16, 8), BT_F32, bt_cpu(), 2);
    int32_t bad[4] = {1, 2, 20, 3};
    bt_tensor *tg = bt_from_data(bad, bt_shape1(4), BT_I32, bt_cpu());
    BT_EXPECT_ERROR(bt_linear_cross_entropy(x, w, tg, 16, -1), "target 20 at position 2");
    BT_EXPECT_ERROR(bt_linear_cross_entropy(x, bt_randn(bt_shape2(16, 7), BT_F32, bt_cpu(), 3), tg, 16, -1), "needs last dim");
    BT_EXPECT_ERROR(bt_linear_cross_entropy(x, w, tg, 17, -1), "V = 17");
    bt_scope_end();
}

#ifndef TEST_FUSED_GPU
/* the classifier's rows split: the fewest chunks under the cap, equal, 64-row multiples when they fit */
static void test_lxent_rows(void) {
    const int64_t cases[][3] = {{16384, 10672, 8192}, {131072, 10672, 10112}, {40, 7, 7}, {40, 14, 14}, {5, 10, 5},
                                {0, 10, 0}, {1000, 1, 1}, {130, 64, 64}, {129, 64, 64}, {129, 50, 43}, {100000, 99999, 50048}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t N = cases[i][0], cap = cases[i][1], r = bt__lxent_rows(N, cap);
        const int64_t least = cap < 1 ? N : (N + cap - 1) / cap;   /* chunks a cap-sized split needs */
        BT_CHECK(r == cases[i][2], "N %lld cap %lld: %lld rows a chunk, expected %lld", (long long)N, (long long)cap, (long long)r,
                 (long long)cases[i][2]);
        BT_CHECK(r <= cap && (N == 0 || (N + r - 1) / r == least), "N %lld cap %lld: %lld rows breaks the cap or adds chunks",
                 (long long)N, (long long)cap, (long long)r);
    }
}

int main(void) {
    BT_RUN(test_lxent_rows);
    BT_RUN(test_linear_cross_entropy);
    return bt_test_summary("test_fused");
}
#endif
