/* bt_optim.h - BluTrain-C optimizers, v0.1: AdamW and SGD, the global gradient norm and
   clipping, the learning-rate schedule. They update parameters from their gradients; the
   autograd engine (bt_autograd.h) only computes the gradients and knows nothing of this.

   USAGE
     #define BT_OPTIM_IMPLEMENTATION in *one* C/CUDA file, in the file that also defines
     BT_TENSOR_IMPLEMENTATION (the implementation uses bt_tensor.h's internals).

     bt_adamw opt;
     bt_adamw_init(&opt, params, n, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f);   // clip the norm at 1.0
     for (int step = 0; step < steps; step++) {
         bt_zero_grad(params, n);              // the step reads the gradients and leaves them: the
                                               // caller zeroes them, or they add up (accumulation)
         bt_scope_begin();
         bt_backward(model_loss(...));         // bt_autograd.h: ->grad += d loss / d param
         bt_scope_end();
         bt_adamw_step(&opt, lr);              // clip by the global norm, then one fused update
     }
     bt_adamw_free(&opt);

   ADAMW STATE IS PLAIN DATA
     The moments live in two fp32 tensors m and v over one index space of all the parameters'
     elements: parameter i occupies [offset[i], offset[i] + numel(i)). When the parameters tile
     one buffer (a model with a flat parameter buffer, as train_gpt2's), that space is the
     buffer's own order, so a range [lo, hi) of m and v matches the same range of the parameter
     and gradient buffers; otherwise parameters follow in list order. step counts the updates.
     m, v and step are fields the caller reads and writes (a checkpoint saves them; bt_adamw_set_state
     loads them with checks). bt_adamw_shard(opt, lo, hi) keeps state only for [lo, hi) and updates
     only those elements: a ZeRO rank's shard. bt_adamw_step = bt_adamw_set_grad_norm (the global
     gradient norm and the clip factor, on the device, no host sync) + bt_adamw_update; a caller
     whose gradient is sharded computes the norm itself (bt_sumsq of its shard, summed over the
     ranks) and hands the reduced shard to bt_adamw_update.

   THE COMPUTE COPY
     A mixed-precision model multiplies with a bf16 copy of its fp32 weights, remade after every
     update. bt_adamw_set_copy(opt, copy) has the update write it: each element's new value is
     stored rounded to the copy's dtype in the same pass (on a GPU 2 bytes more written, where a
     cast of its own reads 4 and writes 2 again), the same bits as bt_copy_ of the weights after
     the update. The copy spans the index space; a sharded optimizer writes its range only.

   THE WEIGHTS IN TWO HALVES
     The fp32 weights and their bf16 copy can share 4 bytes a parameter instead of taking 6: an
     fp32 is its bf16 (the top half, rounded) plus the 16 bits below, if the top half rounds ties
     away from zero instead of to even, so that it was rounded up exactly when the bottom half is
     >= 0x8000 (bt__f32_hi16 / lo16 / join16 in bt_tensor.h; two neighbours would share both halves
     under ties to even). bt_f32_split_(w) rewrites an f32 tensor in place: the high halves, a bf16
     array, in its first 2n bytes, the low halves in the next 2n; the storage records it
     (storage->halves), bt_f32_halves_hi(w) is the bf16 array as a tensor, bt_f32_join_(w) undoes it.
     bt_adamw_split(opt) does this to the flat buffer an optimizer updates whole (one device, no
     shard; its state on the device or offloaded) and returns the compute copy: each update then
     joins a weight, applies the plain update's fp32 math (the same bits) and splits the result,
     moving what the update with a copy moves less 2 bytes. The copy differs from a cast of the weights in ties alone (one weight
     in 65,536, by one bf16 step). Whatever reads the fp32 weights meanwhile joins them first
     (bt_adamw_join) or reads storage->halves: bt_ckpt.h's saver joins a snapshot of them on the
     host.

   DEVICES
     Every parameter of one optimizer lives on one device; the update runs on that device's
     current stream (bt_tensor.h) in one kernel launch over the flat buffer when the parameters
     and gradients tile one, one launch per gradient buffer when the gradients tile several in
     the parameters' order (bt_grads_lazy's segments), else one launch per parameter. The CPU path
     computes in double.

   GRADIENTS THAT HOLD NO MEMORY BETWEEN STEPS
     bt_grads_lazy(params, n, lo, n_units) moves gradients that are views of one flat buffer into
     one lazy buffer (bt_zeros_lazy) per unit [lo[u], lo[u+1]) of it: each takes its memory when
     the backward pass writes the unit's first gradient and gives it back at bt_grads_drop (after
     the update). A flat buffer lives through the forward pass, where the activations peak; these
     do not: the units of a GPT-2 are its blocks, so the
     peak holds the gradients of the blocks the backward has reached (PyTorch's gradients set to
     None do the same). The values and their sums are the flat buffer's: each gradient starts from
     zeros and accumulates as before. bt_grad_norm and the update take one pass per unit.

   THE STATE IN HOST MEMORY (OFFLOAD)
     bt_adamw_init_offload(..., chunk) keeps m and v in pinned host memory instead of on the
     parameters' GPU: 8 bytes a parameter move off the GPU (a 13B model: 104 GB). Each update
     streams them through two pairs of device buffers of `chunk` elements: while chunk k is
     updated on the current stream, chunk k + 1 comes in on one copy stream and chunk k - 1 goes
     out on another, so the update takes about the time of the transfers, 8 bytes a parameter
     each way (measured ~36 GB/s each way on an H200's PCIe 5 x16: ~0.22 s per billion
     parameters), and the first loads overlap the end of the backward pass. The kernel and its inputs are the ones of the
     state on the GPU: the weights and the state are the same bits either way. The stores are
     asynchronous: the host reads m and v after bt_adamw_wait (a checkpoint does). On a CPU the
     state is in host memory already; the chunks are copied all the same, which is how the
     chunking is tested without a GPU.

   OPTIONS: those of bt_tensor.h.
*/
#ifndef BT_OPTIM_H
#define BT_OPTIM_H
#include "bt_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- AdamW (decoupled weight decay, bias correction) ---- */
typedef struct {
    bt_tensor **params; int n;            /* one float dtype (f32 on a GPU), contiguous, one device; not owned */
    float beta1, beta2, eps, weight_decay;
    float max_grad_norm;                  /* > 0: scale the gradients so their global L2 norm <= this */
    unsigned char *decay;                 /* per parameter: 1 = weight decay applies (default: ndim >= 2) */
    /* the state */
    int64_t step;                         /* updates done */
    int64_t numel;                        /* all parameters' elements: the state's index space */
    int64_t *offset;                      /* [n]: where parameter i starts in it */
    int64_t lo, hi;                       /* the range held and updated ([0, numel) unless sharded) */
    bt_tensor *m, *v;                     /* [hi - lo], the parameters' dtype and device */
    bt_tensor *grad_norm;                 /* fp32 [1]: the last step's global gradient norm */
    bt_tensor *clip_scale;                /* fp32 [1]: min(1, max_grad_norm / norm), or NULL */
    bt_tensor *copy;                      /* [numel] or NULL: each update writes its range's new values
                                             there too, rounded (bt_adamw_set_copy); retained */
    int split;                            /* 1: the parameters' buffer holds them in two halves (bt_adamw_split) */
    /* internal */
    bt_tensor *flat_p;                    /* the parameters' buffer when they tile one, else NULL */
    void *runs;                           /* GPU: the weight-decay runs over [lo, hi), a device table */
    int nruns;
    int64_t *run_ends;                    /* GPU: the runs' ends on the host (a launch's first run) */
    int64_t offload_chunk;                /* > 0: m, v in host memory, streamed in chunks of this many elements */
    void *offload;                        /* its device buffers, copy streams and events */
} bt_adamw;
#define BT_ADAMW_OFFLOAD_CHUNK ((int64_t)1 << 24)   /* 64 MiB of m (and of v) a transfer */

