/* bt_autograd.h - BluTrain-C reverse-mode autograd engine and optimizers, v0.1.

   USAGE
     #define BT_AUTOGRAD_IMPLEMENTATION (with BT_TENSOR_ and BT_ALLOC_IMPLEMENTATION) in *one* file.

     bt_scope_begin();
     bt_tensor *loss = model_forward(...);     // ops record nodes (bt_tensor.h)
     bt_backward(loss);                        // grads accumulate into each leaf's ->grad
     bt_scope_end();
     bt_adamw_step(&opt, lr);                  // one fused update over every parameter

   THE ENGINE
     bt_backward walks the graph from the output in reverse topological order (each node runs once,
     after every consumer of its outputs has contributed its gradient). Gradients of leaves are
     accumulated (+=) into ->grad, so two backward calls add up (gradient accumulation). A node's
     saved tensors are released as soon as it has run, and the graph is freed once it has run
     (retain_graph is not supported: run the forward again). A saved tensor whose storage version
     moved since it was saved is an error naming the op (an illegal in-place write).
     Gradient-ready hooks fire for a leaf once its gradient is complete for this backward pass
     (DDP starts its all-reduce there).

   OPTIMIZERS
     AdamW (decoupled weight decay, bias correction) and SGD with momentum over a list of fp32
     parameters; optional global grad-norm clipping computed on the device without a host sync.
     bt_lr_cosine: linear warmup then cosine decay to a floor.
*/
#ifndef BT_AUTOGRAD_H
#define BT_AUTOGRAD_H
#include "bt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

BTDEF void bt_backward(bt_tensor *out);                        /* out: one element; seed 1 */
BTDEF void bt_backward_with(bt_tensor *out, bt_tensor *gout);  /* seed gout (same shape as out) */
BTDEF void bt_free_graph(bt_tensor *out);                      /* drop the graph without running it */

typedef void (*bt_grad_hook_fn)(bt_tensor *leaf, void *user);
/* fn(leaf, user) runs when leaf's gradient is complete during a backward pass */
BTDEF void bt_register_grad_hook(bt_tensor *leaf, bt_grad_hook_fn fn, void *user);
BTDEF void bt_clear_grad_hooks(void);

BTDEF void bt_zero_grad(bt_tensor **params, int n);             /* zero existing grads in place */

/* ---- optimizers ---- */
typedef struct {
    bt_tensor **params; int n;
    float beta1, beta2, eps, weight_decay;
    float max_grad_norm;          /* > 0: clip the global L2 norm of all grads to this */
    int step;
    bt_tensor **m, **v;           /* fp32 state, one per param */
    unsigned char *decay;         /* per param: 1 = apply weight decay (default: ndim >= 2) */
    bt_tensor *grad_norm;         /* fp32 scalar on the params' device: the last step's norm */
    bt_tensor *clip_scale;        /* fp32 scalar: min(1, max_norm / norm) */
    int *order;                   /* when the params tile one buffer: their order in it, else NULL */
    bt_tensor *flat_m, *flat_v;   /* then m and v are one buffer each too (m[i], v[i] view them) */
} bt_adamw;

BTDEF void bt_adamw_init(bt_adamw *opt, bt_tensor **params, int n, float beta1, float beta2, float eps,
                         float weight_decay, float max_grad_norm);
BTDEF void bt_adamw_step(bt_adamw *opt, float lr);
BTDEF void bt_adamw_free(bt_adamw *opt);

typedef struct {
    bt_tensor **params; int n;
    float momentum, weight_decay;
    bt_tensor **buf;
} bt_sgd;
BTDEF void bt_sgd_init(bt_sgd *opt, bt_tensor **params, int n, float momentum, float weight_decay);
BTDEF void bt_sgd_step(bt_sgd *opt, float lr);
BTDEF void bt_sgd_free(bt_sgd *opt);

