/* bt_tensor.h - BluTrain-C tensors, v0.1: dtypes, storage, views, devices, and every op with its
   forward and backward math.

   USAGE
     #define BT_TENSOR_IMPLEMENTATION   (and BT_ALLOC_IMPLEMENTATION) in *one* C file, then
     #include "bt_tensor.h". Compiled by nvcc (-x cu) the CUDA path is built too (bt_kernels.cuh).

     bt_tensor *x = bt_randn(bt_shape2(4, 8), BT_F32, bt_cpu(), 1234);
     bt_tensor *w = bt_randn(bt_shape2(8, 3), BT_F32, bt_cpu(), 99);
     bt_set_requires_grad(w, 1);
     bt_scope_begin();                        // every tensor an op makes from here is released...
     bt_tensor *loss = bt_mean(bt_tanh(bt_matmul(x, w)), NULL, 0, 0);
     bt_backward(loss);                       // (bt_autograd.h) w->grad now holds dloss/dw
     bt_scope_end();                          // ...here, unless bt_retain()ed
     bt_release(x); bt_release(w);

   MODEL
     A tensor is a view (dtype, device, shape, element strides, element offset) over a refcounted
     storage. Views (bt_view, bt_transpose, bt_permute, bt_narrow, bt_expand, ...) share the
     storage and the storage's version counter; an in-place op bumps the counter, and autograd
     refuses to use a saved tensor whose version moved. Ops take any strides and call
     bt_contiguous internally where their kernel needs it.

   OWNERSHIP
     A tensor starts with one reference. While a scope is open (bt_scope_begin / bt_scope_end,
     nestable) each tensor an op returns is also registered with the innermost scope, which drops
     that reference at its end: a training step frees its temporaries without calling bt_release.
     bt_retain keeps one past its scope; with no scope open, the caller owns the result.

   ERRORS
     Every op checks its arguments (shapes, dtypes, devices) and raises bt_error naming the op,
     the shapes and the dtypes; see bt_alloc.h for the handler.

   AUTOGRAD
     When grad mode is on and an input requires grad, an op records a node (its backward
     function, the inputs, the tensors it saved). bt_autograd.h runs the graph.

   SECTIONS (implementation)
     1. dtypes, errors, storage, tensor lifetime, scopes
     2. creation, random numbers (Philox), copies, device moves
     3. views
     4. the autograd node record
     5. ops: elementwise, scalar, broadcasting binary, reductions, matmul, activations,
        softmax, layernorm, embedding, cross-entropy, attention, concat/split, casts
*/
#ifndef BT_TENSOR_H
#define BT_TENSOR_H

#include "bt_alloc.h"
#include <stdint.h>
#include <stddef.h>
#include <math.h>

#ifdef __CUDACC__
#define BT_HOSTDEV __host__ __device__
#else
#define BT_HOSTDEV
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dtypes ---- */
typedef enum { BT_F32 = 0, BT_F64, BT_BF16, BT_F16, BT_I32, BT_U16, BT_I64, BT_NDTYPES } bt_dtype;
BTDEF size_t bt_dtype_size(bt_dtype dt);
BTDEF const char *bt_dtype_name(bt_dtype dt);
static inline int bt_dtype_is_float(bt_dtype dt) { return dt <= BT_F16; }

/* ---- op kinds shared with the kernels ---- */
typedef enum { BT_UOP_NEG = 0, BT_UOP_EXP, BT_UOP_LOG, BT_UOP_SQRT, BT_UOP_TANH, BT_UOP_RELU, BT_UOP_GELU,
               BT_UOP_SQUARE, BT_UOP_RECIP, BT_NUOPS } bt_unary_op;
typedef enum { BT_BOP_ADD = 0, BT_BOP_SUB, BT_BOP_MUL, BT_BOP_DIV, BT_NBOPS } bt_binary_op;
typedef enum { BT_REDUCE_SUM = 0, BT_REDUCE_MEAN, BT_REDUCE_MAX } bt_reduce_op;
typedef enum { BT_MATMUL_FP32 = 0, BT_MATMUL_TF32 = 1 } bt_matmul_precision;

