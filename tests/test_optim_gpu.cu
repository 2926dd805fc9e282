/* test_optim_gpu.cu - bt_optim.h on the GPU: AdamW's state offloaded to pinned host memory and
   streamed through the device in chunks gives the same bits as the state kept on the GPU.

   fp32 parameters in one buffer (the trainer's layout: one pass of chunks over the decay runs) and
   apart (a pass per parameter), gradients in fp32 and bf16, clipping on, chunk sizes that cut
   parameters and runs at odd places, the whole index space and a ZeRO-like range; 3 updates, then
   the weights, m and v compared bit for bit. The copies run on their own streams while the kernels
   run on the compute stream, so a missing wait between a load, its update and its store shows up
   as different bits. Then a state set into an offloaded optimizer, and m and v pinned (the copy
   engines read them directly). AdamW and the norm over gradients held per unit (bt_grads_lazy)
   against the flat buffer's; the weights in two halves with the state offloaded. Without a GPU every test skips. */
#include "bt_autograd.h"
#include "bt_optim.h"
#include "tests/bt_test.h"
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#define NP 5
static const int64_t SIZES[NP] = {768 * 1024 + 3, 4097, 3 * 1024 * 1024, 1000, 2 * 1024 * 1024 + 17};
static const int NDIM[NP] = {2, 1, 2, 1, 2};   /* 1-D: no weight decay */

static int64_t total(void) { int64_t s = 0; for (int i = 0; i < NP; i++) s += SIZES[i]; return s; }
/* parameter i as a view of buf (one buffer) or a copy of that view (apart) */
static bt_tensor *param(bt_tensor *buf, int i, int apart) {
    int64_t off = 0;
    for (int k = 0; k < i; k++) off += SIZES[k];
    bt_scope_begin();
    bt_tensor *v = bt_narrow(buf, 0, off, SIZES[i]);
    if (NDIM[i] == 2) v = bt_view(v, SIZES[i] % 2 ? bt_shape2(1, SIZES[i]) : bt_shape2(2, SIZES[i] / 2));
    bt_tensor *p = bt_keep(apart ? bt_clone(v) : v);
    bt_scope_end();
    p->requires_grad = 1;
    return p;
}
static int equal_bits(bt_tensor *a, bt_tensor *b) {
    size_t n = (size_t)bt_numel(a) * bt_dtype_size(a->dtype);
    char *x = (char *)malloc(n), *y = (char *)malloc(n);
    bt_to_host(a, x, a->dtype); bt_to_host(b, y, b->dtype);
    int same = !memcmp(x, y, n);
    free(x); free(y);
    return same;
}