BTDEF void bt_adamw_init(bt_adamw *opt, bt_tensor **params, int n, float beta1, float beta2, float eps,
                         float weight_decay, float max_grad_norm);
/* the same with m and v in (pinned) host memory, streamed through the device `chunk` elements
   at a time (BT_ADAMW_OFFLOAD_CHUNK is a good size): THE STATE IN HOST MEMORY above */
BTDEF void bt_adamw_init_offload(bt_adamw *opt, bt_tensor **params, int n, float beta1, float beta2, float eps,
                                 float weight_decay, float max_grad_norm, int64_t chunk);
/* the host waits for the last update's stores of m and v (offloaded state; else a no-op) */
BTDEF void bt_adamw_wait(bt_adamw *opt);
/* The gradients are left as they are: the caller zeroes them (bt_zero_grad) before the next
   backward pass, else they accumulate. One step = bt_adamw_set_grad_norm over all grads + update. */
BTDEF void bt_adamw_step(bt_adamw *opt, float lr);
BTDEF void bt_adamw_free(bt_adamw *opt);
/* hold state for and update only [lo, hi) of the index space (kept state is carried over) */
BTDEF void bt_adamw_shard(bt_adamw *opt, int64_t lo, int64_t hi);
/* norm: an fp32 one-element tensor on the parameters' device (kept); sets grad_norm and clip_scale */
BTDEF void bt_adamw_set_grad_norm(bt_adamw *opt, bt_tensor *norm);
/* One update of [lo, hi) with the clip factor set last. grad NULL: the parameters' own .grad;
   else a contiguous [hi - lo] tensor (f32/bf16/f16) holding the gradient of that range. */
BTDEF void bt_adamw_update(bt_adamw *opt, float lr, bt_tensor *grad);
/* Copy a saved state in: m, v of [hi - lo] elements on any device, step >= 0. */
BTDEF void bt_adamw_set_state(bt_adamw *opt, bt_tensor *m, bt_tensor *v, int64_t step);
/* copy (NULL: none): a contiguous tensor of numel elements over the index space, on the
   parameters' device (bf16 on a GPU; any float dtype on a CPU). Each update also stores the
   updated [lo, hi) there, rounded to its dtype as bt_copy_ rounds: a mixed-precision model's
   compute copy of its weights, made in the update's own pass instead of one of its own (on a
   GPU 2 bytes a parameter written against 6 moved). */
BTDEF void bt_adamw_set_copy(bt_adamw *opt, bt_tensor *copy);
/* The parameters' flat buffer [numel] in two halves from here (THE WEIGHTS IN TWO HALVES): needs
   the parameters to tile one f32 buffer from its storage's start and the whole range [0, numel)
   (offloaded state or not); drops a copy set before. Returns the high halves, bf16 [numel] (a new
   reference): the compute copy every update writes. bt_adamw_join makes the buffer f32 again. */
BTDEF bt_tensor *bt_adamw_split(bt_adamw *opt);
BTDEF void bt_adamw_join(bt_adamw *opt);
/* w: f32, contiguous, at its storage's start, [n] elements: in place to two halves, and back.
   Each needs a temporary of 2n bytes and one of a chunk (64 MiB) on w's device. */
BTDEF void bt_f32_split_(bt_tensor *w);
BTDEF void bt_f32_join_(bt_tensor *w);
/* the elements the conversions copy aside at a time (default 2^24), set; returns the old (0: asks) */
BTDEF int64_t bt_f32_halves_chunk(int64_t elements);
/* the high halves of a split w as a bf16 [n] tensor over the same bytes (retains the storage) */
BTDEF bt_tensor *bt_f32_halves_hi(bt_tensor *w);

/* ---- SGD with momentum (PyTorch's form: buf = mu buf + g + wd p; p -= lr buf) ---- */
typedef struct {
    bt_tensor **params; int n;
    float momentum, weight_decay;
    bt_tensor **buf;
} bt_sgd;
BTDEF void bt_sgd_init(bt_sgd *opt, bt_tensor **params, int n, float momentum, float weight_decay);
BTDEF void bt_sgd_step(bt_sgd *opt, float lr);   /* the gradients are left: the caller zeroes them (bt_zero_grad) */
BTDEF void bt_sgd_free(bt_sgd *opt);

/* ---- gradients per unit, held only from the first write to bt_grads_drop ---- */
/* params' .grad: views of one buffer (its elements [0, lo[n_units]) in units [lo[u], lo[u + 1])).
   Each unit gets a lazy buffer of its own (bt_zeros_lazy: no memory until written) and each
   .grad becomes the same span of its unit's buffer; the old buffer is left to the caller. Returns
   the units' buffers ([n_units], malloc'd, one reference each: bt_grads_free). */
BTDEF bt_tensor **bt_grads_lazy(bt_tensor **params, int n, const int64_t *lo, int n_units);
BTDEF void bt_grads_drop(bt_tensor **units, int n_units);    /* memory back; the gradients are zeros again */
BTDEF void bt_grads_zero(bt_tensor **units, int n_units);    /* the held ones filled with zeros */
BTDEF void bt_grads_take(bt_tensor **units, int n_units);    /* every one holds memory (zeros where not held) */
BTDEF void bt_grads_free(bt_tensor **units, int n_units);

/* ---- norms and schedules ---- */
/* global L2 norm of the grads, as an fp32 [1] tensor on the grads' device (no host sync) */
BTDEF bt_tensor *bt_grad_norm(bt_tensor **params, int n);
/* sum of squares of x (any float dtype, contiguous) as an fp32 [1] tensor on x's device */
BTDEF bt_tensor *bt_sumsq(bt_tensor *x);
/* linear warmup over `warmup` steps to max_lr, then cosine to min_lr at `total` */
BTDEF double bt_lr_cosine(int step, int warmup, int total, double max_lr, double min_lr);

#ifdef __cplusplus
}
#endif
#endif /* BT_OPTIM_H */

#ifdef BT_OPTIM_IMPLEMENTATION
#ifndef BT_OPTIM_IMPLEMENTATION_DONE
#define BT_OPTIM_IMPLEMENTATION_DONE
#ifndef BT_TENSOR_IMPLEMENTATION_DONE
#error "bt_optim.h: define BT_TENSOR_IMPLEMENTATION in the same file, before BT_OPTIM_IMPLEMENTATION"
#endif
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* ============================================================================================
   1. flat buffers: parameters (or gradients) that tile one storage
   ============================================================================================ */
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
/* the flat buffer the n tensors tile, as a 1-D view of `numel` elements from the first; else NULL.
   `like` (may be NULL): the tensors must also sit at the same relative offsets as like's. */