/* global L2 norm of the grads, as an fp32 scalar tensor on the grads' device (no host sync) */
BTDEF bt_tensor *bt_grad_norm(bt_tensor **params, int n);
/* linear warmup over `warmup` steps to max_lr, then cosine to min_lr at `total` */
BTDEF double bt_lr_cosine(int step, int warmup, int total, double max_lr, double min_lr);

#ifdef __cplusplus
}
#endif
#endif /* BT_AUTOGRAD_H */

#ifdef BT_AUTOGRAD_IMPLEMENTATION
#ifndef BT_AUTOGRAD_IMPLEMENTATION_DONE
#define BT_AUTOGRAD_IMPLEMENTATION_DONE
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdio.h>

/* ============================================================================================
   1. the engine
   ============================================================================================ */
typedef struct { bt_tensor *leaf; bt_grad_hook_fn fn; void *user; } bt__hook;
static struct { bt__hook *hooks; int n_hooks, cap_hooks; uint64_t pass; } bt__ag;

BTDEF void bt_register_grad_hook(bt_tensor *leaf, bt_grad_hook_fn fn, void *user) {
    if (!leaf || !fn) bt_error("register_grad_hook: leaf and fn must not be NULL");
    if (leaf->grad_fn) bt_error("register_grad_hook: tensor is not a leaf (made by %s)", leaf->grad_fn->op);
    if (bt__ag.n_hooks == bt__ag.cap_hooks) {
        bt__ag.cap_hooks = bt__ag.cap_hooks ? 2 * bt__ag.cap_hooks : 64;
        bt__ag.hooks = (bt__hook *)realloc(bt__ag.hooks, sizeof(bt__hook) * bt__ag.cap_hooks);
        if (!bt__ag.hooks) bt_error("register_grad_hook: out of host memory");
    }
    bt__hook h = {leaf, fn, user};
    bt__ag.hooks[bt__ag.n_hooks++] = h;
}
BTDEF void bt_clear_grad_hooks(void) { free(bt__ag.hooks); bt__ag.hooks = NULL; bt__ag.n_hooks = bt__ag.cap_hooks = 0; }
static void bt__fire_hooks(bt_tensor *leaf) {
    for (int k = 0; k < bt__ag.n_hooks; k++) if (bt__ag.hooks[k].leaf == leaf) bt__ag.hooks[k].fn(leaf, bt__ag.hooks[k].user);
}

/* max-heap of ready nodes by creation order: the newest ready node runs first, so gradients flow
   back layer by layer and each layer's saved tensors are freed before the next one runs */
typedef struct { bt_node **a; int n, cap; } bt__ready_heap;
static void bt__ready_push(bt__ready_heap *h, bt_node *x) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 64;
        h->a = (bt_node **)realloc(h->a, sizeof(bt_node *) * h->cap);
        if (!h->a) bt_error("backward: out of host memory");
    }
    int i = h->n++;
    while (i && h->a[(i - 1) / 2]->seq < x->seq) { h->a[i] = h->a[(i - 1) / 2]; i = (i - 1) / 2; }
    h->a[i] = x;
}
static bt_node *bt__ready_pop(bt__ready_heap *h) {
    bt_node *top = h->a[0], *x = h->a[--h->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->a[c + 1]->seq > h->a[c]->seq) c++;
        if (h->a[c]->seq <= x->seq) break;
        h->a[i] = h->a[c]; i = c;
    }
    if (h->n) h->a[i] = x;
    return top;
}

/* a gradient we may add into in place: ours alone (no other reference, no other view) */
static int bt__exclusive(bt_tensor *t) { return t->refcount == 1 && t->storage->refcount == 1 && bt_is_contiguous(t); }

