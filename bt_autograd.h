/* bt_autograd.h - BluTrain-C reverse-mode autograd engine, v0.1: backward passes and hooks.
   (The optimizers that consume the gradients live in bt_optim.h.)

   USAGE
     #define BT_AUTOGRAD_IMPLEMENTATION (with BT_TENSOR_ and BT_ALLOC_IMPLEMENTATION) in *one* file.

     bt_scope_begin();
     bt_tensor *loss = model_forward(...);     // ops record nodes (bt_tensor.h)
     bt_backward(loss);                        // grads accumulate into each leaf's ->grad
     bt_scope_end();

   THE ENGINE
     bt_backward walks the graph from the output in reverse topological order (each node runs once,
     after every consumer of its outputs has contributed its gradient; among ready nodes the newest
     first, so gradients flow back layer by layer). Gradients of leaves are accumulated (+=) into
     ->grad, so two backward calls add up (gradient accumulation). A node's saved tensors are
     released as soon as it has run, and the graph is freed once it has run (retain_graph is not
     supported: run the forward again). A saved tensor whose storage version moved since it was
     saved is an error naming the op (an illegal in-place write).

   ACTIVATION CHECKPOINTING
     y = bt_checkpoint(fn, &ctx, sizeof ctx, inputs, n) is y = fn(ctx, inputs) that keeps only the
     inputs for the backward: fn runs with grad mode off in a scope of its own (its intermediates
     are freed at once) and y gets ONE node, "checkpoint", whose saved tensors are the inputs. Its
     backward runs fn again with grad mode on over detached aliases of the inputs, then this engine
     from the remade output with the incoming gradient: the parameters fn reaches through ctx (leaves,
     or casts of leaves made inside fn) get their gradients as usual, and the inputs' gradients go
     on as the node's. ctx is copied (ctx_size bytes; 0 keeps the pointer, which must then live until
     the backward). fn must give the same values twice: the same ops on the same data (no random
     numbers drawn from a moving seed), which holds for every op here since none picks its kernel by
     the grad mode. With that the values, losses and gradients are the bits of the same forward
     without the checkpoint: each detached input's gradient is summed in a node of its own, as it
     would have been in its producer's node (the in-place sinks, bt__pending_grad_sink, and the
     column sums left with a gradient behave the same), and the remade graph's root takes the
     engine's reference to the incoming gradient. Exact also needs every consumer of an input to
     be inside fn (else the outside consumers' gradient is added to the region's sum instead of
     each in turn) and an input that is an op result, not a leaf (a leaf's existing .grad would get
     the region's sum in one add). GPT-2's blocks meet both (gpt2.h: BT_RECOMPUTE_ATTN, _MLP, _BLOCK).
     Without grad mode, or when no input needs a gradient, bt_checkpoint is fn (nothing saved is
     spared then: a region that only reaches parameters through ctx records them as usual).
     The backward allocates only what the forward did (from the current pool: inside a captured
     CUDA graph, the graph's pool) plus host nodes; it neither syncs nor uploads, so a captured
     micro-step may hold it. Flags read inside fn (bt_set_recompute's BT_RECOMPUTE_GELU) apply to
     the remade graph, which lives only during the node's backward. A leaf reached inside fn
     should be used by one region per pass: its gradient hooks fire when that region's backward
     has delivered (the engine counts each leaf's edges per pass, and the region's pass is its
     own). Nested regions work (each backward remakes its inner regions once more). An embedding
     lookup inside fn offers its rows to the table's rows hook (bt_set_rows_hook) as usual.

   HOOKS (for communication: DDP starts a bucket's all-reduce from them)
     bt_register_grad_hook(leaf, fn, user) adds a hook to that tensor (looked up from the tensor,
     never by scanning a global list) and returns a handle for bt_remove_grad_hook. A hook fires
     once per backward pass, on the host, when the leaf's gradient is final for that pass (every
     edge into the leaf has delivered): the kernels writing it are queued on the leaf's device's
     current stream, so a hook that wants another stream to use the gradient records an event
     there (bt_event_record(ev, bt_stream_current(dev))) for that stream to wait on. Several hooks
     of one leaf fire in registration order. bt_set_grad_hooks_enabled(0) holds every hook back
     (gradient accumulation's micro-batches that must not communicate: the "no sync" case); the
     gradients still accumulate. A handle is valid while its tensor lives.
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

/* fn(leaf, user) runs when leaf's gradient is final during a backward pass; returns the handle */
BTDEF bt_hook *bt_register_grad_hook(bt_tensor *leaf, bt_grad_hook_fn fn, void *user);
BTDEF void bt_remove_grad_hook(bt_hook *handle);
BTDEF int bt_set_grad_hooks_enabled(int on);                   /* returns the previous setting */

