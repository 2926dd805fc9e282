/* test_autograd.c - the engine of bt_autograd.h: shared subexpressions, accumulation, no-grad mode,
   errors and the state they leave, saved tensors freed during backward, gradient-ready hooks (their
   order, handles, the no-sync switch). The optimizers are tested in test_optim.c. */
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_AUTOGRAD_IMPLEMENTATION
#include "bt_autograd.h"
#include "tests/bt_test.h"
#pragma GCC diagnostic ignored "-Wclobbered"   /* BT_EXPECT_ERROR's setjmp: a false positive */
#include <stdlib.h>
#include <stdint.h>

#define CPU bt_cpu()
static size_t allocated(void) { return bt_alloc_stats(CPU).allocated; }

/* ---------------------------------------------------------------------------------------------
   the engine
   --------------------------------------------------------------------------------------------- */
static void test_shared_subexpressions(void) {
    size_t base = allocated();
    bt_tensor *x = bt_test_leaf(bt_shape1(7), BT_F64, 1);
    double *xh = bt_test_host(x);
    bt_scope_begin();
    bt_tensor *y = bt_add(bt_mul(x, x), bt_mul(x, x));        /* x used four times: dy/dx = 4x */
    bt_backward(bt_sum(y, NULL, 0, 0));
    bt_scope_end();
    double *g = bt_test_host(x->grad), want[7];
    for (int i = 0; i < 7; i++) want[i] = 4 * xh[i];
    BT_CHECK(bt_test_relerr(g, want, 7) < BT_TOL_F64_ROUND, "x*x + x*x: rel err %g", bt_test_relerr(g, want, 7));
    free(g); bt_test_drop_grad(x);
    /* a diamond through an intermediate used by three consumers: a = exp(x), f = a*a + tanh(a) + a */
    bt_scope_begin();
    bt_tensor *a = bt_exp(x);
    bt_backward(bt_sum(bt_add(bt_add(bt_mul(a, a), bt_tanh(a)), a), NULL, 0, 0));
    bt_scope_end();
    g = bt_test_host(x->grad);
    for (int i = 0; i < 7; i++) { double e = exp(xh[i]), t = tanh(e); want[i] = (2 * e + (1 - t * t) + 1) * e; }
    BT_CHECK(bt_test_relerr(g, want, 7) < BT_TOL_F64_ULP, "diamond: rel err %g", bt_test_relerr(g, want, 7));
    free(g); free(xh);
    bt_release(x);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

static void test_accumulation_and_zero_grad(void) {
    size_t base = allocated();
    bt_tensor *w = bt_test_leaf(bt_shape2(3, 4), BT_F32, 1), *x = bt_test_leaf(bt_shape2(5, 4), BT_F32, 0);
    double *once = NULL;
    for (int pass = 0; pass < 3; pass++) {
        bt_scope_begin();
        bt_backward(bt_mean(bt_square(bt_linear(x, w, NULL)), NULL, 0, 0));
        bt_scope_end();
        double *g = bt_test_host(w->grad);
        if (pass == 0) once = g;
        else {
            double want[12];
            for (int i = 0; i < 12; i++) want[i] = (pass + 1) * once[i];
            BT_CHECK(bt_test_relerr(g, want, 12) < BT_TOL_F32_ROUND, "after %d backward calls the grad is not %d times one: rel err %g",
                     pass + 1, pass + 1, bt_test_relerr(g, want, 12));
            free(g);
        }
    }
    bt_tensor *grad_before = w->grad;
    bt_zero_grad(&w, 1);
    double *z = bt_test_host(w->grad); int zero = 1;
    for (int i = 0; i < 12; i++) zero &= z[i] == 0;
    free(z);
    BT_CHECK(zero && w->grad == grad_before, "zero_grad did not zero the grad in place");
    bt_scope_begin();
    bt_backward(bt_mean(bt_square(bt_linear(x, w, NULL)), NULL, 0, 0));
    bt_scope_end();
    double *g = bt_test_host(w->grad);
    BT_CHECK(bt_test_relerr(g, once, 12) <= BT_TOL_EXACT, "after zero_grad one backward differs from the single grad by %g", bt_test_relerr(g, once, 12));
    free(g); free(once);
    bt_tensor *none = NULL;
    bt_tensor *ps[2] = {x, none};
    bt_zero_grad(ps, 2);                                /* no grad, NULL: nothing to do */
    BT_CHECK(x->grad == NULL, "zero_grad made a grad");
    bt_release(w); bt_release(x);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

static void test_no_grad(void) {
    size_t base = allocated();
    bt_tensor *x = bt_test_leaf(bt_shape2(3, 3), BT_F32, 1);
    bt_scope_begin();
    int old = bt_set_grad_enabled(0);
    BT_CHECK(old == 1 && !bt_grad_enabled(), "grad mode switch");
    bt_tensor *y = bt_matmul(bt_tanh(x), x), *v = bt_transpose(x, 0, 1);
    BT_CHECK(y->grad_fn == NULL && !y->requires_grad && v->grad_fn == NULL, "no-grad mode recorded a graph");
    BT_EXPECT_ERROR(bt_backward(bt_sum(y, NULL, 0, 0)), "does not require grad");
    bt_set_grad_enabled(old);
    bt_tensor *y2 = bt_matmul(bt_tanh(x), x);
    BT_CHECK(y2->grad_fn != NULL && y2->requires_grad, "grad mode back on: no graph");
    /* inputs that do not require grad record nothing either */
    bt_tensor *c = bt_test_leaf(bt_shape2(3, 3), BT_F32, 0);
    bt_tensor *y3 = bt_exp(bt_add(c, c));
    BT_CHECK(y3->grad_fn == NULL && !y3->requires_grad, "an op on constants recorded a graph");
    bt_release(c);
    bt_scope_end();
    BT_CHECK(x->grad == NULL, "no backward ran, yet x has a grad");
    bt_release(x);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

/* a hook counting its calls */
typedef struct { int calls; int order[8]; int n; } hook_log;
/* remove every hook of t through its handles */
static void unhook(bt_tensor *t) { while (t->hooks) bt_remove_grad_hook(t->hooks); }
static void count_hook(bt_tensor *leaf_, void *user) { (void)leaf_; ((hook_log *)user)->calls++; }

static void test_backward_errors(void) {
    size_t base = allocated();
    bt_tensor *x = bt_test_leaf(bt_shape1(6), BT_F64, 1), *w = bt_test_leaf(bt_shape1(6), BT_F64, 1);
    bt_scope_begin();
    BT_EXPECT_ERROR(bt_backward(bt_exp(x)), "single element");
    bt_tensor *loss = bt_sum(bt_exp(x), NULL, 0, 0);
    bt_backward(loss);
    BT_EXPECT_ERROR(bt_backward(loss), "already run");
    /* a new graph that reaches into the consumed one */
    bt_tensor *mid = bt_tanh(x), *l1 = bt_sum(mid, NULL, 0, 0);
    bt_backward(l1);
    BT_EXPECT_ERROR(bt_backward(bt_sum(bt_mul(mid, w), NULL, 0, 0)), "already run");
    BT_EXPECT_ERROR(bt_backward_with(loss, bt_zeros(bt_shape1(2), BT_F64, CPU)), "backward");
    bt_scope_end();
    bt_test_drop_grad(x); bt_test_drop_grad(w);
    BT_CHECK(bt__g.scope_depth == 0, "errors left %d scopes open", bt__g.scope_depth);
    BT_CHECK(bt_grad_enabled(), "errors left grad mode off");
    /* in place: mul saves x and w; x changes under no-grad; backward must refuse */
    hook_log hx = {0};
    bt_register_grad_hook(x, count_hook, &hx);
    bt_scope_begin();
    bt_tensor *l2 = bt_sum(bt_mul(bt_exp(x), w), NULL, 0, 0);
    int old = bt_set_grad_enabled(0);
    bt_add_(x, bt_full(bt_shape1(6), 0.5, BT_F64, CPU), 1.0);
    bt_set_grad_enabled(old);
    BT_EXPECT_ERROR(bt_backward(l2), "modified in place");
    bt_scope_end();
    BT_CHECK(bt__g.scope_depth == 0, "the in-place error left %d scopes open", bt__g.scope_depth);
    BT_CHECK(bt_grad_enabled(), "the in-place error left grad mode off");
    BT_CHECK(x->grad == NULL && w->grad == NULL && hx.calls == 0, "a refused backward changed grads or fired hooks");
    /* the engine still works, and the leaf's hook fires once */
    bt_scope_begin();
    bt_backward(bt_sum(bt_mul(bt_exp(x), w), NULL, 0, 0));
    bt_scope_end();
    BT_CHECK(hx.calls == 1, "after an error, x's hook fired %d times in one backward", hx.calls);
    double *g = bt_test_host(x->grad), *xh = bt_test_host(x), *wh = bt_test_host(w), want[6];
    for (int i = 0; i < 6; i++) want[i] = exp(xh[i]) * wh[i];
    BT_CHECK(bt_test_relerr(g, want, 6) < BT_TOL_F64_ULP, "backward after an error: rel err %g", bt_test_relerr(g, want, 6));
    free(g); free(xh); free(wh);
    unhook(x);
    /* a modification through a view of a saved tensor counts too (the version is the storage's) */
    bt_tensor *big = bt_test_leaf(bt_shape2(4, 6), BT_F64, 1);
    bt_scope_begin();
    bt_tensor *l3 = bt_sum(bt_square(bt_narrow(big, 0, 1, 2)), NULL, 0, 0);
    old = bt_set_grad_enabled(0);
    bt_fill_(bt_select(big, 0, 3), 1.0);      /* another row of the same storage */
    bt_set_grad_enabled(old);
    BT_EXPECT_ERROR(bt_backward(l3), "square");
    bt_scope_end();
    BT_EXPECT_ERROR(bt_register_grad_hook(NULL, count_hook, NULL), "register_grad_hook");
    bt_release(big); bt_release(x); bt_release(w);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

/* saved tensors are released as soon as their node has run, not when the graph is freed */
typedef struct { size_t at; int calls; } alloc_probe;
static void probe_hook(bt_tensor *l, void *user) { (void)l; ((alloc_probe *)user)->at = allocated(); ((alloc_probe *)user)->calls++; }
static void test_saved_tensors_freed(void) {
    size_t base = allocated();
    int64_t n = 1 << 16;                       /* 256 KB per f32 tensor */
    bt_tensor *x = bt_test_leaf(bt_shape1(n), BT_F32, 1), *w = bt_test_leaf(bt_shape1(n), BT_F32, 1);
    size_t X = bt_alloc_size(x->storage->data);
    alloc_probe early = {0, 0}, late = {0, 0};
    bt_register_grad_hook(w, probe_hook, &late);     /* w is used last: its grad is ready first */
    bt_register_grad_hook(x, probe_hook, &early);    /* x is used first: its grad is ready last */
    /* no scope: the intermediates are released by us at once, so only the graph holds them */
    bt_tensor *a = bt_exp(x), *b = bt_tanh(a), *c = bt_mul(b, b), *d = bt_mul(c, w), *loss = bt_sum(d, NULL, 0, 0);
    bt_release(a); bt_release(b); bt_release(c); bt_release(d);
    size_t after_fwd = allocated();
    BT_CHECK(after_fwd >= base + 5 * X, "the graph should hold x, w, a, b, c: %zu KB over base", (after_fwd - base) >> 10);
    bt_backward(loss);
    size_t after_bwd = allocated();
    BT_CHECK(late.calls == 1 && early.calls == 1, "hooks fired %d and %d times", late.calls, early.calls);
    BT_CHECK(early.at + X < late.at, "nothing was freed between the last and the first leaf's hooks: %zu KB vs %zu KB",
             early.at >> 10, late.at >> 10);
    /* left: x, w, their grads, the loss; every saved intermediate is gone while loss still holds the graph */
    BT_CHECK(after_bwd <= base + 4 * X + 4096, "after backward %zu KB over base (want ~%zu KB)", (after_bwd - base) >> 10, (4 * X) >> 10);
    BT_CHECK(loss->grad_fn != NULL, "the loss lost its graph");
    bt_release(loss);
    unhook(x); unhook(w);
    bt_release(x); bt_release(w);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
    /* bt_free_graph drops a graph that will not be run */
    bt_tensor *p = bt_test_leaf(bt_shape1(n), BT_F32, 1);
    bt_tensor *q = bt_exp(p), *th = bt_tanh(q), *r = bt_sum(th, NULL, 0, 0);
    bt_release(q); bt_release(th);            /* tanh saved its input q: only the graph holds q now */
    size_t held = allocated();
    bt_free_graph(r);
    BT_CHECK(r->grad_fn == NULL && allocated() + X <= held, "free_graph kept %zu KB", (allocated() - base) >> 10);
    bt_release(r); bt_release(p);
    BT_CHECK(allocated() == base, "free_graph leaked %lld bytes", (long long)(allocated() - base));
}

/* gradient-ready hooks: once per leaf per backward, in reverse order of use, with the final grad */
typedef struct { bt_tensor **leaves; int n; int order[16]; int count; double grad_sum[16]; } order_log;
static void order_hook(bt_tensor *l, void *user) {
    order_log *o = (order_log *)user;
    for (int i = 0; i < o->n; i++)
        if (o->leaves[i] == l && o->count < 16) {
            o->order[o->count] = i;
            double *g = bt_test_host(l->grad), s = 0;
            for (int64_t j = 0; j < bt_numel(l); j++) s += g[j];
            free(g);
            o->grad_sum[o->count++] = s;
        }
}
static void test_hooks_order(void) {
    size_t base = allocated();
    bt_tensor *x = bt_test_leaf(bt_shape2(2, 3), BT_F64, 0);
    bt_tensor *w1 = bt_test_leaf(bt_shape2(4, 3), BT_F64, 1), *b1 = bt_test_leaf(bt_shape1(4), BT_F64, 1);
    bt_tensor *w2 = bt_test_leaf(bt_shape2(5, 4), BT_F64, 1), *w3 = bt_test_leaf(bt_shape2(2, 5), BT_F64, 1);
    bt_tensor *ps[4] = {w1, b1, w2, w3};
    order_log log = {ps, 4, {0}, 0, {0}};
    for (int i = 3; i >= 0; i--) bt_register_grad_hook(ps[i], order_hook, &log);
    for (int pass = 0; pass < 2; pass++) {
        log.count = 0;
        bt_scope_begin();
        bt_tensor *h = bt_tanh(bt_linear(x, w1, b1));
        h = bt_tanh(bt_linear(h, w2, NULL));
        bt_backward(bt_sum(bt_linear(h, w3, NULL), NULL, 0, 0));
        bt_scope_end();
        BT_CHECK(log.count == 4, "pass %d: %d hook calls for 4 leaves", pass, log.count);
        BT_CHECK(log.count == 4 && log.order[0] == 3 && log.order[1] == 2 && log.order[2] <= 1 && log.order[3] <= 1 && log.order[2] != log.order[3],
                 "pass %d: hook order %d %d %d %d, want w3 w2 then w1, b1", pass, log.order[0], log.order[1], log.order[2], log.order[3]);
        /* the grad seen by the hook is the finished one */
        for (int k = 0; k < log.count; k++) {
            double *g = bt_test_host(ps[log.order[k]]->grad), s = 0;
            for (int64_t j = 0; j < bt_numel(ps[log.order[k]]); j++) s += g[j];
            free(g);
            BT_CHECK(s == log.grad_sum[k], "pass %d: leaf %d's grad changed after its hook (%g vs %g)", pass, log.order[k], log.grad_sum[k], s);
        }
    }
    for (int i = 0; i < 4; i++) unhook(ps[i]);
    /* one leaf used by several nodes, and by several layers: its hook fires once, after its last use */
    bt_tensor *w = bt_test_leaf(bt_shape2(3, 3), BT_F64, 1), *u = bt_test_leaf(bt_shape2(3, 3), BT_F64, 1);
    bt_tensor *pw[2] = {w, u};
    order_log l2 = {pw, 2, {0}, 0, {0}};
    bt_register_grad_hook(w, order_hook, &l2);
    bt_register_grad_hook(u, order_hook, &l2);
    bt_scope_begin();
    bt_tensor *h = bt_linear(x, w, NULL);                      /* w first */
    h = bt_linear(bt_tanh(h), u, NULL);                        /* then u */
    h = bt_add(bt_linear(bt_tanh(h), w, NULL), bt_mul(h, h));  /* w again, last */
    bt_backward(bt_sum(h, NULL, 0, 0));
    bt_scope_end();
    BT_CHECK(l2.count == 2 && l2.order[0] == 1 && l2.order[1] == 0, "shared leaf: %d calls, order %d %d (want u then w)", l2.count, l2.order[0], l2.order[1]);
    double *gw = bt_test_host(w->grad), s = 0;
    for (int j = 0; j < 9; j++) s += gw[j];
    free(gw);
    BT_CHECK(l2.count == 2 && s == l2.grad_sum[1], "w's hook saw a partial gradient: %g vs %g", l2.grad_sum[1], s);
    unhook(w); unhook(u);
    /* independent branches ready at the same time: the newest node runs first, so the parameter
       used last gets its hook first (DDP all-reduces it while the earlier layers still compute) */
    bt_tensor *pb[3] = {w, u, NULL};
    order_log l3 = {pb, 2, {0}, 0, {0}};
    bt_register_grad_hook(w, order_hook, &l3);
    bt_register_grad_hook(u, order_hook, &l3);
    for (int flip = 0; flip < 2; flip++) {
        l3.count = 0;
        bt_scope_begin();
        bt_tensor *first = bt_linear(x, flip ? u : w, NULL);
        bt_tensor *second = bt_linear(x, flip ? w : u, NULL);
        bt_tensor *tail1 = bt_sum(bt_tanh(first), NULL, 0, 0);
        bt_tensor *tail2 = bt_sum(bt_tanh(second), NULL, 0, 0);
        bt_backward(bt_add(tail1, tail2));
        bt_scope_end();
        BT_CHECK(l3.count == 2 && l3.order[0] == (flip ? 0 : 1), "branches (flip %d): first hook for %s, want %s",
                 flip, l3.order[0] ? "u" : "w", flip ? "w" : "u");
    }
    unhook(w); unhook(u);
    bt_test_drop_grad(w); bt_test_drop_grad(u);
    /* a leaf reached by no gradient (its consumer's output is unused) still gets its hook once */
    bt_tensor *side = bt_test_leaf(bt_shape1(3), BT_F64, 1);
    hook_log hs = {0};
    bt_register_grad_hook(side, count_hook, &hs);
    bt_register_grad_hook(w, count_hook, &hs);
    bt_scope_begin();
    bt_tensor *parts[2]; int64_t sz[2] = {1, 2};
    bt_split(bt_mul(side, side), sz, 2, 0, parts);
    bt_backward(bt_add(bt_sum(parts[0], NULL, 0, 0), bt_sum(bt_linear(x, w, NULL), NULL, 0, 0)));
    bt_scope_end();
    BT_CHECK(hs.calls == 2, "hooks: %d calls, want 2", hs.calls);
    unhook(side); unhook(w);
    bt_release(x); bt_release(w1); bt_release(b1); bt_release(w2); bt_release(w3); bt_release(w); bt_release(u); bt_release(side);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

/* a chain of many nodes: no recursion in the engine, in the release of the graph or of its nodes */
static void test_deep_graph(void) {
    size_t base = allocated();
    int depth = bt_test_quick() ? 5000 : 50000;
    bt_tensor *x = bt_test_leaf(bt_shape1(3), BT_F64, 1);
    bt_scope_begin();
    bt_tensor *y = x;
    for (int i = 0; i < depth; i++) y = bt_affine(y, 1.0, 1e-3);
    bt_backward(bt_sum(bt_scale(y, 2.0), NULL, 0, 0));
    bt_scope_end();
    double *g = bt_test_host(x->grad);
    BT_CHECK(g[0] == 2 && g[1] == 2 && g[2] == 2, "deep chain grad %g %g %g", g[0], g[1], g[2]);
    free(g);
    /* and a deep graph freed without running it */
    bt_tensor *z = x;
    for (int i = 0; i < depth; i++) { bt_tensor *n = bt_tanh(z); if (z != x) bt_release(z); z = n; }
    bt_release(z);
    bt_release(x);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

static void test_backward_with_seed(void) {
    bt_tensor *x = bt_test_leaf(bt_shape2(2, 3), BT_F64, 1);
    bt_scope_begin();
    bt_tensor *y = bt_square(x), *seed = bt_randn(bt_shape2(2, 3), BT_F64, CPU, 77);
    bt_backward_with(y, seed);
    double *g = bt_test_host(x->grad), *xh = bt_test_host(x), *sh = bt_test_host(seed), want[6];
    for (int i = 0; i < 6; i++) want[i] = 2 * xh[i] * sh[i];
    BT_CHECK(bt_test_relerr(g, want, 6) < BT_TOL_F64_ROUND, "backward_with: rel err %g", bt_test_relerr(g, want, 6));
    free(g); free(xh); free(sh);
    /* a leaf as the output: its grad is the seed */
    bt_test_drop_grad(x);
    bt_backward_with(x, seed);
    double *g2 = bt_test_host(x->grad), *s2 = bt_test_host(seed);
    BT_CHECK(bt_test_relerr(g2, s2, 6) == 0, "backward_with on a leaf");
    free(g2); free(s2);
    bt_scope_end();
    bt_release(x);
}


/* hooks are per tensor, removable by handle, fire in registration order, and can be held back */
static void test_hook_handles(void) {
    size_t base = allocated();
    bt_tensor *x = bt_test_leaf(bt_shape1(5), BT_F64, 0), *w = bt_test_leaf(bt_shape1(5), BT_F64, 1);
    hook_log a = {0}, b = {0};
    order_log seq = {NULL, 0, {0}, 0, {0}};
    bt_hook *ha = bt_register_grad_hook(w, count_hook, &a), *hb = bt_register_grad_hook(w, count_hook, &b);
    BT_CHECK(ha && hb && ha != hb && w->hooks == ha && ha->next == hb, "two hooks on one tensor, in order");
    bt_remove_grad_hook(ha);
    bt_scope_begin(); bt_backward(bt_sum(bt_mul(x, w), NULL, 0, 0)); bt_scope_end();
    BT_CHECK(a.calls == 0 && b.calls == 1, "after removing one of two hooks: calls %d and %d (want 0 and 1)", a.calls, b.calls);
    bt_hook stranger = {count_hook, &a, w, NULL};
    BT_EXPECT_ERROR(bt_remove_grad_hook(&stranger), "not a hook");
    /* no sync: two micro-batches accumulate without firing, the third fires once */
    bt_test_drop_grad(w); b.calls = 0;
    for (int k = 0; k < 3; k++) {
        int old = bt_set_grad_hooks_enabled(k == 2);
        bt_scope_begin(); bt_backward(bt_sum(bt_mul(x, w), NULL, 0, 0)); bt_scope_end();
        bt_set_grad_hooks_enabled(old);
        BT_CHECK(b.calls == (k == 2), "micro-batch %d: the hook fired %d times", k, b.calls);
    }
    double *g = bt_test_host(w->grad), *xh = bt_test_host(x), want[5];
    for (int i = 0; i < 5; i++) want[i] = 3 * xh[i];
    BT_CHECK(bt_test_relerr(g, want, 5) < BT_TOL_F64_ROUND, "the held-back micro-batches did not accumulate");
    free(g); free(xh);
    /* registration order with several hooks */
    bt_tensor *ls[1] = {w};
    seq.leaves = ls; seq.n = 1;
    bt_register_grad_hook(w, order_hook, &seq);
    bt_scope_begin(); bt_backward(bt_sum(bt_mul(x, w), NULL, 0, 0)); bt_scope_end();
    BT_CHECK(b.calls == 2 && seq.count == 1, "both remaining hooks fired once: %d, %d", b.calls - 1, seq.count);
    unhook(w);
    BT_CHECK(w->hooks == NULL, "unhook left hooks");
    /* a tensor released with its hooks frees them (LeakSanitizer checks) */
    bt_register_grad_hook(w, count_hook, &a);
    bt_release(x); bt_release(w);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

/* gradient sinks: a linear's weight and bias gradients land in the leaves' existing .grad (views of
   one flat buffer, as GPT-2's) by accumulation, equal to the ordinary path, with hooks on time */
static void test_grad_sink(void) {
    size_t base = allocated();
    bt_tensor *x = bt_test_leaf(bt_shape2(6, 5), BT_F32, 0);
    bt_tensor *flat = bt_test_leaf(bt_shape1(4 * 5 + 4), BT_F32, 0), *gflat = bt_test_leaf(bt_shape1(24), BT_F32, 0);
    bt_tensor *w, *b, *w2 = bt_test_leaf(bt_shape2(4, 5), BT_F32, 1), *b2 = bt_test_leaf(bt_shape1(4), BT_F32, 1);
    bt_scope_begin();
    w = bt_keep(bt_view(bt_narrow(flat, 0, 0, 20), bt_shape2(4, 5)));
    b = bt_keep(bt_narrow(flat, 0, 20, 4));
    bt_copy_(w2, w); bt_copy_(b2, b);
    w->requires_grad = b->requires_grad = 1;
    w->grad = bt_keep(bt_view(bt_narrow(gflat, 0, 0, 20), bt_shape2(4, 5)));
    b->grad = bt_keep(bt_narrow(gflat, 0, 20, 4));
    bt_scope_end();
    double *g0 = bt_test_host(gflat);
    bt_scope_begin();
    bt_tensor *probe = bt_linear(x, w, b), *probe2 = bt_linear(x, w2, b2);
    BT_CHECK(bt__grad_sink(probe->grad_fn, 1, BT_F32) == w->grad && bt__grad_sink(probe->grad_fn, 2, BT_F32) == b->grad,
             "the linear node does not see its leaves' grads as sinks");
    BT_CHECK(bt__grad_sink(probe2->grad_fn, 1, BT_F32) == NULL, "a leaf without a grad is a sink");
    bt_scope_end();
    hook_log hw = {0};
    bt_register_grad_hook(w, count_hook, &hw);
    for (int pass = 0; pass < 2; pass++) {
        bt_scope_begin();
        bt_backward(bt_sum(bt_tanh(bt_linear(x, w, b)), NULL, 0, 0));     /* into the existing grads */
        bt_backward(bt_sum(bt_tanh(bt_linear(x, w2, b2)), NULL, 0, 0));   /* fresh leaves: the ordinary path */
        bt_scope_end();
    }
    double *gw = bt_test_host(w->grad), *gb = bt_test_host(b->grad), *rw = bt_test_host(w2->grad), *rb = bt_test_host(b2->grad), want[24];
    for (int i = 0; i < 24; i++) want[i] = g0[i] + (i < 20 ? rw[i] : rb[i - 20]);
    double ew = bt_test_relerr(gw, want, 20), eb = bt_test_relerr(gb, want + 20, 4);
    BT_CHECK(ew < BT_TOL_F32_ROUND && eb < BT_TOL_F32_ROUND, "sunk gradients differ from the ordinary path: w %.3g b %.3g", ew, eb);
    BT_CHECK(hw.calls == 2, "the weight's hook fired %d times in 2 passes", hw.calls);
    free(g0); free(gw); free(gb); free(rw); free(rb);
    unhook(w);
    bt_release(w); bt_release(b); bt_release(w2); bt_release(b2); bt_release(flat); bt_release(gflat); bt_release(x);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

/* a leaf's existing .grad in another float dtype (bf16 gradients of an f32 model) keeps its dtype */
static void test_grad_other_dtype(void) {
    size_t base = allocated();
    bt_tensor *x = bt_test_leaf(bt_shape1(6), BT_F32, 1);
    bt_scope_begin();
    x->grad = bt_keep(bt_zeros(bt_shape1(6), BT_BF16, CPU));
    bt_scope_end();
    for (int k = 0; k < 2; k++) { bt_scope_begin(); bt_backward(bt_sum(bt_square(x), NULL, 0, 0)); bt_scope_end(); }
    double *g = bt_test_host(x->grad), *xh = bt_test_host(x), e = 0;
    for (int i = 0; i < 6; i++) e = fmax(e, fabs(g[i] - 4 * xh[i]) / fabs(4 * xh[i]));
    BT_CHECK(x->grad->dtype == BT_BF16 && e < BT_TOL_BF16_OP, "bf16 grad of an f32 leaf: dtype %s, rel err %.3g", bt_dtype_name(x->grad->dtype), e);
    free(g); free(xh);
    bt_release(x);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

/* A cast of a leaf whose .grad has the cast's dtype (bf16 gradients of an fp32 master, f32 of f64):
   the engine adds the gradient into .grad as it is (no cast up and back). The bits are those of the
   rounding the long way gives: .grad = round(.grad + g) with g exact in the leaf's dtype. A bf16
   leaf cast to f32 with an f32 .grad still goes through its cast (g rounded to bf16 first), and the
   leaf's hook fires once per pass either way. */
static void test_cast_into_grad(void) {
    size_t base = allocated();
    const bt_dtype lo[3] = {BT_BF16, BT_F16, BT_F32}, hi[3] = {BT_F32, BT_F32, BT_F64};
    for (int k = 0; k < 4; k++) {
        bt_dtype ld = k < 3 ? hi[k] : BT_BF16, cd = k < 3 ? lo[k] : BT_F32;   /* leaf dtype, cast (and .grad) dtype */
        bt_tensor *x = bt_test_leaf(bt_shape1(64), ld, 1);
        hook_log hits = {0};
        bt_register_grad_hook(x, count_hook, &hits);
        bt_scope_begin();
        bt_tensor *g0 = bt_cast(bt_randn(bt_shape1(64), BT_F32, CPU, 40 + k), cd), *c = bt_cast(bt_randn(bt_shape1(64), BT_F32, CPU, 50 + k), cd);
        x->grad = bt_keep(bt_clone(g0));
        bt_tensor *want = bt_add(g0, k < 3 ? c : bt_cast(bt_cast(c, BT_BF16), BT_F32));   /* k = 3: g rounded to the bf16 leaf */
        bt_backward(bt_sum(bt_mul(bt_cast(x, cd), c), NULL, 0, 0));
        BT_CHECK(x->grad->dtype == cd && !memcmp(bt_data_ptr(x->grad), bt_data_ptr(want), (size_t)64 * bt_dtype_size(cd)),
                 "%s leaf, %s cast: .grad is not round(.grad + g)", bt_dtype_name(ld), bt_dtype_name(cd));
        BT_CHECK(hits.calls == 1, "%s leaf, %s cast: the hook fired %d times", bt_dtype_name(ld), bt_dtype_name(cd), hits.calls);
        bt_scope_end();
        bt_release(x);
    }
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

/* ---------------------------------------------------------------------------------------------
   activation checkpointing (bt_checkpoint)
   --------------------------------------------------------------------------------------------- */
/* a residual block's shape: x + linear(gelu(linear(layernorm(x, g, b), w1, b1)), w2, b2), the
   parameters leaves reached through ctx, x an op result (two consumers inside the region) */
typedef struct { bt_tensor *g, *b, *w1, *b1, *w2, *b2; int nested; } ck_params;
static bt_tensor *ck_inner(void *ctx, bt_tensor **in) {
    ck_params *p = (ck_params *)ctx;
    return bt_linear(bt_gelu(bt_linear(in[0], p->w1, p->b1)), p->w2, p->b2);
}
static bt_tensor *ck_block(void *ctx, bt_tensor **in) {
    ck_params *p = (ck_params *)ctx;
    bt_tensor *h = bt_layernorm(in[0], p->g, p->b, 1e-5);
    bt_tensor *u = p->nested ? bt_checkpoint(ck_inner, p, sizeof *p, &h, 1) : ck_inner(p, &h);
    return bt_add(in[0], u);
}
static ck_params ck_make(bt_dtype dt, int C, int F) {
    ck_params p = {bt_test_leaf(bt_shape1(C), dt, 1), bt_test_leaf(bt_shape1(C), dt, 1), bt_test_leaf(bt_shape2(F, C), dt, 1),
                   bt_test_leaf(bt_shape1(F), dt, 1), bt_test_leaf(bt_shape2(C, F), dt, 1), bt_test_leaf(bt_shape1(C), dt, 1), 0};
    return p;
}
static void ck_free(ck_params *p) { bt_release(p->g); bt_release(p->b); bt_release(p->w1); bt_release(p->b1); bt_release(p->w2); bt_release(p->b2); }
static bt_tensor **ck_list(ck_params *p, bt_tensor *x0) { static bt_tensor *l[7]; l[0] = p->g; l[1] = p->b; l[2] = p->w1; l[3] = p->b1; l[4] = p->w2; l[5] = p->b2; l[6] = x0; return l; }
/* loss = sum(tanh(block2(block1(tanh(x0))))^2), each block checkpointed when mode is 1 (2: the MLP
   inside each block checkpointed too, nested) */
static bt_tensor *ck_loss(ck_params *p1, ck_params *p2, bt_tensor *x0, int mode) {
    p1->nested = p2->nested = mode == 2;
    bt_tensor *x = bt_tanh(x0);
    x = mode ? bt_checkpoint(ck_block, p1, sizeof *p1, &x, 1) : ck_block(p1, &x);
    x = mode ? bt_checkpoint(ck_block, p2, sizeof *p2, &x, 1) : ck_block(p2, &x);
    return bt_sum(bt_square(bt_tanh(x)), NULL, 0, 0);
}
/* the gradients of both blocks' parameters and x0, as one f64 array of n */
static double *ck_grads(ck_params *p1, ck_params *p2, bt_tensor *x0, long *n) {
    bt_tensor *all[13];
    memcpy(all, ck_list(p1, x0), sizeof(bt_tensor *) * 6); memcpy(all + 6, ck_list(p2, x0), sizeof(bt_tensor *) * 7);
    long tot = 0;
    for (int i = 0; i < 13; i++) tot += (long)bt_numel(all[i]);
    double *g = (double *)malloc(sizeof(double) * (size_t)tot);
    long k = 0;
    for (int i = 0; i < 13; i++) {
        double *gi = bt_test_host(all[i]->grad);
        memcpy(g + k, gi, sizeof(double) * (size_t)bt_numel(all[i])); k += (long)bt_numel(all[i]);
        free(gi); bt_test_drop_grad(all[i]);
    }
    *n = tot;
    return g;
}
static void test_checkpoint_exact(void) {
    size_t base = allocated();
    enum { N = 6, C = 8, F = 16 };
    ck_params p1 = ck_make(BT_F32, C, F), p2 = ck_make(BT_F32, C, F);
    bt_tensor *x0 = bt_test_leaf(bt_shape2(N, C), BT_F32, 1);
    hook_log hw = {0};
    bt_register_grad_hook(p1.w1, count_hook, &hw);
    double loss[3]; double *g[3]; long n = 0;
    size_t held[3];
    for (int mode = 0; mode < 3; mode++) {
        for (int rep = 0; rep < 2; rep++) {   /* twice: the second adds into the first's gradients */
            bt_scope_begin();
            bt_tensor *l = ck_loss(&p1, &p2, x0, mode);
            if (rep == 0) held[mode] = allocated() - base;   /* what the graph (and the scope) holds after the forward */
            bt_backward(l);
            loss[mode] = bt_item(l);
            bt_scope_end();
        }
        g[mode] = ck_grads(&p1, &p2, x0, &n);
    }
    for (int mode = 1; mode < 3; mode++) {
        BT_CHECK(loss[mode] == loss[0], "mode %d: loss %.9g, unwrapped %.9g", mode, loss[mode], loss[0]);
        BT_CHECK(!memcmp(g[mode], g[0], sizeof(double) * (size_t)n), "mode %d: gradients differ from the unwrapped chain's", mode);
        BT_CHECK(held[mode] < held[0], "mode %d: the forward holds %zu bytes, unwrapped %zu", mode, held[mode], held[0]);
    }
    BT_CHECK(hw.calls == 6, "a parameter's hook fired %d times in 6 passes", hw.calls);
    for (int mode = 0; mode < 3; mode++) free(g[mode]);
    unhook(p1.w1);
    /* no grad mode: fn itself; an input returned as it is gets a struct of its own */
    bt_scope_begin();
    int og = bt_set_grad_enabled(0);
    bt_tensor *t = bt_tanh(x0), *y = bt_checkpoint(ck_block, &p1, sizeof p1, &t, 1);
    BT_CHECK(!y->grad_fn, "grad mode off: a node was recorded (%s)", y->grad_fn ? y->grad_fn->op : "");
    bt_set_grad_enabled(og);
    bt_scope_end();
    BT_EXPECT_ERROR(bt_checkpoint(ck_block, &p1, sizeof p1, NULL, 1), "checkpoint: fn, and inputs");
    ck_free(&p1); ck_free(&p2); bt_release(x0);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}
/* the checkpointed chain's gradients in f64 against central differences of its loss */
static void test_checkpoint_gradcheck(void) {
    size_t base = allocated();
    enum { N = 3, C = 4, F = 6 };
    ck_params p1 = ck_make(BT_F64, C, F), p2 = ck_make(BT_F64, C, F);
    bt_tensor *x0 = bt_test_leaf(bt_shape2(N, C), BT_F64, 1);
    bt_scope_begin();
    bt_backward(ck_loss(&p1, &p2, x0, 2));
    bt_scope_end();
    bt_tensor *all[13];
    memcpy(all, ck_list(&p1, x0), sizeof(bt_tensor *) * 6); memcpy(all + 6, ck_list(&p2, x0), sizeof(bt_tensor *) * 7);
    double worst = 0;
    const double h = 1e-6;
    for (int i = 0; i < 13; i++) {
        double *ga = bt_test_host(all[i]->grad), *v = (double *)bt_data_ptr(all[i]);
        for (int64_t k = 0; k < bt_numel(all[i]); k++) {
            double keep = v[k], lp, lm;
            int og = bt_set_grad_enabled(0);
            bt_scope_begin();
            v[k] = keep + h; lp = bt_item(ck_loss(&p1, &p2, x0, 2));
            v[k] = keep - h; lm = bt_item(ck_loss(&p1, &p2, x0, 2));
            bt_scope_end();
            bt_set_grad_enabled(og);
            v[k] = keep;
            double fd = (lp - lm) / (2 * h), e = fabs(fd - ga[k]) / fmax(1.0, fabs(fd));
            if (e > worst) worst = e;
        }
        free(ga);
    }
    BT_CHECK(worst < BT_TOL_FD, "checkpointed gradients against central differences: worst error %.3g", worst);
    for (int i = 0; i < 13; i++) bt_test_drop_grad(all[i]);
    ck_free(&p1); ck_free(&p2); bt_release(x0);
    BT_CHECK(allocated() == base, "leaked %lld bytes", (long long)(allocated() - base));
}

int main(void) {
    bt_test_seed = 5000;
    BT_RUN(test_shared_subexpressions);
    BT_RUN(test_accumulation_and_zero_grad);
    BT_RUN(test_no_grad);
    BT_RUN(test_backward_errors);
    BT_RUN(test_saved_tensors_freed);
    BT_RUN(test_hooks_order);
    BT_RUN(test_hook_handles);
    BT_RUN(test_grad_sink);
    BT_RUN(test_grad_other_dtype);
    BT_RUN(test_cast_into_grad);
    BT_RUN(test_deep_graph);
    BT_RUN(test_backward_with_seed);
    BT_RUN(test_checkpoint_exact);
    BT_RUN(test_checkpoint_gradcheck);
    return bt_test_summary("test_autograd");
}
