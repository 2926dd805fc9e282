/* test_fsdp.c - bt_parallel.h's fully sharded data parallel engine (bt_fsdp) on the CPU, with 1, 2
   and 3 ranks (forked processes whose collectives go through the TCP store) against the unsharded
   arithmetic of one process: a toy model of six leaves in one flat fp32 buffer, cut into three
   units (one boundary inside a leaf, and a unit smaller than the ranks' shards, so a rank may own
   none of it). Each rank checks: every unit gathered (fp32 exactly, bf16 as the cast of the full
   weights), the shards gathered back into the flat layout, the reduce-scatter of each unit's
   gradient over two micro-batches (the mean over ranks, summed over micro-batches; and the sum),
   a gathered unit's gradient hook (a backward pass reduces it), the global norm, AdamW with
   clipping over the shards against AdamW over the whole buffer (weights, m and v), and the load of
   a full buffer into shards. The errors: units that leave a gap, overlap, stop short or run past
   the buffer, an empty unit, leaves that do not tile one buffer. */
#define _POSIX_C_SOURCE 200809L
#include "bt_autograd.h"
#include "bt_parallel.h"
#include "tests/bt_test.h"
#include "tests/proc_test.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include <signal.h>
#include <sys/wait.h>

/* the toy model: leaves of these shapes, in buffer order */
#define NLEAF 6
static const int64_t leaf_shape[NLEAF][2] = {{7, 5}, {5, 0}, {3, 4}, {4, 0}, {6, 6}, {2, 0}};   /* 0: 1-D */
static const bt_fsdp_unit units3[3] = {{0, 38}, {38, 56}, {56, 94}};   /* 38 cuts leaf 1 ([35, 40)) */
#define NUMEL 94
/* a last unit of 2 elements: with shards of align 1 and 3 ranks, rank 2 owns none of it */
static const bt_fsdp_unit units_small[4] = {{0, 40}, {40, 56}, {56, 92}, {92, 94}};

typedef struct { bt_tensor *flat, *grad, *leaves[NLEAF]; } toy;
static void toy_make(toy *t, uint64_t seed) {
    bt_scope_begin();
    t->flat = bt_keep(bt_randn(bt_shape1(NUMEL), BT_F32, bt_cpu(), seed));
    t->grad = bt_keep(bt_zeros(bt_shape1(NUMEL), BT_F32, bt_cpu()));
    int64_t at = 0;
    for (int i = 0; i < NLEAF; i++) {
        bt_shape s = leaf_shape[i][1] ? bt_shape2(leaf_shape[i][0], leaf_shape[i][1]) : bt_shape1(leaf_shape[i][0]);
        int64_t n = leaf_shape[i][0] * (leaf_shape[i][1] ? leaf_shape[i][1] : 1);
        t->leaves[i] = bt_keep(bt_view(bt_narrow(t->flat, 0, at, n), s));
        bt_set_requires_grad(t->leaves[i], 1);
        t->leaves[i]->grad = bt_keep(bt_view(bt_narrow(t->grad, 0, at, n), s));
        at += n;
    }
    bt_scope_end();
}
static void toy_free(toy *t) {
    for (int i = 0; i < NLEAF; i++) bt_release(t->leaves[i]);
    bt_release(t->flat); bt_release(t->grad);
}

static int rank_fails;
static void expect(int rank, int ok, const char *what, double e) {
    if (!ok) { fprintf(stderr, "  FAIL rank %d: %s (%.3g)\n", rank, what, e); rank_fails++; }
}
static double relerr(bt_tensor *got, bt_tensor *want) { return bt_test_relerr_t(got, want); }
static int same_bits(bt_tensor *a, bt_tensor *b) {
    return bt_numel(a) == bt_numel(b) && a->dtype == b->dtype &&
           !memcmp(bt_data_ptr(bt_contiguous(a)), bt_data_ptr(bt_contiguous(b)), (size_t)bt_numel(a) * bt_dtype_size(a->dtype));
}
/* micro-batch k's gradient of rank r: the same random numbers on every rank */
static bt_tensor *grad_of(int r, int k) { return bt_randn(bt_shape1(NUMEL), BT_F32, bt_cpu(), 1000 + 10 * r + k); }

