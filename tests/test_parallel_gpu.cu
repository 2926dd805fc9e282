/* test_parallel_gpu.cu - bt_parallel.h on two GPUs through NCCL, each op against the same op on
   one GPU on the same inputs (every rank computes that reference itself):
     tensor parallel: linear col / row / an MLP block (sync and async, with and without sequence
       parallelism), vocabulary-parallel embedding, cross-entropy and the fused head;
     context parallel: attention for each K/V strategy (ring, allgather, alltoall), causal at
       T = 1024 and 16384, non-causal at T = 1024, and GPT-2's packed [B, T, 3C] layout.
   Forward and backward. Inputs are random with a fresh seed per run (printed; BT_TEST_SEED=n
   repeats one). Tolerances (relative error, norm-wise; tests/bt_test.h's table):
     f32 (matmul precision FP32, no TF32): BT_TOL_F32, 1e-5 against the 1-GPU f32 op. The
       parallel ops only change the order of sums (chunked GEMMs, 2-term reductions, lse merges):
       ~1e-7 expected.
     bf16: both the parallel and the 1-GPU bf16 op are measured against the f32 op on the same
       (bf16-rounded) inputs, err_par and err_1gpu; the test requires err_par <= 2 err_1gpu + 2e-3
       (half of BT_TOL_BF16_ROUND: one more rounding to bf16, on average) and prints both: the
       parallel op may round at other places (partial sums reduced in bf16, one rounding per
       attention tile), but must not be less accurate than the 1-GPU op beyond that factor. One "info:" line per case: each tensor's error (f32), or err_par/err_1gpu (bf16).
   Also prints the time of an MLP block's forward + backward at GPT-2 124M's width, sync vs async
   TP (information only). Each test skips itself with fewer than 2 GPUs. The ranks start with the
   --nproc launcher (bt_dist_spawn) from a forked child; this process never initializes CUDA.
   NCCL_NVLS_ENABLE=0 in every rank (the launcher sets it). Run: make test-gpu on a 2-GPU machine. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "bt_autograd.h"
#pragma GCC diagnostic pop
#include "bt_parallel.h"
#include "tests/bt_test.h"
#include "tests/proc_test.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <cuda_runtime.h>

static uint64_t seed0;                    /* the run's base seed (the ranks inherit it) */

/* ---- process helpers (no CUDA in this process) ------------------------------------------ */


/* rank 0's "info:" lines and every FAIL line of a run, to this process's stderr */
static void relay(const char *path) {
    char *s = bt_test_read_file(path, NULL);
    for (char *line = s ? strtok(s, "\n") : NULL; line; line = strtok(NULL, "\n"))
        if (strstr(line, "[rank 0] info:")) fprintf(stderr, "%s\n", strstr(line, "info:"));
        else if (strstr(line, "FAIL") || strstr(line, "bt error")) fprintf(stderr, "  %s\n", line);
    free(s);
}

/* ---- comparisons (in a rank) ------------------------------------------------------------- */

static int fails, the_rank;
/* One "info:" line per case (rank 0), listing each compared tensor's errors:
   f32: par against the 1-GPU op; bf16: both against the f32 op on the same inputs (par/1gpu). */
static char info[1024];
static void case_begin(const char *name) { snprintf(info, sizeof info, "info: %s:", name); }
static void case_end(void) { if (the_rank == 0) fprintf(stderr, "%s\n", info); }
static void compare(const char *what, bt_tensor *par, bt_tensor *one, bt_tensor *ref) {
    const char *name = strrchr(what, ' ') ? strrchr(what, ' ') + 1 : what;   /* the tensor: "y", "dx", ... */
    size_t n = strlen(info);
    if (!ref) {
        double e = bt_test_relerr_t(par, one);
        snprintf(info + n, sizeof info - n, " %s %.1e", name, e);
        if (!(e <= BT_TOL_F32)) { fprintf(stderr, "FAIL rank %d: %s f32: relative error %.3g > %.0e\n", the_rank, what, e, BT_TOL_F32); fails++; }
        return;
    }
    double ep = bt_test_relerr_t(par, ref), e1 = bt_test_relerr_t(one, ref);
    snprintf(info + n, sizeof info - n, " %s %.1e/%.1e", name, ep, e1);
    if (!(ep <= 2 * e1 + BT_TOL_BF16_ROUND / 2)) {   /* + half of one more bf16 rounding */
        fprintf(stderr, "FAIL rank %d: %s bf16: err_par %.3g > 2 x err_1gpu %.3g + %.0e\n", the_rank, what, ep, e1, BT_TOL_BF16_ROUND / 2);
        fails++;
    }
}

