/* bt_kernels.cuh - BluTrain-C CUDA kernels, v0.1: the device side of every op in bt_tensor.h.

   Included by bt_tensor.h's implementation when compiled by nvcc (BT_CUDA); it sees bt_tensor.h's
   declarations (bt_dtype, bt_philox_*). Every function here works on raw device pointers to
   contiguous row-major data and launches on the stream it is given; none allocates with
   cudaMalloc (scratch comes from bt_alloc on that stream) and none synchronizes with the host.
   Every launch and library call is checked; an error names the op (bt_error).

   Floating dtypes: BT_F32, BT_BF16 and BT_F16 everywhere (math in fp32 registers); BT_F64 for
   the elementwise, reduction and copy kernels. Index tensors are BT_I32.
   Device code is CUDA C; templates appear only to instantiate a kernel per dtype.

   SECTIONS
     1. context: stream, cuBLAS(Lt) handles, checks
     2. copy, cast, fill, random (Philox, bit-identical counters with the CPU)
     3. elementwise: unary, scalar affine, broadcasting binary
     4. reductions (sum, mean, max with argmax), sum of squares
     5. softmax / log_softmax
     6. layernorm
     7. embedding
     8. fused cross-entropy over a padded vocabulary
     9. causal self-attention
    10. matmul (cuBLASLt: fp32, tf32, bf16; bias epilogue)
    11. AdamW, fused over a flat parameter buffer
*/
#ifndef BT_KERNELS_CUH
#define BT_KERNELS_CUH
#include "bt_tensor.h"
#include <cuda_runtime.h>
#include <stdint.h>

/* ---- 1. context ---- */
BTDEF void bt_k_init(int device);            /* idempotent: creates handles for the device */
BTDEF cudaStream_t bt_k_stream(void);        /* the stream every op of the current device uses */
BTDEF void bt_k_set_stream(cudaStream_t s);  /* e.g. for graph capture */
BTDEF void bt_k_synchronize(void);
BTDEF int bt_k_device_count(void);           /* 0 when no GPU / no driver, never an error */

/* ---- 2. copy, cast, fill, random ---- */
/* dst (contiguous, ndim dims of `shape`) = src read through element strides; dtypes may differ. */
BTDEF void bt_k_copy_strided(bt_dtype dt_dst, void *dst, bt_dtype dt_src, const void *src,
                             int ndim, const int64_t *shape, const int64_t *src_strides, cudaStream_t s);
BTDEF void bt_k_cast(bt_dtype dt_dst, void *dst, bt_dtype dt_src, const void *src, int64_t n, cudaStream_t s);
BTDEF void bt_k_fill(bt_dtype dt, void *dst, double value, int64_t n, cudaStream_t s);
/* dst[i] = bt_philox_uniform(seed, offset + i) * (hi - lo) + lo, resp. normal(mean, std) */
BTDEF void bt_k_uniform(bt_dtype dt, void *dst, int64_t n, uint64_t seed, uint64_t offset, double lo, double hi, cudaStream_t s);
BTDEF void bt_k_normal(bt_dtype dt, void *dst, int64_t n, uint64_t seed, uint64_t offset, double mean, double std, cudaStream_t s);

/* ---- 3. elementwise ---- */
/* out = f(x); bt_unary_op is declared in bt_tensor.h (NEG, EXP, LOG, SQRT, TANH, RELU, GELU, ...). */
BTDEF void bt_k_unary(bt_unary_op op, bt_dtype dt, void *out, const void *x, int64_t n, cudaStream_t s);
/* gx = gout * f'(x), given x and y = f(x) (each kernel uses whichever is cheaper; y may be NULL
   for ops whose derivative does not need it). gx may alias gout. */
BTDEF void bt_k_unary_backward(bt_unary_op op, bt_dtype dt, void *gx, const void *gout, const void *x,
                               const void *y, int64_t n, cudaStream_t s);
/* out = alpha * x + beta */
BTDEF void bt_k_affine(bt_dtype dt, void *out, const void *x, double alpha, double beta, int64_t n, cudaStream_t s);
/* out (contiguous, `shape`) = a op b, a and b read through element strides (0 on broadcast dims);
   all three of dtype dt. out may alias a when a is contiguous of the same shape (in-place add). */
BTDEF void bt_k_binary(bt_binary_op op, bt_dtype dt, void *out, const void *a, const int64_t *a_strides,
                       const void *b, const int64_t *b_strides, int ndim, const int64_t *shape, cudaStream_t s);

/* ---- 4. reductions ---- */
/* in is [outer, r, inner] contiguous; out[o, i] = reduce_j in[o, j, i]. For BT_REDUCE_MAX, argmax
   (int32, may be NULL) receives j. Accumulation in fp32 (fp64 for BT_F64). */
BTDEF void bt_k_reduce(bt_reduce_op op, bt_dtype dt, void *out, int32_t *argmax, const void *in,
                       int64_t outer, int64_t r, int64_t inner, cudaStream_t s);
/* *out (one fp32 on the device) = sum_i x[i]^2, accumulated when accumulate != 0 */
BTDEF void bt_k_sumsq(bt_dtype dt, float *out, const void *x, int64_t n, int accumulate, cudaStream_t s);