/* every check of the file header on communicator c (its size: the world) */
static void check_engine(bt_comm *c, const bt_fsdp_unit *units, int n_units, int64_t align) {
    int r = c->rank, W = c->size;
    toy t;
    toy_make(&t, 7);
    bt_fsdp_opts o = {align, 0};
    bt_fsdp *f = bt_fsdp_create(c, bt_cpu(), t.leaves, NLEAF, units, n_units, t.flat, &o);
    bt_scope_begin();
    int old = bt_set_grad_enabled(0);
    /* gathers */
    for (int u = 0; u < n_units; u++) {
        bt_tensor *want = bt_narrow(t.flat, 0, units[u].lo, units[u].hi - units[u].lo);
        expect(r, same_bits(bt_fsdp_gather(f, u, BT_F32), want), "fp32 gather", 0);
        expect(r, same_bits(bt_fsdp_gather(f, u, BT_BF16), bt_cast(want, BT_BF16)), "bf16 gather", 0);
    }
    expect(r, same_bits(bt_fsdp_full(f, f->param), t.flat), "the shards gathered into the flat layout", 0);
    /* reduce-scatter over two micro-batches: the mean over ranks, summed */
    bt_tensor *want = bt_zeros(bt_shape1(NUMEL), BT_F32, bt_cpu());
    for (int k = 0; k < 2; k++) {
        bt_tensor *g = grad_of(r, k);
        for (int u = 0; u < n_units; u++) bt_fsdp_reduce(f, u, bt_narrow(g, 0, units[u].lo, units[u].hi - units[u].lo));
        for (int p = 0; p < W; p++) bt_add_(want, grad_of(p, k), 1.0 / W);
    }
    double e = relerr(bt_fsdp_full(f, f->grad), want);
    expect(r, e < 1e-6, "reduced gradients (mean over ranks, two micro-batches)", e);
    bt_tensor *norm = bt_fsdp_grad_norm(f);
    double nw = sqrt(bt_item(bt_sumsq(want))), ng = bt_item(norm);
    expect(r, fabs(ng - nw) <= 1e-6 * nw, "global gradient norm", fabs(ng - nw) / nw);
    /* the sum (opts.sum) */
    bt_fsdp_opts os = {align, 1};
    bt_fsdp *fs = bt_fsdp_create(c, bt_cpu(), t.leaves, NLEAF, units, n_units, t.flat, &os);
    bt_tensor *g0 = grad_of(r, 0), *want_s = bt_zeros(bt_shape1(NUMEL), BT_F32, bt_cpu());
    for (int u = 0; u < n_units; u++) bt_fsdp_reduce(fs, u, bt_narrow(g0, 0, units[u].lo, units[u].hi - units[u].lo));
    for (int p = 0; p < W; p++) bt_add_(want_s, grad_of(p, 0), 1.0);
    e = relerr(bt_fsdp_full(fs, fs->grad), want_s);
    expect(r, e < 1e-6, "reduced gradients (sum)", e);
    bt_fsdp_free(fs);
    /* a gathered unit's hook: loss = sum(w * x) over every unit reduces d loss / d w = x (mean: x) */
    bt_set_grad_enabled(1);
    bt_fsdp_zero_grad(f);
    int64_t before = f->reduces;
    bt_tensor *x = bt_randn(bt_shape1(NUMEL), BT_F32, bt_cpu(), 55), *loss = bt_scalar(0, BT_F32, bt_cpu());
    for (int u = 0; u < n_units; u++) {
        bt_tensor *w = bt_fsdp_gather(f, u, BT_F32);
        loss = bt_add(loss, bt_sum(bt_mul(w, bt_narrow(x, 0, units[u].lo, units[u].hi - units[u].lo)), NULL, 0, 0));
    }
    bt_backward(loss);
    bt_set_grad_enabled(0);
    e = relerr(bt_fsdp_full(f, f->grad), x);
    expect(r, f->reduces - before == n_units && e < 1e-6, "gradient hooks of gathered units", e);
    /* AdamW over the shards (clip 0.5) against AdamW over the whole buffer, two steps */
    bt_adamw ref, sh;
    int np;
    bt_tensor **pieces = bt_fsdp_params(f, &np);
    bt_adamw_init(&ref, t.leaves, NLEAF, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f);
    bt_adamw_init(&sh, pieces, np, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f);
    expect(r, sh.numel == f->soff[n_units] && sh.flat_p != NULL, "the pieces tile the shards", 0);
    for (int step = 0; step < 2; step++) {
        bt_fsdp_zero_grad(f);
        bt_zero_(t.grad);
        for (int p = 0; p < W; p++) bt_add_(t.grad, grad_of(p, 5 + step), 1.0 / W);
        bt_tensor *g = grad_of(r, 5 + step);
        for (int u = 0; u < n_units; u++) bt_fsdp_reduce(f, u, bt_narrow(g, 0, units[u].lo, units[u].hi - units[u].lo));
        bt_adamw_step(&ref, 1e-2f);
        bt_adamw_set_grad_norm(&sh, bt_fsdp_grad_norm(f));
        bt_adamw_update(&sh, 1e-2f, f->grad);
    }
    e = relerr(bt_fsdp_full(f, f->param), t.flat);
    double em = relerr(bt_fsdp_full(f, sh.m), ref.m), ev = relerr(bt_fsdp_full(f, sh.v), ref.v);
    expect(r, e < 1e-6 && em < 1e-6 && ev < 1e-6, "AdamW over the shards: weights, m, v", fmax(e, fmax(em, ev)));
    /* the load of a full buffer: its shards, gathered, are the buffer */
    bt_tensor *full = bt_randn(bt_shape1(NUMEL), BT_F32, bt_cpu(), 99), *x2 = bt_zeros(bt_shape1(f->soff[n_units]), BT_F32, bt_cpu());
    bt_fsdp_load(f, full, x2);
    expect(r, same_bits(bt_fsdp_full(f, x2), full), "load then gather", 0);
    bt_adamw_free(&ref); bt_adamw_free(&sh);
    bt_set_grad_enabled(old);
    bt_scope_end();
    bt_fsdp_free(f);
    toy_free(&t);
}
static void check_all(bt_comm *c) {
    check_engine(c, units3, 3, 64);
    check_engine(c, units_small, 4, 1);   /* shards of ceil(2 / W) elements: with 3 ranks the last owns none of unit 3 */
}

