/* op_cases.h - the op table: a case for every op of bt_tensor.h's public API, forward and backward,
   that runs on any device in any dtype and is compared with the same case run on the CPU in f64.

   USAGE (after bt_autograd.h with its implementation, in a test)
     oc_build_table();                                     // fills oc_cases[0 .. oc_ncases)
     oc_result ref, got; oc_stats st = {0};
     oc_run(idx, bt_cpu(), bt_cpu(), BT_F64, BT_BF16, &ref);       // the reference of a bf16 run
     oc_check("cuda:0 bf16", idx, bt_cuda_device(0), bt_cpu(), BT_BF16, 0, &ref, &st);
     oc_result_free(&ref);

   A CASE is a function that draws its inputs (fresh random numbers from seeds of its own, so that
   every run of the case sees the same numbers), applies one op (with the views or the one or two
   exact ops around it that the op needs) and returns the output. oc_run runs it on (device, dtype),
   seeds the backward with a random gradient (bt_backward_with) and keeps the output and every
   input's gradient as doubles. The REFERENCE is the same case run on the CPU in f64, on the very
   same input values: every input (and the upstream gradient) is drawn in f64 on the CPU, rounded
   to the run's dtype `qdt`, and only then widened to the run's dtype (f64 for the reference) and
   moved to the device. The comparison therefore measures the op's own arithmetic, not the
   rounding of its inputs. The CPU f64 path is the one tests/test_ops.c checks against hand-written
   references and float64 finite differences.
   Every unary and binary op is a case through the X-macros BT_UNARY_OPS / BT_BINARY_OPS, so a new
   line in those lists is tested everywhere without touching this file; an op that needs inputs
   from a restricted domain gets one line in oc_unary_positive.

   TOLERANCES (oc_tol): kinds of tests/bt_test.h's table, whose comment gives the reasoning. The
   error is ||got - ref|| / ||ref|| over a whole output or gradient.
     exact  BT_TOL_EXACT: data movement (views, copies, casts, concat/split, to, clone), max/argmax,
            fills, creation: every device uses the same conversion and rounding functions
            (bt__ld/bt__st, Philox), so the bits are the same. Philox fills in f64 are kept within
            BT_TOL_F64_ULP: normals go through log/sin/cos, whose CUDA versions are within 2 ulp of
            glibc's, and lo + (hi - lo) u may be fused on one side.
     f64    BT_TOL_F64: GPU f64 against CPU f64, the same math summed in another order (~1e-16).
     f32    BT_TOL_F32: the sums here have at most a few thousand terms and random signs, so
            ~1e-7..1e-6 is expected; BT_TOL_F32_LOOSE for the loose cases (a 20000-term sum,
            attention's online softmax over up to 100 keys).
     tf32   BT_TOL_TF32_CHAIN (matmul, attention): up to ~2e-3 per product, and a backward chains
            two or three products (and a layernorm's rstd) before a gradient is compared.
     bf16   BT_TOL_BF16: an op rounds its output, and a backward chain rounds 2 to 4 intermediates
            (div's gb = -g a / b^2 is three) before a sum. BT_TOL_BF16_LOOSE: long reductions,
            attention, whose kernels round the probabilities P and dS to bf16 inside, and the
            composites (several ops chained).
     f16    BT_TOL_F16, BT_TOL_F16_LOOSE: the same counts at 2^-11 = 5e-4 a rounding.
   A wrong formula, index, stride, stream or device is off by order 1, far above all of these.
   Inputs whose sums could cancel (reductions, vector dot products) are drawn with mean 0.5, so
   that a relative error stays a relative error of the op and not of a near-zero result.

   oc_run_guarded traps a bt_error raised inside a case (the default handler would end the test
   binary): the case counts as failed with the message, and the scopes it left open are closed. */
#ifndef OP_CASES_H
#define OP_CASES_H
#include "bt_autograd.h"
#include "tests/bt_test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <setjmp.h>
#include <math.h>

#define OC_MAX_IN 12                 /* inputs whose gradients a case compares */
#define OC_MAX_OUT (OC_MAX_IN + 1)   /* the output, then one gradient per input */
#define OC_MAX_CASES 320

enum {
    OC_NO_BACKWARD = 1 << 0,   /* not differentiable (in place, fills, argmax, copies): the output only */
    OC_EXACT = 1 << 1,         /* output and gradients bit for bit */
    OC_EXACT_FWD = 1 << 2,     /* the output bit for bit, the gradients within tolerance */
    OC_F64_ULPS = 1 << 3,      /* exact, but f64 within 1e-14 (Philox fills: libm, a fused multiply-add) */
    OC_LOOSE = 1 << 4,         /* long reductions, attention, composites: the loose tolerance */
    OC_NO_GPU_F64 = 1 << 5,    /* its kernels have no f64 (softmax, layernorm, rmsnorm, embedding, cross-entropy, attention) */
    OC_TF32 = 1 << 6,          /* it multiplies matrices: also run f32 with BT_MATMUL_TF32 */
    OC_DETERMINISTIC = 1 << 7, /* run with bt_set_deterministic(1) */
    OC_ZERO_OK = 1 << 8        /* its reference output is zero by design (bt_zeros) */
};

/* what a case sees while it builds itself */
typedef struct oc_ctx {
    bt_device dev;          /* where the op runs */
    bt_device dev2;         /* a second device for the device-move cases: another GPU, else the CPU */
    bt_dtype dt;            /* the dtype it runs in (f64 for the reference) */
    bt_dtype qdt;           /* the dtype its inputs are rounded to: the run's own, for its reference too */
    uint64_t seed;          /* the next seed to draw from */
    int n_in;
    bt_tensor *in[OC_MAX_IN];   /* the leaves whose gradients are compared */
} oc_ctx;

struct oc_case;
typedef bt_tensor *(*oc_fn)(oc_ctx *c, const struct oc_case *k);
typedef struct oc_case {
    char name[80];
    oc_fn fn;
    unsigned flags;
    bt_shape s[3];          /* shapes, parameters: what each case function reads from them is */
    int i[8];               /* documented above it */
    double f[2];
} oc_case;

/* the output (slot 0) and the input gradients of one run, as doubles */
typedef struct {
    int n;
    int have[OC_MAX_OUT];   /* 0: no tensor (a gradient that never arrived) */
    bt_shape shape[OC_MAX_OUT];
    double *v[OC_MAX_OUT];
} oc_result;

typedef struct {
    int runs, failed, skipped;
    double worst;           /* the largest error / tolerance (error alone where the tolerance is 0) */
    char worst_what[160];
} oc_stats;

static oc_case oc_cases[OC_MAX_CASES];
static int oc_ncases;

/* =============================================================================================
   inputs
   ============================================================================================= */
/* drawn in f64 on the CPU (normal(a, b) or uniform[a, b)), rounded to qdt, then dtype dt on dev */
static bt_tensor *oc__draw(oc_ctx *c, bt_shape s, int normal, double a, double b, bt_dtype dt, bt_device dev) {
    bt_tensor *t = bt_empty(s, BT_F64, bt_cpu());
    if (normal) bt_normal_(t, a, b, c->seed++, 0);
    else bt_uniform_(t, a, b, c->seed++, 0);
    return bt_to(bt_cast(bt_cast(t, c->qdt), dt), dev);
}
static bt_tensor *oc__input(oc_ctx *c, bt_tensor *t) {
    if (c->n_in == OC_MAX_IN) bt_error("op_cases: more than %d inputs in one case", OC_MAX_IN);
    bt_set_requires_grad(t, 1);
    c->in[c->n_in++] = t;
    return t;
}
/* inputs that require grad (compared): normal(mean, std) or uniform[lo, hi) */
static bt_tensor *oc_normal(oc_ctx *c, bt_shape s, double mean, double std) {
    return oc__input(c, oc__draw(c, s, 1, mean, std, c->dt, c->dev));
}
static bt_tensor *oc_uniform(oc_ctx *c, bt_shape s, double lo, double hi) {
    return oc__input(c, oc__draw(c, s, 0, lo, hi, c->dt, c->dev));
}
/* data that does not require grad (the in-place and copy cases), N(0, 1) */
static bt_tensor *oc_data(oc_ctx *c, bt_shape s) { return oc__draw(c, s, 1, 0.0, 1.0, c->dt, c->dev); }
/* i32 indices in [0, V) (uniform, so repeats happen); every `every`-th (from the second) is `ignore` */
static bt_tensor *oc_indices(oc_ctx *c, bt_shape s, int64_t V, int ignore, int every) {
    bt_tensor *t = bt_empty(s, BT_F64, bt_cpu());
    bt_uniform_(t, 0.0, (double)V, c->seed++, 0);
    bt_tensor *ix = bt_cast(t, BT_I32);                  /* truncation: [0, V) */
    int32_t *p = (int32_t *)bt_data_ptr(ix);
    for (int64_t i = 1; every > 0 && i < bt_numel(ix); i += every) p[i] = ignore;
    return bt_to(ix, c->dev);
}
/* the other side of the f32 <-> bf16 casts */
static bt_dtype oc_other(const oc_ctx *c) { return c->qdt == BT_BF16 ? BT_F32 : BT_BF16; }
static bt_shape oc_drop_last(bt_shape s) { s.ndim--; return s; }