/* *acc += g, taking ownership of one reference to g */
static void bt__accumulate(bt_tensor **acc, bt_tensor *g) {
    if (!*acc) { *acc = g; return; }
    if (bt__exclusive(*acc)) { bt_add_(*acc, g, 1.0); bt_release(g); return; }
    bt_scope_begin();
    bt_tensor *sum = bt_retain(bt_add(*acc, g));
    bt_scope_end();
    bt_release(*acc); bt_release(g);
    *acc = sum;
}
static void bt__accumulate_leaf(bt_tensor *leaf, bt_tensor *g) {
    if (leaf->grad) { bt_add_(leaf->grad, g, 1.0); bt_release(g); return; }
    if (bt__exclusive(g) && g->dtype == leaf->dtype) { leaf->grad = g; return; }
    bt_scope_begin();
    leaf->grad = bt_keep(bt_cast(bt_clone(g), leaf->dtype));
    if (leaf->grad->grad_fn) { bt_node_release(leaf->grad->grad_fn); leaf->grad->grad_fn = NULL; }
    bt_scope_end();
    bt_release(g);
}

static void bt__check_saved(bt_node *n) {
    for (int s = 0; s < n->n_saved; s++)
        if (n->saved[s]->storage->version != n->saved_version[s])
            bt_error("backward: a tensor %s saved by %s was modified in place after it was saved (version %u, saved at %u)",
                     bt__s(n->saved[s]), n->op, n->saved[s]->storage->version, n->saved_version[s]);
}

/* Mark every node reachable from root for this pass and count each node's consumers; then count
   each leaf's incoming edges. Every error a pass can foresee (a consumed node, a saved tensor
   modified in place) is raised in the first walk, before anything is changed, so that a caller
   whose error handler returns by longjmp finds the graph, the grads and the hooks' counts intact. */
static void bt__count_deps(bt_node *root, uint64_t pass) {
    bt_node **list = NULL; int n = 1, cap = 64;        /* the reached nodes; the walk's queue too */
    list = (bt_node **)malloc(sizeof(bt_node *) * cap);
    if (!list) bt_error("backward: out of host memory");
    root->pass = pass; root->deps = 0; list[0] = root;
    for (int k = 0; k < n; k++) {
        bt_node *cur = list[k];
        for (int i = 0; i < cur->n_in; i++) {
            bt_node *m = cur->next[i].node;
            if (!m) continue;
            if (m->pass != pass) {
                if (m->consumed) { free(list); bt_error("backward: the graph through %s was already run; its saved tensors are freed (run the forward again)", m->op); }
                m->pass = pass; m->deps = 0;
                if (n == cap) {
                    bt_node **nl = (bt_node **)realloc(list, sizeof(bt_node *) * (cap *= 2));
                    if (!nl) { free(list); bt_error("backward: out of host memory"); }
                    list = nl;
                }
                list[n++] = m;
            }
            m->deps++;
        }
    }
    for (int k = 0; k < n; k++)
        for (int s = 0; s < list[k]->n_saved; s++)
            if (list[k]->saved[s]->storage->version != list[k]->saved_version[s]) { bt_node *bad = list[k]; free(list); bt__check_saved(bad); }
    /* leaves: reset first (a pass cut short by an error in a backward function leaves counts behind) */
    for (int k = 0; k < n; k++) for (int i = 0; i < list[k]->n_in; i++) if (list[k]->next[i].leaf) list[k]->next[i].leaf->grad_pending = 0;
    for (int k = 0; k < n; k++) for (int i = 0; i < list[k]->n_in; i++) if (list[k]->next[i].leaf) list[k]->next[i].leaf->grad_pending++;
    free(list);
}

