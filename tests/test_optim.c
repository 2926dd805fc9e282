/* test_optim.c - bt_optim.h: AdamW (with and without clipping; its state as data: get, set, a
   sharded update equal to the full one on its range; the state offloaded and streamed in chunks,
   the same bits as kept whole; the rounded copy an update writes; the weights in two halves), SGD with momentum, the global gradient norm,
   gradients per unit that hold memory only from their first write to a drop (bt_grads_lazy),
   against hand-written references in double; bt_lr_cosine. */
#include "bt_autograd.h"
#include "bt_optim.h"
#include "tests/bt_test.h"
#pragma GCC diagnostic ignored "-Wclobbered"   /* BT_EXPECT_ERROR's setjmp: a false positive */
#include <stdlib.h>
#include <stdint.h>

#define CPU bt_cpu()
static size_t allocated(void) { return bt_alloc_stats(CPU).allocated; }

/* the part of a flat state tensor (m or v) that belongs to parameter i */
static double *state_of(bt_adamw *opt, bt_tensor *flat, int i) {
    bt_scope_begin();
    double *h = bt_test_host(bt_narrow(flat, 0, opt->offset[i] - opt->lo, bt_numel(opt->params[i])));
    bt_scope_end();
    return h;
}
/* ---------------------------------------------------------------------------------------------
   optimizers
   --------------------------------------------------------------------------------------------- */