/* ---- 5. softmax over the last dim of [rows, cols] ---- */
BTDEF void bt_k_softmax(bt_dtype dt, void *out, const void *x, int64_t rows, int64_t cols, int log, cudaStream_t s);
/* softmax: gx = y * (g - sum(g*y)); log_softmax: gx = g - exp(y) * sum(g) */
BTDEF void bt_k_softmax_backward(bt_dtype dt, void *gx, const void *gout, const void *y, int64_t rows,
                                 int64_t cols, int log, cudaStream_t s);

/* ---- 6. layernorm over the last dim C of [rows, C]; w, b of dtype dt; mean, rstd fp32 [rows] ---- */
BTDEF void bt_k_layernorm(bt_dtype dt, void *out, float *mean, float *rstd, const void *x, const void *w,
                          const void *b, int64_t rows, int64_t C, float eps, cudaStream_t s);
/* gx = (written, not accumulated); gw, gb accumulated (+=) in dtype dt; any may be NULL. */
BTDEF void bt_k_layernorm_backward(bt_dtype dt, void *gx, void *gw, void *gb, const void *gout, const void *x,
                                   const void *w, const float *mean, const float *rstd, int64_t rows, int64_t C,
                                   cudaStream_t s);

/* ---- 7. embedding: out[i, :] = table[idx[i], :], table [V, C] ---- */
/* idx out of [0, V) sets *bad (a device int, may be NULL) to 1 instead of reading out of bounds. */
BTDEF void bt_k_embedding(bt_dtype dt, void *out, const void *table, const int32_t *idx, int64_t n, int64_t C,
                          int64_t V, int *bad, cudaStream_t s);
/* gtable[v, :] += sum_{i: idx[i]=v} gout[i, :]. deterministic != 0: no float atomics (a sort of
   idx then a segmented sum), the same bits on every run. */
BTDEF void bt_k_embedding_backward(bt_dtype dt, void *gtable, const void *gout, const int32_t *idx, int64_t n,
                                   int64_t C, int64_t V, int deterministic, cudaStream_t s);

/* ---- 8. cross-entropy over logits [N, Vp] of which the first V columns are real ---- */
/* losses[i] = logsumexp(logits[i, :V]) - logits[i, t_i] (0 where t_i == ignore_index); lse[i] saved.
   A target outside [0, V) that is not ignore_index sets *bad to 1. */
BTDEF void bt_k_cross_entropy(bt_dtype dt, float *losses, float *lse, const void *logits, const int32_t *targets,
                              int64_t N, int64_t V, int64_t Vp, int ignore_index, int *bad, cudaStream_t s);
/* glogits[i, j] = gloss[i] * (softmax_j - [j == t_i]) for j < V, 0 for the padded columns and the
   ignored rows. gloss is fp32 [N] on the device (the upstream gradient per row). */
BTDEF void bt_k_cross_entropy_backward(bt_dtype dt, void *glogits, const void *logits, const float *lse,
                                       const int32_t *targets, const float *gloss, int64_t N, int64_t V,
                                       int64_t Vp, int ignore_index, cudaStream_t s);

/* ---- 9. causal attention: q, k, v, out [B, H, T, D]; lse fp32 [B, H, T] ---- */
/* out = softmax(q k^T * scale + causal mask) v */
BTDEF void bt_k_attention(bt_dtype dt, void *out, float *lse, const void *q, const void *k, const void *v,
                          int64_t B, int64_t H, int64_t T, int64_t D, float scale, cudaStream_t s);
BTDEF void bt_k_attention_backward(bt_dtype dt, void *gq, void *gk, void *gv, const void *gout, const void *q,
                                   const void *k, const void *v, const void *out, const float *lse, int64_t B,
                                   int64_t H, int64_t T, int64_t D, float scale, cudaStream_t s);

/* ---- 10. matmul: for b < batch, C_b = alpha * op(A_b) op(B_b) + beta * C_b (+ bias[n] on each row)
   op(A) is [M, K] (A stored [K, M] when transA), op(B) is [K, N] (B stored [N, K] when transB);
   row-major, contiguous within a matrix, matrices strideA/strideB/strideC elements apart.
   A, B, C, bias all of dtype dt. precision: BT_MATMUL_FP32 (no tensor cores), BT_MATMUL_TF32
   (fp32 data, tf32 tensor cores); bf16/f16 data always use tensor cores with fp32 accumulation. */
BTDEF void bt_k_matmul(bt_dtype dt, void *C, const void *A, const void *B, const void *bias, int64_t M, int64_t N,
                       int64_t K, int transA, int transB, int64_t batch, int64_t strideA, int64_t strideB,
                       int64_t strideC, float alpha, float beta, bt_matmul_precision precision, cudaStream_t s);

/* ---- 11. AdamW over n fp32 parameters with gradients g of dtype gdt:
   m = b1 m + (1-b1) g', v = b2 v + (1-b2) g'^2 with g' = g * grad_scale,
   p -= lr * (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * p).
   When p_lowp != NULL it also receives p cast to lowp_dt (the bf16 compute copy). */
BTDEF void bt_k_adamw(float *p, const void *g, bt_dtype gdt, float *m, float *v, void *p_lowp, bt_dtype lowp_dt,
                      int64_t n, float lr, float b1, float b2, float eps, float wd, int step,
                      const float *grad_scale, cudaStream_t s);

#endif /* BT_KERNELS_CUH */