/* run one node's backward; returns the input gradients, each one owned reference (or NULL) */
static void bt__run_node(bt_node *n, bt_tensor **gin) {
    for (int i = 0; i < BT_NODE_MAX_IN; i++) gin[i] = NULL;
    bt__check_saved(n);
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();
    n->backward(n, n->grad, gin);
    for (int i = 0; i < n->n_in; i++) {
        if (!gin[i]) continue;
        if (!(n->next[i].node || n->next[i].leaf)) { gin[i] = NULL; continue; }
        bt_shape s = n->in_shape[i];
        if (gin[i]->ndim != s.ndim || memcmp(gin[i]->shape, s.d, sizeof(int64_t) * s.ndim) || gin[i]->dtype != n->in_dtype[i])
            bt_error("backward of %s: gradient %d has shape/dtype %s, expected %d dims of %s", n->op, i,
                     bt__s(gin[i]), s.ndim, bt_dtype_name(n->in_dtype[i]));
        bt_retain(gin[i]);
    }
    bt_scope_end();
    bt_set_grad_enabled(old);
}
static void bt__free_node_buffers(bt_node *n) {
    for (int s = 0; s < n->n_saved; s++) bt_release(n->saved[s]);
    n->n_saved = 0;
    bt_release(n->grad); n->grad = NULL;
    n->consumed = 1;
}

/* the seed is gout, or ones when gout is NULL; made only once every check has passed */
static bt_tensor *bt__seed(bt_tensor *out, bt_tensor *gout) {
    if (gout) return bt_retain(gout);
    bt_tensor *one = bt__new(bt_shape_of(out), out->dtype, bt_device_of(out));
    bt_fill_(one, 1.0);
    return one;
}
static void bt__backward(bt_tensor *out, bt_tensor *gout) {
    if (!out->grad_fn) {
        if (!out->requires_grad) bt_error("backward: the output does not require grad (no input required grad, or grad mode was off)");
        bt__accumulate_leaf(out, bt__seed(out, gout));
        return;
    }
    bt_node *root = out->grad_fn;
    if (root->consumed) bt_error("backward: the graph through %s was already run; its saved tensors are freed (run the forward again)", root->op);
    uint64_t pass = ++bt__ag.pass;
    bt__count_deps(root, pass);
    root->grad = bt__seed(out, gout);
    bt__ready_heap ready = {NULL, 0, 0};
    bt__ready_push(&ready, root);
    while (ready.n) {
        bt_node *n = bt__ready_pop(&ready);
        bt_tensor *gin[BT_NODE_MAX_IN];
        if (n->grad) bt__run_node(n, gin);
        else for (int i = 0; i < BT_NODE_MAX_IN; i++) gin[i] = NULL;   /* nothing flowed in: pass nothing on */
        bt__free_node_buffers(n);
        for (int i = 0; i < n->n_in; i++) {
            bt_node *m = n->next[i].node; bt_tensor *leaf = n->next[i].leaf;
            if (m) {
                if (gin[i]) bt__accumulate(&m->grad, gin[i]);
                if (--m->deps == 0) bt__ready_push(&ready, m);
            } else if (leaf) {
                if (gin[i]) bt__accumulate_leaf(leaf, gin[i]);
                if (--leaf->grad_pending == 0) bt__fire_hooks(leaf);
            }
        }
    }
    free(ready.a);
}
BTDEF void bt_backward_with(bt_tensor *out, bt_tensor *gout) {
    if (!out || !gout) bt_error("backward: output and gradient must not be NULL");
    if (gout->ndim != out->ndim || memcmp(gout->shape, out->shape, sizeof(int64_t) * out->ndim) || gout->dtype != out->dtype)
        bt_error("backward: the seed gradient's shape/dtype differs from the output's");
    bt__backward(out, gout);
}
BTDEF void bt_backward(bt_tensor *out) {
    if (!out) bt_error("backward: output is NULL");
    if (bt_numel(out) != 1) bt_error("backward: output %s is not a single element; use bt_backward_with", bt__s(out));
    bt__backward(out, NULL);
}
BTDEF void bt_free_graph(bt_tensor *out) {
    if (out && out->grad_fn) { bt_node_release(out->grad_fn); out->grad_fn = NULL; }
}
BTDEF void bt_zero_grad(bt_tensor **params, int n) {
    for (int i = 0; i < n; i++) if (params[i] && params[i]->grad) bt_zero_(params[i]->grad);
}