static bt_tensor *bt__flat_view(bt_tensor **ts, int n, int64_t numel, bt_tensor **like) {
    int *order = (int *)malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!order) bt_error("optimizer: out of host memory");
    for (int i = 0; i < n; i++) if (!ts[i]) { free(order); return NULL; }
    bt__sort_by_offset(ts, n, order);
    int ok = bt__tiles(ts, order, n);
    for (int i = 0; ok && like && i < n; i++)
        ok = ts[i]->offset - ts[order[0]]->offset == like[i]->offset - like[order[0]]->offset;
    bt_tensor *flat = NULL;
    if (ok) {
        int64_t shape[1] = {numel}, stride[1] = {1};
        flat = bt__view_raw(ts[order[0]], 1, shape, stride, ts[order[0]]->offset);
    }
    free(order);
    return flat;
}
static int64_t bt__total_numel(bt_tensor **ts, int n) { int64_t s = 0; for (int i = 0; i < n; i++) s += bt_numel(ts[i]); return s; }
/* the parameters in list order cut where their gradients stop tiling one storage: group k is
   params[start[k] .. start[k + 1]) (start has n + 1 entries), its gradients contiguous, of one
   dtype, each starting where the previous one ends. Returns the count; -1 when a gradient is missing. */
static int bt__grad_groups(bt_tensor **params, int n, int *start) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        bt_tensor *g = params[i]->grad, *h = i ? params[i - 1]->grad : NULL;
        if (!g) return -1;
        int joins = h && bt_is_contiguous(g) && bt_is_contiguous(h) && g->storage == h->storage && g->dtype == h->dtype &&
                    g->offset == h->offset + bt_numel(h);
        if (!joins) start[k++] = i;
    }
    start[k] = n;
    return k;
}
/* group k of bt__grad_groups as one 1-D view */
static bt_tensor *bt__grad_group_view(bt_tensor **params, const int *start, int k) {
    int64_t shape[1] = {0}, stride[1] = {1};
    for (int i = start[k]; i < start[k + 1]; i++) shape[0] += bt_numel(params[i]->grad);
    return bt__view_raw(params[start[k]]->grad, 1, shape, stride, params[start[k]]->grad->offset);
}

/* ---- gradients per unit (GRADIENTS THAT HOLD NO MEMORY BETWEEN STEPS) ---- */
BTDEF bt_tensor **bt_grads_lazy(bt_tensor **params, int n, const int64_t *lo, int n_units) {
    if (!params || n < 1 || !lo || n_units < 1) bt_error("grads_lazy: no parameters (%d) or units (%d)", n, n_units);
    bt_tensor *g0 = params[0]->grad;
    int64_t base = -1;
    for (int i = 0; i < n; i++) {
        bt_tensor *g = params[i]->grad;
        if (!g || !bt_is_contiguous(g) || g->storage != g0->storage || g->dtype != g0->dtype)
            bt_error("grads_lazy: parameter %d's gradient is not a contiguous view of parameter 0's gradient buffer", i);
        if (base < 0 || g->offset < base) base = g->offset;
    }
    for (int u = 0; u < n_units; u++)
        if (lo[u + 1] <= lo[u]) bt_error("grads_lazy: unit %d is empty or reversed ([%lld, %lld))", u, (long long)lo[u], (long long)lo[u + 1]);
    bt_tensor **units = (bt_tensor **)calloc((size_t)n_units, sizeof(bt_tensor *));
    if (!units) bt_error("grads_lazy: out of host memory");
    bt_device dev = bt_device_of(g0);
    bt_scope_begin();
    for (int u = 0; u < n_units; u++) units[u] = bt_keep(bt_zeros_lazy(bt_shape1(lo[u + 1] - lo[u]), g0->dtype, dev));
    for (int i = 0; i < n; i++) {   /* every gradient inside one unit, else nothing is changed */
        int64_t a = params[i]->grad->offset - base, b = a + bt_numel(params[i]->grad);
        int u = 0;
        while (u < n_units && lo[u + 1] <= a) u++;
        if (u == n_units || a < lo[u] || b > lo[u + 1]) {
            bt_scope_end();
            bt_grads_free(units, n_units);
            bt_error("grads_lazy: parameter %d's gradient [%lld, %lld) is not inside one unit", i, (long long)a, (long long)b);
        }
    }
    for (int i = 0; i < n; i++) {
        bt_tensor *g = params[i]->grad;
        int64_t a = g->offset - base;
        int u = 0;
        while (lo[u + 1] <= a) u++;
        params[i]->grad = bt__view_raw(units[u], g->ndim, g->shape, g->stride, a - lo[u]);
        bt_release(g);
    }
    bt_scope_end();
    return units;
}
BTDEF void bt_grads_drop(bt_tensor **units, int n_units) { for (int u = 0; u < n_units; u++) bt_lazy_drop(units[u]); }
BTDEF void bt_grads_zero(bt_tensor **units, int n_units) {
    for (int u = 0; u < n_units; u++) if (bt_lazy_held(units[u])) bt_zero_(units[u]);
}
BTDEF void bt_grads_take(bt_tensor **units, int n_units) { for (int u = 0; u < n_units; u++) (void)bt_data_ptr(units[u]); }
BTDEF void bt_grads_free(bt_tensor **units, int n_units) {
    if (!units) return;
    for (int u = 0; u < n_units; u++) bt_release(units[u]);
    free(units);
}

/* ============================================================================================
   2. norms
   ============================================================================================ */
BTDEF bt_tensor *bt_sumsq(bt_tensor *x) {
    bt__need_float(x, "sumsq", "x");
    if (!bt_is_contiguous(x)) bt_error("sumsq: %s is not contiguous", bt__s(x));
    bt_tensor *out = bt__new(bt_shape1(1), BT_F32, bt_device_of(x));
    if (bt__is_gpu(x)) {
#ifdef BT_CUDA
        BT__ON_GPU(bt_device_of(x), stream) bt_k_sumsq(x->dtype, (float *)bt_data_ptr(out), bt_data_ptr(x), bt_numel(x), 0, stream);
#endif
    } else {
        double s = 0; const void *p = bt_data_ptr(x); int64_t m = bt_numel(x);
        for (int64_t j = 0; j < m; j++) { double v = bt__ld(p, x->dtype, j); s += v * v; }
        ((float *)bt_data_ptr(out))[0] = (float)s;
    }
    return bt__register(out);
}

BTDEF bt_tensor *bt_grad_norm(bt_tensor **params, int n) {
    bt_device dev = bt_cpu(); int found = 0;
    for (int i = 0; i < n; i++) if (params[i]->grad) { dev = bt_device_of(params[i]->grad); found = 1; break; }
    int old = bt_set_grad_enabled(0);
    bt_tensor *norm = NULL;
    bt_scope_begin();
    if (!found) norm = bt_retain(bt_zeros(bt_shape1(1), BT_F32, dev));
    else if (dev.type == BT_GPU) {
        int *start = (int *)malloc(sizeof(int) * (size_t)(n + 1));
        if (!start) bt_error("grad_norm: out of host memory");
        int ng = bt__grad_groups(params, n, start);
        bt_tensor *sq;
        if (ng >= 1) {   /* one pass per buffer the gradients tile, in order (one: the flat buffer's) */
            sq = NULL;
            for (int k = 0; k < ng; k++) {
                bt_tensor *v = bt__grad_group_view(params, start, k), *s = bt_sumsq(v);
                bt_release(v);
                if (sq) bt_add_(sq, s, 1.0); else sq = s;
            }
        } else {
            sq = bt_zeros(bt_shape1(1), BT_F32, dev);
            for (int i = 0; i < n; i++) if (params[i]->grad) bt_add_(sq, bt_sumsq(params[i]->grad), 1.0);
        }
        free(start);
        norm = bt_retain(bt_sqrt(sq));
    } else {
        double s = 0;
        for (int i = 0; i < n; i++) {
            bt_tensor *g = params[i]->grad;
            if (!g) continue;
            bt_tensor *gc = bt__contig(g); const void *p = bt_data_ptr(gc); int64_t m = bt_numel(g);
            for (int64_t j = 0; j < m; j++) { double v = bt__ld(p, gc->dtype, j); s += v * v; }
            bt_release(gc);
        }
        norm = bt_retain(bt_full(bt_shape1(1), sqrt(s), BT_F32, dev));
    }
    bt_scope_end();
    bt_set_grad_enabled(old);
    return bt__register(norm);
}