/* =============================================================================================
   the cases, one function per op family
   ============================================================================================= */
/* ---- elementwise: i[0] the op (of BT_UNARY_OPS / BT_BINARY_OPS), i[1] strided operands ---- */
#define OC__UFN(N, n, f, df) bt_##n,
static bt_tensor *(*const oc_unary_fn[BT_NUOPS])(bt_tensor *) = {BT_UNARY_OPS(OC__UFN)};
#undef OC__UFN
#define OC__BFN(N, n, f, da, db) bt_##n,
static bt_tensor *(*const oc_binary_fn[BT_NBOPS])(bt_tensor *, bt_tensor *) = {BT_BINARY_OPS(OC__BFN)};
#undef OC__BFN
/* the ops defined and smooth only for x > 0 draw from [0.25, 3); the others from N(0, 1.5) */
static int oc_unary_positive(int op) {
    return op == BT_UOP_LOG || op == BT_UOP_SQRT || op == BT_UOP_RSQRT || op == BT_UOP_RECIP;
}
/* s[0]: the input (read transposed when i[1]) */
static bt_tensor *oc_f_unary(oc_ctx *c, const oc_case *k) {
    int op = k->i[0];
    bt_tensor *x = oc_unary_positive(op) ? oc_uniform(c, k->s[0], 0.25, 3.0) : oc_normal(c, k->s[0], 0.0, 1.5);
    return oc_unary_fn[op](k->i[1] ? bt_transpose(x, 0, 1) : x);
}
/* i[0]: affine(-1.75, 0.3), scale(3.5), add_scalar(-2.25) */
static bt_tensor *oc_f_scalar(oc_ctx *c, const oc_case *k) {
    bt_tensor *x = oc_normal(c, k->s[0], 0.0, 1.0);
    return k->i[0] == 0 ? bt_affine(x, -1.75, 0.3) : k->i[0] == 1 ? bt_scale(x, 3.5) : bt_add_scalar(x, -2.25);
}
/* a [s0] op b [s1], broadcast; divisors from [0.5, 2). i[1]: a transposed a [5, 4] and an expanded b [5] */
static bt_tensor *oc_f_binary(oc_ctx *c, const oc_case *k) {
    int op = k->i[0];
    bt_shape sa = k->i[1] ? bt_shape2(5, 4) : k->s[0], sb = k->i[1] ? bt_shape1(5) : k->s[1];
    bt_tensor *a = oc_normal(c, sa, 0.0, 1.0);
    bt_tensor *b = op == BT_BOP_DIV ? oc_uniform(c, sb, 0.5, 2.0) : oc_normal(c, sb, 0.0, 1.0);
    if (k->i[1]) { a = bt_transpose(a, 0, 1); b = bt_expand(bt_unsqueeze(b, 0), bt_shape2(4, 5)); }
    return oc_binary_fn[op](a, b);
}

/* ---- in place (not differentiable; the whole buffer is the output). i[0]: through a transposed view ---- */
static bt_tensor *oc_f_add_(oc_ctx *c, const oc_case *k) {
    bt_tensor *a = oc_data(c, bt_shape2(5, 4)), *b = oc_data(c, bt_shape1(k->i[0] ? 5 : 4));
    bt_add_(k->i[0] ? bt_transpose(a, 0, 1) : a, b, -0.5);
    return a;
}
static bt_tensor *oc_f_mul_scalar_(oc_ctx *c, const oc_case *k) {
    bt_tensor *a = oc_data(c, bt_shape2(5, 4));
    bt_mul_scalar_(k->i[0] ? bt_transpose(a, 0, 1) : a, 3.0);
    return a;
}
/* i[0]: fill_ 1.25 into a strided block of a [6, 7], else zero_ one of its columns */
static bt_tensor *oc_f_fill_(oc_ctx *c, const oc_case *k) {
    bt_tensor *a = oc_data(c, bt_shape2(6, 7));
    if (k->i[0]) bt_fill_(bt_narrow(bt_transpose(a, 0, 1), 0, 2, 3), 1.25);
    else bt_zero_(bt_select(a, 1, 4));
    return a;
}

/* ---- reductions ----
   sum / mean of s[0] (mean 0.5): i[0] mean, i[1] keepdim, i[2] the number of dims (0: all), i[3..6]
   the dims, i[7] the input read through a permutation (strided) */
static bt_tensor *oc_f_sum(oc_ctx *c, const oc_case *k) {
    bt_shape s = k->s[0];
    bt_tensor *x;
    if (k->i[7]) {
        bt_shape r = s; int perm[BT_MAX_DIMS];
        for (int d = 0; d < s.ndim; d++) { r.d[d] = s.d[s.ndim - 1 - d]; perm[d] = s.ndim - 1 - d; }
        x = bt_permute(oc_normal(c, r, 0.5, 1.0), perm);
    } else x = oc_normal(c, s, 0.5, 1.0);
    const int *dims = k->i[2] ? k->i + 3 : NULL;
    return k->i[0] ? bt_mean(x, dims, k->i[2], k->i[1]) : bt_sum(x, dims, k->i[2], k->i[1]);
}
/* max over dim i[0] with keepdim i[1] (its gradient goes to the first maximum); argmax over i[0] */
static bt_tensor *oc_f_max(oc_ctx *c, const oc_case *k) { return bt_max(oc_normal(c, k->s[0], 0.0, 1.0), k->i[0], k->i[1]); }
static bt_tensor *oc_f_argmax(oc_ctx *c, const oc_case *k) { return bt_argmax(oc_data(c, k->s[0]), k->i[0]); }

/* ---- matmul: s[0] x s[1] as stored, i[0] transa, i[1] transb, i[2] both operands read as the
   transpose of what is drawn (strided views), f[0] the inputs' mean ---- */
static bt_tensor *oc_f_matmul(oc_ctx *c, const oc_case *k) {
    bt_tensor *a = oc_normal(c, k->s[0], k->f[0], 1.0), *b = oc_normal(c, k->s[1], k->f[0], 1.0);
    if (k->i[2]) { a = bt_transpose(a, -1, -2); b = bt_transpose(b, -1, -2); }
    return bt_matmul_t(a, b, k->i[0], k->i[1]);
}
/* x [s0] w [s1]^T (+ b when i[0]) */
static bt_tensor *oc_f_linear(oc_ctx *c, const oc_case *k) {
    bt_tensor *x = oc_normal(c, k->s[0], 0.0, 1.0), *w = oc_normal(c, k->s[1], 0.0, 1.0);
    bt_tensor *b = k->i[0] ? oc_normal(c, bt_shape1(k->s[1].d[0]), 0.0, 1.0) : NULL;
    return bt_linear(x, w, b);
}

/* ---- nn ops ---- */
/* softmax (log_softmax when i[0]) of N(0, 3) over the last dim of s[0] */
static bt_tensor *oc_f_softmax(oc_ctx *c, const oc_case *k) {
    bt_tensor *x = oc_normal(c, k->s[0], 0.0, 3.0);
    return k->i[0] ? bt_log_softmax(x) : bt_softmax(x);
}
/* layernorm of N(1.5, 2) over the last dim C; i[0] with w ~ N(1, 0.5) [C], i[1] with b [C] */
static bt_tensor *oc_f_layernorm(oc_ctx *c, const oc_case *k) {
    int64_t C = k->s[0].d[k->s[0].ndim - 1];
    bt_tensor *x = oc_normal(c, k->s[0], 1.5, 2.0);
    bt_tensor *w = k->i[0] ? oc_normal(c, bt_shape1(C), 1.0, 0.5) : NULL, *b = k->i[1] ? oc_normal(c, bt_shape1(C), 0.0, 1.0) : NULL;
    return bt_layernorm(x, w, b, 1e-5);
}
/* table [s0] (V rows) looked up at indices [s1] in [0, V) with repeats */
static bt_tensor *oc_f_embedding(oc_ctx *c, const oc_case *k) {
    bt_tensor *table = oc_normal(c, k->s[0], 0.0, 1.0);
    return bt_embedding(table, oc_indices(c, k->s[1], k->s[0].d[0], 0, 0));
}
/* logits [s0] (Vp columns, N(0, 2)) against targets in [0, V); i[0] V (<= 0: all Vp), i[1] the
   ignore_index, which every i[2]-th target is set to (0: none) */