/* ============================================================================================
   2. optimizers
   ============================================================================================ */
/* ---- flat buffers: when tensors are contiguous pieces that tile one storage with no gap, one
   kernel can sweep them all (the GPT-2 model keeps every parameter and gradient that way) ---- */
/* indices of ts sorted by storage offset (insertion sort: a few hundred parameters, rarely) */
static void bt__sort_by_offset(bt_tensor **ts, int n, int *order) {
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && ts[order[j - 1]]->offset > ts[i]->offset; j--) order[j] = order[j - 1];
        order[j] = i;
    }
}
/* 1 when ts[order[0..n)] are contiguous, of one dtype, in one storage, each starting where the
   previous one ends */
static int bt__tiles(bt_tensor **ts, const int *order, int n) {
    for (int k = 0; k < n; k++) {
        bt_tensor *t = ts[order[k]], *t0 = ts[order[0]];
        if (!t || !bt_is_contiguous(t) || t->storage != t0->storage || t->dtype != t0->dtype) return 0;
        if (k && t->offset != ts[order[k - 1]]->offset + bt_numel(ts[order[k - 1]])) return 0;
    }
    return n > 0;
}
#ifdef BT_CUDA
/* the grads of params when they tile one buffer in the same order as order: their first
   element's tensor, else NULL */
static bt_tensor *bt__flat_grads(bt_tensor **params, const int *order, int n, bt_tensor **grads) {
    for (int i = 0; i < n; i++) { grads[i] = params[i]->grad; if (!grads[i]) return NULL; }
    return bt__tiles(grads, order, n) ? grads[order[0]] : NULL;
}
#endif
static int64_t bt__total_numel(bt_tensor **ts, int n) { int64_t s = 0; for (int i = 0; i < n; i++) s += bt_numel(ts[i]); return s; }

BTDEF bt_tensor *bt_grad_norm(bt_tensor **params, int n) {
    bt_device dev = bt_cpu(); int found = 0;
    for (int i = 0; i < n; i++) if (params[i]->grad) { dev = bt_device_of(params[i]->grad); found = 1; break; }
    int old = bt_set_grad_enabled(0);
    bt_tensor *norm = bt__new(bt_shape1(1), BT_F32, dev);   /* registered on return */
    bt_fill_(norm, 0.0);
    if (!found) { bt_set_grad_enabled(old); return bt__register(norm); }
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        bt_tensor **grads = (bt_tensor **)malloc(sizeof(bt_tensor *) * (size_t)n);
        int *order = (int *)calloc((size_t)n, sizeof(int));
        for (int i = 0; i < n; i++) grads[i] = params[i]->grad;
        int all = 1;
        for (int i = 0; i < n; i++) all &= grads[i] != NULL;
        if (all) bt__sort_by_offset(grads, n, order);
        if (all && bt__tiles(grads, order, n)) {          /* one buffer: one pass */
            bt_tensor *g0 = grads[order[0]];
            bt_k_sumsq(g0->dtype, (float *)bt_data_ptr(norm), bt_data_ptr(g0), bt__total_numel(grads, n), 1, bt_k_stream());
        } else
            for (int i = 0; i < n; i++) {
                bt_tensor *g = params[i]->grad;
                if (!g) continue;
                if (!bt_is_contiguous(g)) bt_error("grad_norm: gradient of parameter %d is not contiguous", i);
                bt_k_sumsq(g->dtype, (float *)bt_data_ptr(norm), bt_data_ptr(g), bt_numel(g), 1, bt_k_stream());
            }
        free(grads); free(order);
        bt_scope_begin();
        bt_tensor *root = bt_retain(bt_sqrt(norm));
        bt_scope_end();
        bt_release(norm); norm = root;
#endif
    } else {
        double s = 0;
        for (int i = 0; i < n; i++) {
            bt_tensor *g = params[i]->grad;
            if (!g) continue;
            int64_t m = bt_numel(g); bt_tensor *gc = bt__contig(g); const void *p = bt_data_ptr(gc);
            for (int64_t j = 0; j < m; j++) { double v = bt__ld(p, gc->dtype, j); s += v * v; }
            bt_release(gc);
        }
        bt_fill_(norm, sqrt(s));
    }
    bt_set_grad_enabled(old);
    return bt__register(norm);
}