/* ============================================================================================
   3. AdamW
   ============================================================================================ */
static bt_device bt__opt_device(const bt_adamw *opt) { return bt_device_of(opt->params[0]); }

/* the weight-decay runs of [lo, hi): consecutive elements of equal decay, one entry each (end
   relative to lo); end and wd hold n + 1 entries. Returns their count. */
static int bt__adamw_runs(const bt_adamw *opt, int64_t *end, float *wd) {
    int *order = (int *)malloc(sizeof(int) * (size_t)(opt->n + 1)), nr = 0;
    if (!order) bt_error("adamw: out of host memory");
    for (int i = 0; i < opt->n; i++) {           /* parameters by offset in the index space */
        int j = i;
        for (; j > 0 && opt->offset[order[j - 1]] > opt->offset[i]; j--) order[j] = order[j - 1];
        order[j] = i;
    }
    for (int k = 0; k < opt->n; k++) {
        int i = order[k];
        int64_t a = opt->offset[i], b = a + bt_numel(opt->params[i]);
        if (a < opt->lo) a = opt->lo;
        if (b > opt->hi) b = opt->hi;
        if (a >= b) continue;
        float w = opt->decay[i] ? opt->weight_decay : 0.f;
        if (nr && wd[nr - 1] == w) end[nr - 1] = b - opt->lo;
        else { end[nr] = b - opt->lo; wd[nr] = w; nr++; }
    }
    free(order);
    return nr;
}

#ifdef BT_CUDA
/* the runs as a device table, so one launch updates a flat buffer of many parameters */
static void bt__adamw_build_runs(bt_adamw *opt) {
    bt_k_decay_run *runs = (bt_k_decay_run *)malloc(sizeof(bt_k_decay_run) * (size_t)(opt->n + 1));
    int64_t *end = (int64_t *)malloc(sizeof(int64_t) * (size_t)(opt->n + 1));
    float *wd = (float *)malloc(sizeof(float) * (size_t)(opt->n + 1));
    if (!runs || !end || !wd) bt_error("adamw: out of host memory");
    int nr = bt__adamw_runs(opt, end, wd);
    for (int k = 0; k < nr; k++) { runs[k].end = end[k]; runs[k].wd = wd[k]; }
    free(opt->run_ends);
    opt->run_ends = end;
    free(wd);
    bt_device dev = bt__opt_device(opt);
    bt_free(opt->runs);
    opt->runs = bt_alloc(dev, sizeof(bt_k_decay_run) * (size_t)(nr ? nr : 1), bt_stream_current(dev));
    opt->nruns = nr;
    BT__ON_GPU(dev, stream) {
        BT__CUDA_CHECK(cudaMemcpyAsync(opt->runs, runs, sizeof(bt_k_decay_run) * (size_t)nr, cudaMemcpyHostToDevice, stream), "adamw");
        BT__CUDA_CHECK(cudaStreamSynchronize(stream), "adamw");   /* runs is freed next: once, at setup */
    }
    free(runs);
}
#endif

/* ---- the offloaded state: two slots, each a device buffer of m and one of v ([chunk]); a chunk
   takes the next slot. GPU: the load of a slot waits for the store of its last chunk (stored),
   the update for the load (loaded), the store for the update (updated). ---- */
typedef struct {
    bt_tensor *buf[2][2];                 /* [slot][0: m, 1: v] */
    int next;                             /* the slot of the next chunk */
    int64_t *run_end; float *run_wd; int nruns;   /* the decay runs of [lo, hi), on the host */
#ifdef BT_CUDA
    cudaStream_t load, store;
    cudaEvent_t loaded[2], updated[2], stored[2];
#endif
} bt__adamw_off;

/* a [n] state tensor in host memory the copy engines read directly (pinned) when the parameters
   are on a GPU; owned: it goes back to the pinned pool with its last reference */
static bt_tensor *bt__adamw_host_state(int64_t n, bt_dtype dt, int pinned) {
    if (!pinned) return bt__new(bt_shape1(n), dt, bt_cpu());
    size_t nb = (size_t)n * bt_dtype_size(dt);
    void *p = bt_try_alloc(bt_pinned_host(), nb ? nb : 1, NULL);
    if (!p) bt_error("adamw (offload): %.1f GB of pinned host memory for m or v: %s", nb / 1e9,
                     "the host has too little free memory (fewer parameters, or no offload)");
    bt_tensor *t = bt_from_blob(p, bt_shape1(n), dt, bt_cpu());
    t->storage->external = 0;   /* owned */
    return t;
}

BTDEF void bt_adamw_wait(bt_adamw *opt) {
    bt__adamw_off *o = (bt__adamw_off *)opt->offload;
    if (!o) return;
#ifdef BT_CUDA
    if (bt__opt_device(opt).type == BT_GPU)
        BT__ON_DEVICE(bt__opt_device(opt)) BT__CUDA_CHECK(cudaStreamSynchronize(o->store), "adamw (offload)");
#endif
}
static void bt__adamw_off_free(bt_adamw *opt) {
    bt__adamw_off *o = (bt__adamw_off *)opt->offload;
    if (!o) return;
    bt_adamw_wait(opt);
#ifdef BT_CUDA
    if (bt__opt_device(opt).type == BT_GPU)
        BT__ON_DEVICE(bt__opt_device(opt)) {
            for (int k = 0; k < 2; k++) {
                cudaEventDestroy(o->loaded[k]); cudaEventDestroy(o->updated[k]); cudaEventDestroy(o->stored[k]);
            }
            cudaStreamDestroy(o->load); cudaStreamDestroy(o->store);
        }
#endif
    for (int k = 0; k < 4; k++) bt_release(o->buf[k / 2][k % 2]);
    free(o->run_end); free(o->run_wd); free(o);
    opt->offload = NULL;
}
static void bt__adamw_off_make(bt_adamw *opt) {
    bt__adamw_off_free(opt);
    bt__adamw_off *o = (bt__adamw_off *)calloc(1, sizeof *o);
    if (!o) bt_error("adamw (offload): out of host memory");
    opt->offload = o;
    o->run_end = (int64_t *)malloc(sizeof(int64_t) * (size_t)(opt->n + 1));
    o->run_wd = (float *)malloc(sizeof(float) * (size_t)(opt->n + 1));
    if (!o->run_end || !o->run_wd) bt_error("adamw (offload): out of host memory");
    o->nruns = bt__adamw_runs(opt, o->run_end, o->run_wd);
    bt_device dev = bt__opt_device(opt);
    int64_t c = opt->hi - opt->lo < opt->offload_chunk ? opt->hi - opt->lo : opt->offload_chunk;
    for (int k = 0; k < 4; k++) o->buf[k / 2][k % 2] = bt__new(bt_shape1(c > 0 ? c : 1), opt->params[0]->dtype, dev);
#ifdef BT_CUDA
    if (dev.type == BT_GPU)
        BT__ON_DEVICE(dev) {
            BT__CUDA_CHECK(cudaStreamCreateWithFlags(&o->load, cudaStreamNonBlocking), "adamw (offload)");
            BT__CUDA_CHECK(cudaStreamCreateWithFlags(&o->store, cudaStreamNonBlocking), "adamw (offload)");
            for (int k = 0; k < 2; k++) {
                BT__CUDA_CHECK(cudaEventCreateWithFlags(&o->loaded[k], cudaEventDisableTiming), "adamw (offload)");
                BT__CUDA_CHECK(cudaEventCreateWithFlags(&o->updated[k], cudaEventDisableTiming), "adamw (offload)");
                BT__CUDA_CHECK(cudaEventCreateWithFlags(&o->stored[k], cudaEventDisableTiming), "adamw (offload)");
            }
        }
#endif
}