/* p.grad = fresh random values (a new tensor each step) */
static void set_grad(bt_tensor *p, double scale) {
    bt_test_drop_grad(p);
    p->grad = bt_test_leaf(bt_shape_of(p), p->dtype, 0);
    if (scale != 1) bt_mul_scalar_(p->grad, scale);
}
/* AdamW as PyTorch writes it: m, v moments, bias corrections, decoupled decay on ndim >= 2 */
typedef struct { double *p, *m, *v; int64_t n; int decay; } ref_param;
static void ref_adamw(ref_param *r, const double *g, double cs, int t, double lr, double b1, double b2, double eps, double wd) {
    double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
    for (int64_t j = 0; j < r->n; j++) {
        double gj = g[j] * cs;
        r->m[j] = b1 * r->m[j] + (1 - b1) * gj;
        r->v[j] = b2 * r->v[j] + (1 - b2) * gj * gj;
        r->p[j] *= 1 - lr * (r->decay ? wd : 0);
        r->p[j] -= lr * (r->m[j] / c1) / (sqrt(r->v[j] / c2) + eps);
    }
}
static void test_adamw(void) {
    size_t base = allocated();
    for (int k = 0; k < 2; k++) {
        bt_dtype dt = k ? BT_F32 : BT_F64;
        double tol = k ? BT_TOL_F32_ROUND : BT_TOL_F64_ROUND;
        bt_tensor *W = bt_test_leaf(bt_shape2(3, 4), dt, 1), *b = bt_test_leaf(bt_shape1(4), dt, 1), *E = bt_test_leaf(bt_shape3(2, 2, 3), dt, 1);
        bt_tensor *ps[3] = {W, b, E};
        bt_adamw opt;
        bt_adamw_init(&opt, ps, 3, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f);
        BT_CHECK(opt.decay[0] == 1 && opt.decay[1] == 0 && opt.decay[2] == 1, "default decay flags %d %d %d", opt.decay[0], opt.decay[1], opt.decay[2]);
        ref_param ref[3];
        for (int i = 0; i < 3; i++) {
            ref[i].n = bt_numel(ps[i]); ref[i].p = bt_test_host(ps[i]); ref[i].decay = ps[i]->ndim >= 2;
            ref[i].m = (double *)calloc((size_t)ref[i].n, sizeof(double)); ref[i].v = (double *)calloc((size_t)ref[i].n, sizeof(double));
        }
        double lrs[3] = {1e-2, 3e-2, 5e-3};
        for (int t = 1; t <= 3; t++) {
            for (int i = 0; i < 3; i++) set_grad(ps[i], 1.0);
            for (int i = 0; i < 3; i++) {
                double *g = bt_test_host(ps[i]->grad);
                ref_adamw(&ref[i], g, 1.0, t, (float)lrs[t - 1], (float)0.9f, (float)0.95f, (float)1e-8f, (float)0.1f);
                free(g);
            }
            bt_adamw_step(&opt, (float)lrs[t - 1]);
            BT_CHECK(opt.step == t, "step counter %lld", (long long)opt.step);
        }
        for (int i = 0; i < 3; i++) {
            double *p = bt_test_host(ps[i]), *m = state_of(&opt, opt.m, i), *v = state_of(&opt, opt.v, i);
            double ep = bt_test_relerr(p, ref[i].p, ref[i].n), em = bt_test_relerr(m, ref[i].m, ref[i].n), ev = bt_test_relerr(v, ref[i].v, ref[i].n);
            BT_CHECK(ep < tol && em < tol && ev < tol, "adamw %s param %d after 3 steps: rel err p %.3g m %.3g v %.3g", bt_dtype_name(dt), i, ep, em, ev);
            free(p); free(m); free(v); free(ref[i].p); free(ref[i].m); free(ref[i].v);
        }
        bt_adamw_free(&opt);
        for (int i = 0; i < 3; i++) bt_release(ps[i]);
    }
    /* parameters without a grad are skipped */
    bt_tensor *p1 = bt_test_leaf(bt_shape2(2, 2), BT_F32, 1), *p2 = bt_test_leaf(bt_shape1(3), BT_F32, 1);
    bt_tensor *pp[2] = {p1, p2};
    double *before = bt_test_host(p2);
    bt_adamw o2;
    bt_adamw_init(&o2, pp, 2, 0.9f, 0.999f, 1e-8f, 0.0f, 0.0f);
    set_grad(p1, 1.0);
    bt_adamw_step(&o2, 0.1f);
    double *after = bt_test_host(p2), *p1h = bt_test_host(p1);
    BT_CHECK(memcmp(before, after, 3 * sizeof(double)) == 0, "a parameter without a grad moved");
    free(before); free(after); free(p1h);
    bt_adamw_free(&o2);
    bt_release(p1); bt_release(p2);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

/* clipping: grad_norm is the true global norm; the update is AdamW's with the grads scaled by
   min(1, max_norm / (norm + 1e-6)) (PyTorch's clip_grad_norm_) */
static void test_adamw_clipping(void) {
    size_t base = allocated();
    struct { double gscale, max_norm, eps; } cases[] = {{1.0, 0.5, 0.1}, {300.0, 1.0, 1.0}, {0.01, 10.0, 1e-3}};
    for (int c = 0; c < 3; c++) {
        bt_tensor *W = bt_test_leaf(bt_shape2(4, 5), BT_F32, 1), *b = bt_test_leaf(bt_shape1(5), BT_F32, 1);
        bt_tensor *ps[2] = {W, b};
        bt_adamw opt;
        bt_adamw_init(&opt, ps, 2, 0.9f, 0.95f, (float)cases[c].eps, 0.1f, (float)cases[c].max_norm);
        ref_param ref[2], refu[2];
        for (int i = 0; i < 2; i++) {
            ref[i].n = refu[i].n = bt_numel(ps[i]); ref[i].p = bt_test_host(ps[i]); refu[i].p = bt_test_host(ps[i]); ref[i].decay = refu[i].decay = ps[i]->ndim >= 2;
            ref[i].m = (double *)calloc(ref[i].n, 8); ref[i].v = (double *)calloc(ref[i].n, 8);
            refu[i].m = (double *)calloc(ref[i].n, 8); refu[i].v = (double *)calloc(ref[i].n, 8);
        }
        for (int t = 1; t <= 3; t++) {
            set_grad(W, cases[c].gscale); set_grad(b, cases[c].gscale);
            double *g[2] = {bt_test_host(W->grad), bt_test_host(b->grad)}, nn = 0;
            for (int i = 0; i < 2; i++) for (int64_t j = 0; j < ref[i].n; j++) nn += g[i][j] * g[i][j];
            double norm = sqrt(nn), cs = fmin(1.0, (float)cases[c].max_norm / (norm + 1e-6));
            for (int i = 0; i < 2; i++) {
                ref_adamw(&ref[i], g[i], cs, t, (float)1e-2, (float)0.9f, (float)0.95f, (float)cases[c].eps, (float)0.1f);
                ref_adamw(&refu[i], g[i], 1.0, t, (float)1e-2, (float)0.9f, (float)0.95f, (float)cases[c].eps, (float)0.1f);
                free(g[i]);
            }
            bt_adamw_step(&opt, 1e-2f);
            double gn = bt_item(opt.grad_norm), csv = bt_item(opt.clip_scale);
            BT_CHECK(fabs(gn - norm) <= BT_TOL_F32_ROUND * norm, "case %d step %d: grad_norm %.9g, true norm %.9g", c, t, gn, norm);
            BT_CHECK(fabs(csv - cs) <= BT_TOL_F32_ROUND * cs, "case %d step %d: clip scale %.9g, want %.9g (rel err %.2g)", c, t, csv, cs, fabs(csv - cs) / cs);
        }
        double moved = 0;
        for (int i = 0; i < 2; i++) {
            double *p = bt_test_host(ps[i]);
            double e = bt_test_relerr(p, ref[i].p, ref[i].n);
            BT_CHECK(e < BT_TOL_F32_ROUND, "case %d: clipped update, param %d: rel err %.3g", c, i, e);
            for (int64_t j = 0; j < ref[i].n; j++) moved = fmax(moved, fabs(ref[i].p[j] - refu[i].p[j]));
            free(p); free(ref[i].p); free(ref[i].m); free(ref[i].v); free(refu[i].p); free(refu[i].m); free(refu[i].v);
        }
        /* when clipping happens it must make a visible difference here, else the test proves nothing */
        if (c < 2) BT_CHECK(moved > 1e-4, "case %d: clipped and unclipped updates differ by only %g", c, moved);
        bt_adamw_free(&opt);
        bt_release(W); bt_release(b);
    }
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

static void test_sgd(void) {
    size_t base = allocated();
    for (int variant = 0; variant < 3; variant++) {
        double mom = variant == 0 ? 0.9 : variant == 1 ? 0.0 : 0.5, wd = variant == 2 ? 0.0 : 0.01;
        bt_tensor *W = bt_test_leaf(bt_shape2(3, 5), BT_F64, 1), *b = bt_test_leaf(bt_shape1(5), BT_F64, 1);
        bt_tensor *ps[2] = {W, b};
        bt_sgd opt;
        bt_sgd_init(&opt, ps, 2, (float)mom, (float)wd);
        double *p[2] = {bt_test_host(W), bt_test_host(b)}, *buf[2] = {calloc(15, 8), calloc(5, 8)};
        double lrs[3] = {0.1, 0.05, 0.2};
        for (int t = 0; t < 3; t++) {
            for (int i = 0; i < 2; i++) {
                set_grad(ps[i], 1.0);
                double *g = bt_test_host(ps[i]->grad);
                for (int64_t j = 0; j < bt_numel(ps[i]); j++) {
                    double d = g[j] + (float)wd * p[i][j];
                    if (mom != 0) { buf[i][j] = t == 0 ? d : (float)mom * buf[i][j] + d; d = buf[i][j]; }
                    p[i][j] -= (float)lrs[t] * d;
                }
                free(g);
            }
            bt_sgd_step(&opt, (float)lrs[t]);
        }
        for (int i = 0; i < 2; i++) {
            double *h = bt_test_host(ps[i]);
            double e = bt_test_relerr(h, p[i], bt_numel(ps[i]));
            BT_CHECK(e < BT_TOL_F64_ROUND, "sgd momentum %g wd %g param %d: rel err %.3g", mom, wd, i, e);
            free(h); free(p[i]); free(buf[i]);
        }
        bt_sgd_free(&opt);
        bt_release(W); bt_release(b);
    }
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

static void test_lr_cosine(void) {
    double mx = 6e-4, mn = 6e-5;
    int warm = 10, total = 110;
    BT_CHECK(fabs(bt_lr_cosine(0, warm, total, mx, mn) - mx / 10) < 1e-18, "warmup step 0: %g", bt_lr_cosine(0, warm, total, mx, mn));
    BT_CHECK(fabs(bt_lr_cosine(4, warm, total, mx, mn) - mx * 5 / 10) < 1e-18, "warmup step 4: %g", bt_lr_cosine(4, warm, total, mx, mn));
    BT_CHECK(fabs(bt_lr_cosine(9, warm, total, mx, mn) - mx) < 1e-18, "end of warmup: %g", bt_lr_cosine(9, warm, total, mx, mn));
    for (int s = 1; s < warm; s++)
        BT_CHECK(fabs((bt_lr_cosine(s, warm, total, mx, mn) - bt_lr_cosine(s - 1, warm, total, mx, mn)) - mx / warm) < 1e-15, "warmup is not linear at %d", s);
    BT_CHECK(fabs(bt_lr_cosine(warm, warm, total, mx, mn) - mx) < 1e-15, "start of decay: %g", bt_lr_cosine(warm, warm, total, mx, mn));
    BT_CHECK(fabs(bt_lr_cosine(60, warm, total, mx, mn) - (mx + mn) / 2) < 1e-15, "cosine midpoint: %g, want %g", bt_lr_cosine(60, warm, total, mx, mn), (mx + mn) / 2);
    double q = mn + 0.5 * (mx - mn) * (1 + cos(3.14159265358979323846 * 0.25));
    BT_CHECK(fabs(bt_lr_cosine(35, warm, total, mx, mn) - q) < 1e-15, "cosine quarter: %g, want %g", bt_lr_cosine(35, warm, total, mx, mn), q);
    int mono = 1;
    for (int s = warm + 1; s <= total; s++) mono &= bt_lr_cosine(s, warm, total, mx, mn) <= bt_lr_cosine(s - 1, warm, total, mx, mn);
    BT_CHECK(mono, "decay is not monotone");
    BT_CHECK(fabs(bt_lr_cosine(total, warm, total, mx, mn) - mn) < 1e-18 && bt_lr_cosine(total + 500, warm, total, mx, mn) == mn, "floor after total");
    BT_CHECK(fabs(bt_lr_cosine(total - 1, warm, total, mx, mn) - mn) < 1e-6 && bt_lr_cosine(total - 1, warm, total, mx, mn) > mn, "approach to the floor");
    BT_CHECK(bt_lr_cosine(0, 0, 100, mx, mn) == mx, "no warmup: step 0 is max_lr, got %g", bt_lr_cosine(0, 0, 100, mx, mn));
}

static void test_grad_norm(void) {
    size_t base = allocated();
    bt_tensor *a = bt_test_leaf(bt_shape2(3, 4), BT_F32, 1), *b = bt_test_leaf(bt_shape1(5), BT_F32, 1), *c = bt_test_leaf(bt_shape1(2), BT_F32, 1);
    set_grad(a, 2.0); set_grad(b, 1.0);               /* c has no grad */
    bt_tensor *ps[3] = {a, b, c};
    double *ga = bt_test_host(a->grad), *gb = bt_test_host(b->grad), s = 0;
    for (int i = 0; i < 12; i++) s += ga[i] * ga[i];
    for (int i = 0; i < 5; i++) s += gb[i] * gb[i];
    bt_tensor *n = bt_grad_norm(ps, 3);               /* no scope open: ours */
    BT_CHECK(n->dtype == BT_F32 && bt_numel(n) == 1 && fabs(bt_item(n) - sqrt(s)) < BT_TOL_F32_ROUND * sqrt(s), "grad_norm %g, want %g", bt_item(n), sqrt(s));
    bt_release(n);
    bt_tensor *n0 = bt_grad_norm(&c, 1);
    BT_CHECK(bt_item(n0) == 0, "grad_norm with no grads: %g", bt_item(n0));
    bt_release(n0);
    free(ga); free(gb);
    bt_release(a); bt_release(b); bt_release(c);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

/* The state as data: parameters that tile one buffer index m, v in the buffer's order; two shards
   [0, s) and [s, n) updated separately equal one full update; set_state round-trips and checks. */
static void test_adamw_state_and_shards(void) {
    size_t base = allocated();
    /* a flat buffer of 3 parameters in a different order than the list */
    bt_tensor *flat = bt_test_leaf(bt_shape1(12 + 5 + 8), BT_F64, 0), *gflat = bt_test_leaf(bt_shape1(25), BT_F64, 0);
    bt_tensor *full[3], *sh[3];
    int64_t offs[3] = {13, 0, 5}, sizes[3] = {12, 5, 8};
    bt_shape shapes[3] = {bt_shape2(3, 4), bt_shape1(5), bt_shape2(2, 4)};
    bt_tensor *copy = bt_test_leaf(bt_shape1(25), BT_F64, 0);
    bt_copy_(copy, flat);
    for (int i = 0; i < 3; i++) {
        bt_scope_begin();
        full[i] = bt_keep(bt_view(bt_narrow(flat, 0, offs[i], sizes[i]), shapes[i]));
        sh[i] = bt_keep(bt_view(bt_narrow(copy, 0, offs[i], sizes[i]), shapes[i]));
        bt_scope_end();
        full[i]->requires_grad = sh[i]->requires_grad = 1;
    }
    bt_adamw a, b1, b2;
    bt_adamw_init(&a, full, 3, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f);
    BT_CHECK(a.flat_p != NULL && a.offset[0] == 13 && a.offset[1] == 0 && a.offset[2] == 5 && a.numel == 25,
             "offsets follow the buffer: %lld %lld %lld", (long long)a.offset[0], (long long)a.offset[1], (long long)a.offset[2]);
    bt_adamw_init(&b1, sh, 3, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f);
    bt_adamw_init(&b2, sh, 3, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f);
    bt_adamw_shard(&b1, 0, 9);            /* cuts parameter 2 (offset 5) in two */
    bt_adamw_shard(&b2, 9, 25);
    BT_CHECK(bt_numel(b1.m) == 9 && bt_numel(b2.v) == 16, "shard sizes %lld %lld", (long long)bt_numel(b1.m), (long long)bt_numel(b2.v));
    for (int t = 0; t < 3; t++) {
        bt_uniform_(gflat, -1, 1, 99 + (uint64_t)t, 0);
        for (int i = 0; i < 3; i++) {
            bt_test_drop_grad(full[i]); bt_test_drop_grad(sh[i]);
            bt_scope_begin();
            full[i]->grad = bt_keep(bt_clone(bt_view(bt_narrow(gflat, 0, offs[i], sizes[i]), shapes[i])));
            sh[i]->grad = bt_keep(bt_clone(full[i]->grad));
            bt_scope_end();
        }
        bt_adamw_step(&a, 1e-2f);
        bt_scope_begin();
        bt_tensor *n = bt_full(bt_shape1(1), 1.0, BT_F32, CPU);
        bt_adamw_set_grad_norm(&b1, n); bt_adamw_set_grad_norm(&b2, n);
        bt_adamw_update(&b1, 1e-2f, NULL);                               /* the params' own grads */
        bt_adamw_update(&b2, 1e-2f, bt_narrow(gflat, 0, 9, 16));          /* a reduced shard */
        bt_scope_end();
    }
    double *pa = bt_test_host(flat), *pb = bt_test_host(copy);
    BT_CHECK(bt_test_relerr(pb, pa, 25) < BT_TOL_F64_ROUND, "two shards vs one full update: rel err %.3g", bt_test_relerr(pb, pa, 25));
    double *ma = bt_test_host(a.m), *m1 = bt_test_host(b1.m), *m2 = bt_test_host(b2.m);
    int same = 1;
    for (int j = 0; j < 25; j++) same &= ma[j] == (j < 9 ? m1[j] : m2[j - 9]);
    BT_CHECK(same, "the shards' m is not the full m's range");
    free(pa); free(pb); free(ma); free(m1); free(m2);
    /* set_state: copy a's state into a fresh optimizer; one more step then agrees */
    bt_adamw c;
    bt_adamw_init(&c, sh, 3, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f);
    bt_copy_(copy, flat);
    bt_adamw_set_state(&c, a.m, a.v, a.step);
    BT_CHECK(c.step == 3, "step after set_state: %lld", (long long)c.step);
    for (int i = 0; i < 3; i++) { bt_scope_begin(); bt_copy_(sh[i]->grad, full[i]->grad); bt_scope_end(); }
    bt_adamw_step(&a, 1e-2f); bt_adamw_step(&c, 1e-2f);
    pa = bt_test_host(flat); pb = bt_test_host(copy);
    BT_CHECK(bt_test_relerr(pb, pa, 25) == 0, "a restored state steps differently: %.3g", bt_test_relerr(pb, pa, 25));
    free(pa); free(pb);
    bt_scope_begin();
    BT_EXPECT_ERROR(bt_adamw_set_state(&c, bt_zeros(bt_shape1(24), BT_F64, CPU), c.v, 1), "must hold 25 elements");
    BT_EXPECT_ERROR(bt_adamw_shard(&c, 5, 30), "not inside");
    BT_EXPECT_ERROR(bt_adamw_update(&c, 1e-2f, bt_zeros(bt_shape1(7), BT_F64, CPU)), "adamw_update: grad");
    bt_scope_end();
    bt_adamw_free(&a); bt_adamw_free(&b1); bt_adamw_free(&b2); bt_adamw_free(&c);
    for (int i = 0; i < 3; i++) { bt_release(full[i]); bt_release(sh[i]); }
    bt_release(flat); bt_release(copy); bt_release(gflat);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

/* The offloaded state streamed in chunks gives the same bits as the state kept whole: parameters
   in one buffer (one pass over the decay runs) or apart (one pass per parameter), chunk sizes that
   cut parameters and runs anywhere, clipping on, a ZeRO-like range; then set_state and the errors.
   The same check on a GPU, with pinned memory and the copy streams, is test_ops_gpu's. */
/* 1 when the n tensors of x and y hold the same values, element for element */
static int same_values(bt_tensor **x, bt_tensor **y, int n) {
    int same = 1;
    for (int i = 0; i < n; i++) {
        double *a = bt_test_host(x[i]), *b = bt_test_host(y[i]);
        for (int64_t j = 0; j < bt_numel(x[i]); j++) same &= a[j] == b[j];
        free(a); free(b);
    }
    return same;
}
/* o's copy holds o's parameters rounded to the copy's dtype on [lo, hi) and NaN (unwritten) elsewhere */
static int copy_matches(bt_adamw *o, bt_tensor *copy) {
    double *c = bt_test_host(copy);
    int ok = 1;
    for (int i = 0; i < o->n; i++) {
        bt_scope_begin();
        double *r = bt_test_host(bt_cast(o->params[i], copy->dtype));
        bt_scope_end();
        for (int64_t j = 0; j < bt_numel(o->params[i]); j++) {
            int64_t x = o->offset[i] + j;
            ok &= x >= o->lo && x < o->hi ? c[x] == r[j] : c[x] != c[x];
        }
        free(r);
    }
    free(c);
    return ok;
}
static void test_adamw_offload(void) {
    size_t base = allocated();
    int64_t sizes[4] = {12, 5, 8, 3}, offs[4] = {8, 0, 20, 5};   /* buffer order: 1, 3, 0, 2 */
    bt_shape shapes[4] = {bt_shape2(3, 4), bt_shape1(5), bt_shape2(2, 4), bt_shape1(3)};
    int64_t chunks[4] = {1, 3, 7, 1000};
    for (int flat_case = 0; flat_case < 2; flat_case++)
        for (int ci = 0; ci < 4; ci++)
            for (int sh = 0; sh < 2; sh++) {
                bt_dtype dt = ci % 2 ? BT_F32 : BT_F64;
                bt_tensor *buf[2], *ps[2][4];
                for (int k = 0; k < 2; k++) {
                    buf[k] = bt_zeros(bt_shape1(28), dt, CPU);
                    bt_uniform_(buf[k], -1, 1, 5, 0);
                    for (int i = 0; i < 4; i++) {
                        bt_scope_begin();
                        ps[k][i] = flat_case ? bt_keep(bt_view(bt_narrow(buf[k], 0, offs[i], sizes[i]), shapes[i]))
                                             : bt_keep(bt_clone(bt_view(bt_narrow(buf[k], 0, offs[i], sizes[i]), shapes[i])));
                        bt_scope_end();
                        ps[k][i]->requires_grad = 1;
                    }
                }
                bt_adamw a, b;
                bt_adamw_init(&a, ps[0], 4, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f);
                bt_adamw_init_offload(&b, ps[1], 4, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, chunks[ci]);
                BT_CHECK(b.offload != NULL && bt_device_of(b.m).type == BT_CPU, "offloaded state");
                BT_CHECK((a.flat_p != NULL) == flat_case, "flat case %d: flat_p %p", flat_case, (void *)a.flat_p);
                if (sh) { bt_adamw_shard(&a, 6, 23); bt_adamw_shard(&b, 6, 23); }
                bt_tensor *cp[2] = {bt_full(bt_shape1(28), NAN, BT_BF16, CPU), bt_full(bt_shape1(28), NAN, BT_F32, CPU)};
                bt_adamw_set_copy(&a, cp[0]); bt_adamw_set_copy(&b, cp[1]);   /* a rounded copy written by the update */
                bt_release(cp[0]); bt_release(cp[1]);
                for (int t = 0; t < 3; t++) {
                    /* one buffer: the gradients tile one too (the single pass over the runs) */
                    bt_tensor *gbuf[2] = {bt_zeros(bt_shape1(28), dt, CPU), bt_zeros(bt_shape1(28), dt, CPU)};
                    bt_uniform_(gbuf[0], -3, 3, 77 + (uint64_t)t, 0);   /* a norm above 0.5: clipped */
                    bt_copy_(gbuf[1], gbuf[0]);
                    for (int k = 0; k < 2; k++)
                        for (int i = 0; i < 4; i++) {
                            bt_test_drop_grad(ps[k][i]);
                            bt_scope_begin();
                            bt_tensor *g = bt_view(bt_narrow(gbuf[k], 0, offs[i], sizes[i]), shapes[i]);
                            ps[k][i]->grad = bt_keep(flat_case ? g : bt_clone(g));
                            bt_scope_end();
                        }
                    bt_release(gbuf[0]); bt_release(gbuf[1]);
                    bt_adamw_step(&a, 1e-2f); bt_adamw_step(&b, 1e-2f);
                }
                bt_adamw_wait(&b);
                bt_tensor *sa[2] = {a.m, a.v}, *sb[2] = {b.m, b.v};
                int same = same_values(ps[0], ps[1], 4) && same_values(sa, sb, 2);
                BT_CHECK(same, "offloaded (chunk %lld, %s, %s) differs from the state kept whole", (long long)chunks[ci],
                         flat_case ? "one buffer" : "apart", sh ? "range [6, 23)" : "all");
                BT_CHECK(copy_matches(&a, a.copy) && copy_matches(&b, b.copy), "the update's copy (chunk %lld, %s, %s) is not "
                         "the parameters rounded on its range", (long long)chunks[ci], flat_case ? "one buffer" : "apart", sh ? "range [6, 23)" : "all");
                /* a state set into the offloaded optimizer: one more step agrees again */
                if (ci == 2 && !sh) {
                    bt_adamw c;
                    bt_adamw_init_offload(&c, ps[1], 4, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 4);
                    bt_adamw_set_state(&c, a.m, a.v, a.step);
                    for (int i = 0; i < 4; i++) { bt_scope_begin(); bt_copy_(ps[1][i], ps[0][i]); bt_scope_end(); }
                    bt_adamw_step(&a, 1e-2f); bt_adamw_step(&c, 1e-2f);
                    bt_adamw_wait(&c);
                    BT_CHECK(same_values(ps[0], ps[1], 4), "a state set into an offloaded optimizer steps differently (%s)", flat_case ? "one buffer" : "apart");
                    bt_adamw_free(&c);
                }
                bt_adamw_free(&a); bt_adamw_free(&b);
                for (int k = 0; k < 2; k++) { for (int i = 0; i < 4; i++) { bt_test_drop_grad(ps[k][i]); bt_release(ps[k][i]); } bt_release(buf[k]); }
            }
    bt_tensor *w = bt_test_leaf(bt_shape1(4), BT_F32, 1);
    bt_adamw d;
    BT_EXPECT_ERROR(bt_adamw_init_offload(&d, &w, 1, 0.9f, 0.95f, 1e-8f, 0.1f, 0.f, -1), "chunk -1");
    bt_adamw_init(&d, &w, 1, 0.9f, 0.95f, 1e-8f, 0.1f, 0.f);
    bt_scope_begin();
    BT_EXPECT_ERROR(bt_adamw_set_copy(&d, bt_zeros(bt_shape1(5), BT_BF16, CPU)), "of 4 elements");
    bt_scope_end();
    bt_adamw_free(&d);
    bt_release(w);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

/* THE WEIGHTS IN TWO HALVES. In place f32 -> halves -> f32 on bit patterns with the edges (ties,
   carries into the exponent and to infinity, subnormals, zeros, NaN), the storage's tail past them
   untouched, the data movers refusing the f32 view meanwhile; then AdamW over a split buffer
   against AdamW writing a bf16 copy: the same fp32 bits (joined), m and v, and the high halves
   equal to the copy except at ties, where they are the value rounded away from zero. */
static void test_adamw_halves(void) {
    size_t base = allocated();
    {
        const int64_t n = 4099;
        uint32_t edge[] = {0x00000000u, 0x80000000u, 0x00008000u, 0x80008000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu,
                           0xff7f8000u, 0x7f800000u, 0xff800000u, 0x00000001u, 0x007fffffu, 0x7fc00000u};
        int ne = (int)(sizeof edge / sizeof edge[0]);
        bt_tensor *buf = bt_zeros(bt_shape1(n + 5), BT_F32, CPU);
        uint32_t *u = (uint32_t *)bt_data_ptr(buf), *orig = (uint32_t *)malloc(sizeof(uint32_t) * (size_t)(n + 5));
        uint64_t x = 0x9e3779b97f4a7c15ull;
        for (int64_t i = 0; i < n + 5; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            u[i] = i < ne ? edge[i] : (uint32_t)x & 0xbfffffffu;   /* finite (exponent below all-ones) past the edges */
        }
        memcpy(orig, u, sizeof(uint32_t) * (size_t)(n + 5));
        bt_tensor *w = bt_narrow(buf, 0, 0, n);
        int64_t chunk = bt_f32_halves_chunk(1000);   /* five chunks, the last short: the order of the in-place moves */
        bt_f32_split_(w);
        BT_CHECK(buf->storage->halves == n, "halves %lld, expected %lld", (long long)buf->storage->halves, (long long)n);
        const uint16_t *h = (const uint16_t *)u;
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float f; memcpy(&f, &orig[i], 4);
            bad += h[i] != bt__f32_hi16(f) || h[n + i] != bt__f32_lo16(f);
        }
        for (int64_t i = n; i < n + 5; i++) bad += u[i] != orig[i];
        BT_CHECK(bad == 0, "%lld halves (or tail elements) wrong", (long long)bad);
        bt_tensor *hi = bt_f32_halves_hi(w);
        BT_CHECK(hi->dtype == BT_BF16 && bt_numel(hi) == n && bt_data_ptr(hi) == (void *)u, "the high halves' view");
        BT_CHECK(h[4] == 0x3f81 && h[3] == 0x8001 && h[5] == 0x3f82 && h[9] == 0x7f80, "ties away from zero: %04x %04x %04x %04x",
                 h[4], h[3], h[5], h[9]);
        float tmp[4];
        bt_tensor *other = bt_zeros(bt_shape1(n), BT_F32, CPU);
        BT_EXPECT_ERROR(bt_to_host(w, tmp, BT_F32), "two halves");
        BT_EXPECT_ERROR(bt_copy_(other, w), "two halves");
        BT_EXPECT_ERROR(bt_copy_(w, other), "two halves");
        BT_EXPECT_ERROR(bt_f32_split_(w), "in two halves already");
        bt_release(other);
        bt_f32_join_(w);
        BT_CHECK(buf->storage->halves == 0, "joined: halves %lld", (long long)buf->storage->halves);
        bad = 0;
        for (int64_t i = 0; i < n + 5; i++) {
            float f; memcpy(&f, &u[i], 4);
            bad += orig[i] == 0x7fc00000u ? f == f : u[i] != orig[i];
        }
        BT_CHECK(bad == 0, "%lld of %lld values not the same bits after split and join", (long long)bad, (long long)n + 5);
        BT_EXPECT_ERROR(bt_f32_join_(w), "not in two halves");
        bt_f32_halves_chunk(chunk);
        bt_tensor *mid = bt_narrow(buf, 0, 1, 4);
        BT_EXPECT_ERROR(bt_f32_split_(mid), "start of its storage");
        bt_release(mid); bt_release(hi); bt_release(w); bt_release(buf); free(orig);
    }
    /* AdamW: two parameters tiling one buffer (decay on the matrix only), 3 steps, clipped; a third
       optimizer in halves with its state offloaded, streamed in chunks that cut the parameters */
    const int64_t R = 400, C = 250, N = R * C + 7;
    bt_tensor *buf[3], *ps[3][2];
    for (int k = 0; k < 3; k++) {
        buf[k] = bt_zeros(bt_shape1(N), BT_F32, CPU);
        bt_uniform_(buf[k], -1, 1, 11, 0);
        bt_scope_begin();
        ps[k][0] = bt_keep(bt_view(bt_narrow(buf[k], 0, 0, R * C), bt_shape2(R, C)));
        ps[k][1] = bt_keep(bt_narrow(buf[k], 0, R * C, 7));
        bt_scope_end();
        ps[k][0]->requires_grad = ps[k][1]->requires_grad = 1;
    }
    bt_adamw a, b, c;
    bt_adamw_init(&a, ps[0], 2, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    bt_adamw_init(&b, ps[1], 2, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
    bt_adamw_init_offload(&c, ps[2], 2, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 9973);
    bt_tensor *hic = bt_adamw_split(&c);
    bt_tensor *copy = bt_full(bt_shape1(N), NAN, BT_BF16, CPU);
    bt_adamw_set_copy(&a, copy);
    bt_adamw_set_copy(&b, copy);   /* dropped by the split */
    bt_tensor *hi = bt_adamw_split(&b);
    BT_CHECK(b.split && b.copy == NULL && buf[1]->storage->halves == N, "split: flag %d, copy %p, halves %lld", b.split,
             (void *)b.copy, (long long)buf[1]->storage->halves);
    BT_EXPECT_ERROR(bt_adamw_set_copy(&b, copy), "two halves");
    BT_EXPECT_ERROR(bt_adamw_split(&b), "already");
    int64_t all_ties = 0;
    for (int t = 0; t < 3; t++) {
        bt_tensor *g = bt_zeros(bt_shape1(N), BT_F32, CPU);
        bt_uniform_(g, -0.02, 0.02, 300 + (uint64_t)t, 0);
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 2; i++) {
                bt_test_drop_grad(ps[k][i]);
                bt_scope_begin();
                ps[k][i]->grad = bt_keep(bt_view(bt_narrow(g, 0, i ? R * C : 0, i ? 7 : R * C), bt_shape_of(ps[k][i])));
                bt_scope_end();
            }
        bt_release(g);
        bt_adamw_step(&a, 1e-2f); bt_adamw_step(&b, 1e-2f); bt_adamw_step(&c, 1e-2f);
        BT_CHECK(!memcmp(bt_data_ptr(buf[1]), bt_data_ptr(buf[2]), sizeof(float) * (size_t)N), "step %d: halves with the state "
                 "offloaded differ from halves on the device", t + 1);
        bt_tensor *sc[2] = {c.m, c.v}, *sa0[2] = {a.m, a.v};
        BT_CHECK(same_values(sa0, sc, 2), "step %d: the offloaded m or v differ", t + 1);
        const uint32_t *pa = (const uint32_t *)bt_data_ptr(buf[0]);
        const uint16_t *hb = (const uint16_t *)bt_data_ptr(buf[1]), *cp = (const uint16_t *)bt_data_ptr(copy);
        int64_t bad_p = 0, bad_c = 0, ties = 0;
        for (int64_t i = 0; i < N; i++) {
            float f = bt__f32_join16(hb[i], hb[N + i]), fa;
            memcpy(&fa, &pa[i], 4);
            bad_p += memcmp(&f, &pa[i], 4) != 0;
            int tie = (pa[i] & 0xffffu) == 0x8000u;
            ties += tie;
            bad_c += hb[i] != bt__f32_hi16(fa) || (!tie && hb[i] != cp[i]);
        }
        all_ties += ties;
        BT_CHECK(bad_p == 0 && bad_c == 0, "step %d: %lld joined weights differ from the plain update's, %lld high halves from the copy "
                 "(%lld ties)", t + 1, (long long)bad_p, (long long)bad_c, (long long)ties);
        bt_tensor *sa[2] = {a.m, a.v}, *sb[2] = {b.m, b.v};
        BT_CHECK(same_values(sa, sb, 2), "step %d: m or v differ", t + 1);
    }
    BT_CHECK(all_ties > 0, "no weight fell on a tie in 3 steps: the tie branch is untested (another seed)");
    bt_adamw_join(&b);
    BT_CHECK(!b.split && buf[1]->storage->halves == 0 && !memcmp(bt_data_ptr(buf[0]), bt_data_ptr(buf[1]), sizeof(float) * (size_t)N),
             "joined: not the plain update's bits");
    bt_adamw_shard(&b, 0, 100);
    BT_EXPECT_ERROR(bt_adamw_split(&b), "a shard");
    bt_adamw_join(&c);
    BT_CHECK(!memcmp(bt_data_ptr(buf[0]), bt_data_ptr(buf[2]), sizeof(float) * (size_t)N), "halves, offloaded, joined: not the plain "
             "update's bits");
    bt_adamw_free(&a); bt_adamw_free(&b); bt_adamw_free(&c);
    bt_release(hi); bt_release(hic); bt_release(copy);
    for (int k = 0; k < 3; k++) { for (int i = 0; i < 2; i++) { bt_test_drop_grad(ps[k][i]); bt_release(ps[k][i]); } bt_release(buf[k]); }
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

/* bt_zeros_lazy: no memory until the data is used, zeros then, given back by bt_lazy_drop (zeros
   again). bt_grads_lazy: a two-layer model whose parameters and gradients tile one buffer each,
   its gradients moved to two units; two backward passes (accumulated) give the flat buffer's bits,
   the norm and two AdamW steps the same, a drop frees the units' memory. */
static void grads_model(bt_tensor *flat, bt_tensor *gflat, bt_tensor **ps) {
    static const int64_t shp[4][2] = {{4, 3}, {4, 0}, {2, 4}, {2, 0}};
    int64_t off = 0;
    for (int i = 0; i < 4; i++) {
        int64_t n = shp[i][1] ? shp[i][0] * shp[i][1] : shp[i][0];
        bt_shape sh = shp[i][1] ? bt_shape2(shp[i][0], shp[i][1]) : bt_shape1(shp[i][0]);
        bt_scope_begin();
        ps[i] = bt_keep(bt_view(bt_narrow(flat, 0, off, n), sh));
        bt_set_requires_grad(ps[i], 1);
        ps[i]->grad = bt_keep(bt_view(bt_narrow(gflat, 0, off, n), sh));
        bt_scope_end();
        off += n;
    }
}
static void grads_backward(bt_tensor **ps, int seed) {
    bt_scope_begin();
    bt_tensor *x = bt_randn(bt_shape2(5, 3), BT_F32, CPU, (uint64_t)seed);
    bt_tensor *y = bt_linear(bt_tanh(bt_linear(x, ps[0], ps[1])), ps[2], ps[3]);
    bt_backward(bt_sum(bt_mul(y, y), NULL, 0, 0));
    bt_scope_end();
}
static void test_grads_lazy(void) {
    size_t base = allocated();
    bt_tensor *z = bt_zeros_lazy(bt_shape2(3, 5), BT_F32, CPU), *plain = bt_zeros(bt_shape1(2), BT_F32, CPU);
    size_t with_plain = allocated();
    BT_CHECK(!bt_lazy_held(z) && bt_lazy_held(plain), "held before use: lazy %d, plain %d", bt_lazy_held(z), bt_lazy_held(plain));
    double *h = bt_test_host(z);
    int zeros = 1;
    for (int i = 0; i < 15; i++) zeros &= h[i] == 0;
    free(h);
    BT_CHECK(zeros && bt_lazy_held(z) && allocated() > with_plain, "first use: zeros %d, held %d, %zu bytes more", zeros, bt_lazy_held(z),
             allocated() - with_plain);
    bt_fill_(z, 2.0);
    bt_lazy_drop(z);
    BT_CHECK(!bt_lazy_held(z) && allocated() == with_plain, "after a drop: held %d, %lld bytes more", bt_lazy_held(z),
             (long long)(allocated() - with_plain));
    bt_scope_begin();
    BT_CHECK(bt_item(bt_sum(z, NULL, 0, 0)) == 0, "a dropped lazy tensor does not read as zeros");
    bt_scope_end();
    BT_EXPECT_ERROR(bt_lazy_drop(plain), "not a lazy tensor");
    bt_release(z); bt_release(plain);

    const int64_t n = 12 + 4 + 8 + 2, lo[3] = {0, 16, 26};
    bt_tensor *flat[2], *gflat[2], *ps[2][4];
    for (int k = 0; k < 2; k++) {
        flat[k] = bt_randn(bt_shape1(n), BT_F32, CPU, 5);
        gflat[k] = bt_zeros(bt_shape1(n), BT_F32, CPU);
        grads_model(flat[k], gflat[k], ps[k]);
    }
    int64_t cut[3] = {0, 14, 26};   /* 14 is inside b1 */
    BT_EXPECT_ERROR(bt_grads_lazy(ps[1], 4, cut, 2), "not inside one unit");
    bt_tensor **units = bt_grads_lazy(ps[1], 4, lo, 2);
    size_t before = allocated();
    BT_CHECK(!bt_lazy_held(units[0]) && !bt_lazy_held(units[1]) && ps[1][2]->grad->storage == units[1]->storage &&
             ps[1][1]->grad->offset == 12, "the units' gradients before any backward");
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 2; k++) grads_backward(ps[k], 40 + t);
    BT_CHECK(bt_lazy_held(units[0]) && bt_lazy_held(units[1]) && allocated() > before, "the backward did not take the units' memory");
    int same = 1;
    for (int i = 0; i < 4; i++) {
        double *a = bt_test_host(ps[0][i]->grad), *b = bt_test_host(ps[1][i]->grad);
        for (int64_t j = 0; j < bt_numel(ps[0][i]); j++) same &= a[j] == b[j] && a[j] != 0;
        free(a); free(b);
    }
    BT_CHECK(same, "the units' gradients differ from the flat buffer's (or are zero)");
    bt_tensor *n0 = bt_grad_norm(ps[0], 4), *n1 = bt_grad_norm(ps[1], 4);
    BT_CHECK(bt_item(n0) == bt_item(n1) && bt_item(n0) > 0, "norms %g (flat) and %g (units)", bt_item(n0), bt_item(n1));
    bt_release(n0); bt_release(n1);
    bt_adamw opt[2];
    for (int k = 0; k < 2; k++) {
        bt_adamw_init(&opt[k], ps[k], 4, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);
        bt_adamw_step(&opt[k], 1e-2f);
    }
    size_t held = allocated();
    bt_grads_drop(units, 2);
    BT_CHECK(!bt_lazy_held(units[0]) && !bt_lazy_held(units[1]) && allocated() + (size_t)n * 4 <= held, "a drop gave back %lld bytes",
             (long long)(held - allocated()));
    bt_zero_(gflat[0]);
    grads_backward(ps[0], 50); grads_backward(ps[1], 50);
    for (int k = 0; k < 2; k++) bt_adamw_step(&opt[k], 1e-2f);
    double *a = bt_test_host(flat[0]), *b = bt_test_host(flat[1]);
    same = 1;
    for (int64_t j = 0; j < n; j++) same &= a[j] == b[j];
    free(a); free(b);
    BT_CHECK(same, "two AdamW steps over the units' gradients differ from the flat buffer's");
    for (int k = 0; k < 2; k++) {
        bt_adamw_free(&opt[k]);
        for (int i = 0; i < 4; i++) { bt_test_drop_grad(ps[k][i]); bt_release(ps[k][i]); }
        bt_release(flat[k]); bt_release(gflat[k]);
    }
    bt_grads_free(units, 2);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

int main(void) {
    bt_test_seed = 7000;
    BT_RUN(test_adamw);
    BT_RUN(test_adamw_clipping);
    BT_RUN(test_adamw_state_and_shards);
    BT_RUN(test_adamw_offload);
    BT_RUN(test_adamw_halves);
    BT_RUN(test_sgd);
    BT_RUN(test_lr_cosine);
    BT_RUN(test_grad_norm);
    BT_RUN(test_grads_lazy);
    return bt_test_summary("test_optim");
}