/* ---- data --------------------------------------------------------------------------------- */

static bt_device gpu(void) { int d = 0; cudaGetDevice(&d); return bt_cuda_device(d); }
/* random in dt (rounded); *f32 gets the same values in f32 when dt is not f32 (else NULL) */
static bt_tensor *data(bt_shape s, bt_dtype dt, int salt, bt_tensor **f32) {
    bt_tensor *x = bt_randn(s, BT_F32, gpu(), seed0 + 7919 * (uint64_t)salt);
    if (dt == BT_F32) { *f32 = NULL; return x; }
    bt_tensor *r = bt_cast(x, dt);
    *f32 = bt_cast(r, BT_F32);
    return r;
}
static bt_tensor *dot(bt_tensor *y, bt_tensor *r) { return bt_sum(bt_mul(y, r), NULL, 0, 0); }
static bt_tensor *seq_slice(bt_tensor *t, int r, int W) {
    if (!t) return NULL;
    int64_t n = t->shape[t->ndim - 2] / W;
    return bt_contiguous(bt_narrow(t, t->ndim - 2, r * n, n));
}
static bt_tensor *nar(bt_tensor *t, int dim, int64_t s, int64_t n) { return t ? bt_contiguous(bt_narrow(t, dim, s, n)) : NULL; }
static bt_tensor *zz(bt_tensor *t, int dim, int W, int r) { return t ? bt_zigzag_shard(t, dim, W, r) : NULL; }

/* ---- tensor parallel ---------------------------------------------------------------------- */

typedef struct { bt_tensor *y, *dx, *dw, *db; } lin_out;
static lin_out plain_linear(bt_tensor *x, bt_tensor *w, bt_tensor *b, bt_tensor *R) {
    lin_out o;
    bt_tensor *xl = bt_test_leaf_of(x), *wl = bt_test_leaf_of(w), *bl = bt_test_leaf_of(b);
    o.y = bt_linear(xl, wl, bl);
    bt_backward(dot(o.y, R));
    o.dx = xl->grad; o.dw = wl->grad; o.db = bl->grad;
    return o;
}
static bt_tp *make_tp(bt_comm *c, int sp, int async) {
    bt_tp_opts o;
    memset(&o, 0, sizeof o);
    o.sp = sp; o.async = async;
    return bt_tp_create(c, &o);
}