/* m, v as zeros over [lo, hi): on the parameters' device, or in host memory when offloaded */
static void bt__adamw_alloc_state(bt_adamw *opt) {
    bt_adamw_wait(opt);
    bt_release(opt->m); bt_release(opt->v);
    bt_dtype dt = opt->params[0]->dtype;
    bt_device dev = bt__opt_device(opt);
    if (opt->offload_chunk > 0) {
        opt->m = bt__adamw_host_state(opt->hi - opt->lo, dt, dev.type == BT_GPU);
        opt->v = bt__adamw_host_state(opt->hi - opt->lo, dt, dev.type == BT_GPU);
    } else {
        opt->m = bt__new(bt_shape1(opt->hi - opt->lo), dt, dev);
        opt->v = bt__new(bt_shape1(opt->hi - opt->lo), dt, dev);
    }
    bt_fill_(opt->m, 0.0); bt_fill_(opt->v, 0.0);
    if (opt->offload_chunk > 0) { bt__adamw_off_make(opt); return; }
#ifdef BT_CUDA
    if (dev.type == BT_GPU) bt__adamw_build_runs(opt);
#endif
}

BTDEF void bt_adamw_init_offload(bt_adamw *opt, bt_tensor **params, int n, float beta1, float beta2, float eps,
                                 float weight_decay, float max_grad_norm, int64_t chunk) {
    memset(opt, 0, sizeof *opt);
    if (n <= 0 || !params) bt_error("adamw_init: no parameters");
    if (chunk < 0) bt_error("adamw_init_offload: chunk %lld (0: the state on the parameters' device; > 0: offloaded)", (long long)chunk);
    opt->params = params; opt->n = n;
    opt->beta1 = beta1; opt->beta2 = beta2; opt->eps = eps; opt->weight_decay = weight_decay;
    opt->max_grad_norm = max_grad_norm;
    opt->offset = (int64_t *)calloc((size_t)n, sizeof(int64_t));
    opt->decay = (unsigned char *)calloc((size_t)n, 1);
    if (!opt->offset || !opt->decay) bt_error("adamw_init: out of host memory");
    for (int i = 0; i < n; i++) {
        bt_tensor *p = params[i];
        if (!p || !bt_dtype_is_float(p->dtype) || p->dtype != params[0]->dtype) bt_error("adamw_init: parameter %d is not a float tensor of parameter 0's dtype", i);
        if (bt_device_of(p).type == BT_GPU && p->dtype != BT_F32) bt_error("adamw_init: GPU parameter %d must be f32 (master weights)", i);
        if (!bt_is_contiguous(p)) bt_error("adamw_init: parameter %d %s is not contiguous", i, bt__s(p));
        if (!bt_device_eq(bt_device_of(p), bt_device_of(params[0])))
            bt_error("adamw_init: parameter %d is on %s, parameter 0 on %s", i, bt__s(p), bt__s(params[0]));
        opt->decay[i] = p->ndim >= 2;
    }
    opt->numel = bt__total_numel(params, n);
    opt->flat_p = bt__flat_view(params, n, opt->numel, NULL);
    for (int i = 0; i < n; i++) {                  /* the buffer's order, else the list's */
        if (opt->flat_p) opt->offset[i] = params[i]->offset - opt->flat_p->offset;
        else opt->offset[i] = i ? opt->offset[i - 1] + bt_numel(params[i - 1]) : 0;
    }
    opt->lo = 0; opt->hi = opt->numel;
    opt->offload_chunk = chunk;
    bt__adamw_alloc_state(opt);
}
BTDEF void bt_adamw_init(bt_adamw *opt, bt_tensor **params, int n, float beta1, float beta2, float eps,
                         float weight_decay, float max_grad_norm) {
    bt_adamw_init_offload(opt, params, n, beta1, beta2, eps, weight_decay, max_grad_norm, 0);
}
BTDEF void bt_adamw_free(bt_adamw *opt) {
    bt__adamw_off_free(opt);
    bt_release(opt->m); bt_release(opt->v); bt_release(opt->flat_p);
    bt_release(opt->grad_norm); bt_release(opt->clip_scale); bt_release(opt->copy);
    bt_free(opt->runs); free(opt->run_ends);
    free(opt->offset); free(opt->decay);
    memset(opt, 0, sizeof *opt);
}
BTDEF void bt_adamw_shard(bt_adamw *opt, int64_t lo, int64_t hi) {
    if (lo < 0 || hi < lo || hi > opt->numel)
        bt_error("adamw_shard: [%lld, %lld) is not inside [0, %lld)", (long long)lo, (long long)hi, (long long)opt->numel);
    bt_adamw_wait(opt);
    bt_tensor *m = opt->m, *v = opt->v;
    int64_t olo = opt->lo, ohi = opt->hi;
    opt->m = opt->v = NULL;
    opt->lo = lo; opt->hi = hi;
    bt__adamw_alloc_state(opt);
    int64_t a = lo > olo ? lo : olo, b = hi < ohi ? hi : ohi;   /* carry the overlap over */
    if (a < b) {
        bt_scope_begin();
        bt_copy_(bt_narrow(opt->m, 0, a - lo, b - a), bt_narrow(m, 0, a - olo, b - a));
        bt_copy_(bt_narrow(opt->v, 0, a - lo, b - a), bt_narrow(v, 0, a - olo, b - a));
        bt_scope_end();
    }
    bt_release(m); bt_release(v);
}
BTDEF void bt_adamw_set_state(bt_adamw *opt, bt_tensor *m, bt_tensor *v, int64_t step) {
    bt__need(m, "adamw_set_state", "m"); bt__need(v, "adamw_set_state", "v");
    if (bt_numel(m) != opt->hi - opt->lo || bt_numel(v) != opt->hi - opt->lo)
        bt_error("adamw_set_state: m %s and v %s must hold %lld elements (the range [%lld, %lld))", bt__s(m), bt__s(v),
                 (long long)(opt->hi - opt->lo), (long long)opt->lo, (long long)opt->hi);
    if (step < 0) bt_error("adamw_set_state: step %lld < 0", (long long)step);
    bt_adamw_wait(opt);
    bt_scope_begin();
    bt_copy_(opt->m, bt_reshape(m, bt_shape1(-1)));
    bt_copy_(opt->v, bt_reshape(v, bt_shape1(-1)));
    bt_scope_end();
    opt->step = step;
}