static bt_tensor *oc_f_xent(oc_ctx *c, const oc_case *k) {
    int64_t Vp = k->s[0].d[k->s[0].ndim - 1], V = k->i[0] > 0 ? k->i[0] : Vp;
    bt_tensor *logits = oc_normal(c, k->s[0], 0.0, 2.0);
    bt_tensor *tg = oc_indices(c, oc_drop_last(k->s[0]), V, k->i[1], k->i[2]);
    return k->i[3] ? bt_cross_entropy_rows(logits, tg, k->i[0], k->i[1]) : bt_cross_entropy(logits, tg, k->i[0], k->i[1]);
}
/* q of shape s[0] = [B, H, T, D], k, v the same with i[1] heads (0: H; grouped-query attention when
   fewer); i[0]: the heads of [B, T, H, D] activations (strided views) */
static bt_tensor *oc_f_attention(oc_ctx *c, const oc_case *k) {
    bt_tensor *x[3];
    for (int j = 0; j < 3; j++) {
        bt_shape s = k->s[0];
        if (j && k->i[1]) s.d[1] = k->i[1];
        bt_shape t = bt_shape4(s.d[0], s.d[2], s.d[1], s.d[3]);
        x[j] = k->i[0] ? bt_transpose(oc_normal(c, t, 0.0, 1.0), 1, 2) : oc_normal(c, s, 0.0, 1.0);
    }
    return bt_attention(x[0], x[1], x[2]);
}
/* a packed projection [s0] = [B, T, 3C] with i[0] heads */
static bt_tensor *oc_f_attention_qkv(oc_ctx *c, const oc_case *k) { return bt_attention_qkv(oc_normal(c, k->s[0], 0.0, 1.0), k->i[0]); }
/* Llama's packed projection [s0] = [B, T, (H + 2 Hkv) D], H = i[0], Hkv = i[1]; RoPE with theta f[0]
   when f[0] > 0 (llama3 scaling with factor 8, 1, 4 and original_max_position_embeddings i[2] when > 0) */
static bt_tensor *oc_f_attention_qkv_ex(oc_ctx *c, const oc_case *k) {
    bt_rope_opts o = {k->f[0], 0, 0, 0, 0};
    if (k->i[2] > 0) { o.factor = 8; o.low_freq_factor = 1; o.high_freq_factor = 4; o.original_max_position_embeddings = k->i[2]; }
    return bt_attention_qkv_ex(oc_normal(c, k->s[0], 0.0, 1.0), k->i[0], k->i[1], k->f[0] > 0 ? &o : NULL);
}

/* ---- concat, split, views, copies ---- */
/* i[0] pieces of s[0] with dim i[1] of size 1, 2, 3, 1, ... joined along i[1] */
static bt_tensor *oc_f_concat(oc_ctx *c, const oc_case *k) {
    bt_tensor *p[OC_MAX_IN];
    for (int j = 0; j < k->i[0]; j++) { bt_shape s = k->s[0]; s.d[k->i[1]] = 1 + j % 3; p[j] = oc_normal(c, s, 0.0, 1.0); }
    return bt_concat(p, k->i[0], k->i[1]);
}
/* s[0] split along i[1] into 2, 4, 3, then joined reordered, negated and doubled (exact ops) */
static bt_tensor *oc_f_split(oc_ctx *c, const oc_case *k) {
    int64_t sizes[3] = {2, 4, 3};
    bt_tensor *p[3];
    bt_split(oc_normal(c, k->s[0], 0.0, 1.0), sizes, 3, k->i[1], p);
    bt_tensor *q[3] = {bt_neg(p[2]), p[0], bt_scale(p[1], -2.0)};
    return bt_concat(q, 3, k->i[1]);
}
/* the view ops on x [3, 4, 5]: i[0] picks one; the output is the view (or copy) itself */
static bt_tensor *oc_f_view(oc_ctx *c, const oc_case *k) {
    bt_tensor *x = oc_normal(c, bt_shape3(3, 4, 5), 0.0, 1.0);
    int p120[3] = {1, 2, 0}, p201[3] = {2, 0, 1};
    switch (k->i[0]) {
    case 0: return bt_narrow(x, 1, 1, 2);
    case 1: return bt_select(x, 2, 3);
    case 2: return bt_transpose(x, 0, 2);
    case 3: return bt_permute(x, p120);
    case 4: return bt_view(x, bt_shape2(-1, 10));
    case 5: return bt_reshape(x, bt_shape2(12, 5));                            /* a view */
    case 6: return bt_reshape(bt_transpose(x, 0, 1), bt_shape2(4, 15));        /* a copy: no strides fit */
    case 7: return bt_contiguous(bt_permute(x, p201));
    case 8: return bt_squeeze(bt_narrow(x, 1, 2, 1), 1);
    case 9: return bt_unsqueeze(bt_transpose(x, 1, 2), 1);
    case 10: return bt_clone(bt_select(bt_transpose(x, 1, 2), 0, 1));
    default: return bt_expand(bt_narrow(x, 0, 1, 1), bt_shape4(2, 3, 4, 5));   /* backward sums: not exact */
    }
}
/* x [s0] cast to the other side of f32 <-> bf16 (i[0] = 1: through bt_cast_cached, the cache made
   outside the graph); the gradient is cast back */
static bt_tensor *oc_f_cast(oc_ctx *c, const oc_case *k) {
    bt_tensor *x = oc_normal(c, k->s[0], 0.0, 1.0);
    if (!k->i[0]) return bt_cast(x, oc_other(c));
    int old = bt_set_grad_enabled(0);
    bt_tensor *cache = bt_cast(x, oc_other(c));
    bt_set_grad_enabled(old);
    return bt_cast_cached(x, cache);
}
/* x [s0] moved to the CPU (i[0] = 0) or to dev2, doubled there (exact), and moved back */
static bt_tensor *oc_f_to(oc_ctx *c, const oc_case *k) {
    bt_tensor *x = oc_normal(c, k->s[0], 0.0, 1.0);
    return bt_to(bt_scale(bt_to(x, k->i[0] ? c->dev2 : bt_cpu()), 2.0), c->dev);
}
/* bt_copy_ from a strided [6, 5] view of a [9, 6] tensor into a strided [6, 5] window of a [7, 8]
   tensor, whose whole buffer is the output. i[0]: 0 dev -> dev2 (same dtype), 1 CPU -> dev
   (converted to the other dtype), 2 dev -> dev (converted), 3 dev2 -> dev */
static bt_tensor *oc_f_copy(oc_ctx *c, const oc_case *k) {
    bt_device sd = k->i[0] == 1 ? bt_cpu() : k->i[0] == 3 ? c->dev2 : c->dev, dd = k->i[0] == 0 ? c->dev2 : c->dev;
    bt_dtype ddt = k->i[0] == 1 || k->i[0] == 2 ? oc_other(c) : c->dt;
    bt_tensor *src = bt_narrow(bt_transpose(oc__draw(c, bt_shape2(9, 6), 1, 0.0, 1.0, c->dt, sd), 0, 1), 1, 2, 5);
    bt_tensor *base = oc__draw(c, bt_shape2(7, 8), 1, 0.0, 1.0, ddt, dd);
    bt_copy_(bt_narrow(bt_narrow(bt_transpose(base, 0, 1), 0, 1, 6), 1, 1, 5), src);
    return bt_to(base, c->dev);
}

/* ---- fills and creation, made in qdt on the device (the reference: qdt on the CPU) ----
   i[0]: 0 bt_rand, 1 bt_randn, 2 bt_uniform_ [-2, 3) at offset 7, 3 bt_normal_ (0.5, 2) at offset 13
   into a strided window of a [s0]^T tensor of 3.0 */
static bt_tensor *oc_f_random(oc_ctx *c, const oc_case *k) {
    uint64_t seed = c->seed++;
    bt_shape s = k->s[0];
    switch (k->i[0]) {
    case 0: return bt_rand(s, c->qdt, c->dev, seed);
    case 1: return bt_randn(s, c->qdt, c->dev, seed);
    case 2: { bt_tensor *t = bt_empty(s, c->qdt, c->dev); bt_uniform_(t, -2.0, 3.0, seed, 7); return t; }
    default: {
        bt_tensor *t = bt_full(bt_shape2(s.d[1], s.d[0]), 3.0, c->qdt, c->dev);
        bt_normal_(bt_narrow(bt_transpose(t, 0, 1), 1, 1, s.d[1] - 2), 0.5, 2.0, seed, 13);
        return t;
    }
    }
}
/* i[0]: 0 bt_full 1.25, 1 bt_zeros, 2 bt_scalar -3.5, 3 bt_arange 37, 4 bt_from_data of random host values */
static bt_tensor *oc_f_create(oc_ctx *c, const oc_case *k) {
    switch (k->i[0]) {
    case 0: return bt_full(k->s[0], 1.25, c->qdt, c->dev);
    case 1: return bt_zeros(k->s[0], c->qdt, c->dev);
    case 2: return bt_scalar(-3.5, c->qdt, c->dev);
    case 3: return bt_arange(37, c->qdt, c->dev);
    default: {
        bt_tensor *h = oc__draw(c, k->s[0], 1, 0.0, 1.0, c->qdt, bt_cpu());
        return bt_from_data(bt_data_ptr(h), k->s[0], c->qdt, c->dev);
    }
    }
}