static void tp_col(bt_comm *c, int sp, int async, bt_dtype dt) {
    int W = c->size, r = c->rank;
    int64_t B = 4, T = 256, C = 256, O = 512, Ol = O / W;
    char what[96];
    snprintf(what, sizeof what, "linear_col sp %d async %d", sp, async);
    snprintf(info, sizeof info, "info: %s %s:", what, bt_dtype_name(dt));
    bt_scope_begin();
    bt_tp *tp = make_tp(c, sp, async);
    bt_tensor *x32, *w32, *b32, *R32;
    bt_tensor *x = data(bt_shape3(B, T, C), dt, 1, &x32), *w = data(bt_shape2(O, C), dt, 2, &w32), *b = data(bt_shape1(O), dt, 3, &b32);
    bt_tensor *R = data(bt_shape3(B, T, O), dt, 4, &R32);
    lin_out one = plain_linear(x, w, b, R), ref = {NULL, NULL, NULL, NULL};
    if (x32) ref = plain_linear(x32, w32, b32, R32);
    bt_tensor *xl = bt_test_leaf_of(sp ? seq_slice(x, r, W) : x), *wl = bt_test_leaf_of(nar(w, 0, r * Ol, Ol)), *bl = bt_test_leaf_of(nar(b, 0, r * Ol, Ol));
    bt_tensor *y = bt_tp_linear_col(tp, xl, wl, bl);
    bt_backward(dot(y, nar(R, 2, r * Ol, Ol)));
    char k[128];
    snprintf(k, sizeof k, "%s y", what); compare(k, y, nar(one.y, 2, r * Ol, Ol), nar(ref.y, 2, r * Ol, Ol));
    snprintf(k, sizeof k, "%s dx", what);
    compare(k, xl->grad, sp ? seq_slice(one.dx, r, W) : one.dx, sp ? seq_slice(ref.dx, r, W) : ref.dx);
    snprintf(k, sizeof k, "%s dw", what); compare(k, wl->grad, nar(one.dw, 0, r * Ol, Ol), nar(ref.dw, 0, r * Ol, Ol));
    snprintf(k, sizeof k, "%s db", what); compare(k, bl->grad, nar(one.db, 0, r * Ol, Ol), nar(ref.db, 0, r * Ol, Ol));
    case_end();
    bt_tp_free(tp);
    bt_scope_end();
}
static void tp_row(bt_comm *c, int sp, int async, bt_dtype dt) {
    int W = c->size, r = c->rank;
    int64_t B = 4, T = 256, I = 512, Il = I / W, O = 256;
    char what[96], k[128];
    snprintf(what, sizeof what, "linear_row sp %d async %d", sp, async);
    snprintf(info, sizeof info, "info: %s %s:", what, bt_dtype_name(dt));
    bt_scope_begin();
    bt_tp *tp = make_tp(c, sp, async);
    bt_tensor *x32, *w32, *b32, *R32;
    bt_tensor *x = data(bt_shape3(B, T, I), dt, 5, &x32), *w = data(bt_shape2(O, I), dt, 6, &w32), *b = data(bt_shape1(O), dt, 7, &b32);
    bt_tensor *R = data(bt_shape3(B, T, O), dt, 8, &R32);
    lin_out one = plain_linear(x, w, b, R), ref = {NULL, NULL, NULL, NULL};
    if (x32) ref = plain_linear(x32, w32, b32, R32);
    bt_tensor *xl = bt_test_leaf_of(nar(x, 2, r * Il, Il)), *wl = bt_test_leaf_of(nar(w, 1, r * Il, Il)), *bl = bt_test_leaf_of(b);
    bt_tensor *y = bt_tp_linear_row(tp, xl, wl, bl);
    bt_backward(dot(y, sp ? seq_slice(R, r, W) : R));
    if (sp) bt_tp_reduce_grad(tp, bl->grad);
    snprintf(k, sizeof k, "%s y", what); compare(k, y, sp ? seq_slice(one.y, r, W) : one.y, sp ? seq_slice(ref.y, r, W) : ref.y);
    snprintf(k, sizeof k, "%s dx", what); compare(k, xl->grad, nar(one.dx, 2, r * Il, Il), nar(ref.dx, 2, r * Il, Il));
    snprintf(k, sizeof k, "%s dw", what); compare(k, wl->grad, nar(one.dw, 1, r * Il, Il), nar(ref.dw, 1, r * Il, Il));
    snprintf(k, sizeof k, "%s db", what); compare(k, bl->grad, one.db, ref.db);
    case_end();
    bt_tp_free(tp);
    bt_scope_end();
}
/* async against sync on the same inputs (f32): the same numbers up to summation order */
static void tp_async_vs_sync(bt_comm *c, int sp) {
    int W = c->size, r = c->rank;
    int64_t B = 2, T = 512, C = 256, Hd = 1024, Hl = Hd / W;
    bt_scope_begin();
    bt_tensor *n32;
    bt_tensor *x = data(bt_shape3(B, T, C), BT_F32, 9, &n32), *w1 = data(bt_shape2(Hd, C), BT_F32, 10, &n32);
    bt_tensor *w2 = data(bt_shape2(C, Hd), BT_F32, 11, &n32), *R = data(bt_shape3(B, T, C), BT_F32, 12, &n32);
    bt_tensor *y[2], *dx[2], *dw1[2];
    for (int a = 0; a < 2; a++) {
        bt_tp *tp = make_tp(c, sp, a);
        bt_tensor *xl = bt_test_leaf_of(sp ? seq_slice(x, r, W) : x), *w1l = bt_test_leaf_of(nar(w1, 0, r * Hl, Hl)), *w2l = bt_test_leaf_of(nar(w2, 1, r * Hl, Hl));
        y[a] = bt_tp_linear_row(tp, bt_gelu(bt_tp_linear_col(tp, xl, w1l, NULL)), w2l, NULL);
        bt_backward(dot(y[a], sp ? seq_slice(R, r, W) : R));
        dx[a] = xl->grad; dw1[a] = w1l->grad;
        bt_tp_free(tp);
    }
    char k[96];
    snprintf(k, sizeof k, "mlp async vs sync sp %d f32", sp);
    case_begin(k);
    snprintf(k, sizeof k, "mlp async vs sync sp %d y", sp); compare(k, y[1], y[0], NULL);
    snprintf(k, sizeof k, "mlp async vs sync sp %d dx", sp); compare(k, dx[1], dx[0], NULL);
    snprintf(k, sizeof k, "mlp async vs sync sp %d dw1", sp); compare(k, dw1[1], dw1[0], NULL);
    case_end();
    bt_scope_end();
}
static bt_tensor *ids(bt_shape s, int64_t V, int ign_every, int salt) {   /* i32 in [0, V), every ign_every-th -1 */
    int64_t n = 1;
    for (int d = 0; d < s.ndim; d++) n *= s.d[d];
    int32_t *h = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        h[i] = ign_every && i % ign_every == 3 ? -1 : (int32_t)(bt_philox_uniform(seed0 + (uint64_t)salt, (uint64_t)i) * (double)V);
    bt_tensor *t = bt_from_data(h, s, BT_I32, gpu());
    free(h);
    return t;
}
static void tp_vocab(bt_comm *c, int sp, bt_dtype dt) {
    int W = c->size, r = c->rank;
    int64_t B = 4, T = 256, C = 256, Vp = 50304, Vs = Vp / W, V = 50257;
    char k[128];
    bt_scope_begin();
    bt_tp *tp = make_tp(c, sp, 0);
    bt_tensor *t32, *n32, *x32, *w32;
    bt_tensor *tab = data(bt_shape2(Vp, C), dt, 13, &t32), *R = data(bt_shape3(B, T, C), dt, 14, &n32), *idx = ids(bt_shape2(B, T), V, 0, 15);
    bt_tensor *R32 = n32;
    /* embedding */
    bt_tensor *one_t = bt_test_leaf_of(tab), *one_y = bt_embedding(one_t, idx), *ref_t = NULL, *ref_y = NULL;
    bt_backward(dot(one_y, R));
    if (t32) { ref_t = bt_test_leaf_of(t32); ref_y = bt_embedding(ref_t, idx); bt_backward(dot(ref_y, R32)); }
    snprintf(k, sizeof k, "embedding sp %d %s", sp, bt_dtype_name(dt));
    case_begin(k);
    bt_tensor *tl = bt_test_leaf_of(nar(tab, 0, r * Vs, Vs)), *y = bt_tp_embedding(tp, tl, idx);
    bt_backward(dot(y, sp ? seq_slice(R, r, W) : R));
    snprintf(k, sizeof k, "embedding sp %d y", sp); compare(k, y, sp ? seq_slice(one_y, r, W) : one_y, sp ? seq_slice(ref_y, r, W) : ref_y);
    snprintf(k, sizeof k, "embedding sp %d dtable", sp);
    compare(k, tl->grad, nar(one_t->grad, 0, r * Vs, Vs), ref_t ? nar(ref_t->grad, 0, r * Vs, Vs) : NULL);
    case_end();
    /* the fused head and loss (GPT-2's: x [B, T, C], the tied table as w) */
    bt_tensor *x = data(bt_shape3(B, T, C), dt, 16, &x32), *w = data(bt_shape2(Vp, C), dt, 17, &w32), *tg = ids(bt_shape2(B, T), V, 9, 18);
    bt_tensor *ox = bt_test_leaf_of(x), *ow = bt_test_leaf_of(w), *ol = bt_linear_cross_entropy(ox, ow, tg, V, -1), *rx = NULL, *rw = NULL, *rl = NULL;
    bt_backward(ol);
    if (x32) { rx = bt_test_leaf_of(x32); rw = bt_test_leaf_of(w32); rl = bt_linear_cross_entropy(rx, rw, tg, V, -1); bt_backward(rl); }
    bt_tensor *xl = bt_test_leaf_of(sp ? seq_slice(x, r, W) : x), *wl = bt_test_leaf_of(nar(w, 0, r * Vs, Vs));
    bt_tensor *l = bt_tp_linear_cross_entropy(tp, xl, wl, tg, V, -1);
    bt_backward(l);
    snprintf(k, sizeof k, "linear_cross_entropy sp %d %s", sp, bt_dtype_name(dt));
    case_begin(k);
    snprintf(k, sizeof k, "linear_cross_entropy sp %d loss", sp); compare(k, l, ol, rl);
    snprintf(k, sizeof k, "linear_cross_entropy sp %d dx", sp);
    compare(k, xl->grad, sp ? seq_slice(ox->grad, r, W) : ox->grad, rx ? (sp ? seq_slice(rx->grad, r, W) : rx->grad) : NULL);
    snprintf(k, sizeof k, "linear_cross_entropy sp %d dw", sp);
    compare(k, wl->grad, nar(ow->grad, 0, r * Vs, Vs), rw ? nar(rw->grad, 0, r * Vs, Vs) : NULL);
    case_end();
    /* the loss on logits the rank holds for its columns only */
    if (!sp) {
        bt_tensor *z32, *z = data(bt_shape3(2, 128, Vp), dt, 19, &z32), *tz = ids(bt_shape2(2, 128), V, 5, 20);
        bt_tensor *oz = bt_test_leaf_of(z), *oL = bt_cross_entropy(oz, tz, V, -1), *rz = NULL, *rL = NULL;
        bt_backward(oL);
        if (z32) { rz = bt_test_leaf_of(z32); rL = bt_cross_entropy(rz, tz, V, -1); bt_backward(rL); }
        bt_tensor *zl = bt_test_leaf_of(nar(z, 2, r * Vs, Vs)), *L = bt_tp_cross_entropy(tp, zl, tz, V, -1);
        bt_backward(L);
        snprintf(k, sizeof k, "cross_entropy %s", bt_dtype_name(dt));
        case_begin(k);
        compare("cross_entropy loss", L, oL, rL);
        compare("cross_entropy dlogits", zl->grad, nar(oz->grad, 2, r * Vs, Vs), rz ? nar(rz->grad, 2, r * Vs, Vs) : NULL);
        case_end();
    }
    bt_tp_check(tp);
    bt_tp_free(tp);
    bt_scope_end();
}
/* an MLP block at GPT-2 124M's width (B 8, T 1024, C 768, 4C), bf16: forward + backward, ms */
static double mlp_ms(bt_comm *c, int sp, int async) {
    int W = c->size;
    int64_t B = 8, T = 1024, C = 768, Hd = 4 * C, Hl = Hd / W;
    bt_scope_begin();
    bt_tp *tp = make_tp(c, sp, async);
    bt_tensor *n32;
    bt_tensor *x = data(bt_shape3(B, sp ? T / W : T, C), BT_BF16, 21, &n32), *w1 = bt_test_leaf_of(data(bt_shape2(Hl, C), BT_BF16, 22, &n32));
    bt_tensor *w2 = bt_test_leaf_of(data(bt_shape2(C, Hl), BT_BF16, 23, &n32));
    bt_set_requires_grad(x, 1);
    void *e0 = bt_event_create_timed(gpu()), *e1 = bt_event_create_timed(gpu());   /* timing events */
    for (int it = 0; it < 13; it++) {
        if (it == 3) bt_event_record(e0, bt_stream_current(gpu()));
        bt_scope_begin();
        bt_backward(bt_sum(bt_tp_linear_row(tp, bt_gelu(bt_tp_linear_col(tp, x, w1, NULL)), w2, NULL), NULL, 0, 0));
        bt_scope_end();
    }
    bt_event_record(e1, bt_stream_current(gpu()));
    bt_event_synchronize(e1);
    double ms = bt_event_elapsed_ms(e0, e1);
    bt_event_destroy(e0); bt_event_destroy(e1);
    bt_tp_free(tp);
    bt_scope_end();
    return ms / 10;
}