BTDEF void bt_adamw_set_copy(bt_adamw *opt, bt_tensor *copy) {
    if (copy && opt->split) bt_error("adamw_set_copy: the weights are in two halves (bt_adamw_split): their copy is the high halves");
    if (copy) {
        bt__need_float(copy, "adamw_set_copy", "copy");
        bt_device dev = bt__opt_device(opt);
        if (!bt_is_contiguous(copy) || bt_numel(copy) != opt->numel || !bt_device_eq(bt_device_of(copy), dev))
            bt_error("adamw_set_copy: copy %s must be a contiguous tensor of %lld elements (the parameters') on %s", bt__s(copy),
                     (long long)opt->numel, bt__s(opt->params[0]));
        if (dev.type == BT_GPU && copy->dtype != BT_BF16)
            bt_error("adamw_set_copy: copy %s on a GPU must be bf16", bt__s(copy));
    }
    bt_retain(copy);
    bt_release(opt->copy);
    opt->copy = copy;
}

/* ---- the weights in two halves ---- */
static void bt__halves_need(bt_tensor *w, const char *op, int split) {
    bt__need(w, op, "w");
    if (w->dtype != BT_F32 || !bt_is_contiguous(w) || w->offset != 0)
        bt_error("%s: w %s must be a contiguous f32 tensor at the start of its storage", op, bt__s(w));
    if (split && w->storage->halves) bt_error("%s: w %s is in two halves already", op, bt__s(w));
    if (!split && w->storage->halves != bt_numel(w))
        bt_error("%s: w %s is not in two halves (%lld of its storage's elements are)", op, bt__s(w), (long long)w->storage->halves);
}
/* n bytes from src to dst on w's device (the current stream), or on the host */
static void bt__halves_move(bt_device dev, void *dst, const void *src, size_t n) {
    if (dev.type != BT_GPU) { memmove(dst, src, n); return; }
#ifdef BT_CUDA
    BT__ON_GPU(dev, stream) BT__CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream), "f32 halves");
#endif
}
static int64_t bt__halves_chunk = (int64_t)1 << 24;   /* 64 MiB of f32 copied aside a chunk */
BTDEF int64_t bt_f32_halves_chunk(int64_t elements) {
    int64_t old = bt__halves_chunk;
    if (elements > 0) bt__halves_chunk = elements;
    return old;
}
/* Both ways in place, with a temporary L of the low halves (2n bytes) and one C of a chunk.
   split, going up: the high halves of the chunk [a, a + c) land in f32 slots [a/2, (a + c)/2), all
   read by then (into C first); the low halves then move from L into [2n, 4n), read entirely by
   then too. join, going down: the low halves first to L; the f32 of the chunk [a, a + c) fills
   bytes [4a, 4a + 4c), where the high halves [2a, 2a + 2c) were (read: this chunk's into C first,
   the ones above by the chunks before) or low halves (in L). */
static void bt__halves_convert(bt_tensor *w, int split) {
    bt__halves_need(w, split ? "f32_split_" : "f32_join_", split);
    bt_device dev = bt_device_of(w);
    int64_t n = bt_numel(w), ch = n < bt__halves_chunk ? n : bt__halves_chunk;
    float *x = (float *)bt_data_ptr(w);
    uint16_t *hi = (uint16_t *)x;
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();
    uint16_t *lo = (uint16_t *)bt_data_ptr(bt_empty(bt_shape1(n ? n : 1), BT_BF16, dev));
    void *c = bt_data_ptr(bt_empty(bt_shape1(ch ? ch : 1), BT_F32, dev));
    if (!split) bt__halves_move(dev, lo, hi + n, (size_t)n * 2);
    for (int64_t j = 0; ch > 0 && j * ch < n; j++) {
        int64_t a = split ? j * ch : (n - 1) / ch * ch - j * ch, k = n - a < ch ? n - a : ch;
        bt__halves_move(dev, c, split ? (void *)(x + a) : (void *)(hi + a), (size_t)k * (split ? 4 : 2));
        if (dev.type == BT_GPU) {
#ifdef BT_CUDA
            BT__ON_GPU(dev, stream) {
                if (split) bt_k_f32_split((const float *)c, hi + a, lo + a, k, stream);
                else bt_k_f32_join((const uint16_t *)c, lo + a, x + a, k, stream);
            }
#endif
        } else if (split) {
            for (int64_t i = 0; i < k; i++) { hi[a + i] = bt__f32_hi16(((float *)c)[i]); lo[a + i] = bt__f32_lo16(((float *)c)[i]); }
        } else {
            for (int64_t i = 0; i < k; i++) x[a + i] = bt__f32_join16(((uint16_t *)c)[i], lo[a + i]);
        }
    }
    if (split) bt__halves_move(dev, hi + n, lo, (size_t)n * 2);
    bt_scope_end();
    bt_set_grad_enabled(old);
    w->storage->halves = split ? n : 0;
    w->storage->version++;
}
BTDEF void bt_f32_split_(bt_tensor *w) { bt__halves_convert(w, 1); }
BTDEF void bt_f32_join_(bt_tensor *w) { bt__halves_convert(w, 0); }
BTDEF bt_tensor *bt_f32_halves_hi(bt_tensor *w) {
    bt__halves_need(w, "f32_halves_hi", 0);
    bt_tensor *t = bt__tensor_struct();
    t->ndim = 1; t->dtype = BT_BF16; t->shape[0] = bt_numel(w); t->stride[0] = 1;
    t->storage = w->storage;
    w->storage->refcount++;
    return bt__register(t);
}
BTDEF bt_tensor *bt_adamw_split(bt_adamw *opt) {
    if (opt->split) bt_error("adamw_split: the weights are in two halves already");
    if (!opt->n || !opt->flat_p || opt->flat_p->offset != 0)
        bt_error("adamw_split: the parameters must tile one f32 buffer from its start (a flat parameter buffer)");
    if (opt->lo != 0 || opt->hi != opt->numel) bt_error("adamw_split: the optimizer holds [%lld, %lld) of %lld (a shard): the "
                                                        "weights it does not update would not be written", (long long)opt->lo,
                                                        (long long)opt->hi, (long long)opt->numel);
    bt_adamw_set_copy(opt, NULL);
    bt_f32_split_(opt->flat_p);
    opt->split = 1;
    return bt_f32_halves_hi(opt->flat_p);
}
BTDEF void bt_adamw_join(bt_adamw *opt) {
    if (!opt->split) return;
    bt_f32_join_(opt->flat_p);
    opt->split = 0;
}

/* clip factor min(1, max_norm / (norm + 1e-6)) as a device scalar, no host sync: -max(-1, -r) is
   exact, where 1 - relu(1 - r) in fp32 would lose r's low bits (a relative error of 1e-5 at r = 1e-3) */
BTDEF void bt_adamw_set_grad_norm(bt_adamw *opt, bt_tensor *norm) {
    bt__need(norm, "adamw_set_grad_norm", "norm");
    if (bt_numel(norm) != 1 || norm->dtype != BT_F32) bt_error("adamw_set_grad_norm: norm %s must be one f32", bt__s(norm));
    int old = bt_set_grad_enabled(0);
    bt_release(opt->grad_norm); bt_release(opt->clip_scale);
    opt->grad_norm = bt_retain(norm);
    opt->clip_scale = NULL;
    if (opt->max_grad_norm > 0) {
        bt_scope_begin();
        bt_device dev = bt_device_of(norm);
        bt_tensor *r = bt_div(bt_full(bt_shape1(1), opt->max_grad_norm, BT_F32, dev), bt_add_scalar(bt_reshape(norm, bt_shape1(1)), 1e-6));
        bt_tensor *pair[2] = {bt_full(bt_shape1(1), -1.0, BT_F32, dev), bt_neg(r)};
        opt->clip_scale = bt_keep(bt_neg(bt_max(bt_concat(pair, 2, 0), 0, 1)));
        bt_scope_end();
    }
    bt_set_grad_enabled(old);
}