/* ---- Philox4x32-10: counter-based RNG, the same bits on the CPU and the GPU ----
   A random stream is (seed, index): element `index` of a fill uses the counter index / 4 and takes
   lane index % 4 of the four output words. Uniforms are (w >> 8) * 2^-24 in [0, 1). Normals use
   Box-Muller on the lane pair (0,1) or (2,3) of the same counter, in double precision. */
static inline BT_HOSTDEV void bt_philox4x32(uint64_t counter, uint64_t seed, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1; c3 = (uint32_t)p0; c0 = n0; c2 = n2;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}
static inline BT_HOSTDEV double bt_philox_uniform(uint64_t seed, uint64_t index) {
    uint32_t w[4]; bt_philox4x32(index >> 2, seed, w);
    return (double)(w[index & 3] >> 8) * (1.0 / 16777216.0);
}
static inline BT_HOSTDEV double bt_philox_normal(uint64_t seed, uint64_t index) {
    uint32_t w[4]; bt_philox4x32(index >> 2, seed, w);
    int pair = (int)(index & 2), second = (int)(index & 1);
    double u1 = ((double)w[pair] + 1.0) * (1.0 / 4294967296.0);      /* (0, 1] */
    double u2 = (double)w[pair + 1] * (1.0 / 4294967296.0);          /* [0, 1) */
    double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    return second ? r * sin(th) : r * cos(th);
}

/* ---- shapes ---- */
#define BT_MAX_DIMS 8
typedef struct { int ndim; int64_t d[BT_MAX_DIMS]; } bt_shape;
static inline bt_shape bt_shape1(int64_t a) { bt_shape s = {1, {a}}; return s; }
static inline bt_shape bt_shape2(int64_t a, int64_t b) { bt_shape s = {2, {a, b}}; return s; }
static inline bt_shape bt_shape3(int64_t a, int64_t b, int64_t c) { bt_shape s = {3, {a, b, c}}; return s; }
static inline bt_shape bt_shape4(int64_t a, int64_t b, int64_t c, int64_t d) { bt_shape s = {4, {a, b, c, d}}; return s; }
BTDEF bt_shape bt_shapev(int ndim, const int64_t *dims);

/* ---- storage and tensor ---- */
typedef struct bt_storage {
    void *data;
    size_t nbytes;
    bt_device device;
    int refcount;
    uint32_t version;        /* bumped by every in-place write to any view of it */
    int external;            /* 1: data not owned (bt_from_blob), never freed */
} bt_storage;

struct bt_node;
typedef struct bt_tensor {
    bt_storage *storage;
    int64_t offset;                       /* in elements */
    int ndim;
    int64_t shape[BT_MAX_DIMS];
    int64_t stride[BT_MAX_DIMS];          /* in elements */
    bt_dtype dtype;
    int refcount;
    int requires_grad;
    struct bt_tensor *grad;               /* owned; accumulated by backward */
    struct bt_node *grad_fn;              /* owned reference; NULL for leaves */
    int output_index;                     /* which output of grad_fn this is */
    int retain_grad;                      /* non-leaf that keeps its .grad */
    const char *name;                     /* optional, for messages */
} bt_tensor;

/* ---- lifetime and scopes ---- */
BTDEF bt_tensor *bt_retain(bt_tensor *t);
BTDEF void bt_release(bt_tensor *t);               /* NULL is a no-op */
BTDEF void bt_scope_begin(void);
BTDEF void bt_scope_end(void);
BTDEF bt_tensor *bt_keep(bt_tensor *t);            /* take t out of the innermost scope: caller owns it */

/* ---- properties ---- */
static inline bt_device bt_device_of(const bt_tensor *t) { return t->storage->device; }
BTDEF int64_t bt_numel(const bt_tensor *t);
BTDEF int bt_is_contiguous(const bt_tensor *t);
BTDEF void *bt_data_ptr(const bt_tensor *t);        /* storage data + offset, in bytes */
BTDEF bt_shape bt_shape_of(const bt_tensor *t);
BTDEF const char *bt_shape_str(const bt_tensor *t, char *buf, size_t n);  /* "[2, 3] f32 cpu" */