/* ---- composites: chains of ops as a model uses them ---- */
/* linear -> layernorm -> gelu -> linear on x [2, 3, 8] */
static bt_tensor *oc_f_mlp(oc_ctx *c, const oc_case *k) {
    (void)k;
    bt_tensor *x = oc_normal(c, bt_shape3(2, 3, 8), 0.0, 1.0);
    bt_tensor *w1 = oc_normal(c, bt_shape2(16, 8), 0.0, 0.5), *b1 = oc_normal(c, bt_shape1(16), 0.0, 1.0);
    bt_tensor *lw = oc_normal(c, bt_shape1(16), 1.0, 0.5), *lb = oc_normal(c, bt_shape1(16), 0.0, 1.0);
    bt_tensor *w2 = oc_normal(c, bt_shape2(5, 16), 0.0, 0.5), *b2 = oc_normal(c, bt_shape1(5), 0.0, 1.0);
    return bt_linear(bt_gelu(bt_layernorm(bt_linear(x, w1, b1), lw, lb, 1e-5)), w2, b2);
}
/* bt_mlp_gelu on x s[0] with w1 s[1] [hid, in] and w2 s[2] [out, hid] (plus a residual when i[0]):
   on a GPU the fused GEMM epilogues when the sizes allow them (in, hid, out multiples of 8), the
   ops it names otherwise */
static bt_tensor *oc_f_mlp_gelu(oc_ctx *c, const oc_case *k) {
    bt_tensor *x = oc_normal(c, k->s[0], 0.0, 1.0);
    bt_tensor *w1 = oc_normal(c, k->s[1], 0.0, 0.5), *b1 = oc_normal(c, bt_shape1(k->s[1].d[0]), 0.0, 1.0);
    bt_tensor *w2 = oc_normal(c, k->s[2], 0.0, 0.5), *b2 = oc_normal(c, bt_shape1(k->s[2].d[0]), 0.0, 1.0);
    bt_shape os = k->s[0]; os.d[os.ndim - 1] = k->s[2].d[0];
    bt_tensor *r = k->i[0] ? oc_normal(c, os, 0.0, 1.0) : NULL;   /* i[0]: plus a residual */
    return bt_mlp_gelu(x, w1, b1, w2, b2, r);
}
/* r + x [s0] w [s1]^T + b: linear_add (the residual in the GEMM on a GPU) */
static bt_tensor *oc_f_linear_add(oc_ctx *c, const oc_case *k) {
    bt_tensor *x = oc_normal(c, k->s[0], 0.0, 1.0), *w = oc_normal(c, k->s[1], 0.0, 1.0);
    bt_tensor *b = k->i[0] ? oc_normal(c, bt_shape1(k->s[1].d[0]), 0.0, 1.0) : NULL;
    bt_shape os = k->s[0]; os.d[os.ndim - 1] = k->s[1].d[0];
    return bt_linear_add(x, w, b, oc_normal(c, os, 0.0, 1.0));
}
/* a pre-norm residual step, (h + linear(layernorm(h))) / 2 with h = 1.5 x [s0] (a node, so that its
   gradient is summed in the engine): the skip path's gradient arrives first and the layernorm's
   backward adds its input gradient into it in place (bt__pending_grad_sink) */
static bt_tensor *oc_f_residual_ln(oc_ctx *c, const oc_case *k) {
    int64_t C = k->s[0].d[k->s[0].ndim - 1];
    bt_tensor *h = bt_scale(oc_normal(c, k->s[0], 0.5, 1.0), 1.5);
    bt_tensor *lw = oc_normal(c, bt_shape1(C), 1.0, 0.5), *lb = oc_normal(c, bt_shape1(C), 0.0, 1.0);
    bt_tensor *w = oc_normal(c, bt_shape2(C, C), 0.0, 0.5), *b = oc_normal(c, bt_shape1(C), 0.0, 1.0);
    return bt_scale(bt_linear_add(bt_layernorm(h, lw, lb, 1e-5), w, b, h), 0.5);   /* not the root: its gradient is ours alone */
}
/* Llama's ops. rmsnorm of N(0.5, 2) over the last dim C of s[0]; i[0] with w ~ N(1, 0.5) [C] */
static bt_tensor *oc_f_rmsnorm(oc_ctx *c, const oc_case *k) {
    int64_t C = k->s[0].d[k->s[0].ndim - 1];
    bt_tensor *x = oc_normal(c, k->s[0], 0.5, 2.0);
    return bt_rmsnorm(x, k->i[0] ? oc_normal(c, bt_shape1(C), 1.0, 0.5) : NULL, 1e-5);
}
/* (h + linear(rmsnorm(h))) / 2, h = 1.5 x [s0], no bias (a Llama residual step): the rmsnorm's input
   gradient is added in place into the skip path's (bt__pending_grad_sink) */
static bt_tensor *oc_f_residual_rms(oc_ctx *c, const oc_case *k) {
    int64_t C = k->s[0].d[k->s[0].ndim - 1];
    bt_tensor *h = bt_scale(oc_normal(c, k->s[0], 0.5, 1.0), 1.5);
    bt_tensor *lw = oc_normal(c, bt_shape1(C), 1.0, 0.5), *w = oc_normal(c, bt_shape2(C, C), 0.0, 0.5);
    return bt_scale(bt_linear_add(bt_rmsnorm(h, lw, 1e-5), w, NULL, h), 0.5);
}
/* swiglu of N(0, 1.5) [s0] (last dim 2F, gate then up); i[0]: read through a transposed view of [2F, rows] */
static bt_tensor *oc_f_swiglu(oc_ctx *c, const oc_case *k) {
    if (!k->i[0]) return bt_swiglu(oc_normal(c, k->s[0], 0.0, 1.5));
    return bt_swiglu(bt_transpose(oc_normal(c, bt_shape2(k->s[0].d[1], k->s[0].d[0]), 0.0, 1.5), 0, 1));
}
/* rope of x [B, T, H, D] = s[0] at pos0 = i[0], theta f[0] (llama3 scaling with factor 8, 1, 4 and
   original_max_position_embeddings i[2] when i[2] > 0). i[1], how x is made:
   0 a contiguous leaf; 1 k = narrow of a [B, T, H + 2H, D] qkv buffer (the H heads at H);
   2 q = select of a [B, T, 3, H, D] buffer (index 0); 3 a transpose of [B, T, D, H] (D's stride H) */
static bt_tensor *oc_f_rope(oc_ctx *c, const oc_case *k) {
    bt_shape s = k->s[0];
    int64_t B = s.d[0], T = s.d[1], H = s.d[2], D = s.d[3];
    bt_tensor *x;
    switch (k->i[1]) {
    case 1: x = bt_narrow(oc_normal(c, bt_shape4(B, T, 3 * H, D), 0.0, 1.0), 2, H, H); break;
    case 2: { int64_t d5[5] = {B, T, 3, H, D}; x = bt_select(oc_normal(c, bt_shapev(5, d5), 0.0, 1.0), 2, 0); } break;
    case 3: x = bt_transpose(oc_normal(c, bt_shape4(B, T, D, H), 0.0, 1.0), 2, 3); break;
    default: x = oc_normal(c, s, 0.0, 1.0);
    }
    bt_rope_opts o = {k->f[0], 0, 0, 0, 0};
    if (k->i[2] > 0) { o.factor = 8; o.low_freq_factor = 1; o.high_freq_factor = 4; o.original_max_position_embeddings = k->i[2]; }
    return bt_rope_ex(x, &o, k->i[0]);
}
/* a transformer block's attention half to the loss: layernorm, one q,k,v projection split into
   heads by views, attention, heads merged by transpose + reshape (a copy), output projection,
   residual, cross-entropy with an ignored target. B 2, T 5, H 2, D 4 */
static bt_tensor *oc_f_attn_block(oc_ctx *c, const oc_case *k) {
    (void)k;
    const int64_t B = 2, T = 5, H = 2, D = 4, C = H * D;
    int p0213[4] = {0, 2, 1, 3};
    bt_tensor *x = oc_normal(c, bt_shape3(B, T, C), 0.0, 1.0);
    bt_tensor *wqkv = oc_normal(c, bt_shape2(3 * C, C), 0.0, 0.5), *bqkv = oc_normal(c, bt_shape1(3 * C), 0.0, 0.5);
    bt_tensor *lw = oc_normal(c, bt_shape1(C), 1.0, 0.5), *wo = oc_normal(c, bt_shape2(C, C), 0.0, 0.5);
    bt_tensor *qkv = bt_linear(bt_layernorm(x, lw, NULL, 1e-5), wqkv, bqkv);
    int64_t d5[5] = {B, T, 3, H, D};
    bt_tensor *qkv5 = bt_view(qkv, bt_shapev(5, d5));
    bt_tensor *q = bt_transpose(bt_select(qkv5, 2, 0), 1, 2), *kk = bt_transpose(bt_select(qkv5, 2, 1), 1, 2);
    bt_tensor *v = bt_permute(bt_select(qkv5, 2, 2), p0213);
    bt_tensor *merged = bt_reshape(bt_transpose(bt_attention(q, kk, v), 1, 2), bt_shape3(B, T, C));
    bt_tensor *y = bt_add(x, bt_matmul_t(merged, wo, 0, 1));
    return bt_cross_entropy(y, oc_indices(c, bt_shape2(B, T), C, -100, 4), -1, -100);
}