BTDEF void bt_adamw_init(bt_adamw *opt, bt_tensor **params, int n, float beta1, float beta2, float eps,
                         float weight_decay, float max_grad_norm) {
    memset(opt, 0, sizeof *opt);
    opt->params = params; opt->n = n;
    opt->beta1 = beta1; opt->beta2 = beta2; opt->eps = eps; opt->weight_decay = weight_decay;
    opt->max_grad_norm = max_grad_norm;
    opt->m = (bt_tensor **)calloc((size_t)n, sizeof(bt_tensor *));
    opt->v = (bt_tensor **)calloc((size_t)n, sizeof(bt_tensor *));
    opt->decay = (unsigned char *)calloc((size_t)n, 1);
    if (!opt->m || !opt->v || !opt->decay) bt_error("adamw_init: out of host memory");
    for (int i = 0; i < n; i++) {
        bt_tensor *p = params[i];
        if (!p || !bt_dtype_is_float(p->dtype)) bt_error("adamw_init: parameter %d is NULL or not float", i);
        if (bt_device_of(p).type == BT_GPU && p->dtype != BT_F32) bt_error("adamw_init: GPU parameter %d must be f32 (master weights)", i);
        if (!bt_is_contiguous(p)) bt_error("adamw_init: parameter %d is not contiguous", i);
        opt->decay[i] = p->ndim >= 2;
    }
    int *order = (int *)calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    if (!order) bt_error("adamw_init: out of host memory");
    bt__sort_by_offset(params, n, order);
    int flat = n > 0 && bt_device_of(params[0]).type == BT_GPU && bt__tiles(params, order, n);
    if (flat) {           /* m and v tile one buffer each, in the params' order */
        int64_t total = bt__total_numel(params, n), off = 0;
        opt->order = order;
        opt->flat_m = bt__new(bt_shape1(total), BT_F32, bt_device_of(params[0]));
        opt->flat_v = bt__new(bt_shape1(total), BT_F32, bt_device_of(params[0]));
        bt_fill_(opt->flat_m, 0.0); bt_fill_(opt->flat_v, 0.0);
        for (int k = 0; k < n; k++) {
            bt_tensor *p = params[order[k]];
            bt_tensor *mv[2] = {bt__alias(opt->flat_m), bt__alias(opt->flat_v)};
            for (int j = 0; j < 2; j++) {
                mv[j]->offset = off; mv[j]->ndim = p->ndim;
                memcpy(mv[j]->shape, p->shape, sizeof p->shape); bt__set_contiguous_strides(mv[j]);
            }
            opt->m[order[k]] = mv[0]; opt->v[order[k]] = mv[1];
            off += bt_numel(p);
        }
        return;
    }
    free(order);
    for (int i = 0; i < n; i++) {
        bt_tensor *p = params[i];
        opt->m[i] = bt__new(bt_shape_of(p), p->dtype, bt_device_of(p)); bt_fill_(opt->m[i], 0.0);
        opt->v[i] = bt__new(bt_shape_of(p), p->dtype, bt_device_of(p)); bt_fill_(opt->v[i], 0.0);
    }
}
BTDEF void bt_adamw_free(bt_adamw *opt) {
    for (int i = 0; i < opt->n; i++) { bt_release(opt->m[i]); bt_release(opt->v[i]); }
    free(opt->m); free(opt->v); free(opt->decay); free(opt->order);
    bt_release(opt->flat_m); bt_release(opt->flat_v);
    bt_release(opt->grad_norm); bt_release(opt->clip_scale);
    memset(opt, 0, sizeof *opt);
}
/* clip factor min(1, max_norm / (norm + 1e-6)) as a device scalar, no host sync: -max(-1, -r) is
   exact, where 1 - relu(1 - r) in fp32 would lose r's low bits (a relative error of 1e-5 at r = 1e-3) */