static void run_world(int world) { run_store_world(world, check_all, &rank_fails); }
static void test_two_ranks(void) { run_world(2); }
static void test_three_ranks(void) { run_world(3); }

static bt_dist *one_rank(void) {
    static bt_dist_env env;
    bt_dist_opts o;
    return one_rank_init(&env, &o, 1);
}
static void test_one_rank(void) {
    bt_dist *d = one_rank();
    rank_fails = 0;
    check_all(d->world_comm);
    BT_CHECK(rank_fails == 0, "%d mismatches (above)", rank_fails);
    bt_dist_shutdown(d);
}

static void test_errors(void) {
    bt_dist *d = one_rank();
    toy t;
    toy_make(&t, 3);
    bt_comm *c = d->world_comm;
    static const bt_fsdp_unit gap[3] = {{0, 38}, {40, 56}, {56, 94}}, overlap[3] = {{0, 40}, {38, 56}, {56, 94}};
    static const bt_fsdp_unit shortu[2] = {{0, 38}, {38, 90}}, longu[2] = {{0, 38}, {38, 100}}, empty[3] = {{0, 38}, {38, 38}, {38, 94}};
    static const bt_fsdp_unit late[2] = {{2, 38}, {38, 94}};
    BT_EXPECT_ERROR(bt_fsdp_create(c, bt_cpu(), t.leaves, NLEAF, gap, 3, NULL, NULL), "elements [38, 40) are in no unit");
    BT_EXPECT_ERROR(bt_fsdp_create(c, bt_cpu(), t.leaves, NLEAF, late, 2, NULL, NULL), "elements [0, 2) are in no unit");
    BT_EXPECT_ERROR(bt_fsdp_create(c, bt_cpu(), t.leaves, NLEAF, overlap, 3, NULL, NULL), "units 0 and 1 overlap on elements [38, 40)");
    BT_EXPECT_ERROR(bt_fsdp_create(c, bt_cpu(), t.leaves, NLEAF, shortu, 2, NULL, NULL), "the end of the buffer is in no unit");
    BT_EXPECT_ERROR(bt_fsdp_create(c, bt_cpu(), t.leaves, NLEAF, longu, 2, NULL, NULL), "the units run past it");
    BT_EXPECT_ERROR(bt_fsdp_create(c, bt_cpu(), t.leaves, NLEAF, empty, 3, NULL, NULL), "unit 1 is empty");
    BT_EXPECT_ERROR(bt_fsdp_create(c, bt_cpu(), t.leaves, NLEAF, units3, 0, NULL, NULL), "no units");
    bt_tensor *holes[2] = {t.leaves[0], t.leaves[2]};   /* [0, 35) and [40, 52): a hole between */
    BT_EXPECT_ERROR(bt_fsdp_create(c, bt_cpu(), holes, 2, units3, 3, NULL, NULL), "do not tile one buffer");
    bt_fsdp *f = bt_fsdp_create(c, bt_cpu(), t.leaves, NLEAF, units3, 3, t.flat, NULL);
    bt_scope_begin();
    BT_EXPECT_ERROR(bt_fsdp_gather(f, 3, BT_F32), "unit 3; the engine has units 0..2");
    BT_EXPECT_ERROR(bt_fsdp_reduce(f, 0, bt_zeros(bt_shape1(5), BT_F32, bt_cpu())), "unit 0's gradient must be a float tensor of 38 elements");
    BT_EXPECT_ERROR(bt_fsdp_full(f, t.flat), "shard elements");
    bt_scope_end();
    bt_fsdp_free(f);
    toy_free(&t);
    bt_dist_shutdown(d);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    /* the forked worlds first: libgomp's thread pool does not survive a fork */
    BT_RUN(test_two_ranks);
    BT_RUN(test_three_ranks);
    BT_RUN(test_one_rank);
    BT_RUN(test_errors);
    return bt_test_summary("test_fsdp");
}