static int tp_rank(int rank) {
    bt_dist *d = bt_dist_init(NULL);
    the_rank = rank;
    bt_set_matmul_precision(BT_MATMUL_FP32);
    bt_dtype dts[2] = {BT_F32, BT_BF16};
    for (int di = 0; di < 2; di++)
        for (int sp = 0; sp < 2; sp++) {
            for (int async = 0; async < 2; async++) { tp_col(d->world_comm, sp, async, dts[di]); tp_row(d->world_comm, sp, async, dts[di]); }
            tp_vocab(d->world_comm, sp, dts[di]);
        }
    tp_async_vs_sync(d->world_comm, 0);
    tp_async_vs_sync(d->world_comm, 1);
    for (int sp = 0; sp < 2; sp++) {
        double s = mlp_ms(d->world_comm, sp, 0), a = mlp_ms(d->world_comm, sp, 1);
        if (rank == 0) fprintf(stderr, "info: tp=2 MLP block fwd+bwd bf16 B8 T1024 C768 sp %d: sync %.3f ms, async %.3f ms\n", sp, s, a);
    }
    bt_dist_shutdown(d);
    fprintf(stderr, "rank %d: tp done, %d failures\n", rank, fails);
    return fails ? 1 : 0;
}

/* ---- context parallel --------------------------------------------------------------------- */