/* ---- creation ---- */
BTDEF bt_tensor *bt_empty(bt_shape shape, bt_dtype dt, bt_device dev);
BTDEF bt_tensor *bt_zeros(bt_shape shape, bt_dtype dt, bt_device dev);
BTDEF bt_tensor *bt_full(bt_shape shape, double value, bt_dtype dt, bt_device dev);
BTDEF bt_tensor *bt_scalar(double value, bt_dtype dt, bt_device dev);     /* 0-dim */
BTDEF bt_tensor *bt_from_data(const void *data, bt_shape shape, bt_dtype dt, bt_device dev);  /* copies host data */
BTDEF bt_tensor *bt_from_blob(void *data, bt_shape shape, bt_dtype dt, bt_device dev);        /* wraps, no copy */
BTDEF bt_tensor *bt_arange(int64_t n, bt_dtype dt, bt_device dev);
/* Philox fills; (seed, offset) names the random stream, see bt_philox_uniform. The same seed and
   offset give the same numbers on every device. */
BTDEF bt_tensor *bt_rand(bt_shape shape, bt_dtype dt, bt_device dev, uint64_t seed);
BTDEF bt_tensor *bt_randn(bt_shape shape, bt_dtype dt, bt_device dev, uint64_t seed);
BTDEF void bt_uniform_(bt_tensor *t, double lo, double hi, uint64_t seed, uint64_t offset);
BTDEF void bt_normal_(bt_tensor *t, double mean, double std, uint64_t seed, uint64_t offset);
BTDEF void bt_fill_(bt_tensor *t, double value);
BTDEF void bt_zero_(bt_tensor *t);

/* ---- copies, devices, dtypes ---- */
BTDEF bt_tensor *bt_contiguous(bt_tensor *t);       /* t itself (retained) when already contiguous */
BTDEF bt_tensor *bt_clone(bt_tensor *t);
BTDEF void bt_copy_(bt_tensor *dst, bt_tensor *src);  /* same shape, any dtypes/devices/strides */
BTDEF bt_tensor *bt_to(bt_tensor *t, bt_device dev);  /* differentiable */
BTDEF bt_tensor *bt_cast(bt_tensor *t, bt_dtype dt);  /* differentiable for float dtypes */
BTDEF void bt_to_host(bt_tensor *t, void *dst, bt_dtype dt);   /* copy all elements, converted to dt */
BTDEF double bt_item(bt_tensor *t);                 /* one-element tensor -> double (syncs a GPU) */
BTDEF double bt_get(bt_tensor *t, const int64_t *index);  /* one element, for tests */

/* ---- views (share storage; differentiable) ---- */
BTDEF bt_tensor *bt_view(bt_tensor *t, bt_shape shape);          /* one dim may be -1; needs compatible strides */
BTDEF bt_tensor *bt_reshape(bt_tensor *t, bt_shape shape);       /* view when possible, else a copy */
BTDEF bt_tensor *bt_transpose(bt_tensor *t, int d0, int d1);
BTDEF bt_tensor *bt_permute(bt_tensor *t, const int *perm);
BTDEF bt_tensor *bt_narrow(bt_tensor *t, int dim, int64_t start, int64_t len);
BTDEF bt_tensor *bt_select(bt_tensor *t, int dim, int64_t index);  /* drops dim */
BTDEF bt_tensor *bt_expand(bt_tensor *t, bt_shape shape);        /* broadcast size-1 dims (stride 0) */
BTDEF bt_tensor *bt_unsqueeze(bt_tensor *t, int dim);
BTDEF bt_tensor *bt_squeeze(bt_tensor *t, int dim);

/* ---- grad mode ---- */
BTDEF int bt_grad_enabled(void);
BTDEF int bt_set_grad_enabled(int on);              /* returns the previous mode */
BTDEF void bt_set_requires_grad(bt_tensor *t, int on);  /* leaves only */

/* ---- precision ---- */
BTDEF void bt_set_matmul_precision(bt_matmul_precision p);
BTDEF bt_matmul_precision bt_get_matmul_precision(void);
BTDEF void bt_set_deterministic(int on);            /* deterministic embedding backward on the GPU */