#ifdef BT_CUDA
/* the run (of opt->runs) element `at` of [lo, hi) is in */
static int bt__adamw_run_of(const bt_adamw *opt, int64_t at) {
    int a = 0, b = opt->nruns - 1;
    while (a < b) { int c = (a + b) / 2; if (opt->run_ends[c] > at) b = c; else a = c + 1; }
    return a;
}
#endif
/* one update of n elements: parameters p (the parameters' dtype), gradients g (dtype gdt), state
   m, v (the state's dtype) on the parameters' device, decay wd, or (at >= 0: p is element `at` of
   [lo, hi)) the run table's; pc: the same elements of the copy, or NULL; in halves (opt->split) p
   is not used: pc holds the high halves and pl the low ones */
static void bt__adamw_apply(bt_adamw *opt, float lr, void *p, const void *g, bt_dtype gdt, void *m, void *v, int64_t n,
                            float wd, int64_t at, void *pc, uint16_t *pl) {
    bt_dtype dt = opt->params[0]->dtype;
    bt_device dev = bt__opt_device(opt);
    if (dev.type == BT_GPU) {
#ifdef BT_CUDA
        const float *cs = opt->clip_scale ? (const float *)bt_data_ptr(opt->clip_scale) : NULL;
        int r0 = at >= 0 ? bt__adamw_run_of(opt, at) : 0;
        BT__ON_GPU(dev, stream)
            bt_k_adamw((float *)p, g, gdt, (float *)m, (float *)v, n, lr, opt->beta1, opt->beta2, opt->eps, wd,
                       at >= 0 ? (const bt_k_decay_run *)opt->runs + r0 : NULL, at >= 0 ? opt->nruns - r0 : 0, at >= 0 ? at : 0,
                       (int)opt->step, cs, (uint16_t *)pc, pl, stream);
#else
        (void)at; (void)m; (void)v; (void)pc; (void)pl;
#endif
        return;
    }
    double b1 = opt->beta1, b2 = opt->beta2, c1 = 1.0 - pow(b1, (double)opt->step), c2 = 1.0 - pow(b2, (double)opt->step);
    double cs = opt->clip_scale ? bt__ld(bt_data_ptr(opt->clip_scale), BT_F32, 0) : 1.0;
    bt_dtype cdt = opt->copy ? opt->copy->dtype : dt;
    #pragma omp parallel for if (n > BT__PAR_MIN)
    for (int64_t j = 0; j < n; j++) {
        double gj = bt__ld(g, gdt, j) * cs, pj = pl ? bt__f32_join16(((uint16_t *)pc)[j], pl[j]) : bt__ld(p, dt, j);
        double mj = b1 * bt__ld(m, dt, j) + (1 - b1) * gj, vj = b2 * bt__ld(v, dt, j) + (1 - b2) * gj * gj;
        pj -= lr * ((mj / c1) / (sqrt(vj / c2) + opt->eps) + wd * pj);
        bt__st(m, dt, j, mj); bt__st(v, dt, j, vj);
        if (pl) {   /* the f32 it would store, split */
            float pf = (float)pj;
            ((uint16_t *)pc)[j] = bt__f32_hi16(pf); pl[j] = bt__f32_lo16(pf);
            continue;
        }
        bt__st(p, dt, j, pj);
        if (pc) bt__st(pc, cdt, j, bt__ld(p, dt, j));   /* the stored parameter rounded once, as a cast of it */
    }
}
/* the offloaded update of n elements from element a: each chunk's m and v loaded into a slot's
   device buffers, updated there, stored back (THE STATE IN HOST MEMORY) */
static void bt__adamw_stream(bt_adamw *opt, float lr, char *p, const char *g, bt_dtype gdt, int64_t a, int64_t n, float wd,
                             char *pc, uint16_t *pl) {
    bt__adamw_off *o = (bt__adamw_off *)opt->offload;
    size_t es = bt_dtype_size(opt->params[0]->dtype), gs = bt_dtype_size(gdt);
    size_t cs = opt->split ? sizeof(uint16_t) : opt->copy ? bt_dtype_size(opt->copy->dtype) : 0;
    bt_device dev = bt__opt_device(opt);
    for (int64_t c = 0; c < n; c += opt->offload_chunk) {
        int64_t k = n - c < opt->offload_chunk ? n - c : opt->offload_chunk;
        int slot = o->next;
        o->next ^= 1;
        char *hm = (char *)bt_data_ptr(opt->m) + (a + c - opt->lo) * (int64_t)es, *hv = (char *)bt_data_ptr(opt->v) + (a + c - opt->lo) * (int64_t)es;
        void *dm = bt_data_ptr(o->buf[slot][0]), *dv = bt_data_ptr(o->buf[slot][1]);
        size_t nb = (size_t)k * es;
        if (dev.type != BT_GPU) {
            memcpy(dm, hm, nb); memcpy(dv, hv, nb);
            bt__adamw_apply(opt, lr, p + c * (int64_t)es, g + c * (int64_t)gs, gdt, dm, dv, k, wd, -1, pc ? pc + c * (int64_t)cs : NULL,
                            pl ? pl + c : NULL);
            memcpy(hm, dm, nb); memcpy(hv, dv, nb);
            continue;
        }
#ifdef BT_CUDA
        BT__ON_GPU(dev, stream) {
            BT__CUDA_CHECK(cudaStreamWaitEvent(o->load, o->stored[slot], 0), "adamw (offload)");
            BT__CUDA_CHECK(cudaMemcpyAsync(dm, hm, nb, cudaMemcpyHostToDevice, o->load), "adamw (offload): load");
            BT__CUDA_CHECK(cudaMemcpyAsync(dv, hv, nb, cudaMemcpyHostToDevice, o->load), "adamw (offload): load");
            BT__CUDA_CHECK(cudaEventRecord(o->loaded[slot], o->load), "adamw (offload)");
            BT__CUDA_CHECK(cudaStreamWaitEvent(stream, o->loaded[slot], 0), "adamw (offload)");
        }
        bt__adamw_apply(opt, lr, p + c * (int64_t)es, g + c * (int64_t)gs, gdt, dm, dv, k, wd, -1, pc ? pc + c * (int64_t)cs : NULL,
                        pl ? pl + c : NULL);
        BT__ON_GPU(dev, stream) {
            BT__CUDA_CHECK(cudaEventRecord(o->updated[slot], stream), "adamw (offload)");
            BT__CUDA_CHECK(cudaStreamWaitEvent(o->store, o->updated[slot], 0), "adamw (offload)");
            BT__CUDA_CHECK(cudaMemcpyAsync(hm, dm, nb, cudaMemcpyDeviceToHost, o->store), "adamw (offload): store");
            BT__CUDA_CHECK(cudaMemcpyAsync(hv, dv, nb, cudaMemcpyDeviceToHost, o->store), "adamw (offload): store");
            BT__CUDA_CHECK(cudaEventRecord(o->stored[slot], o->store), "adamw (offload)");
        }
#endif
    }
}
/* the update of n elements from element a of the index space: parameters at p, gradients at g
   (dtype gdt), decay wd, or with runs the run table's (offloaded: the span is all of [lo, hi)) */