typedef struct { bt_tensor *o, *dq, *dk, *dv; } att_out;
/* the 1-GPU attention (bt_kernels.cuh's kernels, as bt_attention runs them; causal or not) and its
   backward for d out = R, on contiguous [B, H, T, D] */
static att_out plain_attention(bt_tensor *q, bt_tensor *k, bt_tensor *v, bt_tensor *R, int causal) {
    int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3], st[3] = {H * T * D, T * D, D};
    bt_device dev = gpu();
    cudaStream_t s = (cudaStream_t)bt_stream_current(dev);
    float scale = (float)(1.0 / sqrt((double)D));
    att_out o;
    bt_tensor *lse = bt_empty(bt_shape3(B, H, T), BT_F32, dev);
    o.o = bt_empty(bt_shape_of(q), q->dtype, dev);
    o.dq = bt_empty(bt_shape_of(q), q->dtype, dev); o.dk = bt_empty(bt_shape_of(q), q->dtype, dev); o.dv = bt_empty(bt_shape_of(q), q->dtype, dev);
    bt_k_attention_strided(q->dtype, bt_data_ptr(o.o), st, (float *)bt_data_ptr(lse), bt_data_ptr(q), st, bt_data_ptr(k), st, bt_data_ptr(v), st,
                           B, H, H, T, D, scale, causal, bt_get_matmul_precision(), s);
    bt_k_attention_backward_strided(q->dtype, bt_data_ptr(o.dq), st, bt_data_ptr(o.dk), st, bt_data_ptr(o.dv), st, bt_data_ptr(R), st,
                                    bt_data_ptr(q), st, bt_data_ptr(k), st, bt_data_ptr(v), st, bt_data_ptr(o.o), st,
                                    (const float *)bt_data_ptr(lse), B, H, H, T, D, scale, causal, bt_get_matmul_precision(), s);
    return o;
}
static void cp_case(bt_comm *c, bt_cp_kv kv, int causal, int64_t T, bt_dtype dt) {
    int W = c->size, r = c->rank;
    int64_t B = 1, H = 4, D = 64;
    char what[96], k2[128];
    snprintf(what, sizeof what, "cp %s causal %d T %lld", bt_cp_kv_name(kv), causal, (long long)T);
    snprintf(info, sizeof info, "info: %s %s:", what, bt_dtype_name(dt));
    bt_scope_begin();
    bt_cp *cp = bt_cp_create(c, kv);
    bt_shape s = bt_shape4(B, H, T, D);
    bt_tensor *q32, *k32, *v32, *R32;
    bt_tensor *q = data(s, dt, 31, &q32), *k = data(s, dt, 32, &k32), *v = data(s, dt, 33, &v32), *R = data(s, dt, 34, &R32);
    att_out one = plain_attention(q, k, v, R, causal), ref = {NULL, NULL, NULL, NULL};
    if (q32) ref = plain_attention(q32, k32, v32, R32, causal);
    bt_tensor *ql = bt_test_leaf_of(zz(q, 2, W, r)), *kl = bt_test_leaf_of(zz(k, 2, W, r)), *vl = bt_test_leaf_of(zz(v, 2, W, r));
    bt_tensor *y = bt_cp_attention(cp, ql, kl, vl, causal);
    bt_backward(dot(y, zz(R, 2, W, r)));
    snprintf(k2, sizeof k2, "%s y", what); compare(k2, y, zz(one.o, 2, W, r), zz(ref.o, 2, W, r));
    snprintf(k2, sizeof k2, "%s dq", what); compare(k2, ql->grad, zz(one.dq, 2, W, r), zz(ref.dq, 2, W, r));
    snprintf(k2, sizeof k2, "%s dk", what); compare(k2, kl->grad, zz(one.dk, 2, W, r), zz(ref.dk, 2, W, r));
    snprintf(k2, sizeof k2, "%s dv", what); compare(k2, vl->grad, zz(one.dv, 2, W, r), zz(ref.dv, 2, W, r));
    case_end();
    bt_cp_free(cp);
    bt_scope_end();
}
/* GPT-2's layout: qkv [B, T, 3C] (C 768, 12 heads) against bt_attention_qkv */
static void cp_qkv_case(bt_comm *c, bt_cp_kv kv, bt_dtype dt) {
    int W = c->size, r = c->rank;
    int64_t B = 2, T = 1024, C = 768, H = 12;
    char k2[128];
    bt_scope_begin();
    bt_cp *cp = bt_cp_create(c, kv);
    bt_tensor *x32, *R32, *x = data(bt_shape3(B, T, 3 * C), dt, 35, &x32), *R = data(bt_shape3(B, T, C), dt, 36, &R32);
    bt_tensor *ox = bt_test_leaf_of(x), *oy = bt_attention_qkv(ox, H), *rx = NULL, *ry = NULL;
    bt_backward(dot(oy, R));
    if (x32) { rx = bt_test_leaf_of(x32); ry = bt_attention_qkv(rx, H); bt_backward(dot(ry, R32)); }
    snprintf(k2, sizeof k2, "cp_qkv %s B2 T1024 C768 H12 %s", bt_cp_kv_name(kv), bt_dtype_name(dt));
    case_begin(k2);
    bt_tensor *xl = bt_test_leaf_of(zz(x, 1, W, r)), *y = bt_cp_attention_qkv(cp, xl, H, 1);
    bt_backward(dot(y, zz(R, 1, W, r)));
    snprintf(k2, sizeof k2, "cp_qkv %s y", bt_cp_kv_name(kv)); compare(k2, y, zz(oy, 1, W, r), zz(ry, 1, W, r));
    snprintf(k2, sizeof k2, "cp_qkv %s dqkv", bt_cp_kv_name(kv));
    compare(k2, xl->grad, zz(ox->grad, 1, W, r), rx ? zz(rx->grad, 1, W, r) : NULL);
    case_end();
    bt_cp_free(cp);
    bt_scope_end();
}