static void test_offload_bits(void) {
    if (bt_k_device_count() < 1) { BT_SKIP("no GPU"); return; }
    bt_device gpu = bt_cuda_device(0);
    int64_t n = total(), chunks[3] = {(int64_t)1 << 20, 100003, BT_ADAMW_OFFLOAD_CHUNK};
    for (int apart = 0; apart < 2; apart++)
        for (int gi = 0; gi < 2; gi++)
            for (int ci = 0; ci < 3; ci++)
                for (int sh = 0; sh < 2; sh++) {
                    bt_dtype gdt = gi ? BT_BF16 : BT_F32;
                    bt_tensor *buf[2], *ps[2][NP];
                    for (int k = 0; k < 2; k++) {
                        buf[k] = bt_zeros(bt_shape1(n), BT_F32, gpu);
                        bt_uniform_(buf[k], -1, 1, 11, 0);
                        for (int i = 0; i < NP; i++) ps[k][i] = param(buf[k], i, apart);
                    }
                    bt_adamw a, b;
                    bt_adamw_init(&a, ps[0], NP, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
                    bt_adamw_init_offload(&b, ps[1], NP, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, chunks[ci]);
                    if (sh) { bt_adamw_shard(&a, 5000, n - 777); bt_adamw_shard(&b, 5000, n - 777); }
                    for (int t = 0; t < 3; t++) {
                        bt_tensor *g[2] = {bt_zeros(bt_shape1(n), gdt, gpu), bt_zeros(bt_shape1(n), gdt, gpu)};
                        bt_uniform_(g[0], -0.01, 0.01, 100 + (uint64_t)t, 0);   /* norm ~ 13 > 1: clipped */
                        bt_copy_(g[1], g[0]);
                        for (int k = 0; k < 2; k++) {
                            int64_t off = 0;
                            for (int i = 0; i < NP; i++) {
                                bt_test_drop_grad(ps[k][i]);
                                bt_scope_begin();
                                bt_tensor *v = bt_view(bt_narrow(g[k], 0, off, SIZES[i]), bt_shape_of(ps[k][i]));
                                ps[k][i]->grad = bt_keep(apart ? bt_clone(v) : v);
                                bt_scope_end();
                                off += SIZES[i];
                            }
                        }
                        bt_release(g[0]); bt_release(g[1]);
                        bt_adamw_step(&a, 1e-3f); bt_adamw_step(&b, 1e-3f);
                    }
                    bt_adamw_wait(&b);
                    int same = 1;
                    for (int i = 0; i < NP; i++) same &= equal_bits(ps[0][i], ps[1][i]);
                    int same_state = equal_bits(a.m, b.m) && equal_bits(a.v, b.v);
                    BT_CHECK(same && same_state, "offloaded (chunk %lld, %s, grad %s, %s): weights %s, state %s", (long long)chunks[ci],
                             apart ? "apart" : "one buffer", gi ? "bf16" : "f32", sh ? "a range" : "all",
                             same ? "equal" : "differ", same_state ? "equal" : "differ");
                    if (!apart && !gi && !ci && !sh) {
                        cudaPointerAttributes at;
                        BT_CHECK(cudaPointerGetAttributes(&at, bt_data_ptr(b.m)) == cudaSuccess && at.type == cudaMemoryTypeHost,
                                 "m is not pinned host memory (type %d)", (int)at.type);
                        /* a state set into a fresh offloaded optimizer: one more update, the same bits */
                        bt_adamw c;
                        bt_adamw_init_offload(&c, ps[1], NP, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 65536);
                        bt_adamw_set_state(&c, a.m, a.v, a.step);
                        bt_copy_(buf[1], buf[0]);
                        bt_adamw_step(&a, 1e-3f); bt_adamw_step(&c, 1e-3f);
                        bt_adamw_wait(&c);
                        BT_CHECK(equal_bits(buf[0], buf[1]) && equal_bits(a.m, c.m), "a state set into an offloaded optimizer steps differently");
                        bt_adamw_free(&c);
                    }
                    bt_adamw_free(&a); bt_adamw_free(&b);
                    for (int k = 0; k < 2; k++) {
                        for (int i = 0; i < NP; i++) { bt_test_drop_grad(ps[k][i]); bt_release(ps[k][i]); }
                        bt_release(buf[k]);
                    }
                }
}

/* Gradients per unit (bt_grads_lazy): AdamW takes one launch per unit, each from the decay run its
   first element is in; the weights (plain and in two halves), m and v must be the flat buffer's
   bits over 3 clipped steps (the same norm handed to both; the units start at parameters of
   either decay). The norm over the units: one pass each, equal to the flat one's within
   float rounding. */
static void test_grads_units_bits(void) {
    if (bt_k_device_count() < 1) { BT_SKIP("no GPU"); return; }
    bt_device gpu = bt_cuda_device(0);
    int64_t n = total(), lo[4] = {0, SIZES[0] + SIZES[1], SIZES[0] + SIZES[1] + SIZES[2], n};
    for (int halves = 0; halves < 2; halves++) {
        bt_tensor *buf[2], *gbuf[2], *ps[2][NP];
        for (int k = 0; k < 2; k++) {
            buf[k] = bt_zeros(bt_shape1(n), BT_F32, gpu);
            bt_uniform_(buf[k], -1, 1, 13, 0);
            gbuf[k] = bt_zeros(bt_shape1(n), BT_BF16, gpu);
            int64_t off = 0;
            for (int i = 0; i < NP; i++) {
                ps[k][i] = param(buf[k], i, 0);
                bt_scope_begin();
                ps[k][i]->grad = bt_keep(bt_view(bt_narrow(gbuf[k], 0, off, SIZES[i]), bt_shape_of(ps[k][i])));
                bt_scope_end();
                off += SIZES[i];
            }
        }
        bt_tensor **units = bt_grads_lazy(ps[1], NP, lo, 3);
        bt_adamw a, b;
        bt_adamw_init(&a, ps[0], NP, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
        bt_adamw_init(&b, ps[1], NP, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
        bt_tensor *hi[2] = {NULL, NULL};
        if (halves) { hi[0] = bt_adamw_split(&a); hi[1] = bt_adamw_split(&b); }
        double worst = 0;
        for (int t = 0; t < 3; t++) {
            bt_uniform_(gbuf[0], -0.01, 0.01, 200 + (uint64_t)t, 0);   /* norm ~ 13 > 1: clipped */
            for (int i = 0; i < NP; i++) bt_copy_(ps[1][i]->grad, ps[0][i]->grad);
            bt_tensor *na = bt_grad_norm(ps[0], NP), *nb = bt_grad_norm(ps[1], NP);
            double e = fabs(bt_item(na) - bt_item(nb)) / bt_item(na);
            if (e > worst) worst = e;
            bt_adamw_set_grad_norm(&a, na); bt_adamw_set_grad_norm(&b, na);
            bt_adamw_update(&a, 1e-3f, NULL); bt_adamw_update(&b, 1e-3f, NULL);
            bt_release(na); bt_release(nb);
            bt_grads_drop(units, 3);
        }
        BT_CHECK(worst < 1e-6, "%s: the norm over the units differs from the flat one's by %.2g relative", halves ? "halves" : "plain", worst);
        if (halves) { bt_adamw_join(&a); bt_adamw_join(&b); }
        BT_CHECK(equal_bits(buf[0], buf[1]) && equal_bits(a.m, b.m) && equal_bits(a.v, b.v),
                 "%s: AdamW over the units' gradients: weights %s, m %s, v %s", halves ? "halves" : "plain",
                 equal_bits(buf[0], buf[1]) ? "equal" : "differ", equal_bits(a.m, b.m) ? "equal" : "differ",
                 equal_bits(a.v, b.v) ? "equal" : "differ");
        bt_release(hi[0]); bt_release(hi[1]);
        bt_adamw_free(&a); bt_adamw_free(&b);
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < NP; i++) { bt_test_drop_grad(ps[k][i]); bt_release(ps[k][i]); }
            bt_release(buf[k]); bt_release(gbuf[k]);
        }
        bt_grads_free(units, 3);
    }
}

/* The weights in two halves with the state offloaded: the chunked update joins, updates and splits
   each chunk's weights as the update on the device does (chunks that cut the parameters and the
   decay runs); 3 clipped steps, the weights (joined), m and v bit for bit. */
static void test_offload_halves_bits(void) {
    if (bt_k_device_count() < 1) { BT_SKIP("no GPU"); return; }
    bt_device gpu = bt_cuda_device(0);
    int64_t n = total();
    bt_tensor *buf[2], *ps[2][NP], *hi[2];
    for (int k = 0; k < 2; k++) {
        buf[k] = bt_zeros(bt_shape1(n), BT_F32, gpu);
        bt_uniform_(buf[k], -1, 1, 17, 0);
        for (int i = 0; i < NP; i++) ps[k][i] = param(buf[k], i, 0);
    }
    bt_adamw a, b;
    bt_adamw_init(&a, ps[0], NP, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    bt_adamw_init_offload(&b, ps[1], NP, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 100003);
    hi[0] = bt_adamw_split(&a); hi[1] = bt_adamw_split(&b);
    for (int t = 0; t < 3; t++) {
        bt_tensor *g = bt_zeros(bt_shape1(n), BT_BF16, gpu);
        bt_uniform_(g, -0.01, 0.01, 300 + (uint64_t)t, 0);
        for (int k = 0; k < 2; k++) {
            int64_t off = 0;
            for (int i = 0; i < NP; i++) {
                bt_test_drop_grad(ps[k][i]);
                bt_scope_begin();
                ps[k][i]->grad = bt_keep(bt_view(bt_narrow(g, 0, off, SIZES[i]), bt_shape_of(ps[k][i])));
                bt_scope_end();
                off += SIZES[i];
            }
        }
        bt_release(g);
        bt_adamw_step(&a, 1e-3f); bt_adamw_step(&b, 1e-3f);
    }
    bt_adamw_wait(&b);
    bt_adamw_join(&a); bt_adamw_join(&b);
    BT_CHECK(equal_bits(buf[0], buf[1]) && equal_bits(a.m, b.m) && equal_bits(a.v, b.v), "halves, offloaded: weights %s, m %s, v %s",
             equal_bits(buf[0], buf[1]) ? "equal" : "differ", equal_bits(a.m, b.m) ? "equal" : "differ", equal_bits(a.v, b.v) ? "equal" : "differ");
    bt_release(hi[0]); bt_release(hi[1]);
    bt_adamw_free(&a); bt_adamw_free(&b);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < NP; i++) { bt_test_drop_grad(ps[k][i]); bt_release(ps[k][i]); }
        bt_release(buf[k]);
    }
}

int main(void) {
    bt_test_seed = 7100;
    BT_RUN(test_offload_bits);
    BT_RUN(test_grads_units_bits);
    BT_RUN(test_offload_halves_bits);
    return bt_test_summary("test_optim_gpu");
}