static void bt__clip_scale(bt_adamw *opt) {
    bt_release(opt->grad_norm); bt_release(opt->clip_scale);
    bt_scope_begin();
    bt_tensor *norm = bt_grad_norm(opt->params, opt->n);
    opt->grad_norm = bt_keep(norm);
    opt->clip_scale = NULL;
    if (opt->max_grad_norm > 0) {
        bt_tensor *r = bt_div(bt_full(bt_shape1(1), opt->max_grad_norm, BT_F32, bt_device_of(norm)), bt_add_scalar(norm, 1e-6));
        bt_tensor *pair[2] = {bt_full(bt_shape1(1), -1.0, BT_F32, bt_device_of(norm)), bt_neg(r)};
        opt->clip_scale = bt_keep(bt_neg(bt_max(bt_concat(pair, 2, 0), 0, 1)));
    }
    bt_scope_end();
}
#ifdef BT_CUDA
/* every parameter in one launch when the grads tile a buffer like the params: the segments are
   the runs of equal weight decay along the buffer. Returns 0 (nothing done) otherwise. */
static int bt__adamw_flat_step(bt_adamw *opt, float lr) {
    int n = opt->n;
    bt_tensor **grads = (bt_tensor **)malloc(sizeof(bt_tensor *) * (size_t)n);
    bt_tensor *g0 = grads ? bt__flat_grads(opt->params, opt->order, n, grads) : NULL;
    free(grads);
    if (!g0) return 0;
    bt_k_segments sg; sg.n = 0;
    int64_t end = 0;
    for (int k = 0; k < n; k++) {
        int i = opt->order[k];
        float wd = opt->decay[i] ? opt->weight_decay : 0.f;
        end += bt_numel(opt->params[i]);
        if (sg.n && sg.wd[sg.n - 1] == wd) { sg.end[sg.n - 1] = end; continue; }
        if (sg.n == BT_K_MAX_SEGMENTS) return 0;
        sg.end[sg.n] = end; sg.wd[sg.n] = wd; sg.n++;
    }
    bt_tensor *p0 = opt->params[opt->order[0]];
    bt_k_adamw_segments((float *)bt_data_ptr(p0), bt_data_ptr(g0), g0->dtype, (float *)bt_data_ptr(opt->flat_m),
                        (float *)bt_data_ptr(opt->flat_v), NULL, BT_BF16, &sg, lr, opt->beta1, opt->beta2, opt->eps, opt->step,
                        opt->clip_scale ? (const float *)bt_data_ptr(opt->clip_scale) : NULL, bt_k_stream());
    for (int i = 0; i < n; i++) opt->params[i]->storage->version++;
    return 1;
}
#endif
BTDEF void bt_adamw_step(bt_adamw *opt, float lr) {
    int old = bt_set_grad_enabled(0);
    opt->step++;
    bt__clip_scale(opt);
    double b1 = opt->beta1, b2 = opt->beta2, c1 = 1.0 - pow(b1, opt->step), c2 = 1.0 - pow(b2, opt->step);
#ifdef BT_CUDA
    if (opt->order && bt__adamw_flat_step(opt, lr)) { bt_set_grad_enabled(old); return; }
#endif
    for (int i = 0; i < opt->n; i++) {
        bt_tensor *p = opt->params[i], *g = p->grad;
        if (!g) continue;
        float wd = opt->decay[i] ? opt->weight_decay : 0.f;
        int64_t n = bt_numel(p);
        if (bt_device_of(p).type == BT_GPU) {
#ifdef BT_CUDA
            bt_k_adamw((float *)bt_data_ptr(p), bt_data_ptr(g), g->dtype, (float *)bt_data_ptr(opt->m[i]), (float *)bt_data_ptr(opt->v[i]),
                       NULL, BT_BF16, n, lr, opt->beta1, opt->beta2, opt->eps, wd, opt->step,
                       opt->clip_scale ? (const float *)bt_data_ptr(opt->clip_scale) : NULL, bt_k_stream());
#endif
        } else {
            double cs = opt->clip_scale ? bt_item(opt->clip_scale) : 1.0;
            void *pp = bt_data_ptr(p), *mp = bt_data_ptr(opt->m[i]), *vp = bt_data_ptr(opt->v[i]);
            bt_tensor *gc = bt_retain(g); const void *gp = bt_data_ptr(gc); bt_dtype dt = p->dtype;
            #pragma omp parallel for if (n > BT__PAR_MIN)
            for (int64_t j = 0; j < n; j++) {
                double gj = bt__ld(gp, g->dtype, j) * cs;
                double m = b1 * bt__ld(mp, dt, j) + (1 - b1) * gj, v = b2 * bt__ld(vp, dt, j) + (1 - b2) * gj * gj;
                double pj = bt__ld(pp, dt, j);
                pj -= lr * ((m / c1) / (sqrt(v / c2) + opt->eps) + wd * pj);
                bt__st(mp, dt, j, m); bt__st(vp, dt, j, v); bt__st(pp, dt, j, pj);
            }
            bt_release(gc);
        }
        p->storage->version++;
    }
    bt_set_grad_enabled(old);
}