/* ---- ops (differentiable unless noted) ---- */
/* elementwise */
BTDEF bt_tensor *bt_neg(bt_tensor *x);
BTDEF bt_tensor *bt_exp(bt_tensor *x);
BTDEF bt_tensor *bt_log(bt_tensor *x);
BTDEF bt_tensor *bt_sqrt(bt_tensor *x);
BTDEF bt_tensor *bt_tanh(bt_tensor *x);
BTDEF bt_tensor *bt_relu(bt_tensor *x);
BTDEF bt_tensor *bt_gelu(bt_tensor *x);             /* tanh form, as GPT-2 */
BTDEF bt_tensor *bt_square(bt_tensor *x);
/* scalar: alpha * x + beta */
BTDEF bt_tensor *bt_affine(bt_tensor *x, double alpha, double beta);
BTDEF bt_tensor *bt_scale(bt_tensor *x, double alpha);
BTDEF bt_tensor *bt_add_scalar(bt_tensor *x, double beta);
/* broadcasting binary (numpy rules) */
BTDEF bt_tensor *bt_add(bt_tensor *a, bt_tensor *b);
BTDEF bt_tensor *bt_sub(bt_tensor *a, bt_tensor *b);
BTDEF bt_tensor *bt_mul(bt_tensor *a, bt_tensor *b);
BTDEF bt_tensor *bt_div(bt_tensor *a, bt_tensor *b);
/* in place, not differentiable through (bumps the version): a += alpha * b */
BTDEF void bt_add_(bt_tensor *a, bt_tensor *b, double alpha);
BTDEF void bt_mul_scalar_(bt_tensor *a, double alpha);
/* reductions over the listed dims (dims == NULL or ndims == 0: all); keepdim keeps them as size 1 */
BTDEF bt_tensor *bt_sum(bt_tensor *x, const int *dims, int ndims, int keepdim);
BTDEF bt_tensor *bt_mean(bt_tensor *x, const int *dims, int ndims, int keepdim);
BTDEF bt_tensor *bt_max(bt_tensor *x, int dim, int keepdim);     /* gradient to the (first) argmax */
BTDEF bt_tensor *bt_argmax(bt_tensor *x, int dim);               /* i32, not differentiable */
/* matmul: [.., M, K] x [.., K, N] -> [.., M, N], batch dims broadcast; 1-D b is a vector.
   transa/transb: use the transpose of the last two dims. */
BTDEF bt_tensor *bt_matmul(bt_tensor *a, bt_tensor *b);
BTDEF bt_tensor *bt_matmul_t(bt_tensor *a, bt_tensor *b, int transa, int transb);
/* y = x w^T + b: x [.., in], w [out, in] (PyTorch's layout), b [out] or NULL */
BTDEF bt_tensor *bt_linear(bt_tensor *x, bt_tensor *w, bt_tensor *b);
/* softmax family, over the last dim */
BTDEF bt_tensor *bt_softmax(bt_tensor *x);
BTDEF bt_tensor *bt_log_softmax(bt_tensor *x);
/* layernorm over the last dim; w, b [C] (either may be NULL) */
BTDEF bt_tensor *bt_layernorm(bt_tensor *x, bt_tensor *w, bt_tensor *b, double eps);
/* embedding: table [V, C], idx i32 of any shape -> [idx.shape.., C]; backward = scatter-add */
BTDEF bt_tensor *bt_embedding(bt_tensor *table, bt_tensor *idx);
/* cross-entropy: logits [.., Vp] (only the first V columns are classes; V <= 0 means all),
   targets i32 [..]; mean over the rows whose target != ignore_index -> scalar f32 */
BTDEF bt_tensor *bt_cross_entropy(bt_tensor *logits, bt_tensor *targets, int64_t V, int ignore_index);
/* causal self-attention: q, k, v [B, H, T, D] -> softmax(q k^T / sqrt(D) + causal mask) v */
BTDEF bt_tensor *bt_attention(bt_tensor *q, bt_tensor *k, bt_tensor *v);
/* concat along dim; split into pieces of the given sizes (returns n tensors into out) */
BTDEF bt_tensor *bt_concat(bt_tensor **ts, int n, int dim);
BTDEF void bt_split(bt_tensor *x, const int64_t *sizes, int n, int dim, bt_tensor **out);

#ifdef __cplusplus
}
#endif
#endif /* BT_TENSOR_H */