/* =============================================================================================
   the table
   ============================================================================================= */
static const char *oc__shape_s(bt_shape s) {
    static char bufs[4][64]; static int r;
    char *b = bufs[r = (r + 1) & 3]; size_t n = 0;
    n += (size_t)snprintf(b, 64, "[");
    for (int d = 0; d < s.ndim && n < 64; d++) n += (size_t)snprintf(b + n, 64 - n, d ? ", %lld" : "%lld", (long long)s.d[d]);
    if (n < 64) snprintf(b + n, 64 - n, "]");
    return b;
}
static oc_case *oc__add(oc_fn fn, unsigned flags, const char *fmt, ...) {
    if (oc_ncases == OC_MAX_CASES) bt_error("op_cases: more than %d cases", OC_MAX_CASES);
    oc_case *k = &oc_cases[oc_ncases++];
    memset(k, 0, sizeof *k);
    va_list ap; va_start(ap, fmt); vsnprintf(k->name, sizeof k->name, fmt, ap); va_end(ap);
    k->fn = fn; k->flags = flags;
    return k;
}
static oc_case *oc__add_sum(int mean, int keep, int n, const int *dims, bt_shape s, unsigned flags, int strided) {
    char ds[32] = "all"; size_t m = 0;
    for (int j = 0; j < n; j++) m += (size_t)snprintf(ds + m, sizeof ds - m, j ? ",%d" : "{%d", dims[j]);
    if (n) snprintf(ds + m, sizeof ds - m, "}");
    oc_case *k = oc__add(oc_f_sum, flags, "%s %s dims %s keepdim %d%s", mean ? "mean" : "sum", oc__shape_s(s), ds, keep,
                         strided ? " strided" : "");
    k->s[0] = s; k->i[0] = mean; k->i[1] = keep; k->i[2] = n; k->i[7] = strided;
    for (int j = 0; j < n; j++) k->i[3 + j] = dims[j];
    return k;
}
static oc_case *oc__add_mm(const char *what, bt_shape a, bt_shape b, int ta, int tb, int strided, double mean) {
    oc_case *k = oc__add(oc_f_matmul, OC_TF32, "matmul %s %s%s x %s%s", what, oc__shape_s(a), ta ? "^T" : "", oc__shape_s(b), tb ? "^T" : "");
    k->s[0] = a; k->s[1] = b; k->i[0] = ta; k->i[1] = tb; k->i[2] = strided; k->f[0] = mean;
    return k;
}