BTDEF void bt_zero_grad(bt_tensor **params, int n);             /* zero existing grads in place */

/* activation checkpointing (see ACTIVATION CHECKPOINTING above); at most BT_NODE_MAX_SAVED inputs */
typedef bt_tensor *(*bt_checkpoint_fn)(void *ctx, bt_tensor **inputs);
BTDEF bt_tensor *bt_checkpoint(bt_checkpoint_fn fn, const void *ctx, size_t ctx_size, bt_tensor **inputs, int n_inputs);

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
static struct { uint64_t pass; int hooks_off; } bt__ag;

BTDEF bt_hook *bt_register_grad_hook(bt_tensor *leaf, bt_grad_hook_fn fn, void *user) {
    if (!leaf || !fn) bt_error("register_grad_hook: leaf and fn must not be NULL");
    if (leaf->grad_fn) bt_error("register_grad_hook: tensor is not a leaf (made by %s)", leaf->grad_fn->op);
    bt_hook *h = (bt_hook *)malloc(sizeof *h), **tail = &leaf->hooks;
    if (!h) bt_error("register_grad_hook: out of host memory");
    h->fn = fn; h->user = user; h->leaf = leaf; h->next = NULL;
    while (*tail) tail = &(*tail)->next;
    *tail = h;
    return h;
}
BTDEF void bt_remove_grad_hook(bt_hook *handle) {
    if (!handle) return;
    for (bt_hook **p = &handle->leaf->hooks; *p; p = &(*p)->next)
        if (*p == handle) { *p = handle->next; free(handle); return; }
    bt_error("remove_grad_hook: %p is not a hook of its tensor (removed twice?)", (void *)handle);
}
BTDEF int bt_set_grad_hooks_enabled(int on) { int old = !bt__ag.hooks_off; bt__ag.hooks_off = !on; return old; }
static void bt__fire_hooks(bt_tensor *leaf) {
    if (bt__ag.hooks_off) return;
    for (bt_hook *h = leaf->hooks; h; h = h->next) h->fn(leaf, h->user);
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

/* bt__exclusive (bt_tensor.h): a gradient we may add into in place */
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
/* leaf->grad += g; an existing .grad keeps its own dtype (a model may hold its gradients in bf16) */
static void bt__accumulate_leaf(bt_tensor *leaf, bt_tensor *g) {
    if (leaf->grad && leaf->grad->dtype != g->dtype) {
        bt_scope_begin();
        bt_add_(leaf->grad, bt_cast(g, leaf->grad->dtype), 1.0);
        bt_scope_end();
        bt_release(g);
        return;
    }
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
    if (n->aux_free) n->aux_free(n->aux);
    n->aux = NULL; n->aux_free = NULL;
    bt_release(n->grad); n->grad = NULL;
    n->consumed = 1;
}

/* A cast node whose input is a leaf with a .grad of the incoming gradient's dtype (bf16 gradients of
   an fp32 master weight): its backward would cast g up to the leaf's dtype and the leaf's
   accumulation cast it back, both exact where the leaf's dtype holds every value of g's (bf16 or
   f16 into f32 or f64, f32 into f64). g goes into .grad as it is: the same bits, two kernels fewer
   per parameter (at GPT-2 124M B 16, 192 launches of ~3.7 us a step: the biases and layernorms). */
static int bt__cast_passes_through(const bt_node *n) {
    const bt_tensor *leaf = n->next[0].leaf, *g = n->grad;
    if (n->backward != bt__cast_back || n->n_in != 1 || !leaf || !leaf->grad || leaf->grad->dtype != g->dtype) return 0;
    bt_dtype in = n->in_dtype[0];
    int exact = ((g->dtype == BT_BF16 || g->dtype == BT_F16) && (in == BT_F32 || in == BT_F64)) || (g->dtype == BT_F32 && in == BT_F64);
    return exact && g->ndim == leaf->grad->ndim && !memcmp(g->shape, leaf->grad->shape, sizeof(int64_t) * (size_t)g->ndim);
}
/* the seed is gout, or ones when gout is NULL; made only once every check has passed */
static bt_tensor *bt__seed(bt_tensor *out, bt_tensor *gout) {
    if (gout) return bt_retain(gout);
    bt_tensor *one = bt__new(bt_shape_of(out), out->dtype, bt_device_of(out));
    bt_fill_(one, 1.0);
    return one;
}
/* take: the caller hands over its reference to gout (bt_checkpoint's remade root holds it alone) */
static void bt__backward(bt_tensor *out, bt_tensor *gout, int take) {
    if (!out->grad_fn) {
        if (!out->requires_grad) bt_error("backward: the output does not require grad (no input required grad, or grad mode was off)");
        bt__accumulate_leaf(out, take ? gout : bt__seed(out, gout));
        return;
    }
    bt_node *root = out->grad_fn;
    if (root->consumed) bt_error("backward: the graph through %s was already run; its saved tensors are freed (run the forward again)", root->op);
    uint64_t pass = ++bt__ag.pass;
    bt__count_deps(root, pass);
    root->grad = take ? gout : bt__seed(out, gout);
    bt__ready_heap ready = {NULL, 0, 0};
    bt__ready_push(&ready, root);
    while (ready.n) {
        bt_node *n = bt__ready_pop(&ready);
        bt_tensor *gin[BT_NODE_MAX_IN];
        if (n->grad && bt__cast_passes_through(n)) { for (int i = 0; i < BT_NODE_MAX_IN; i++) gin[i] = NULL; gin[0] = bt_retain(n->grad); }
        else if (n->grad) bt__run_node(n, gin);
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
    bt__backward(out, gout, 0);
}
BTDEF void bt_backward(bt_tensor *out) {
    if (!out) bt_error("backward: output is NULL");
    if (bt_numel(out) != 1) bt_error("backward: output %s is not a single element; use bt_backward_with", bt__s(out));
    bt__backward(out, NULL, 0);
}
BTDEF void bt_free_graph(bt_tensor *out) {
    if (out && out->grad_fn) { bt_node_release(out->grad_fn); out->grad_fn = NULL; }
}
BTDEF void bt_zero_grad(bt_tensor **params, int n) {
    for (int i = 0; i < n; i++) if (params[i] && params[i]->grad) bt_zero_(params[i]->grad);
}

/* ============================================================================================
   2. activation checkpointing
   ============================================================================================ */
typedef struct { bt_checkpoint_fn fn; void *ctx; } bt__ckpt_aux;   /* followed by the copy of ctx */

/* a detached input's node (no inputs): its gradient, summed by this engine as the producer's would
   have been, is kept in *aux for the checkpoint's backward to pass on */
static void bt__ckpt_input_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    (void)gin;
    if (n->aux) *(bt_tensor **)n->aux = bt_retain(g);
}
/* remake the region from its saved inputs with grad mode on, then run it backward */
static void bt__ckpt_back(bt_node *n, bt_tensor *g, bt_tensor **gin) {
    bt__ckpt_aux *a = (bt__ckpt_aux *)n->aux;
    bt_tensor *d[BT_NODE_MAX_SAVED], *got[BT_NODE_MAX_SAVED] = {NULL};
    bt_node *edge[BT_NODE_MAX_SAVED] = {NULL};
    for (int i = 0; i < n->n_in; i++) {
        d[i] = bt__register(bt__alias(n->saved[i]));   /* the same storage, no graph behind it */
        if (bt__wants(n, i)) { edge[i] = bt__record_source("checkpoint input", bt__ckpt_input_back, d[i]); edge[i]->aux = &got[i]; }
    }
    n->grad = NULL;          /* g is ours now: the engine's reference, handed to the remade root */
    int old = bt_set_grad_enabled(1);
    bt_scope_begin();        /* the remade intermediates live as long as the remade graph saves them */
    bt_tensor *y = bt_retain(a->fn(a->ctx, d));
    bt_scope_end();
    bt_set_grad_enabled(old);
    if (y->ndim != g->ndim || memcmp(y->shape, g->shape, sizeof(int64_t) * (size_t)g->ndim) || y->dtype != g->dtype) {
        bt_release(y); bt_release(g);
        bt_error("checkpoint: the remade output's shape/dtype differs from the first run's (the function must do the same twice)");
    }
    if (y->grad_fn) bt__backward(y, g, 1);
    else bt_release(g);      /* no parameter and no input reached: nothing to pass on */
    bt_release(y);
    for (int i = 0; i < n->n_in; i++) {
        if (edge[i]) edge[i]->aux = NULL;
        if (got[i]) gin[i] = bt__register(got[i]);
    }
}
BTDEF bt_tensor *bt_checkpoint(bt_checkpoint_fn fn, const void *ctx, size_t ctx_size, bt_tensor **inputs, int n_inputs) {
    if (!fn || n_inputs < 0 || (n_inputs && !inputs)) bt_error("checkpoint: fn, and inputs when n_inputs > 0, must not be NULL");
    if (n_inputs > BT_NODE_MAX_SAVED) bt_error("checkpoint: %d inputs (at most %d)", n_inputs, BT_NODE_MAX_SAVED);
    int any = 0;
    for (int i = 0; i < n_inputs; i++) {
        if (!inputs[i]) bt_error("checkpoint: input %d is NULL", i);
        any |= bt__needs_grad(inputs[i]);
    }
    if (!bt_grad_enabled() || !any) return fn((void *)ctx, inputs);
    bt__ckpt_aux *a = (bt__ckpt_aux *)malloc(sizeof *a + ctx_size);
    if (!a) bt_error("checkpoint: out of host memory");
    a->fn = fn; a->ctx = (void *)ctx;
    if (ctx_size) { memcpy(a + 1, ctx, ctx_size); a->ctx = a + 1; }
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();        /* fn's intermediates go at its end: nothing holds them */
    bt_tensor *y = fn(a->ctx, inputs);
    if (!y) { bt_set_grad_enabled(old); free(a); bt_error("checkpoint: fn returned NULL"); }
    bt_retain(y);
    bt_scope_end();
    bt_set_grad_enabled(old);
    int own = !y->requires_grad && !y->grad_fn;
    for (int i = 0; i < n_inputs; i++) own &= y != inputs[i];
    if (!own) { bt_tensor *v = bt__alias(y); bt_release(y); y = v; }   /* an input or a leaf returned: its own struct */
    if (!bt_dtype_is_float(y->dtype)) { free(a); return bt__register(y); }
    bt_node *n = bt__record("checkpoint", bt__ckpt_back, y, inputs, n_inputs);
    for (int i = 0; i < n_inputs; i++) bt__save(n, inputs[i]);
    n->aux = a; n->aux_free = free;
    return bt__register(y);
}

#endif /* BT_AUTOGRAD_IMPLEMENTATION_DONE */
#endif /* BT_AUTOGRAD_IMPLEMENTATION */