BTDEF void bt_sgd_init(bt_sgd *opt, bt_tensor **params, int n, float momentum, float weight_decay) {
    memset(opt, 0, sizeof *opt);
    opt->params = params; opt->n = n; opt->momentum = momentum; opt->weight_decay = weight_decay;
    opt->buf = (bt_tensor **)calloc((size_t)n, sizeof(bt_tensor *));
    if (!opt->buf) bt_error("sgd_init: out of host memory");
}
/* buf = momentum buf + (g + wd p); p -= lr buf (PyTorch's form; the first step sets buf = g) */
BTDEF void bt_sgd_step(bt_sgd *opt, float lr) {
    int old = bt_set_grad_enabled(0);
    for (int i = 0; i < opt->n; i++) {
        bt_tensor *p = opt->params[i];
        if (!p->grad) continue;
        bt_scope_begin();
        bt_tensor *d = p->grad;
        if (opt->weight_decay != 0) d = bt_add(d, bt_scale(p, opt->weight_decay));
        if (opt->momentum != 0) {
            if (!opt->buf[i]) opt->buf[i] = bt_keep(bt_clone(d));
            else { bt_mul_scalar_(opt->buf[i], opt->momentum); bt_add_(opt->buf[i], d, 1.0); }
            d = opt->buf[i];
        }
        bt_add_(p, d, -lr);
        bt_scope_end();
    }
    bt_set_grad_enabled(old);
}
BTDEF void bt_sgd_free(bt_sgd *opt) {
    for (int i = 0; i < opt->n; i++) bt_release(opt->buf[i]);
    free(opt->buf); memset(opt, 0, sizeof *opt);
}

BTDEF double bt_lr_cosine(int step, int warmup, int total, double max_lr, double min_lr) {
    if (step < warmup) return max_lr * (double)(step + 1) / (double)warmup;
    if (step >= total) return min_lr;
    double progress = (double)(step - warmup) / (double)(total - warmup > 0 ? total - warmup : 1);
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + cos(3.14159265358979323846 * progress));
}

#endif /* BT_AUTOGRAD_IMPLEMENTATION_DONE */
#endif /* BT_AUTOGRAD_IMPLEMENTATION */