/* builds oc_cases once; returns the number of cases */
static int oc_build_table(void) {
    if (oc_ncases) return oc_ncases;
    oc_case *k;
    /* elementwise: every op of the lists */
#define OC__U(N, n, f, df) k = oc__add(oc_f_unary, 0, "unary %s", #n); k->i[0] = BT_UOP_##N; k->s[0] = bt_shape2(13, 33);
    BT_UNARY_OPS(OC__U)
#undef OC__U
    k = oc__add(oc_f_unary, 0, "unary gelu of a transpose"); k->i[0] = BT_UOP_GELU; k->i[1] = 1; k->s[0] = bt_shape2(33, 13);
    k = oc__add(oc_f_unary, 0, "unary exp of a transpose"); k->i[0] = BT_UOP_EXP; k->i[1] = 1; k->s[0] = bt_shape2(7, 5);
    for (int j = 0; j < 3; j++) {
        k = oc__add(oc_f_scalar, 0, "%s", j == 0 ? "affine" : j == 1 ? "scale" : "add_scalar");
        k->i[0] = j; k->s[0] = bt_shape2(13, 33);
    }
    {
        int64_t a0[3] = {3, 1, 5}, a1[4] = {2, 1, 3, 1}, b1[3] = {5, 1, 4};
        bt_shape pa[7] = {bt_shapev(3, a0), bt_shape2(4, 1), bt_shape2(13, 33), bt_shape2(2, 3), bt_shapev(4, a1), bt_shape2(6, 5), bt_shape2(5, 67)};
        bt_shape pb[7] = {bt_shape2(4, 1), bt_shapev(3, a0), bt_shape2(13, 33), bt_shape1(3), bt_shapev(3, b1), bt_shape2(6, 1), bt_shape2(1, 67)};
#define OC__B(N, n, f, da, db) \
        for (int j = 0; j < 7; j++) { k = oc__add(oc_f_binary, 0, "binary %s %s x %s", #n, oc__shape_s(pa[j]), oc__shape_s(pb[j])); \
                                      k->i[0] = BT_BOP_##N; k->s[0] = pa[j]; k->s[1] = pb[j]; } \
        k = oc__add(oc_f_binary, 0, "binary %s of a transpose and an expand", #n); k->i[0] = BT_BOP_##N; k->i[1] = 1;
        BT_BINARY_OPS(OC__B)
#undef OC__B
    }
    for (int j = 0; j < 2; j++) {
        k = oc__add(oc_f_add_, OC_NO_BACKWARD, "add_%s", j ? " into a transpose" : ""); k->i[0] = j;
        k = oc__add(oc_f_mul_scalar_, OC_NO_BACKWARD, "mul_scalar_%s", j ? " of a transpose" : ""); k->i[0] = j;
        k = oc__add(oc_f_fill_, OC_NO_BACKWARD | OC_EXACT, "%s", j ? "fill_ a strided window" : "zero_ a column"); k->i[0] = j;
    }
    /* reductions */
    {
        int64_t d4[4] = {3, 4, 5, 6}; bt_shape x4 = bt_shapev(4, d4);
        int sets[8][4] = {{0}, {3}, {1, 2}, {0, 2}, {1, 3}, {0, 1, 3}, {0}, {-1, 0}}, ns[8] = {1, 1, 2, 2, 2, 3, 0, 2};
        for (int mean = 0; mean < 2; mean++)
            for (int s = 0; s < 8; s++)
                for (int keep = 0; keep < 2; keep++) oc__add_sum(mean, keep, ns[s], sets[s], x4, 0, 0);
        oc__add_sum(0, 0, 2, sets[2], x4, 0, 1);
        oc__add_sum(1, 1, 2, sets[3], x4, 0, 1);
        int one[1] = {1};
        oc__add_sum(0, 0, 1, one, bt_shape2(3, 20000), OC_LOOSE, 0);
        oc__add_sum(1, 1, 1, one, bt_shape3(2, 300, 5), OC_LOOSE, 0);
        int mdims[3] = {-1, 0, 2};
        for (int j = 0; j < 3; j++)
            for (int keep = 0; keep < 2; keep++) {
                k = oc__add(oc_f_max, OC_EXACT, "max %s dim %d keepdim %d", oc__shape_s(x4), mdims[j], keep);
                k->s[0] = x4; k->i[0] = mdims[j]; k->i[1] = keep;
            }
        bt_shape longs[2] = {bt_shape2(3, 20000), bt_shape3(2, 300, 5)};
        for (int j = 0; j < 2; j++) {
            k = oc__add(oc_f_max, OC_EXACT, "max %s dim 1", oc__shape_s(longs[j])); k->s[0] = longs[j]; k->i[0] = 1;
            k = oc__add(oc_f_argmax, OC_EXACT | OC_NO_BACKWARD, "argmax %s dim 1", oc__shape_s(longs[j])); k->s[0] = longs[j]; k->i[0] = 1;
        }
        k = oc__add(oc_f_argmax, OC_EXACT | OC_NO_BACKWARD, "argmax %s dim -1", oc__shape_s(x4)); k->s[0] = x4; k->i[0] = -1;
        k = oc__add(oc_f_argmax, OC_EXACT | OC_NO_BACKWARD, "argmax %s dim 1", oc__shape_s(x4)); k->s[0] = x4; k->i[0] = 1;
    }
    /* matmul: [13, 33] x [33, 17] in every transposition, batched, broadcast batch, 3-D x 2-D
       (the folded path) and back, vectors, strided operands; linear */
    for (int t = 0; t < 4; t++) {
        int ta = t & 1, tb = t >> 1;
        int64_t a3[3] = {2, 13, 33}, a3t[3] = {2, 33, 13};
        int64_t ab[4] = {2, 3, 5, 7}, abt[4] = {2, 3, 7, 5}, bb[4] = {2, 3, 7, 4}, bbt[4] = {2, 3, 4, 7};
        int64_t ac[4] = {3, 1, 5, 6}, act[4] = {3, 1, 6, 5}, bc[3] = {2, 6, 4}, bct[3] = {2, 4, 6};
        oc__add_mm("2-D", ta ? bt_shape2(33, 13) : bt_shape2(13, 33), tb ? bt_shape2(17, 33) : bt_shape2(33, 17), ta, tb, 0, 0.0);
        oc__add_mm("batched", bt_shapev(4, ta ? abt : ab), bt_shapev(4, tb ? bbt : bb), ta, tb, 0, 0.0);
        oc__add_mm("broadcast batch", bt_shapev(4, ta ? act : ac), bt_shapev(3, tb ? bct : bc), ta, tb, 0, 0.0);
        oc__add_mm("3-D x 2-D", bt_shapev(3, ta ? a3t : a3), tb ? bt_shape2(67, 33) : bt_shape2(33, 67), ta, tb, 0, 0.0);
    }
    {
        int64_t b3[3] = {4, 7, 5}, b3t[3] = {4, 5, 7}, m3[3] = {2, 13, 7};
        oc__add_mm("2-D", bt_shape2(64, 80), bt_shape2(96, 80), 0, 1, 0, 0.0);
        oc__add_mm("2-D", bt_shape2(80, 64), bt_shape2(80, 96), 1, 0, 0, 0.0);
        oc__add_mm("2-D x 3-D", bt_shape2(3, 7), bt_shapev(3, b3), 0, 0, 0, 0.0);
        oc__add_mm("2-D x 3-D", bt_shape2(7, 3), bt_shapev(3, b3t), 1, 1, 0, 0.0);
        oc__add_mm("matrix x vector", bt_shape2(13, 7), bt_shape1(7), 0, 0, 0, 0.0);
        oc__add_mm("vector x matrix", bt_shape1(13), bt_shape2(13, 7), 0, 0, 0, 0.0);
        oc__add_mm("vector x vector", bt_shape1(7), bt_shape1(7), 0, 0, 0, 0.5);
        oc__add_mm("batched matrix x vector", bt_shapev(3, m3), bt_shape1(7), 0, 0, 0, 0.0);
        oc__add_mm("transa matrix x vector", bt_shape2(13, 7), bt_shape1(13), 1, 0, 0, 0.0);
        oc__add_mm("of transposed views", bt_shape2(9, 6), bt_shape2(11, 9), 0, 0, 1, 0.0);
        for (int hb = 0; hb < 2; hb++) {
            k = oc__add(oc_f_linear, OC_TF32, "linear [2, 7, 13] x [33, 13]^T %s bias", hb ? "with" : "without");
            k->s[0] = bt_shape3(2, 7, 13); k->s[1] = bt_shape2(33, 13); k->i[0] = hb;
        }
        k = oc__add(oc_f_linear, OC_TF32, "linear [37, 45] x [300, 45]^T with bias");
        k->s[0] = bt_shape2(37, 45); k->s[1] = bt_shape2(300, 45); k->i[0] = 1;
    }
    /* softmax, layernorm, embedding, cross-entropy, attention */
    {
        bt_shape sm[4] = {bt_shape2(5, 67), bt_shape3(2, 3, 13), bt_shape2(4, 1000), bt_shape2(2, 3000)};
        for (int lg = 0; lg < 2; lg++)
            for (int j = 0; j < 4; j++) {
                k = oc__add(oc_f_softmax, OC_NO_GPU_F64, "%s %s", lg ? "log_softmax" : "softmax", oc__shape_s(sm[j]));
                k->s[0] = sm[j]; k->i[0] = lg;
            }
        for (int m = 0; m < 4; m++) {
            k = oc__add(oc_f_layernorm, OC_NO_GPU_F64, "layernorm [2, 7, 33]%s%s", m & 1 ? " w" : "", m & 2 ? " b" : "");
            k->s[0] = bt_shape3(2, 7, 33); k->i[0] = m & 1; k->i[1] = m >> 1;
        }
        k = oc__add(oc_f_layernorm, OC_NO_GPU_F64, "layernorm [4, 768] w b"); k->s[0] = bt_shape2(4, 768); k->i[0] = k->i[1] = 1;
        k = oc__add(oc_f_layernorm, OC_NO_GPU_F64, "layernorm [3, 1600] w b"); k->s[0] = bt_shape2(3, 1600); k->i[0] = k->i[1] = 1;
        k = oc__add(oc_f_embedding, OC_NO_GPU_F64 | OC_EXACT_FWD, "embedding [11, 13] at [3, 7]");
        k->s[0] = bt_shape2(11, 13); k->s[1] = bt_shape2(3, 7);
        for (int det = 0; det < 2; det++) {
            k = oc__add(oc_f_embedding, OC_NO_GPU_F64 | OC_EXACT_FWD | (det ? OC_DETERMINISTIC : 0), "embedding [50, 64] at [4, 33]%s",
                        det ? " deterministic" : "");
            k->s[0] = bt_shape2(50, 64); k->s[1] = bt_shape2(4, 33);
        }
        struct { bt_shape s; int V, ignore, every; } xe[4] = {
            {bt_shape3(2, 3, 8), 5, -100, 3}, {bt_shape3(2, 3, 8), 0, 6, 0}, {bt_shape2(4, 300), 250, -1, 4}, {bt_shape2(3, 1024), 1000, -100, 2}};
        for (int j = 0; j < 4; j++) {
            k = oc__add(oc_f_xent, OC_NO_GPU_F64, "cross_entropy %s V %d ignore_index %d", oc__shape_s(xe[j].s), xe[j].V, xe[j].ignore);
            k->s[0] = xe[j].s; k->i[0] = xe[j].V; k->i[1] = xe[j].ignore; k->i[2] = xe[j].every;
        }
        bt_shape at[5] = {bt_shape4(2, 3, 7, 5), bt_shape4(1, 2, 13, 8), bt_shape4(2, 1, 33, 4), bt_shape4(1, 2, 100, 64), bt_shape4(2, 3, 7, 5)};
        for (int j = 0; j < 6; j++) {
            int strided = j >= 4;
            bt_shape s = at[j < 4 ? j : j == 4 ? 3 : 4];
            k = oc__add(oc_f_attention, OC_NO_GPU_F64 | OC_TF32 | OC_LOOSE, "attention %s%s", oc__shape_s(s), strided ? " heads of [B, T, H, D]" : "");
            k->s[0] = s; k->i[0] = strided;
        }
        k = oc__add(oc_f_attention_qkv, OC_NO_GPU_F64 | OC_TF32 | OC_LOOSE, "attention_qkv [2, 7, 45] H 3");
        k->s[0] = bt_shape3(2, 7, 45); k->i[0] = 3;
        k = oc__add(oc_f_attention_qkv, OC_NO_GPU_F64 | OC_TF32 | OC_LOOSE, "attention_qkv [1, 40, 192] H 2");
        k->s[0] = bt_shape3(1, 40, 192); k->i[0] = 2;
    }
    /* concat, split, views, casts, device moves, copies */
    k = oc__add(oc_f_concat, OC_EXACT, "concat of 3 [2, _, 4] along dim 1"); k->s[0] = bt_shape3(2, 1, 4); k->i[0] = 3; k->i[1] = 1;
    k = oc__add(oc_f_concat, OC_EXACT, "concat of 11 [_, 3] along dim 0"); k->s[0] = bt_shape2(1, 3); k->i[0] = 11; k->i[1] = 0;
    k = oc__add(oc_f_split, OC_EXACT, "split [2, 9] along dim 1"); k->s[0] = bt_shape2(2, 9); k->i[1] = 1;
    k = oc__add(oc_f_split, OC_EXACT, "split [9, 2] along dim 0"); k->s[0] = bt_shape2(9, 2); k->i[1] = 0;
    {
        static const char *vn[12] = {"narrow", "select", "transpose", "permute", "view", "reshape (a view)", "reshape (a copy)",
                                     "contiguous", "squeeze", "unsqueeze", "clone", "expand"};
        for (int j = 0; j < 12; j++) { k = oc__add(oc_f_view, j < 11 ? OC_EXACT : 0, "%s", vn[j]); k->i[0] = j; }
    }
    k = oc__add(oc_f_cast, OC_EXACT, "cast f32 <-> bf16"); k->s[0] = bt_shape2(13, 33);
    k = oc__add(oc_f_cast, OC_EXACT, "cast_cached f32 <-> bf16"); k->s[0] = bt_shape2(13, 33); k->i[0] = 1;
    k = oc__add(oc_f_to, OC_EXACT, "to the CPU and back"); k->s[0] = bt_shape2(13, 33);
    k = oc__add(oc_f_to, OC_EXACT, "to the second device and back"); k->s[0] = bt_shape2(13, 33); k->i[0] = 1;
    {
        static const char *cn[4] = {"copy_ strided, device to second device", "copy_ strided, CPU to device, converted",
                                    "copy_ strided, on the device, converted", "copy_ strided, second device to device"};
        for (int j = 0; j < 4; j++) { k = oc__add(oc_f_copy, OC_EXACT | OC_NO_BACKWARD, "%s", cn[j]); k->i[0] = j; }
    }
    /* Philox fills and creation */
    {
        static const char *rn[4] = {"rand", "randn", "uniform_ at an offset", "normal_ into a strided window"};
        for (int j = 0; j < 4; j++) {
            k = oc__add(oc_f_random, OC_EXACT | OC_NO_BACKWARD | OC_F64_ULPS, "%s", rn[j]);
            k->i[0] = j; k->s[0] = bt_shape2(33, 65);
        }
        static const char *cr[5] = {"full", "zeros", "scalar", "arange", "from_data"};
        for (int j = 0; j < 5; j++) {
            k = oc__add(oc_f_create, OC_EXACT | OC_NO_BACKWARD | (j == 1 ? OC_ZERO_OK : 0), "%s", cr[j]);
            k->i[0] = j; k->s[0] = bt_shape2(7, 9);
        }
    }
    oc__add(oc_f_mlp, OC_NO_GPU_F64 | OC_TF32 | OC_LOOSE, "composite: linear, layernorm, gelu, linear");
    k = oc__add(oc_f_mlp_gelu, OC_TF32 | OC_LOOSE, "mlp_gelu [3, 5, 16] -> 40 -> 24 (fusable sizes)");
    k->s[0] = bt_shape3(3, 5, 16); k->s[1] = bt_shape2(40, 16); k->s[2] = bt_shape2(24, 40);
    k = oc__add(oc_f_mlp_gelu, OC_TF32 | OC_LOOSE, "mlp_gelu [37, 13] -> 21 -> 7 (odd sizes)");
    k->s[0] = bt_shape2(37, 13); k->s[1] = bt_shape2(21, 13); k->s[2] = bt_shape2(7, 21);
    k = oc__add(oc_f_mlp_gelu, OC_TF32 | OC_LOOSE, "mlp_gelu [3, 5, 16] -> 40 -> 24 plus a residual");
    k->s[0] = bt_shape3(3, 5, 16); k->s[1] = bt_shape2(40, 16); k->s[2] = bt_shape2(24, 40); k->i[0] = 1;
    k = oc__add(oc_f_mlp_gelu, OC_TF32 | OC_LOOSE, "mlp_gelu [37, 13] -> 21 -> 7 plus a residual (odd sizes)");
    k->s[0] = bt_shape2(37, 13); k->s[1] = bt_shape2(21, 13); k->s[2] = bt_shape2(7, 21); k->i[0] = 1;
    for (int hb = 0; hb < 2; hb++) {
        k = oc__add(oc_f_linear_add, OC_TF32, "linear_add [2, 7, 16] x [40, 16]^T %s bias, plus a residual", hb ? "with" : "without");
        k->s[0] = bt_shape3(2, 7, 16); k->s[1] = bt_shape2(40, 16); k->i[0] = hb;
    }
    k = oc__add(oc_f_linear_add, OC_TF32, "linear_add [37, 45] x [30, 45]^T with bias, plus a residual");
    k->s[0] = bt_shape2(37, 45); k->s[1] = bt_shape2(30, 45); k->i[0] = 1;
    oc__add(oc_f_attn_block, OC_NO_GPU_F64 | OC_TF32 | OC_LOOSE, "composite: attention block to the loss");
    /* new cases go last: a case's inputs come from seeds of its index (oc_seed_of), so inserting one
       earlier redraws every later case's numbers (the attention block's bf16 gradient 2 read 0.0335
       of its 0.03 on an H100 with the draw of index + 2, 2026-11-23; 0.0207 on the CPU) */
    k = oc__add(oc_f_residual_ln, OC_NO_GPU_F64 | OC_TF32 | OC_LOOSE, "composite: h + linear(layernorm(h)) [2, 7, 33]");
    k->s[0] = bt_shape3(2, 7, 33);
    k = oc__add(oc_f_residual_ln, OC_NO_GPU_F64 | OC_TF32 | OC_LOOSE, "composite: h + linear(layernorm(h)) [9, 256]");
    k->s[0] = bt_shape2(9, 256);
    /* Llama's ops: rmsnorm (odd C: the general warp rows; 768, 1000: the register rows; 1600, 4096:
       a block a row), swiglu (odd F: one element a thread; else 16-byte vectors), rope (D 64 and 128, pos0 > 0,
       the views a qkv projection makes, llama3 frequencies) */
    {
        struct { bt_shape s; int w; } rn[8] = {{bt_shape3(2, 7, 33), 1}, {bt_shape3(2, 7, 33), 0}, {bt_shape2(4, 768), 1},
                                               {bt_shape2(5, 1000), 1}, {bt_shape2(3, 4096), 1}, {bt_shape2(2, 4096), 0},
                                               {bt_shape3(2, 3, 5), 1}, {bt_shape2(3, 1600), 1}};
        for (int j = 0; j < 8; j++) {
            k = oc__add(oc_f_rmsnorm, OC_NO_GPU_F64, "rmsnorm %s%s", oc__shape_s(rn[j].s), rn[j].w ? " w" : "");
            k->s[0] = rn[j].s; k->i[0] = rn[j].w;
        }
        k = oc__add(oc_f_residual_rms, OC_NO_GPU_F64 | OC_TF32 | OC_LOOSE, "composite: h + linear(rmsnorm(h)) [2, 7, 33]");
        k->s[0] = bt_shape3(2, 7, 33);
        k = oc__add(oc_f_residual_rms, OC_NO_GPU_F64 | OC_TF32 | OC_LOOSE, "composite: h + linear(rmsnorm(h)) [9, 256]");
        k->s[0] = bt_shape2(9, 256);
        bt_shape sw[4] = {bt_shape3(2, 7, 66), bt_shape2(4, 1024), bt_shape3(2, 3, 2752), bt_shape2(5, 48)};
        for (int j = 0; j < 4; j++) {
            k = oc__add(oc_f_swiglu, 0, "swiglu %s%s", oc__shape_s(sw[j]), j == 3 ? " transposed view" : "");
            k->s[0] = sw[j]; k->i[0] = j == 3;
        }
        static const char *rv[4] = {"", " k of [B, T, 3H, D]", " q of [B, T, 3, H, D]", " D strided"};
        struct { bt_shape s; int pos0, view, lmax; double theta; } rp[7] = {
            {bt_shape4(2, 5, 3, 64), 0, 0, 0, 10000.0}, {bt_shape4(1, 9, 2, 128), 1000, 0, 0, 10000.0},
            {bt_shape4(2, 4, 2, 64), 7, 1, 0, 10000.0}, {bt_shape4(2, 6, 2, 64), 3, 2, 0, 500000.0},
            {bt_shape4(2, 3, 2, 8), 5, 3, 0, 10000.0}, {bt_shape4(1, 7, 3, 64), 100, 0, 64, 500000.0},
            {bt_shape4(2, 3, 1, 6), 2, 0, 0, 10000.0}};
        for (int j = 0; j < 7; j++) {
            k = oc__add(oc_f_rope, 0, "rope %s pos0 %d theta %g%s%s", oc__shape_s(rp[j].s), rp[j].pos0, rp[j].theta, rv[rp[j].view],
                        rp[j].lmax ? " llama3" : "");
            k->s[0] = rp[j].s; k->i[0] = rp[j].pos0; k->i[1] = rp[j].view; k->i[2] = rp[j].lmax; k->f[0] = rp[j].theta;
        }
        /* per-row losses (bt_cross_entropy_rows): the small case and the 1024-column one of cross_entropy's */
        struct { bt_shape s; int V, ignore, every; } xr[2] = {{bt_shape3(2, 3, 8), 5, -100, 3}, {bt_shape2(3, 1024), 1000, -100, 2}};
        for (int j = 0; j < 2; j++) {
            k = oc__add(oc_f_xent, OC_NO_GPU_F64, "cross_entropy_rows %s V %d ignore_index %d", oc__shape_s(xr[j].s), xr[j].V, xr[j].ignore);
            k->s[0] = xr[j].s; k->i[0] = xr[j].V; k->i[1] = xr[j].ignore; k->i[2] = xr[j].every; k->i[3] = 1;
        }
    }
    /* grouped-query attention (Hkv key/value heads dividing H, read in place by group): bt_attention, and
       Llama's packed projection with RoPE (bt_attention_qkv_ex): D 64 and 128 (the Hopper kernels in
       bf16), multi-query (Hkv 1), several 64-row tiles, strided heads */
    {
        struct { bt_shape s; int hkv, strided; } ga[4] = {{bt_shape4(2, 6, 9, 8), 2, 0}, {bt_shape4(1, 4, 70, 64), 1, 1},
                                                          {bt_shape4(1, 8, 100, 64), 2, 0}, {bt_shape4(1, 4, 65, 128), 2, 1}};
        for (int j = 0; j < 4; j++) {
            k = oc__add(oc_f_attention, OC_NO_GPU_F64 | OC_TF32 | OC_LOOSE, "attention %s Hkv %d%s", oc__shape_s(ga[j].s), ga[j].hkv,
                        ga[j].strided ? " heads of [B, T, H, D]" : "");
            k->s[0] = ga[j].s; k->i[0] = ga[j].strided; k->i[1] = ga[j].hkv;
        }
        struct { int B, T, H, hkv, D, lmax; double theta; } gx[5] = {{2, 7, 4, 2, 8, 0, 10000.0}, {1, 70, 6, 2, 64, 64, 500000.0},
                                                                    {2, 33, 3, 1, 16, 0, 0.0}, {1, 130, 4, 2, 128, 0, 500000.0},
                                                                    {2, 5, 3, 3, 6, 0, 10000.0}};
        for (int j = 0; j < 5; j++) {
            bt_shape s = bt_shape3(gx[j].B, gx[j].T, (gx[j].H + 2 * gx[j].hkv) * gx[j].D);
            k = oc__add(oc_f_attention_qkv_ex, OC_NO_GPU_F64 | OC_TF32 | OC_LOOSE, "attention_qkv_ex %s H %d Hkv %d%s%s", oc__shape_s(s),
                        gx[j].H, gx[j].hkv, gx[j].theta > 0 ? " rope" : "", gx[j].lmax ? " llama3" : "");
            k->s[0] = s; k->i[0] = gx[j].H; k->i[1] = gx[j].hkv; k->i[2] = gx[j].lmax; k->f[0] = gx[j].theta;
        }
    }
    return oc_ncases;
}

/* =============================================================================================
   running and comparing
   ============================================================================================= */
static uint64_t oc_seed_of(int idx) { return 0x6F7000ull + 1000ull * (uint64_t)idx; }

static void oc_result_free(oc_result *r) {
    for (int j = 0; j < r->n; j++) free(r->v[j]);
    memset(r, 0, sizeof *r);
}
static void oc__keep(oc_result *r, bt_tensor *t) {
    int j = r->n++;
    r->have[j] = t != NULL;
    if (!t) return;
    int64_t n = bt_numel(t);
    r->shape[j] = bt_shape_of(t);
    r->v[j] = (double *)malloc(sizeof(double) * (size_t)(n ? n : 1));
    bt_to_host(t, r->v[j], BT_F64);
}
/* case idx on (dev, dt) with inputs rounded to qdt: its output and input gradients into r */
static void oc_run(int idx, bt_device dev, bt_device dev2, bt_dtype dt, bt_dtype qdt, oc_result *r) {
    const oc_case *k = &oc_cases[idx];
    memset(r, 0, sizeof *r);
    if (k->flags & OC_DETERMINISTIC) bt_set_deterministic(1);
    bt_scope_begin();
    oc_ctx c;
    memset(&c, 0, sizeof c);
    c.dev = dev; c.dev2 = dev2; c.dt = dt; c.qdt = qdt; c.seed = oc_seed_of(idx);
    bt_tensor *y = k->fn(&c, k);
    if (!bt_device_eq(bt_device_of(y), dev)) bt_error("op_cases: %s left its output on another device", k->name);
    oc__keep(r, y);
    if (!(k->flags & OC_NO_BACKWARD)) {
        if (!y->requires_grad || !c.n_in) bt_error("op_cases: %s has no graph to run backward on", k->name);
        bt_backward_with(y, oc__draw(&c, bt_shape_of(y), 1, 0.0, 1.0, y->dtype, dev));
        for (int j = 0; j < c.n_in; j++) oc__keep(r, c.in[j]->grad);
    }
    bt_scope_end();
    bt_set_deterministic(0);
}

static jmp_buf oc__jmp;
static char oc_error_msg[1024];
static void oc__on_error(const char *msg, void *user) { (void)user; snprintf(oc_error_msg, sizeof oc_error_msg, "%s", msg); longjmp(oc__jmp, 1); }
/* oc_run with bt_error trapped: 0 on success; 1 after an error (its message in oc_error_msg, the
   scopes it left open closed, grad mode and determinism reset, r empty) */
static int oc_run_guarded(int idx, bt_device dev, bt_device dev2, bt_dtype dt, bt_dtype qdt, oc_result *r) {
    bt_error_fn old_fn; void *old_user;
    bt_get_error_handler(&old_fn, &old_user);
    const int depth = bt_scope_depth();
    memset(r, 0, sizeof *r);
    bt_set_error_handler(oc__on_error, NULL);
    if (setjmp(oc__jmp)) {
        bt_set_error_handler(old_fn, old_user);
        while (bt_scope_depth() > depth) bt_scope_end();
        bt_set_grad_enabled(1); bt_set_deterministic(0);
        oc_result_free(r);
        return 1;
    }
    oc_run(idx, dev, dev2, dt, qdt, r);
    bt_set_error_handler(old_fn, old_user);
    return 0;
}

/* the tolerance of case k's output (grad = 0) or gradients in dtype dt; tf32: f32 with TF32 matmuls */
static double oc_tol(const oc_case *k, bt_dtype dt, int tf32, int grad) {
    if ((k->flags & OC_EXACT) || ((k->flags & OC_EXACT_FWD) && !grad))
        return (k->flags & OC_F64_ULPS) && dt == BT_F64 ? BT_TOL_F64_ULP : BT_TOL_EXACT;
    if (dt == BT_F32 && tf32) return BT_TOL_TF32_CHAIN;
    return bt_test_tol(dt, (k->flags & OC_LOOSE) != 0);
}
static int oc__same_shape(bt_shape a, bt_shape b) {
    if (a.ndim != b.ndim) return 0;
    for (int d = 0; d < a.ndim; d++) if (a.d[d] != b.d[d]) return 0;
    return 1;
}
/* got against ref, slot by slot: shapes, presence, relative error within oc_tol */
static void oc_compare(const char *where, int idx, const oc_result *got, const oc_result *ref, bt_dtype dt, int tf32, oc_stats *st) {
    const oc_case *k = &oc_cases[idx];
    if (got->n != ref->n) {
        BT_CHECK(0, "%s %s: %d results (output and gradients), the reference has %d", where, k->name, got->n, ref->n);
        st->failed++;
        return;
    }
    int bad = 0;
    for (int j = 0; j < ref->n; j++) {
        char what[24];
        if (j) snprintf(what, sizeof what, "gradient %d", j - 1); else snprintf(what, sizeof what, "output");
        if (!got->have[j] || !ref->have[j]) {
            BT_CHECK(got->have[j] == ref->have[j], "%s %s: %s %s", where, k->name, what, got->have[j] ? "unexpected" : "missing");
            bad |= got->have[j] != ref->have[j];
            continue;
        }
        if (!oc__same_shape(got->shape[j], ref->shape[j])) {
            BT_CHECK(0, "%s %s: %s has shape %s, the reference %s", where, k->name, what, oc__shape_s(got->shape[j]), oc__shape_s(ref->shape[j]));
            bad = 1;
            continue;
        }
        int64_t n = 1;
        for (int d = 0; d < ref->shape[j].ndim; d++) n *= ref->shape[j].d[d];
        double e = bt_test_relerr(got->v[j], ref->v[j], n), tol = oc_tol(k, dt, tf32, j > 0);
        BT_CHECK(e <= tol, "%s %s: %s rel err %.3g > tolerance %.3g", where, k->name, what, e, tol);
        bad |= !(e <= tol);
        double ratio = tol > 0 ? e / tol : e;
        if (!(ratio < st->worst)) {
            st->worst = ratio;
            snprintf(st->worst_what, sizeof st->worst_what, "%.80s %.23s (%.3g, tol %.3g)", k->name, what, e, tol);
        }
        if (bt_test_verbose()) printf("  %-12s %-64s %-12s %10.3g %10.3g\n", where, k->name, what, e, tol);
    }
    st->failed += bad;
}
/* runs case idx on (dev, dt) and compares it with ref (the case on the CPU in f64 from inputs
   rounded to dt); the caller has set the matmul precision for tf32 */
static void oc_check(const char *where, int idx, bt_device dev, bt_device dev2, bt_dtype dt, int tf32, const oc_result *ref, oc_stats *st) {
    oc_result got;
    st->runs++;
    if (oc_run_guarded(idx, dev, dev2, dt, dt, &got)) {
        BT_CHECK(0, "%s %s: error: %s", where, oc_cases[idx].name, oc_error_msg);
        st->failed++;
        return;
    }
    oc_compare(where, idx, &got, ref, dt, tf32, st);
    oc_result_free(&got);
}
/* one line on stdout: what ran and the worst error relative to its tolerance */
static void oc_report(const char *where, const oc_stats *st) {
    printf("info: %-34s %3d runs, %d failed, %d skipped; worst err/tol %.2g: %s\n", where, st->runs, st->failed, st->skipped, st->worst,
           st->worst_what);
}

#endif /* OP_CASES_H */