static void bt__adamw_span(bt_adamw *opt, float lr, void *p, const void *g, bt_dtype gdt, int64_t a, int64_t n, float wd,
                           int runs) {
    bt__adamw_off *o = (bt__adamw_off *)opt->offload;
    size_t es = bt_dtype_size(opt->params[0]->dtype), gs = bt_dtype_size(gdt);
    size_t cs = opt->split ? sizeof(uint16_t) : opt->copy ? bt_dtype_size(opt->copy->dtype) : 0;   /* bytes of the copy's element */
    char *pc = opt->copy ? (char *)bt_data_ptr(opt->copy) + a * (int64_t)cs : NULL;   /* the copy of element a */
    uint16_t *pl = NULL;
    if (opt->split) {   /* element a's halves: the buffer's first numel 16-bit words, then the low ones */
        pc = (char *)((uint16_t *)opt->flat_p->storage->data + a);
        pl = (uint16_t *)opt->flat_p->storage->data + opt->numel + a;
    }
    if (!o) {
        bt__adamw_apply(opt, lr, p, g, gdt, (char *)bt_data_ptr(opt->m) + (a - opt->lo) * (int64_t)es,
                        (char *)bt_data_ptr(opt->v) + (a - opt->lo) * (int64_t)es, n, wd, runs ? a - opt->lo : -1, pc, pl);
        return;
    }
    if (!runs) { bt__adamw_stream(opt, lr, (char *)p, (const char *)g, gdt, a, n, wd, pc, pl); return; }
    for (int r = 0; r < o->nruns; r++) {   /* all of [lo, hi): run by run, each with its decay */
        int64_t r0 = r ? o->run_end[r - 1] : 0;
        bt__adamw_stream(opt, lr, (char *)p + r0 * (int64_t)es, (const char *)g + r0 * (int64_t)gs, gdt, opt->lo + r0,
                         o->run_end[r] - r0, o->run_wd[r], pc ? pc + r0 * (int64_t)cs : NULL, pl ? pl + r0 : NULL);
    }
}
BTDEF void bt_adamw_update(bt_adamw *opt, float lr, bt_tensor *grad) {
    if (grad) {
        bt__need_float(grad, "adamw_update", "grad");
        if (!bt_is_contiguous(grad) || bt_numel(grad) != opt->hi - opt->lo || !bt_device_eq(bt_device_of(grad), bt__opt_device(opt)))
            bt_error("adamw_update: grad %s must be a contiguous [%lld] tensor on the parameters' device", bt__s(grad),
                     (long long)(opt->hi - opt->lo));
    }
    int old = bt_set_grad_enabled(0);
    opt->step++;
    bt_tensor **grads = (bt_tensor **)malloc(sizeof(bt_tensor *) * (size_t)opt->n);
    if (!grads) bt_error("adamw_update: out of host memory");
    for (int i = 0; i < opt->n; i++) grads[i] = opt->params[i]->grad;
    /* one launch over [lo, hi) when parameters and gradients each tile one buffer the same way
       (offloaded: one pass of chunks, on a CPU too) */
    bt_tensor *gflat = grad ? bt_retain(grad) : opt->flat_p ? bt__flat_view(grads, opt->n, opt->numel, opt->params) : NULL;
    int *start = NULL, ng = -1;
    if (!gflat && !grad && opt->flat_p && !opt->offload && bt__opt_device(opt).type == BT_GPU && opt->lo == 0 && opt->hi == opt->numel) {
        start = (int *)malloc(sizeof(int) * (size_t)(opt->n + 1));   /* gradients in several buffers, in order: one launch each */
        if (!start) bt_error("adamw_update: out of host memory");
        ng = bt__grad_groups(opt->params, opt->n, start);
        for (int i = 1; ng > 0 && i < opt->n; i++)   /* the parameters in index order, as the groups' spans assume */
            if (opt->offset[i] != opt->offset[i - 1] + bt_numel(opt->params[i - 1])) ng = -1;
        if (ng > 0 && opt->offset[0] != 0) ng = -1;
    }
    if (opt->flat_p && gflat && (bt__opt_device(opt).type == BT_GPU || opt->offload)) {
        int64_t gofs = grad ? 0 : opt->lo;
        bt__adamw_span(opt, lr, (char *)bt_data_ptr(opt->flat_p) + opt->lo * (int64_t)bt_dtype_size(opt->flat_p->dtype),
                       (const char *)bt_data_ptr(gflat) + gofs * (int64_t)bt_dtype_size(gflat->dtype),
                       gflat->dtype, opt->lo, opt->hi - opt->lo, 0.f, 1);
    } else if (ng > 0) {
        size_t es = bt_dtype_size(opt->flat_p->dtype);
        for (int k = 0; k < ng; k++) {
            bt_tensor *gv = bt__grad_group_view(opt->params, start, k);
            int64_t a = opt->offset[start[k]];
            bt__adamw_span(opt, lr, (char *)bt_data_ptr(opt->flat_p) + a * (int64_t)es, bt_data_ptr(gv), gv->dtype, a, bt_numel(gv), 0.f, 1);
            bt_release(gv);
        }
    } else {
        for (int i = 0; i < opt->n; i++) {                /* the part of each parameter in [lo, hi) */
            bt_tensor *p = opt->params[i], *g = grad ? grad : grads[i];
            int64_t a = opt->offset[i], b = a + bt_numel(p);
            if (a < opt->lo) a = opt->lo;
            if (b > opt->hi) b = opt->hi;
            if (a >= b || !g) continue;
            if (!grad && !bt_is_contiguous(g)) bt_error("adamw_update: the gradient of parameter %d is not contiguous", i);
            int64_t gofs = grad ? a - opt->lo : a - opt->offset[i];
            bt__adamw_span(opt, lr, (char *)bt_data_ptr(p) + (a - opt->offset[i]) * (int64_t)bt_dtype_size(p->dtype),
                           (const char *)bt_data_ptr(g) + gofs * (int64_t)bt_dtype_size(g->dtype), g->dtype, a, b - a,
                           opt->decay[i] ? opt->weight_decay : 0.f, 0);
        }
    }
    bt_release(gflat);
    free(grads); free(start);
    for (int i = 0; i < opt->n; i++) opt->params[i]->storage->version++;
    if (opt->copy) opt->copy->storage->version++;
    bt_set_grad_enabled(old);
}
BTDEF void bt_adamw_step(bt_adamw *opt, float lr) {
    int old = bt_set_grad_enabled(0);
    bt_scope_begin();
    bt_adamw_set_grad_norm(opt, bt_grad_norm(opt->params, opt->n));
    bt_scope_end();
    bt_set_grad_enabled(old);
    bt_adamw_update(opt, lr, NULL);
}

/* ============================================================================================
   4. SGD
   ============================================================================================ */
BTDEF void bt_sgd_init(bt_sgd *opt, bt_tensor **params, int n, float momentum, float weight_decay) {
    memset(opt, 0, sizeof *opt);
    opt->params = params; opt->n = n; opt->momentum = momentum; opt->weight_decay = weight_decay;
    opt->buf = (bt_tensor **)calloc((size_t)(n > 0 ? n : 1), sizeof(bt_tensor *));
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

#endif /* BT_OPTIM_IMPLEMENTATION_DONE */
#endif /* BT_OPTIM_IMPLEMENTATION */