static int cp_rank(int rank) {
    bt_dist *d = bt_dist_init(NULL);
    the_rank = rank;
    bt_set_matmul_precision(BT_MATMUL_FP32);
    bt_dtype dts[2] = {BT_F32, BT_BF16};
    for (int kv = 0; kv < 3; kv++)
        for (int di = 0; di < 2; di++) {
            cp_case(d->world_comm, (bt_cp_kv)kv, 1, 1024, dts[di]);
            cp_case(d->world_comm, (bt_cp_kv)kv, 0, 1024, dts[di]);
            cp_case(d->world_comm, (bt_cp_kv)kv, 1, 16384, dts[di]);
            cp_qkv_case(d->world_comm, (bt_cp_kv)kv, dts[di]);
        }
    bt_dist_shutdown(d);
    fprintf(stderr, "rank %d: cp done, %d failures\n", rank, fails);
    return fails ? 1 : 0;
}

static void run(proc_rank_fn fn, const char *name, const char *done0, const char *done1) {
    char err[256];
    int code = launch2(fn, name, 5, 900, err, sizeof err, NULL);
    char *s = bt_test_read_file(err, NULL);
    int ok = code == 0 && s && strstr(s, done0) && strstr(s, done1);
    free(s);
    relay(err);
    BT_CHECK(ok, "%s: the launcher exited %d (rank output in %s)", name, code, err);
}
static void test_tp_gpu(void) {
    NEED_2_GPUS();
    run(tp_rank, "tp", "rank 0: tp done, 0 failures", "rank 1: tp done, 0 failures");
}
static void test_cp_gpu(void) {
    NEED_2_GPUS();
    run(cp_rank, "cp", "rank 0: cp done, 0 failures", "rank 1: cp done, 0 failures");
}

int main(void) {
    const char *env = getenv("BT_TEST_SEED");
    seed0 = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    fprintf(stderr, "info: test_parallel_gpu seed %llu (BT_TEST_SEED=%llu repeats it)\n", (unsigned long long)seed0,
            (unsigned long long)seed0);
    if (bt_test_dir_make("test_parallel_gpu")) return 1;
    signal(SIGPIPE, SIG_IGN);
    BT_RUN(test_tp_gpu);
    BT_RUN(test_cp_gpu);
    if (!bt_test__failed) bt_test_dir_remove();   /* a failed run's rank output stays */
    return bt_test_summary("test_parallel_gpu");
}
