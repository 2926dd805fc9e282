/* bt_kernels.cuh - BluTrain-C CUDA kernels, v0.1: the device side of every op in bt_tensor.h.

   Included by bt_tensor.h's implementation when compiled by nvcc (BT_CUDA); it sees bt_tensor.h's
   declarations and its shared host/device code (the dtype list, the element loads and stores,
   the op list BT_UNARY_OPS, Philox). Every function here works on raw device pointers to
   contiguous row-major data, runs on the current CUDA device (bt_tensor.h's device guard sets
   it to the tensor's) and launches on the stream it is given; none allocates with cudaMalloc
   (scratch comes from bt_alloc on that stream) and none synchronizes with the host. Every
   launch and library call is checked; an error names the op (bt_error).

   Floating dtypes: BT_F32, BT_BF16 and BT_F16 everywhere (math in fp32 registers); BT_F64 for
   the elementwise, reduction and copy kernels. Index tensors are BT_I32.
   Device code is CUDA C++ used sparingly: templates instantiate a kernel per dtype and per op of
   the op list, and, where a tile shape or an MMA shape varies, per shape (the attention kernels).

   SECTIONS
     1. context: devices, stream stacks, cuBLASLt, checks
     2. copy, cast, fill, random (Philox, bit-identical counters with the CPU)
     3. elementwise: unary, scalar affine, broadcasting binary
     4. reductions (sum, mean, max with argmax), sum of squares
     5. softmax / log_softmax
     6. layernorm
     7. embedding
     8. fused cross-entropy over a padded vocabulary
     9. attention (causal or not; sm_80 kernels and an sm_90a wgmma path)
    10. matmul (cuBLASLt: fp32, tf32, bf16; epilogues: bias, residual add, GELU / dGELU, bias
        gradient; the fastest candidate timed per shape)
    11. AdamW, fused over a flat parameter buffer
    12. less common paths: strided-to-strided copy, max's backward scatter, a device-side count
        for the cross-entropy mean
*/
#ifndef BT_KERNELS_CUH
#define BT_KERNELS_CUH
#include "bt_tensor.h"
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>

/* ---- 1. context: devices, stream stacks ----
   Every bt_k_ function launches on the stream it is given and runs on the CURRENT CUDA device,
   which the caller sets (bt_tensor.h's device guard makes it the tensor's device). */
BTDEF int bt_k_device_count(void);                      /* 0 when no GPU / no driver, never an error */
BTDEF void bt_k_init(int device);                       /* idempotent: the device's stream and cuBLASLt handle */
/* The stream ops on `device` use: the top of its stream stack, else the device's own
   non-blocking stream. Push/pop nest (graph capture, communication and copy streams). */
BTDEF cudaStream_t bt_k_current_stream(int device);
BTDEF void bt_k_push_stream(int device, cudaStream_t s);
BTDEF void bt_k_pop_stream(int device);
/* forget what is cached for stream s (its matmul workspace): call before destroying s */
BTDEF void bt_k_forget_stream(int device, cudaStream_t s);
BTDEF void bt_k_synchronize(int device);                /* the host waits for the current stream */
/* destroys every device's stream, handle, matmul plans and workspaces; a later bt_k_ call starts again */
BTDEF void bt_k_shutdown(void);

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
/* out = f(x) for an op of bt_tensor.h's list BT_UNARY_OPS (NEG, EXP, ..., GELU, ...) */
BTDEF void bt_k_unary(bt_unary_op op, bt_dtype dt, void *out, const void *x, int64_t n, cudaStream_t s);
/* gx = gout * f'(x) (f' from x: recomputing f costs less than reading a saved y). gx may alias gout. */
BTDEF void bt_k_unary_backward(bt_unary_op op, bt_dtype dt, void *gx, const void *gout, const void *x, int64_t n,
                               cudaStream_t s);
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
/* acc[j] += sum_i in[i, j] for in [rows, cols] of dtype dt (f32/bf16/f16), acc fp32: a bias gradient
   added straight into an fp32 gradient buffer */
BTDEF void bt_k_sum_rows_acc(bt_dtype dt, float *acc, const void *in, int64_t rows, int64_t cols, cudaStream_t s);
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
/* gx written, or with gx_add != 0 added to (gx += dx: a residual stream's gradient, one rounding);
   gw, gb accumulated (+=) in dtype dt; any of the three may be NULL. gx_colsum (fp32 [C], may be
   NULL; needs gx) receives the column sums of the gx written: a residual stream's gradient is the
   next linear layer's output gradient, whose bias gradient is exactly that sum, so it costs no pass
   of its own. */
BTDEF void bt_k_layernorm_backward(bt_dtype dt, void *gx, int gx_add, void *gw, void *gb, float *gx_colsum, const void *gout,
                                   const void *x, const void *w, const float *mean, const float *rstd, int64_t rows, int64_t C,
                                   cudaStream_t s);

/* ---- 7. embedding: out[i, :] = table[idx[i], :], table [V, C] ---- */
/* idx out of [0, V) sets *bad (a device int, may be NULL) to 1 instead of reading out of bounds. */
BTDEF void bt_k_embedding(bt_dtype dt, void *out, const void *table, const int32_t *idx, int64_t n, int64_t C,
                          int64_t V, int *bad, cudaStream_t s);
/* gtable[v, :] += sum_{i: idx[i]=v} gout[i, :]. deterministic != 0: no float atomics (a sort of
   idx then a segmented sum), the same bits on every run. */
BTDEF void bt_k_embedding_backward(bt_dtype dt, void *gtable, const void *gout, const int32_t *idx, int64_t n,
                                   int64_t C, int64_t V, int deterministic, cudaStream_t s);
/* gtable[v, :] += scale sum_{i: idx[i]=v} gout[i, :] into an fp32 table whatever dt gout is (a leaf's
   fp32 gradient: no [V, C] temporary, no cast and add of the whole table afterwards) */
BTDEF void bt_k_embedding_backward_f32(bt_dtype dt, float *gtable, const void *gout, const int32_t *idx, int64_t n,
                                       int64_t C, int64_t V, float scale, int deterministic, cudaStream_t s);

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
/* Both in one pass, in place: losses (and lse, when not NULL) as bt_k_cross_entropy, then logits
   overwritten by glogits as bt_k_cross_entropy_backward. Traffic: the V logits read once and the
   Vp written once per row (the two kernels: V read, then V read and Vp written). */
BTDEF void bt_k_cross_entropy_fused(bt_dtype dt, float *losses, float *lse, void *logits, const int32_t *targets,
                                    const float *gloss, int64_t N, int64_t V, int64_t Vp, int ignore_index, int *bad,
                                    cudaStream_t s);

/* ---- 9. attention, causal or not (tiled, online softmax; no T x T scratch) ----
   out = softmax(q k^T * scale + mask) v, lse = the log-sum-exp of each row (saved for the
   backward). causal = 1 hides key j from query i for j > i (GPT-2); causal = 0 lets every query
   see every key (a ring-attention block off the diagonal). scale > 0.
   q, k, v, out (and gq, gk, gv, gout) are [B, H, T, D] read/written through element
   strides {batch, head, token} (the D stride is 1): a view of a [B, T, H, D] buffer has strides
   {T*H*D, D, H*D}. lse fp32 [B, H, T] contiguous. D from 1 to 128. precision (as for matmul):
   f32 data with BT_MATMUL_FP32 is computed with fp32 FFMA (no TF32), with BT_MATMUL_TF32 on TF32
   tensor cores (fp32 accumulation and softmax); bf16/f16 always on tensor cores with fp32
   accumulation (precision ignored). The backward is deterministic (no atomics) and takes Dvec
   scratch (4 B H T bytes) from bt_alloc on the stream; the strict-fp32 backward also takes its dS
   (64 x 64 fp32 tiles: about 2 T^2 bytes per head causal, 4 T^2 not), over chunks of heads
   that keep it under bt_k_attention_scratch_cap (512 MiB by default). On an H100 (sm_90a build)
   bf16/f16 with D 64 or 128 run on warpgroup-MMA kernels (bt_k_attention_hopper). */
BTDEF void bt_k_attention_strided(bt_dtype dt, void *out, const int64_t *so, float *lse,
    const void *q, const int64_t *sq, const void *k, const int64_t *sk, const void *v, const int64_t *sv,
    int64_t B, int64_t H, int64_t T, int64_t D, float scale, int causal, bt_matmul_precision precision, cudaStream_t s);
BTDEF void bt_k_attention_backward_strided(bt_dtype dt, void *gq, const int64_t *sgq, void *gk, const int64_t *sgk,
    void *gv, const int64_t *sgv, const void *gout, const int64_t *sgo, const void *q, const int64_t *sq,
    const void *k, const int64_t *sk, const void *v, const int64_t *sv, const void *out, const int64_t *so,
    const float *lse, int64_t B, int64_t H, int64_t T, int64_t D, float scale, int causal,
    bt_matmul_precision precision, cudaStream_t s);
/* the backward, and the column sums of gq, gk and gv too when the kernel can give them in its own pass
   (the fused Hopper backward: causal, bf16/f16, D 64): colsum (fp32 [3, H, D]) gets, for part q / k /
   v, head h and column d, the sum over b and t of that gradient (before its rounding): the bias
   gradient of a packed qkv projection. Returns 1 when it wrote colsum, 0 when not (untouched). */
BTDEF int bt_k_attention_backward_colsum(bt_dtype dt, void *gq, const int64_t *sgq, void *gk, const int64_t *sgk,
    void *gv, const int64_t *sgv, const void *gout, const int64_t *sgo, const void *q, const int64_t *sq,
    const void *k, const int64_t *sk, const void *v, const int64_t *sv, const void *out, const int64_t *so,
    const float *lse, int64_t B, int64_t H, int64_t T, int64_t D, float scale, int causal,
    bt_matmul_precision precision, float *colsum, cudaStream_t s);
/* the Hopper path (wgmma kernels, used on a compute capability 9.0 device by an sm_90a build for
   bf16 / f16 with D 64 or 128 and 16-byte aligned rows): on = 1 allows it (the default), 0 keeps
   every call on the sm_80 kernels, -1 only asks. Returns the setting before (bit 0), plus 2 when
   the current device can run the wgmma kernels (3: they run). */
BTDEF int bt_k_attention_hopper(int on);
/* sets the strict-fp32 backward's dS scratch cap (bytes; 0 only asks) and returns the one before */
BTDEF size_t bt_k_attention_scratch_cap(size_t bytes);
/* the same on contiguous [B, H, T, D] tensors (strides {H*T*D, T*D, D}), precision BT_MATMUL_FP32 */
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
/* The same with C (and the bias) of dtype dt_c: dt_c == dt, or bf16/f16 operands into an fp32 C
   (a weight gradient added with beta = 1 straight into an fp32 gradient buffer). */
/* Autotuning (timing cuBLASLt's candidates on a shape's first use) on or off; off, or with
   BT_MATMUL_AUTOTUNE=0, the heuristic's first pick: the same bits on every run. The choices made on
   a device export as bytes (the size needed is returned; buf may be NULL) and import into another
   run, which then picks the same algorithms (a resumed run must compute like the one it resumes). */
BTDEF void bt_k_matmul_set_autotune(int on);
BTDEF size_t bt_k_matmul_tuning_export(int device, void *buf, size_t cap);
BTDEF void bt_k_matmul_tuning_import(int device, const void *buf, size_t n);
BTDEF void bt_k_matmul_out(bt_dtype dt, bt_dtype dt_c, void *C, const void *A, const void *B, const void *bias, int64_t M,
                           int64_t N, int64_t K, int transA, int transB, int64_t batch, int64_t strideA, int64_t strideB,
                           int64_t strideC, float alpha, float beta, bt_matmul_precision precision, cudaStream_t s);
/* D = op(A) op(B) + bias[n] + R ([M, N], batch 1, dtype dt; bias may be NULL; R may be D): a linear
   layer and the residual add after it in one pass, R entering as cuBLASLt's C with beta = 1
   (traffic: the product's plus R read once, instead of a separate add's 2 reads and a write). */
BTDEF void bt_k_matmul_add(bt_dtype dt, void *D, const void *A, const void *B, const void *bias, const void *R, int64_t M, int64_t N,
                           int64_t K, int transA, int transB, bt_matmul_precision precision, cudaStream_t s);
/* One product C = op(A) op(B) + beta C ([M, N], batch 1, alpha 1) with a cuBLASLt epilogue fused in:
     BT_K_EPI_GELU_AUX_BIAS  C = gelu(op(A) op(B) + vec[n]) (GPT-2's tanh form); aux [M, N] <- the
                             pre-activation (dtype dt_c, for the backward). beta must be 0.
     BT_K_EPI_DGELU_BGRAD    C = (op(A) op(B)) * gelu'(aux[m, n]); vec[n] <- sum over m of that C.
                             beta must be 0.
     BT_K_EPI_BGRADB         C = op(A) op(B) + beta C; vec[m] <- sum over k of op(A)[m, k] (the bias
                             gradient of a weight gradient dW = dY^T X: column sums of dY).
     BT_K_EPI_DGELU          C = (op(A) op(B)) * gelu'(aux[m, n]); vec unused. beta must be 0.
   vec and aux are of dtype dt_c, vec written, never accumulated. Measured on an H100 (bench
   rows in bench/RESULTS.md) at GPT-2's MLP shape: DGELU_BGRAD ran at 20% of the bf16 product
   rate, slower than the product plus separate kernels, so bt_mlp_gelu uses DGELU and takes the
   bias gradient from the next GEMM's BGRADB. Returns 1 when it ran, 0 when cuBLASLt offers no
   algorithm for it (then nothing was written and the caller does the work by other means); the
   answer is cached with the plan. */
typedef enum { BT_K_EPI_NONE, BT_K_EPI_BIAS, BT_K_EPI_GELU_AUX_BIAS, BT_K_EPI_DGELU_BGRAD, BT_K_EPI_BGRADB, BT_K_EPI_DGELU } bt_k_epilogue;
BTDEF int bt_k_matmul_epi(bt_dtype dt, bt_dtype dt_c, void *C, const void *A, const void *B, int64_t M, int64_t N, int64_t K,
                          int transA, int transB, float beta, bt_k_epilogue epi, void *vec, void *aux,
                          bt_matmul_precision precision, cudaStream_t s);

/* ---- 11. AdamW over n fp32 parameters with gradients g of dtype gdt:
   m = b1 m + (1-b1) g', v = b2 v + (1-b2) g'^2 with g' = g * grad_scale (a device scalar, or NULL),
   p -= lr * (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + wd * p).
   The weight decay is wd for every element, or, when runs != NULL, given per run of elements:
   run k covers [runs[k-1].end, runs[k].end) (from 0; the last end is n) with decay runs[k].wd;
   the table (nruns entries) lives in device memory, so a flat buffer of many parameters with
   different decays is one launch. */
typedef struct { int64_t end; float wd; } bt_k_decay_run;
BTDEF void bt_k_adamw(float *p, const void *g, bt_dtype gdt, float *m, float *v, int64_t n, float lr, float b1, float b2,
                      float eps, float wd, const bt_k_decay_run *runs, int nruns, int step, const float *grad_scale,
                      cudaStream_t s);

/* ---- 12. less common paths ---- */
/* y += a[0] x, fp32, a a device scalar (a gradient scaled by the upstream one, added into a buffer) */
BTDEF void bt_k_axpy_f32(float *y, const float *a, const float *x, int64_t n, cudaStream_t s);
/* dst = src elementwise, both read/written through element strides (a write into a view) */
BTDEF void bt_k_copy_general(bt_dtype dt_dst, void *dst, const int64_t *dst_strides, bt_dtype dt_src, const void *src,
                             const int64_t *src_strides, int ndim, const int64_t *shape, cudaStream_t s);
/* gx[o, argmax[o, i], i] = g[o, i] for gx [outer, r, inner] (already zeroed): max's backward */
BTDEF void bt_k_scatter_rows(bt_dtype dt, void *gx, const void *g, const int32_t *argmax, int64_t outer, int64_t r,
                             int64_t inner, cudaStream_t s);
/* *out = 1 / max(1, #{i : x[i] != value}): a mean that skips ignored targets, with no host sync */
BTDEF void bt_k_inv_count_ne(float *out, const int32_t *x, int64_t n, int value, cudaStream_t s);

#endif /* BT_KERNELS_CUH */

/* ==============================================================================================
   IMPLEMENTATION
   ============================================================================================== */
#ifdef BT_KERNELS_IMPLEMENTATION
#ifndef BT_KERNELS_IMPLEMENTATION_DONE
#define BT_KERNELS_IMPLEMENTATION_DONE
#include <cuda.h>   /* CUtensorMap and its enums (types only: the encoder is found at run time, nothing links libcuda) */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <stdio.h>
#include <string.h>
#include <math.h>

/* ---- 1. context: devices, stream stacks, cuBLASLt, checks -------------------------------------
   One record per device, made on first use: its own non-blocking stream, a stack of streams a
   caller pushed, a cuBLASLt handle and the matmul plan cache (plans describe shapes, not streams,
   so one cache serves every stream of the device), and a 32 MiB cuBLASLt workspace per stream
   (two streams running matmuls at once must not share one), from bt_alloc on that stream. Work
   on a device is issued from one host thread at a time (the plan cache is not locked). */
#define BT__K_WS_BYTES ((size_t)32 << 20)
#define BT__K_MM_SLOTS 256                       /* matmul plan cache entries per device */
#ifndef BT__K_MM_CANDIDATES
#define BT__K_MM_CANDIDATES 6                    /* cuBLASLt algorithms timed per new shape */
#endif
#define BT__K_MAX_STACK 16                       /* pushed streams per device */
#define BT__K_MAX_WS 16                          /* streams with a matmul workspace per device */

typedef struct {
    int used;
    int64_t key[18];
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    int epi_bias;                                 /* 1: the bias epilogue is in the plan */
    int no_algo;                                  /* 1: cuBLASLt has none for this key's epilogue (no descriptors held) */
    int n_cand;                                   /* candidates left to time (autotuning) */
    cublasLtMatmulAlgo_t cand[BT__K_MM_CANDIDATES];
} bt__k_mm_plan;

typedef struct {
    int init;
    cudaStream_t stream;                          /* the device's own */
    cudaStream_t stack[BT__K_MAX_STACK];
    int depth;
    cublasLtHandle_t lt;
    struct { cudaStream_t s; void *ws; } ws[BT__K_MAX_WS];
    int n_ws;
    int sm_count;
    bt__k_mm_plan mm[BT__K_MM_SLOTS];
} bt__k_ctx;
static bt__k_ctx bt__k_ctxs[BT_MAX_GPUS];

#define BT__K_CUDA(call, op) do { cudaError_t e__ = (call); if (e__ != cudaSuccess) \
    bt_error("%s: %s failed: %s (%s)", op, #call, cudaGetErrorString(e__), cudaGetErrorName(e__)); } while (0)
/* after every launch: a bad configuration shows here, a fault in the kernel at the next check */
#define BT__K_LAUNCHED(op) BT__K_CUDA(cudaGetLastError(), op)
#define BT__K_BLAS(call, op) do { cublasStatus_t s__ = (call); if (s__ != CUBLAS_STATUS_SUCCESS) \
    bt_error("%s: %s failed: %s", op, #call, cublasGetStatusString(s__)); } while (0)

BTDEF int bt_k_device_count(void) {
    static int n = -1;                            /* fixed for the life of the process */
    if (n < 0 && cudaGetDeviceCount(&n) != cudaSuccess) { (void)cudaGetLastError(); n = 0; }
    return n;
}

static bt__k_ctx *bt__k_ctx_of(int device) {
    if (device < 0 || device >= BT_MAX_GPUS || device >= bt_k_device_count())
        bt_error("bt_kernels: no CUDA device %d (%d present)", device, bt_k_device_count());
    bt__k_ctx *c = &bt__k_ctxs[device];
    if (!c->init) bt_k_init(device);
    return c;
}
BTDEF void bt_k_init(int device) {
    if (device < 0 || device >= BT_MAX_GPUS || device >= bt_k_device_count())
        bt_error("bt_k_init: no CUDA device %d (%d present)", device, bt_k_device_count());
    bt__k_ctx *c = &bt__k_ctxs[device];
    if (c->init) return;
    int prev = 0;
    BT__K_CUDA(cudaGetDevice(&prev), "bt_k_init");
    BT__K_CUDA(cudaSetDevice(device), "bt_k_init");
    memset(c, 0, sizeof *c);
    BT__K_CUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "bt_k_init");
    BT__K_CUDA(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, device), "bt_k_init");
    BT__K_BLAS(cublasLtCreate(&c->lt), "bt_k_init");
    c->init = 1;
    BT__K_CUDA(cudaSetDevice(prev), "bt_k_init");
}
/* the current device's record: the device a bt_k_ function runs on */
static int bt__k_device(void) { int d = 0; BT__K_CUDA(cudaGetDevice(&d), "bt_kernels"); return d; }
static bt__k_ctx *bt__k_cur(void) { return bt__k_ctx_of(bt__k_device()); }

BTDEF cudaStream_t bt_k_current_stream(int device) {
    bt__k_ctx *c = bt__k_ctx_of(device);
    return c->depth ? c->stack[c->depth - 1] : c->stream;
}
BTDEF void bt_k_push_stream(int device, cudaStream_t s) {
    bt__k_ctx *c = bt__k_ctx_of(device);
    if (c->depth == BT__K_MAX_STACK) bt_error("bt_k_push_stream: more than %d streams pushed on cuda:%d", BT__K_MAX_STACK, device);
    c->stack[c->depth++] = s;
}
BTDEF void bt_k_pop_stream(int device) {
    bt__k_ctx *c = bt__k_ctx_of(device);
    if (!c->depth) bt_error("bt_k_pop_stream: no stream pushed on cuda:%d", device);
    c->depth--;
}
BTDEF void bt_k_synchronize(int device) {
    cudaStream_t s = bt_k_current_stream(device);
    BT__K_CUDA(cudaStreamSynchronize(s), "bt_k_synchronize");
    BT__K_CUDA(cudaGetLastError(), "bt_k_synchronize");
}
/* the cuBLASLt workspace of stream s on the current device */
static void *bt__k_workspace(bt__k_ctx *c, cudaStream_t s) {
    for (int i = 0; i < c->n_ws; i++) if (c->ws[i].s == s) return c->ws[i].ws;
    if (c->n_ws == BT__K_MAX_WS)
        bt_error("bt_k_matmul: matmuls on more than %d streams of one device (bt_k_forget_stream frees a slot)", BT__K_MAX_WS);
    c->ws[c->n_ws].s = s;
    c->ws[c->n_ws].ws = bt_alloc(bt_cuda_device(bt__k_device()), BT__K_WS_BYTES, (void *)s);
    return c->ws[c->n_ws++].ws;
}
BTDEF void bt_k_forget_stream(int device, cudaStream_t s) {
    bt__k_ctx *c = bt__k_ctx_of(device);
    for (int i = 0; i < c->n_ws; i++)
        if (c->ws[i].s == s) {
            BT__K_CUDA(cudaStreamSynchronize(s), "bt_k_forget_stream");   /* the workspace may still be in use */
            bt_free(c->ws[i].ws);
            c->ws[i] = c->ws[--c->n_ws];
            return;
        }
}

static void bt__k_mm_plan_drop(bt__k_mm_plan *p) {
    if (!p->used) return;
    if (p->no_algo) { p->used = 0; p->no_algo = 0; return; }
    cublasLtMatrixLayoutDestroy(p->la); cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc); cublasLtMatmulDescDestroy(p->op);
    p->used = 0;
}

BTDEF void bt_k_shutdown(void) {
    int prev = 0;
    if (cudaGetDevice(&prev) != cudaSuccess) { (void)cudaGetLastError(); return; }
    for (int d = 0; d < BT_MAX_GPUS; d++) {
        bt__k_ctx *c = &bt__k_ctxs[d];
        if (!c->init) continue;
        BT__K_CUDA(cudaSetDevice(d), "bt_k_shutdown");
        BT__K_CUDA(cudaDeviceSynchronize(), "bt_k_shutdown");
        for (int i = 0; i < BT__K_MM_SLOTS; i++) bt__k_mm_plan_drop(&c->mm[i]);
        for (int i = 0; i < c->n_ws; i++) bt_free(c->ws[i].ws);
        cublasLtDestroy(c->lt);
        BT__K_CUDA(cudaStreamDestroy(c->stream), "bt_k_shutdown");
        memset(c, 0, sizeof *c);
    }
    BT__K_CUDA(cudaSetDevice(prev), "bt_k_shutdown");
}

/* blocks for a grid-stride loop over `work` items: enough to fill the chip, no more */
static unsigned bt__k_blocks(int64_t work, int threads) {
    int64_t b = (work + threads - 1) / threads, cap = (int64_t)bt__k_cur()->sm_count * 16;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}
static int bt__k_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }
static void *bt__k_scratch(size_t nbytes, cudaStream_t s) {
    return bt_alloc(bt_cuda_device(bt__k_device()), nbytes, (void *)s);
}

/* ---- device-side type helpers: storage type T, math in A = float (double for f64) ---- */
template <typename T> struct bt__k_acc { typedef float t; };
template <> struct bt__k_acc<double> { typedef double t; };
__device__ __forceinline__ float bt__k_tof(float x) { return x; }
__device__ __forceinline__ double bt__k_tof(double x) { return x; }
__device__ __forceinline__ float bt__k_tof(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float bt__k_tof(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T bt__k_from(typename bt__k_acc<T>::t x);
template <> __device__ __forceinline__ float bt__k_from<float>(float x) { return x; }
template <> __device__ __forceinline__ double bt__k_from<double>(double x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 bt__k_from<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half bt__k_from<__half>(float x) { return __float2half_rn(x); }
/* 16-byte vector access: V = 16 / sizeof(T) elements; the caller checked the alignment */
template <typename T> __device__ __forceinline__ void bt__k_ld16(T *v, const T *p) {
    uint4 u = __ldg(reinterpret_cast<const uint4 *>(p)); memcpy(v, &u, 16);
}
template <typename T> __device__ __forceinline__ void bt__k_st16(T *p, const T *v) {
    uint4 u; memcpy(&u, v, 16); *reinterpret_cast<uint4 *>(p) = u;
}
/* 16-byte asynchronous copy global -> shared (sm_80+, through L2 only), in commit groups; the
   issuing thread sees the data after its wait, the others after a barrier that follows it */
__device__ __forceinline__ void bt__k_cp16(void *sdst, const void *gsrc) {
    unsigned a = (unsigned)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gsrc) : "memory");
}
__device__ __forceinline__ void bt__k_cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void bt__k_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
/* mbarriers (shared::cta): a phase completes when its arrivals (and, for bulk copies, its expected
   bytes) are in; waiters poll the phase's parity */
__device__ __forceinline__ void bt__k_mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void bt__k_mbar_wait(uint32_t bar, int parity) {
    uint32_t done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}
__device__ __forceinline__ void bt__k_mbar_arrive(uint32_t bar) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }\n" ::"r"(bar) : "memory");
}
/* shared memory handed between the generic proxy (threads, cp.async) and the async proxy (the
   tensor cores, bulk copies): after generic writes before async reads, or generic reads before
   async writes */
__device__ __forceinline__ void bt__k_fence_async(void) { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* sm_90: one bulk copy of `bytes` (a multiple of 16) global -> shared by the copy engine, no thread
   waits for it; the mbarrier's phase completes when the bytes have landed (this call is its one
   arrival) */
__device__ __forceinline__ void bt__k_bulk_load(uint32_t sdst, const void *gsrc, uint32_t bytes, uint32_t bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(sdst),
                 "l"(gsrc), "r"(bytes), "r"(bar) : "memory");
}
/* sm_90: the box of 4-d tensor map `map` (a __grid_constant__ parameter's address) at coordinates c0 ..
   c3 into shared memory by the tensor memory accelerator (zeros where the box leaves the tensor);
   its bytes count toward the mbarrier's expected ones (bt__k_mbar_expect, once for all of a phase's boxes) */
__device__ __forceinline__ void bt__k_tma_load4(uint32_t sdst, const void *map, int c0, int c1, int c2, int c3, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
                 ::"r"(sdst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar) : "memory");
}
__device__ __forceinline__ void bt__k_mbar_expect(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ float bt__k_wsum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double bt__k_wsum(double v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* sum over a 1-D block (blockDim.x a multiple of 32, <= 1024); every thread gets the total */
template <typename A> __device__ A bt__k_bsum(A v, A *sh /* 32 */) {
    v = bt__k_wsum(v);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < nw ? sh[l] : (A)0;
    return bt__k_wsum(v);
}
/* sum over the threads of one row: one warp (blockDim.x == 32) or the whole block (blockDim.y == 1) */
__device__ __forceinline__ float bt__k_rsum(float v, float *sh) {
    if (blockDim.x == 32) return bt__k_wsum(v);
    return bt__k_bsum<float>(v, sh);
}
/* merge two online-softmax states (max m, sum of exp(x - m) s) */
__device__ __forceinline__ void bt__k_ms_merge(float &m, float &s, float m2, float s2) {
    float M = fmaxf(m, m2);
    if (M == -INFINITY) { s = 0.f; m = M; return; }
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}
__device__ __forceinline__ void bt__k_ms_add(float &m, float &s, float x) {
    if (x > m) { s = s * expf(m - x) + 1.f; m = x; }
    else if (m > -INFINITY) s += expf(x - m);
}
__device__ void bt__k_rms(float &m, float &s, float *sh /* 64 */) {
    for (int o = 16; o; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        bt__k_ms_merge(m, s, m2, s2);
    }
    if (blockDim.x == 32) return;
    int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (l == 0) { sh[w] = m; sh[32 + w] = s; }
    __syncthreads();
    m = l < nw ? sh[l] : -INFINITY; s = l < nw ? sh[32 + l] : 0.f;
    for (int o = 16; o; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        bt__k_ms_merge(m, s, m2, s2);
    }
}

/* runtime dtype dispatch: binds T to the storage type of dt and runs the statement */
#define BT__K_CASE(DT, TYPE, ...) case DT: { typedef TYPE T; __VA_ARGS__; } break;
#define BT__K_DISPATCH3(dt, opname, ...) switch (dt) { \
    BT__K_CASE(BT_F32, float, __VA_ARGS__) BT__K_CASE(BT_BF16, __nv_bfloat16, __VA_ARGS__) \
    BT__K_CASE(BT_F16, __half, __VA_ARGS__) \
    default: bt_error("%s: dtype %s not supported (f32, bf16, f16)", opname, bt_dtype_name(dt)); }
#define BT__K_DISPATCH4(dt, opname, ...) switch (dt) { \
    BT__K_CASE(BT_F32, float, __VA_ARGS__) BT__K_CASE(BT_BF16, __nv_bfloat16, __VA_ARGS__) \
    BT__K_CASE(BT_F16, __half, __VA_ARGS__) BT__K_CASE(BT_F64, double, __VA_ARGS__) \
    default: bt_error("%s: dtype %s not supported (f32, f64, bf16, f16)", opname, bt_dtype_name(dt)); }

/* ---- 2. copy, cast, fill, random ---------------------------------------------------------------
   Memory-bound: each element is read once (size of the source dtype) and written once (size of
   the destination). Loads and stores go through bt_tensor.h's bt__ld / bt__st (a runtime dtype
   switch in double, exact for every dtype here except i64 beyond 2^53; bf16/f16 rounded from
   fp32), the very functions of the CPU path, so a conversion gives the same bits on both sides
   (same-dtype contiguous copies use cudaMemcpyAsync and never convert). The strided copy decodes an index per element (div/mod per dim, after
   merging dims that are contiguous with each other on the host). */
typedef struct { int ndim; int64_t shape[BT_MAX_DIMS], sa[BT_MAX_DIMS], sb[BT_MAX_DIMS]; } bt__k_geom;

__global__ void bt__k_cast_kernel(int dtd, void *dst, int dts, const void *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        bt__st(dst, (bt_dtype)dtd, i, bt__ld(src, (bt_dtype)dts, i));
}
__global__ void bt__k_copy_strided_kernel(int dtd, void *dst, int dts, const void *src, bt__k_geom g, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, off = 0;
        for (int d = g.ndim - 1; d >= 0; d--) {
            int64_t q = rem / g.shape[d];
            off += (rem - q * g.shape[d]) * g.sa[d];
            rem = q;
        }
        bt__st(dst, (bt_dtype)dtd, i, bt__ld(src, (bt_dtype)dts, off));
    }
}
/* Drop size-1 dims and merge dim d into d+1 where every operand steps through them as one. */
static int bt__k_coalesce(int ndim, const int64_t *shape, const int64_t *sa, const int64_t *sb, bt__k_geom *g) {
    int k = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        if (k > 0 && g->sa[k - 1] == sa[d] * shape[d] && (!sb || g->sb[k - 1] == sb[d] * shape[d])) {
            g->shape[k - 1] *= shape[d]; g->sa[k - 1] = sa[d]; if (sb) g->sb[k - 1] = sb[d];
            continue;
        }
        g->shape[k] = shape[d]; g->sa[k] = sa[d]; g->sb[k] = sb ? sb[d] : 0; k++;
    }
    g->ndim = k;
    return k;
}

BTDEF void bt_k_cast(bt_dtype dt_dst, void *dst, bt_dtype dt_src, const void *src, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    if (!bt_dtype_size(dt_dst) || !bt_dtype_size(dt_src)) bt_error("bt_k_cast: bad dtype %d -> %d", (int)dt_src, (int)dt_dst);
    if (dt_dst == dt_src) {
        BT__K_CUDA(cudaMemcpyAsync(dst, src, (size_t)n * bt_dtype_size(dt_dst), cudaMemcpyDeviceToDevice, s), "bt_k_cast");
        return;
    }
    bt__k_cast_kernel<<<bt__k_blocks(n, 256), 256, 0, s>>>((int)dt_dst, dst, (int)dt_src, src, n);
    BT__K_LAUNCHED("bt_k_cast");
}

BTDEF void bt_k_copy_strided(bt_dtype dt_dst, void *dst, bt_dtype dt_src, const void *src, int ndim,
                             const int64_t *shape, const int64_t *src_strides, cudaStream_t s) {
    if (ndim < 0 || ndim > BT_MAX_DIMS) bt_error("bt_k_copy_strided: %d dims (at most %d)", ndim, BT_MAX_DIMS);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (n <= 0) return;
    bt__k_geom g;
    int k = bt__k_coalesce(ndim, shape, src_strides, NULL, &g);
    if (k == 0 || (k == 1 && g.sa[0] == 1)) { bt_k_cast(dt_dst, dst, dt_src, src, n, s); return; }
    bt__k_copy_strided_kernel<<<bt__k_blocks(n, 256), 256, 0, s>>>((int)dt_dst, dst, (int)dt_src, src, g, n);
    BT__K_LAUNCHED("bt_k_copy_strided");
}

__global__ void bt__k_fill_kernel(int dt, void *dst, double v, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        bt__st(dst, (bt_dtype)dt, i, v);
}
BTDEF void bt_k_fill(bt_dtype dt, void *dst, double value, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    if (!bt_dtype_size(dt)) bt_error("bt_k_fill: bad dtype %d", (int)dt);
    if (value == 0.0 && !signbit(value)) {   /* +0 is all-zero bits in every dtype */
        BT__K_CUDA(cudaMemsetAsync(dst, 0, (size_t)n * bt_dtype_size(dt), s), "bt_k_fill");
        return;
    }
    bt__k_fill_kernel<<<bt__k_blocks(n, 256), 256, 0, s>>>((int)dt, dst, value, n);
    BT__K_LAUNCHED("bt_k_fill");
}

/* Philox: element i is bt_philox_uniform/normal(seed, offset + i), computed in double exactly as on
   the CPU (no contraction of a*b+c into an fma), then rounded to dt. Writes n elements, reads none. */
__global__ void bt__k_random_kernel(int dt, void *dst, int64_t n, uint64_t seed, uint64_t offset, double a, double b,
                                    int normal) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double r = normal ? bt_philox_normal(seed, offset + (uint64_t)i) : bt_philox_uniform(seed, offset + (uint64_t)i);
        bt__st(dst, (bt_dtype)dt, i, __dadd_rn(__dmul_rn(r, a), b));
    }
}
BTDEF void bt_k_uniform(bt_dtype dt, void *dst, int64_t n, uint64_t seed, uint64_t offset, double lo, double hi, cudaStream_t s) {
    if (n <= 0) return;
    if (!bt_dtype_is_float(dt)) bt_error("bt_k_uniform: dtype %s is not floating", bt_dtype_name(dt));
    bt__k_random_kernel<<<bt__k_blocks(n, 256), 256, 0, s>>>((int)dt, dst, n, seed, offset, hi - lo, lo, 0);
    BT__K_LAUNCHED("bt_k_uniform");
}
BTDEF void bt_k_normal(bt_dtype dt, void *dst, int64_t n, uint64_t seed, uint64_t offset, double mean, double std, cudaStream_t s) {
    if (n <= 0) return;
    if (!bt_dtype_is_float(dt)) bt_error("bt_k_normal: dtype %s is not floating", bt_dtype_name(dt));
    bt__k_random_kernel<<<bt__k_blocks(n, 256), 256, 0, s>>>((int)dt, dst, n, seed, offset, std, mean, 1);
    BT__K_LAUNCHED("bt_k_normal");
}

/* ---- 3. elementwise ----------------------------------------------------------------------------
   unary: out = f(x); 1 read + 1 write per element (2n or 4n bytes for bf16/f32, 8n for f64).
   GELU is the tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with
   d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
   backward: gx = gout * f'(x): 2 reads + 1 write per element. The derivative is taken from x
   (recomputing exp/tanh costs less than reading y); from y only when x is NULL.
   affine: out = alpha x + beta. binary: out = a op b, 2 reads + 1 write when nothing broadcasts.
   Contiguous operands 16-byte aligned move in 16-byte vectors (4 f32 / 8 bf16 per access). */
/* f(x) and f'(x) of the op list (bt_tensor.h's BT_UNARY_OPS), in the accumulation type A */
template <int OP, typename A> __device__ __forceinline__ A bt__k_uop(A x) {
    typedef A bt_op_t;
    switch (OP) {
#define BT__X(N, n, f, df) case BT_UOP_##N: return f;
    BT_UNARY_OPS(BT__X)
#undef BT__X
    }
    return x;
}
template <int OP, typename A> __device__ __forceinline__ A bt__k_uop_grad(A x) {
    typedef A bt_op_t;
    switch (OP) {
#define BT__X(N, n, f, df) case BT_UOP_##N: { A y = f; (void)y; return df; }
    BT_UNARY_OPS(BT__X)
#undef BT__X
    }
    return x;
}

/* The flat elementwise kernels are one loop: out[i] = f(x[i]) (NIN 1) or f(x[i], y[i]) (NIN 2) in the
   accumulation type, grid-stride over 16-byte vectors first when vec != 0 (V lanes unrolled in
   registers), then the scalar tail. f is a functor; the ops below are its instances. */
template <typename T, int NIN, typename F>
__global__ void bt__k_map(T *out, const T *x, const T *y, int64_t n, int vec, F f) {
    const int V = 16 / sizeof(T);
    int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, st = (int64_t)gridDim.x * blockDim.x;
    int64_t nv = vec ? n / V : 0;
    for (int64_t c = tid; c < nv; c += st) {
        T a[V], b[V];
        bt__k_ld16(a, x + c * V);
        if (NIN == 2) bt__k_ld16(b, y + c * V);
#pragma unroll
        for (int e = 0; e < V; e++) a[e] = bt__k_from<T>(f(bt__k_tof(a[e]), bt__k_tof(NIN == 2 ? b[e] : a[e])));
        bt__k_st16(out + c * V, a);
    }
    for (int64_t i = nv * V + tid; i < n; i += st) out[i] = bt__k_from<T>(f(bt__k_tof(x[i]), bt__k_tof(NIN == 2 ? y[i] : x[i])));
}
template <typename T, int NIN, typename F>
static void bt__k_map_run(T *out, const T *x, const T *y, int64_t n, int vec, F f, cudaStream_t s) {
    const int V = 16 / sizeof(T);
    bt__k_map<T, NIN, F><<<bt__k_blocks(vec ? (n + V - 1) / V : n, 256), 256, 0, s>>>(out, x, y, n, vec, f);
}
template <int OP> struct bt__k_uop_f {
    template <typename A> __device__ __forceinline__ A operator()(A x, A) const { return bt__k_uop<OP, A>(x); }
};
template <int OP> struct bt__k_uop_grad_f {   /* gx = g f'(x) */
    template <typename A> __device__ __forceinline__ A operator()(A g, A x) const { return g * bt__k_uop_grad<OP, A>(x); }
};

template <typename T>
static void bt__k_unary_t(bt_unary_op op, T *out, const T *x, int64_t n, int vec, cudaStream_t s) {
    switch (op) {
#define BT__X(N, nm, f, df) case BT_UOP_##N: bt__k_map_run<T, 1>(out, x, x, n, vec, bt__k_uop_f<BT_UOP_##N>(), s); break;
    BT_UNARY_OPS(BT__X)
#undef BT__X
    default: bt_error("bt_k_unary: unknown op %d", (int)op);
    }
}
template <typename T>
static void bt__k_unary_bwd_t(bt_unary_op op, T *gx, const T *g, const T *x, int64_t n, int vec, cudaStream_t s) {
    switch (op) {
#define BT__X(N, nm, f, df) case BT_UOP_##N: bt__k_map_run<T, 2>(gx, g, x, n, vec, bt__k_uop_grad_f<BT_UOP_##N>(), s); break;
    BT_UNARY_OPS(BT__X)
#undef BT__X
    default: bt_error("bt_k_unary_backward: unknown op %d", (int)op);
    }
}
BTDEF void bt_k_unary(bt_unary_op op, bt_dtype dt, void *out, const void *x, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    int vec = bt__k_aligned16(out) && bt__k_aligned16(x);
    BT__K_DISPATCH4(dt, "bt_k_unary", { bt__k_unary_t<T>(op, (T *)out, (const T *)x, n, vec, s); })
    BT__K_LAUNCHED("bt_k_unary");
}

BTDEF void bt_k_unary_backward(bt_unary_op op, bt_dtype dt, void *gx, const void *gout, const void *x, int64_t n,
                               cudaStream_t s) {
    if (n <= 0) return;
    int vec = bt__k_aligned16(gx) && bt__k_aligned16(gout) && bt__k_aligned16(x);
    BT__K_DISPATCH4(dt, "bt_k_unary_backward", { bt__k_unary_bwd_t<T>(op, (T *)gx, (const T *)gout, (const T *)x, n, vec, s); })
    BT__K_LAUNCHED("bt_k_unary_backward");
}

template <typename A> struct bt__k_affine_f {   /* al x + be */
    A al, be;
    __device__ __forceinline__ A operator()(A x, A) const { return al * x + be; }
};
BTDEF void bt_k_affine(bt_dtype dt, void *out, const void *x, double alpha, double beta, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    int vec = bt__k_aligned16(out) && bt__k_aligned16(x);
    BT__K_DISPATCH4(dt, "bt_k_affine", {
        typedef typename bt__k_acc<T>::t A;
        bt__k_affine_f<A> f = {(A)alpha, (A)beta};
        bt__k_map_run<T, 1>((T *)out, (const T *)x, (const T *)x, n, vec, f, s);
    })
    BT__K_LAUNCHED("bt_k_affine");
}

template <int OP, typename A> __device__ __forceinline__ A bt__k_bop(A a, A b) {
    switch (OP) {
    case BT_BOP_ADD: return a + b;
    case BT_BOP_SUB: return a - b;
    case BT_BOP_MUL: return a * b;
    case BT_BOP_DIV: return a / b;
    }
    return a;
}
template <int OP> struct bt__k_bop_f {
    template <typename A> __device__ __forceinline__ A operator()(A a, A b) const { return bt__k_bop<OP, A>(a, b); }
};
/* general case: per element, decode the output index into per-dim coordinates (div/mod per dim
   after coalescing) and step a and b by their strides; broadcast dims have stride 0 and are
   re-read from cache. */
template <typename T, int OP> __global__ void bt__k_binary_strided(T *out, const T *a, const T *b, bt__k_geom g, int64_t n) {
    typedef typename bt__k_acc<T>::t A;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, oa = 0, ob = 0;
        for (int d = g.ndim - 1; d >= 0; d--) {
            int64_t q = rem / g.shape[d], c = rem - q * g.shape[d];
            oa += c * g.sa[d]; ob += c * g.sb[d]; rem = q;
        }
        out[i] = bt__k_from<T>(bt__k_bop<OP, A>(bt__k_tof(a[oa]), bt__k_tof(b[ob])));
    }
}
/* one operand repeated along the outer dim (x + the position embedding: [B, T C] + [T C]):
   out[i] = a[i] op b[i mod nb] (BA 0) or b[i mod nb] op a[i] (BA 1), in 16-byte vectors (nb a whole
   number of them); the index into b steps with the loop, no division */
template <typename T, int OP, int BA>
__global__ void bt__k_binary_bcast(T *out, const T *a, const T *b, int64_t n, int64_t nb) {
    typedef typename bt__k_acc<T>::t A;
    const int V = 16 / sizeof(T);
    const int64_t nv = n / V, nbv = nb / V, st = (int64_t)gridDim.x * blockDim.x, stb = st % nbv;
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, cb = c % nbv;
    for (; c < nv; c += st) {
        T x[V], y[V];
        bt__k_ld16(x, a + c * V);
        bt__k_ld16(y, b + cb * V);
#pragma unroll
        for (int e = 0; e < V; e++)
            x[e] = bt__k_from<T>(BA ? bt__k_bop<OP, A>(bt__k_tof(y[e]), bt__k_tof(x[e])) : bt__k_bop<OP, A>(bt__k_tof(x[e]), bt__k_tof(y[e])));
        bt__k_st16(out + c * V, x);
        cb += stb;
        if (cb >= nbv) cb -= nbv;
    }
}
/* out = a op s (BA = 0) or s op a (BA = 1) with s one element (a tensor times its upstream
   gradient, a device scalar): a in 16-byte vectors, s read once; the last n % V elements after */
template <typename T, int OP, int BA>
__global__ void bt__k_binary_scalar(T *out, const T *a, const T *s, int64_t n) {
    typedef typename bt__k_acc<T>::t A;
    const int V = 16 / sizeof(T);
    const A y = bt__k_tof(*s);
    const int64_t nv = n / V, st = (int64_t)gridDim.x * blockDim.x, c0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (int64_t c = c0; c < nv; c += st) {
        T x[V];
        bt__k_ld16(x, a + c * V);
#pragma unroll
        for (int e = 0; e < V; e++) x[e] = bt__k_from<T>(BA ? bt__k_bop<OP, A>(y, bt__k_tof(x[e])) : bt__k_bop<OP, A>(bt__k_tof(x[e]), y));
        bt__k_st16(out + c * V, x);
    }
    for (int64_t i = nv * V + c0; i < n; i += st)
        out[i] = bt__k_from<T>(BA ? bt__k_bop<OP, A>(y, bt__k_tof(a[i])) : bt__k_bop<OP, A>(bt__k_tof(a[i]), y));
}
template <typename T>
static void bt__k_binary_t(bt_binary_op op, T *out, const T *a, const T *b, int flat, int vec, int bcast, const bt__k_geom *g,
                           int64_t n, cudaStream_t s) {
    const int V = 16 / sizeof(T);
    switch (op) {
#define BT__K_X(OPC) case OPC: \
        if (flat) bt__k_map_run<T, 2>(out, a, b, n, vec, bt__k_bop_f<OPC>(), s); \
        else if (bcast == 1) bt__k_binary_bcast<T, OPC, 0><<<bt__k_blocks(n / V, 256), 256, 0, s>>>(out, a, b, n, g->shape[1]); \
        else if (bcast == 2) bt__k_binary_bcast<T, OPC, 1><<<bt__k_blocks(n / V, 256), 256, 0, s>>>(out, b, a, n, g->shape[1]); \
        else if (bcast == 3) bt__k_binary_scalar<T, OPC, 0><<<bt__k_blocks(n / V + 1, 256), 256, 0, s>>>(out, a, b, n); \
        else if (bcast == 4) bt__k_binary_scalar<T, OPC, 1><<<bt__k_blocks(n / V + 1, 256), 256, 0, s>>>(out, b, a, n); \
        else bt__k_binary_strided<T, OPC><<<bt__k_blocks(n, 256), 256, 0, s>>>(out, a, b, *g, n); \
        break;
    BT__K_X(BT_BOP_ADD) BT__K_X(BT_BOP_SUB) BT__K_X(BT_BOP_MUL) BT__K_X(BT_BOP_DIV)
#undef BT__K_X
    default: bt_error("bt_k_binary: unknown op %d", (int)op);
    }
}
BTDEF void bt_k_binary(bt_binary_op op, bt_dtype dt, void *out, const void *a, const int64_t *a_strides, const void *b,
                       const int64_t *b_strides, int ndim, const int64_t *shape, cudaStream_t s) {
    if (ndim < 0 || ndim > BT_MAX_DIMS) bt_error("bt_k_binary: %d dims (at most %d)", ndim, BT_MAX_DIMS);
    if ((unsigned)op >= (unsigned)BT_NBOPS) bt_error("bt_k_binary: unknown op %d", (int)op);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (n <= 0) return;
    bt__k_geom g;
    int k = bt__k_coalesce(ndim, shape, a_strides, b_strides, &g);
    int flat = k == 0 || (k == 1 && g.sa[0] == 1 && g.sb[0] == 1);
    int vec = bt__k_aligned16(out) && bt__k_aligned16(a) && bt__k_aligned16(b);
    /* [outer, inner] with b (1) or a (2) repeated over outer, in whole 16-byte vectors */
    int two = !flat && vec && k == 2 && (g.shape[1] * (int64_t)bt_dtype_size(dt)) % 16 == 0 && g.sa[1] == 1 && g.sb[1] == 1;
    int bcast = two && g.sa[0] == g.shape[1] && g.sb[0] == 0 ? 1 : two && g.sa[0] == 0 && g.sb[0] == g.shape[1] ? 2 : 0;
    /* one side a single element, the other dense and 16-byte aligned like out: b (3) or a (4) the scalar */
    if (!flat && k == 1 && bt__k_aligned16(out)) {
        if (g.sa[0] == 1 && g.sb[0] == 0 && bt__k_aligned16(a)) bcast = 3;
        else if (g.sa[0] == 0 && g.sb[0] == 1 && bt__k_aligned16(b)) bcast = 4;
    }
    BT__K_DISPATCH4(dt, "bt_k_binary", { bt__k_binary_t<T>(op, (T *)out, (const T *)a, (const T *)b, flat, flat && vec, bcast, &g, n, s); })
    BT__K_LAUNCHED("bt_k_binary");
}

/* ---- 4. reductions -----------------------------------------------------------------------------
   in [outer, r, inner] -> out [outer, inner]; each input element is read once (plus the partials
   of a second stage), each output written once. Accumulation in A (fp32; fp64 for f64); MEAN is
   SUM divided by r at the end; MAX keeps (value, first index). Two shapes:
     inner == 1: a block of 256 threads per row (of chunk of a row), strided coalesced reads;
     inner > 1:  a block of 32 x 8 threads per 32 columns: 32 consecutive i (coalesced) by 8 rows.
   When the rows alone cannot fill the chip, r is split across blocks (grid dim `splits`): stage 1
   writes partials [outer, splits, inner] to scratch, stage 2 reduces them with the same kernel.
   The combining order is fixed, so results are the same bits on every run. */
template <typename A> __device__ __forceinline__ void bt__k_maxidx(A &v, int32_t &i, A v2, int32_t i2) {
    if (i2 >= 0 && (i < 0 || v2 > v || (v2 == v && i2 < i))) { v = v2; i = i2; }
}
template <typename TI, typename TO, int MAX>
__global__ void bt__k_reduce_last(const TI *in, const int32_t *in_idx, int64_t outer, int64_t r, int64_t chunk,
                                  typename bt__k_acc<TO>::t *pval, int32_t *pidx, TO *out, int32_t *argmax,
                                  typename bt__k_acc<TO>::t div, int accumulate) {
    typedef typename bt__k_acc<TO>::t A;
    __shared__ A shv[32];
    __shared__ int32_t shi[32];
    int splits = gridDim.x;
    for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
        const TI *row = in + o * r;
        int64_t j0 = blockIdx.x * chunk, j1 = j0 + chunk < r ? j0 + chunk : r;
        A acc = MAX ? (A)-INFINITY : (A)0;
        int32_t bi = -1;
        for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
            A v = (A)bt__k_tof(row[j]);
            if (MAX) bt__k_maxidx(acc, bi, v, in_idx ? in_idx[o * r + j] : (int32_t)j);
            else acc += v;
        }
        if (MAX) {
            for (int off = 16; off; off >>= 1) {
                A v2 = __shfl_xor_sync(0xffffffffu, acc, off);
                int32_t i2 = __shfl_xor_sync(0xffffffffu, bi, off);
                bt__k_maxidx(acc, bi, v2, i2);
            }
            int w = threadIdx.x >> 5, l = threadIdx.x & 31;
            __syncthreads();
            if (l == 0) { shv[w] = acc; shi[w] = bi; }
            __syncthreads();
            if (threadIdx.x == 0)
                for (int k = 1; k < (int)(blockDim.x >> 5); k++) bt__k_maxidx(acc, bi, shv[k], shi[k]);
        } else {
            acc = bt__k_bsum<A>(acc, shv);
        }
        if (threadIdx.x == 0) {
            if (splits == 1) {
                A val = MAX ? acc : acc / div;
                out[o] = bt__k_from<TO>(accumulate ? (A)bt__k_tof(out[o]) + val : val);
                if (argmax) argmax[o] = bi;
            } else {
                pval[o * splits + blockIdx.x] = acc;
                if (pidx) pidx[o * splits + blockIdx.x] = bi;
            }
        }
    }
}
template <typename TI, typename TO, int MAX>
__global__ void bt__k_reduce_cols(const TI *in, const int32_t *in_idx, int64_t outer, int64_t r, int64_t inner,
                                  int64_t chunk, typename bt__k_acc<TO>::t *pval, int32_t *pidx, TO *out,
                                  int32_t *argmax, typename bt__k_acc<TO>::t div, int accumulate) {
    typedef typename bt__k_acc<TO>::t A;
    __shared__ A shv[8][33];
    __shared__ int32_t shi[8][33];
    int splits = gridDim.z, tx = threadIdx.x, ty = threadIdx.y;
    int64_t i = blockIdx.x * (int64_t)32 + tx;
    int64_t j0 = blockIdx.z * chunk, j1 = j0 + chunk < r ? j0 + chunk : r;
    for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
        A acc = MAX ? (A)-INFINITY : (A)0;
        int32_t bi = -1;
        if (i < inner)
            for (int64_t j = j0 + ty; j < j1; j += 8) {
                int64_t e = (o * r + j) * inner + i;
                A v = (A)bt__k_tof(in[e]);
                if (MAX) bt__k_maxidx(acc, bi, v, in_idx ? in_idx[e] : (int32_t)j);
                else acc += v;
            }
        shv[ty][tx] = acc; shi[ty][tx] = bi;
        __syncthreads();
        if (ty == 0 && i < inner) {
            for (int y = 1; y < 8; y++) {
                if (MAX) bt__k_maxidx(acc, bi, shv[y][tx], shi[y][tx]);
                else acc += shv[y][tx];
            }
            if (splits == 1) {
                A val = MAX ? acc : acc / div;
                out[o * inner + i] = bt__k_from<TO>(accumulate ? (A)bt__k_tof(out[o * inner + i]) + val : val);
                if (argmax) argmax[o * inner + i] = bi;
            } else {
                int64_t p = (o * splits + blockIdx.z) * inner + i;
                pval[p] = acc;
                if (pidx) pidx[p] = bi;
            }
        }
        __syncthreads();
    }
}
/* TO: the output type (T, or float when a low-precision sum lands in an fp32 accumulator);
   accumulate: out += the result instead of out = */
template <typename T, typename TO>
static void bt__k_reduce_t(int isMax, TO *out, int32_t *argmax, const T *in, int64_t outer, int64_t r, int64_t inner,
                           int mean, int accumulate, cudaStream_t s) {
    typedef typename bt__k_acc<TO>::t A;
    int64_t sms = bt__k_cur()->sm_count, splits = 1;
    A div = mean ? (A)r : (A)1;
    unsigned gy = (unsigned)(outer < 65535 ? outer : 65535);
    if (inner == 1) {
        if (outer < 2 * sms && r > 8192) {
            splits = (r + 4095) / 4096;
            int64_t want = (4 * sms + outer - 1) / outer;
            if (splits > want) splits = want;
        }
    } else {
        int64_t base = ((inner + 31) / 32) * outer;
        if (base < 2 * sms && r > 64) {
            splits = (r + 63) / 64;
            int64_t want = (4 * sms + base - 1) / base;
            if (splits > want) splits = want;
            if (splits > 65535) splits = 65535;
        }
    }
    int64_t chunk = (r + splits - 1) / splits;
    if (chunk < 1) chunk = 1;
    A *pval = NULL;
    int32_t *pidx = NULL;
    if (splits > 1) {
        size_t np = (size_t)(outer * splits * inner);
        pval = (A *)bt__k_scratch(np * sizeof(A), s);
        if (isMax) pidx = (int32_t *)bt__k_scratch(np * sizeof(int32_t), s);
    }
#define BT__K_RED(MX)                                                                                         \
    if (inner == 1) {                                                                                         \
        bt__k_reduce_last<T, TO, MX><<<dim3((unsigned)splits, gy), 256, 0, s>>>(in, NULL, outer, r, chunk, pval, pidx, \
                                                                                out, argmax, div, accumulate); \
        if (splits > 1)                                                                                       \
            bt__k_reduce_last<A, TO, MX><<<dim3(1, gy), 256, 0, s>>>(pval, pidx, outer, splits, splits, NULL, NULL, \
                                                                     out, argmax, div, accumulate);           \
    } else {                                                                                                  \
        dim3 g((unsigned)((inner + 31) / 32), gy, (unsigned)splits);                                          \
        bt__k_reduce_cols<T, TO, MX><<<g, dim3(32, 8), 0, s>>>(in, NULL, outer, r, inner, chunk, pval, pidx, out, argmax, \
                                                               div, accumulate);                              \
        if (splits > 1)                                                                                       \
            bt__k_reduce_cols<A, TO, MX><<<dim3(g.x, gy, 1), dim3(32, 8), 0, s>>>(pval, pidx, outer, splits, inner, \
                                                                                  splits, NULL, NULL, out, argmax, div, \
                                                                                  accumulate);                \
    }
    if (isMax) { BT__K_RED(1) } else { BT__K_RED(0) }
#undef BT__K_RED
    BT__K_LAUNCHED("bt_k_reduce");
    bt_free(pval); bt_free(pidx);
}
BTDEF void bt_k_reduce(bt_reduce_op op, bt_dtype dt, void *out, int32_t *argmax, const void *in, int64_t outer,
                       int64_t r, int64_t inner, cudaStream_t s) {
    if (outer <= 0 || inner <= 0) return;
    if (r <= 0 && op == BT_REDUCE_MAX) bt_error("bt_k_reduce: max over an empty dim (r = %lld)", (long long)r);
    if (r < 0) bt_error("bt_k_reduce: r = %lld", (long long)r);
    int isMax = op == BT_REDUCE_MAX, mean = op == BT_REDUCE_MEAN;
    if (!isMax) argmax = NULL;
    BT__K_DISPATCH4(dt, "bt_k_reduce", { bt__k_reduce_t<T, T>(isMax, (T *)out, argmax, (const T *)in, outer, r, inner, mean, 0, s); })
}
/* Column sums of a tall [rows, cols] matrix (a bias gradient: rows = tokens, cols = features),
   the fast path: a block of 32 x 8 threads covers 32 16-byte column vectors (256 bf16 columns);
   each thread adds the vectors of every 8th row of the block's row range (4 loads in flight),
   the 8 row lanes merge through shared memory, and the block writes one fp32 partial row; a
   second kernel adds the partials of each column in split order into acc. Reads the matrix once
   (a warp reads 512 contiguous bytes of a row); partials: splits x cols fp32 (about 1 MB for
   GPT-2's). No atomics: the same bits on every run. */
template <typename T>
__global__ void __launch_bounds__(256) bt__k_colsum_part(const T *in, int64_t rows, int64_t cols, int64_t per, float *part) {
    const int VE = 16 / sizeof(T), U = 4;
    __shared__ float sh[8][32][16 / sizeof(T) + 1];
    int64_t cv = blockIdx.x * 32 + threadIdx.x, ncv = cols / VE;
    int64_t r0 = blockIdx.y * per, r1 = r0 + per < rows ? r0 + per : rows;
    float acc[VE];
#pragma unroll
    for (int e = 0; e < VE; e++) acc[e] = 0.f;
    if (cv < ncv) {
        const T *p = in + cv * VE;
        int64_t r = r0 + threadIdx.y;
        for (; r + 8 * (U - 1) < r1; r += 8 * U) {
            T a[U][VE];
#pragma unroll
            for (int u = 0; u < U; u++) bt__k_ld16(a[u], p + (r + 8 * u) * cols);
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int e = 0; e < VE; e++) acc[e] += bt__k_tof(a[u][e]);
        }
        for (; r < r1; r += 8) {
            T a[VE];
            bt__k_ld16(a, p + r * cols);
#pragma unroll
            for (int e = 0; e < VE; e++) acc[e] += bt__k_tof(a[e]);
        }
    }
#pragma unroll
    for (int e = 0; e < VE; e++) sh[threadIdx.y][threadIdx.x][e] = acc[e];
    __syncthreads();
    if (threadIdx.y == 0 && cv < ncv) {
#pragma unroll
        for (int e = 0; e < VE; e++) {
            float v = 0.f;
#pragma unroll
            for (int y = 0; y < 8; y++) v += sh[y][threadIdx.x][e];
            part[blockIdx.y * cols + cv * VE + e] = v;
        }
    }
}
/* acc[j] += sum over k of part[k, j]: 32 columns a block, its 8 row lanes each add every 8th
   partial (in order), then lane 0 adds the 8 lane sums (in order) */
__global__ void __launch_bounds__(256) bt__k_colsum_final(const float *part, int64_t splits, int64_t cols, float *acc) {
    __shared__ float sh[8][33];
    int64_t j = blockIdx.x * 32 + threadIdx.x;
    float v = 0.f;
    if (j < cols)
        for (int64_t k = threadIdx.y; k < splits; k += 8) v += part[k * cols + j];
    sh[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
        float t = 0.f;
#pragma unroll
        for (int y = 0; y < 8; y++) t += sh[y][threadIdx.x];
        acc[j] += t;
    }
}
BTDEF void bt_k_sum_rows_acc(bt_dtype dt, float *acc, const void *in, int64_t rows, int64_t cols, cudaStream_t s) {
    if (rows <= 0 || cols <= 0) return;
    BT__K_DISPATCH3(dt, "bt_k_sum_rows_acc", {
        const int64_t VE = 16 / (int64_t)sizeof(T);
        if (rows >= 64 && cols % VE == 0 && bt__k_aligned16(in)) {   /* tall, vector-wide rows: the fast path */
            int64_t gx = (cols / VE + 31) / 32, splits = 8 * (int64_t)bt__k_cur()->sm_count / gx;
            if (splits > rows / 32) splits = rows / 32;               /* at least 32 rows a block */
            if (splits < 1) splits = 1;
            if (splits > 65535) splits = 65535;
            int64_t per = (rows + splits - 1) / splits;
            splits = (rows + per - 1) / per;
            float *part = (float *)bt__k_scratch((size_t)(splits * cols) * sizeof(float), s);
            dim3 grid((unsigned)gx, (unsigned)splits);
            bt__k_colsum_part<T><<<grid, dim3(32, 8), 0, s>>>((const T *)in, rows, cols, per, part);
            BT__K_LAUNCHED("bt_k_sum_rows_acc");
            bt__k_colsum_final<<<(unsigned)((cols + 31) / 32), dim3(32, 8), 0, s>>>(part, splits, cols, acc);
            BT__K_LAUNCHED("bt_k_sum_rows_acc");
            bt_free(part);
        } else {
            bt__k_reduce_t<T, float>(0, acc, NULL, (const T *)in, 1, rows, cols, 0, 1, s);
        }
    })
}

/* sum of squares into one fp32: stage 1, each block sums x^2 (fp32, fp64 for f64) over a grid-
   stride slice, 16-byte loads; stage 2, one block adds the block partials in fp64 in a fixed order
   and writes (or adds to) *out. No atomics: the same bits on every run. Reads n elements once. */
template <typename T> __global__ void bt__k_sumsq_part(const T *x, int64_t n, int vec, double *part) {
    typedef typename bt__k_acc<T>::t A;
    __shared__ A sh[32];
    const int V = 16 / sizeof(T);
    int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, st = (int64_t)gridDim.x * blockDim.x;
    int64_t nv = vec ? n / V : 0;
    A acc = 0;
    for (int64_t c = tid; c < nv; c += st) {
        T a[V];
        bt__k_ld16(a, x + c * V);
#pragma unroll
        for (int e = 0; e < V; e++) { A v = bt__k_tof(a[e]); acc += v * v; }
    }
    for (int64_t i = nv * V + tid; i < n; i += st) { A v = bt__k_tof(x[i]); acc += v * v; }
    acc = bt__k_bsum<A>(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = (double)acc;
}
__global__ void bt__k_sumsq_final(const double *part, int nb, float *out, int accumulate) {
    __shared__ double sh[32];
    double acc = 0;
    for (int i = threadIdx.x; i < nb; i += blockDim.x) acc += part[i];
    acc = bt__k_bsum<double>(acc, sh);
    if (threadIdx.x == 0) *out = accumulate ? (float)((double)*out + acc) : (float)acc;
}
BTDEF void bt_k_sumsq(bt_dtype dt, float *out, const void *x, int64_t n, int accumulate, cudaStream_t s) {
    if (n < 0) n = 0;
    int vec = bt__k_aligned16(x);
    BT__K_DISPATCH4(dt, "bt_k_sumsq", {
        const int V = 16 / sizeof(T);
        unsigned nb = bt__k_blocks(vec ? (n + V - 1) / V : n, 256);
        double *part = (double *)bt__k_scratch(nb * sizeof(double), s);
        bt__k_sumsq_part<T><<<nb, 256, 0, s>>>((const T *)x, n, vec, part);
        BT__K_LAUNCHED("bt_k_sumsq");
        bt__k_sumsq_final<<<1, 256, 0, s>>>(part, (int)nb, out, accumulate);
        BT__K_LAUNCHED("bt_k_sumsq");
        bt_free(part);
    })
}

/* ---- 5. softmax / log_softmax over rows ---------------------------------------------------------
   Fast path (cols <= 1024, cols a multiple of 16 / sizeof(T), rows 16-byte aligned): one warp per
   row, 8 rows per block; lane L holds 16-byte vectors L, L + 32, ... of the row in registers
   (NV of them, NV from 1 to 8 picked per call), so the row is read once and written once:
   forward max, then sum of exp(x - m) (from registers), then the output; backward reads g and y
   once, sum(g * y) (softmax) or sum(g) (log_softmax), then gx. Traffic: 2 bytes per element and
   direction for bf16 (2 reads + 1 write backward), the least there is.
   Fallback (any other shape): one warp per row for cols <= 1024, else a block of 256 threads per
   row; forward keeps an online (max m, sum s of exp(x - m)) per thread and merges them, then
   writes exp(x - m) / s, or x - m - log s, re-reading the row (from L1/L2 for rows that fit);
   backward 2 + 2 reads, 1 write per element. Math in fp32. */
/* the register-row helpers shared by sections 5 and 6 */
static int bt__k_pick_nv(int64_t nvec) { int n = (int)((nvec + 31) / 32); return n <= 4 ? (n < 1 ? 1 : n) : n <= 6 ? 6 : 8; }
/* NV for a row of nvec vectors (inside BT__K_DISPATCH*: 2-byte rows of <= 1024 elements never need more than 4) */
#define BT__K_NV_DISPATCH(nv, ...) switch (nv) { \
    case 1: { const int NV = 1; __VA_ARGS__; } break; case 2: { const int NV = 2; __VA_ARGS__; } break; \
    case 3: { const int NV = 3; __VA_ARGS__; } break; case 4: { const int NV = 4; __VA_ARGS__; } break; \
    case 6: { const int NV = sizeof(T) == 2 ? 4 : 6; __VA_ARGS__; } break; \
    default: { const int NV = sizeof(T) == 2 ? 4 : 8; __VA_ARGS__; } break; }
/* rows of the fast path: n elements a multiple of the vector, at most 1024, pointers 16-byte aligned */
static int bt__k_rowfast(int64_t n, size_t es, const void *a, const void *b, const void *c, const void *d) {
    int64_t ve = (int64_t)(16 / es);
    return n <= 1024 && n % ve == 0 && bt__k_aligned16(a) && bt__k_aligned16(b) && bt__k_aligned16(c) && bt__k_aligned16(d);
}
static unsigned bt__k_warprows_grid(int64_t rows) {
    int64_t g = (rows + 7) / 8, cap = (int64_t)bt__k_cur()->sm_count * 32;
    return (unsigned)(g < cap ? (g < 1 ? 1 : g) : cap);
}
#define BT__K_WARP_ROW_LOOP(row, rows) \
    for (int64_t row = blockIdx.x * (int64_t)8 + (threadIdx.x >> 5); row < (rows); row += (int64_t)gridDim.x * 8)
/* lane's vectors i = 0..NV-1 of a row: x[i][e] = row[(lane + 32 i) VE + e] as fp32, 0 past nvec */
template <typename T, int NV>
__device__ __forceinline__ void bt__k_row_ld(float x[NV][16 / sizeof(T)], const T *row, int nvec) {
    const int VE = 16 / sizeof(T);
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int c = lane + 32 * i;
        if (c < nvec) {
            T a[VE];
            bt__k_ld16(a, row + c * VE);
#pragma unroll
            for (int e = 0; e < VE; e++) x[i][e] = bt__k_tof(a[e]);
        } else {
#pragma unroll
            for (int e = 0; e < VE; e++) x[i][e] = 0.f;
        }
    }
}
template <typename T, int NV>
__device__ __forceinline__ void bt__k_row_st(T *row, const float x[NV][16 / sizeof(T)], int nvec) {
    const int VE = 16 / sizeof(T);
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int c = lane + 32 * i;
        if (c < nvec) {
            T a[VE];
#pragma unroll
            for (int e = 0; e < VE; e++) a[e] = bt__k_from<T>(x[i][e]);
            bt__k_st16(row + c * VE, a);
        }
    }
}
__device__ __forceinline__ float bt__k_wmax(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
template <typename T, int NV>
__global__ void __launch_bounds__(256) bt__k_softmax_warp(T *out, const T *x, int64_t rows, int cols, int log) {
    const int VE = 16 / sizeof(T);
    int nvec = cols / VE, lane = threadIdx.x & 31;
    BT__K_WARP_ROW_LOOP(row, rows) {
        float v[NV][VE];
        bt__k_row_ld<T, NV>(v, x + row * cols, nvec);
        float m = -INFINITY, sm = 0.f;
#pragma unroll
        for (int i = 0; i < NV; i++)
            if (lane + 32 * i < nvec)
#pragma unroll
                for (int e = 0; e < VE; e++) m = fmaxf(m, v[i][e]);
        m = bt__k_wmax(m);
#pragma unroll
        for (int i = 0; i < NV; i++)
            if (lane + 32 * i < nvec)
#pragma unroll
                for (int e = 0; e < VE; e++) {
                    float ex = expf(v[i][e] - m);
                    sm += ex;
                    if (!log) v[i][e] = ex;
                }
        sm = bt__k_wsum(sm);
        float inv = 1.f / sm, ls = logf(sm);
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < VE; e++) v[i][e] = log ? v[i][e] - m - ls : v[i][e] * inv;
        bt__k_row_st<T, NV>(out + row * cols, v, nvec);
    }
}
template <typename T, int NV>
__global__ void __launch_bounds__(256) bt__k_softmax_bwd_warp(T *gx, const T *g, const T *y, int64_t rows, int cols, int log) {
    const int VE = 16 / sizeof(T);
    int nvec = cols / VE;
    BT__K_WARP_ROW_LOOP(row, rows) {
        float gv[NV][VE], yv[NV][VE];
        bt__k_row_ld<T, NV>(gv, g + row * cols, nvec);
        bt__k_row_ld<T, NV>(yv, y + row * cols, nvec);
        float acc = 0.f;   /* padded lanes hold zeros */
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < VE; e++) acc += log ? gv[i][e] : gv[i][e] * yv[i][e];
        acc = bt__k_wsum(acc);
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < VE; e++)
                gv[i][e] = log ? gv[i][e] - expf(yv[i][e]) * acc : yv[i][e] * (gv[i][e] - acc);
        bt__k_row_st<T, NV>(gx + row * cols, gv, nvec);
    }
}
static void bt__k_rowcfg(int64_t rows, int64_t cols, dim3 *blk, unsigned *grid) {
    int tpr = cols <= 1024 ? 32 : 256, rpb = tpr == 32 ? 8 : 1;
    *blk = dim3(tpr, rpb);
    int64_t g = (rows + rpb - 1) / rpb, cap = (int64_t)bt__k_cur()->sm_count * 32;
    *grid = (unsigned)(g < cap ? (g < 1 ? 1 : g) : cap);
}
#define BT__K_ROW_LOOP(row, rows) \
    for (int64_t row = blockIdx.x * (int64_t)blockDim.y + threadIdx.y; row < (rows); row += (int64_t)gridDim.x * blockDim.y)

template <typename T, int LOG> __global__ void bt__k_softmax_kernel(T *out, const T *x, int64_t rows, int64_t cols) {
    __shared__ float sh[64];
    BT__K_ROW_LOOP(row, rows) {
        const T *xr = x + row * cols;
        T *orow = out + row * cols;
        float m = -INFINITY, sm = 0.f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) bt__k_ms_add(m, sm, bt__k_tof(xr[j]));
        bt__k_rms(m, sm, sh);
        float inv = 1.f / sm, ls = logf(sm);
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            float v = bt__k_tof(xr[j]);
            orow[j] = bt__k_from<T>(LOG ? v - m - ls : expf(v - m) * inv);
        }
    }
}
template <typename T, int LOG>
__global__ void bt__k_softmax_bwd_kernel(T *gx, const T *g, const T *y, int64_t rows, int64_t cols) {
    __shared__ float sh[32];
    BT__K_ROW_LOOP(row, rows) {
        const T *gr = g + row * cols, *yr = y + row * cols;
        T *gxr = gx + row * cols;
        float acc = 0.f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            acc += LOG ? bt__k_tof(gr[j]) : bt__k_tof(gr[j]) * bt__k_tof(yr[j]);
        acc = bt__k_rsum(acc, sh);
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            float gj = bt__k_tof(gr[j]), yj = bt__k_tof(yr[j]);
            gxr[j] = bt__k_from<T>(LOG ? gj - expf(yj) * acc : yj * (gj - acc));
        }
    }
}
BTDEF void bt_k_softmax(bt_dtype dt, void *out, const void *x, int64_t rows, int64_t cols, int log, cudaStream_t s) {
    if (rows <= 0 || cols <= 0) return;
    dim3 blk; unsigned grid;
    bt__k_rowcfg(rows, cols, &blk, &grid);
    BT__K_DISPATCH3(dt, "bt_k_softmax", {
        if (bt__k_rowfast(cols, sizeof(T), out, x, x, x)) {
            int nv = bt__k_pick_nv(cols / (int64_t)(16 / sizeof(T)));
            BT__K_NV_DISPATCH(nv, bt__k_softmax_warp<T, NV><<<bt__k_warprows_grid(rows), 256, 0, s>>>((T *)out, (const T *)x, rows,
                                                                                                     (int)cols, log))
        } else if (log) {
            bt__k_softmax_kernel<T, 1><<<grid, blk, 0, s>>>((T *)out, (const T *)x, rows, cols);
        } else {
            bt__k_softmax_kernel<T, 0><<<grid, blk, 0, s>>>((T *)out, (const T *)x, rows, cols);
        }
    })
    BT__K_LAUNCHED("bt_k_softmax");
}
BTDEF void bt_k_softmax_backward(bt_dtype dt, void *gx, const void *gout, const void *y, int64_t rows, int64_t cols,
                                 int log, cudaStream_t s) {
    if (rows <= 0 || cols <= 0) return;
    dim3 blk; unsigned grid;
    bt__k_rowcfg(rows, cols, &blk, &grid);
    BT__K_DISPATCH3(dt, "bt_k_softmax_backward", {
        if (bt__k_rowfast(cols, sizeof(T), gx, gout, y, y)) {
            int nv = bt__k_pick_nv(cols / (int64_t)(16 / sizeof(T)));
            BT__K_NV_DISPATCH(nv, bt__k_softmax_bwd_warp<T, NV><<<bt__k_warprows_grid(rows), 256, 0, s>>>(
                                      (T *)gx, (const T *)gout, (const T *)y, rows, (int)cols, log))
        } else if (log) {
            bt__k_softmax_bwd_kernel<T, 1><<<grid, blk, 0, s>>>((T *)gx, (const T *)gout, (const T *)y, rows, cols);
        } else {
            bt__k_softmax_bwd_kernel<T, 0><<<grid, blk, 0, s>>>((T *)gx, (const T *)gout, (const T *)y, rows, cols);
        }
    })
    BT__K_LAUNCHED("bt_k_softmax_backward");
}

/* ---- 6. layernorm over the last dim C ------------------------------------------------------------
   Forward: mean = sum x / C, var = sum (x - mean)^2 / C (biased; two passes for accuracy),
   rstd = 1 / sqrt(var + eps), out = (x - mean) rstd w + b.
   Backward, with xhat = (x - mean) rstd and wg = w g:
     gx = rstd (wg - mean_j(wg) - xhat mean_j(wg xhat)),  gw += sum_rows g xhat,  gb += sum_rows g.
   Fast path (C <= 1024, C a multiple of 16 / sizeof(T), pointers 16-byte aligned): one warp per
   row with the row in registers as 16-byte vectors (see section 5), w and b loaded once per warp.
   Forward reads x once and writes out once (+ 8 bytes of mean/rstd per row): both passes of the
   variance run over registers; w and b are re-read per row from L1 (holding them in registers
   would halve the warps per SM). Backward reads g and x once and writes gx once; the gw/gb column
   sums ride along: each warp keeps fp32 partials of g xhat and g over the rows it visits in its own
   shared-memory rows, the block adds its 8 warps' rows in warp order into one [C] partial per
   block (fp32 scratch [blocks, C] x 2, at most 3 blocks per SM), and a last small kernel adds the
   block partials into gw, gb in a fixed order, 32 partials at a time in parallel (a serial walk
   over hundreds of partials is latency-bound: it made the first fused version slower than the
   two-kernel one). No atomics: the same bits on every run (for a given GPU, whose SM count sets
   the grid).
   Fallback: one warp (C <= 1024) or block (larger C) per row re-reading x three times forward;
   backward a row kernel for gx plus a column kernel (32 columns x 8 rows per block, row chunks
   over grid.y, fp32 partials [splits, C]) for gw, gb, then the same fixed-order add. */
template <typename T, int NV>
__global__ void __launch_bounds__(256) bt__k_layernorm_warp(T *out, float *mean, float *rstd, const T *x, const T *w,
                                                            const T *b, int64_t rows, int C, float eps) {
    const int VE = 16 / sizeof(T);
    int nvec = C / VE, lane = threadIdx.x & 31;
    BT__K_WARP_ROW_LOOP(row, rows) {
        float v[NV][VE];
        bt__k_row_ld<T, NV>(v, x + row * C, nvec);
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < VE; e++) acc += v[i][e];   /* padded lanes hold zeros */
        float mu = bt__k_wsum(acc) / (float)C;
        acc = 0.f;
#pragma unroll
        for (int i = 0; i < NV; i++)
            if (lane + 32 * i < nvec)
#pragma unroll
                for (int e = 0; e < VE; e++) { float d = v[i][e] - mu; acc += d * d; }
        float rs = 1.f / sqrtf(bt__k_wsum(acc) / (float)C + eps);
        {
            float wb[NV][VE];
#pragma unroll
            for (int i = 0; i < NV; i++)
#pragma unroll
                for (int e = 0; e < VE; e++) v[i][e] = (v[i][e] - mu) * rs;
            if (w) {
                bt__k_row_ld<T, NV>(wb, w, nvec);
#pragma unroll
                for (int i = 0; i < NV; i++)
#pragma unroll
                    for (int e = 0; e < VE; e++) v[i][e] *= wb[i][e];
            }
            if (b) {
                bt__k_row_ld<T, NV>(wb, b, nvec);
#pragma unroll
                for (int i = 0; i < NV; i++)
#pragma unroll
                    for (int e = 0; e < VE; e++) v[i][e] += wb[i][e];
            }
        }
        bt__k_row_st<T, NV>(out + row * C, v, nvec);
        if (lane == 0) {
            if (mean) mean[row] = mu;
            if (rstd) rstd[row] = rs;
        }
    }
}
/* gx for the rows of each warp; when pw != NULL also the block's column partials pw, pb [gridDim.x, C]:
   each warp adds g xhat and g of its rows into its own shared-memory region (a lane only ever
   touches its own columns, stored lane-major, slot (i VE + e) 32 + lane: no synchronization and no
   bank conflicts), then the block sums its 8 warps' regions in warp order. Dynamic shared memory:
   16 regions of NV VE 32 floats when pw != NULL. 256 threads. */
template <typename T, int NV>
__global__ void __launch_bounds__(256, 3) bt__k_layernorm_bwd_warp(T *gx, int gx_add, float *pw, float *pb, float *pr, const T *g, const T *x,
                                                                const T *w, const float *mean, const float *rstd, int64_t rows,
                                                                int C) {
    extern __shared__ __align__(16) float bt__k_ln_sh[];
    const int VE = 16 / sizeof(T);
    int nvec = C / VE, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int R = NV * VE * 32;
    float *sw = bt__k_ln_sh + warp * R + lane, *sb = bt__k_ln_sh + (8 + warp) * R + lane, *sr = bt__k_ln_sh + (16 + warp) * R + lane;
#pragma unroll
    for (int i = 0; i < NV; i++)
        if (lane + 32 * i < nvec)
#pragma unroll
            for (int e = 0; e < VE; e++) {
                if (pw) { sw[(i * VE + e) * 32] = 0.f; sb[(i * VE + e) * 32] = 0.f; }
                if (pr) sr[(i * VE + e) * 32] = 0.f;
            }
    BT__K_WARP_ROW_LOOP(row, rows) {
        float gv[NV][VE], xv[NV][VE];
        bt__k_row_ld<T, NV>(gv, g + row * C, nvec);
        bt__k_row_ld<T, NV>(xv, x + row * C, nvec);
        float mu = mean[row], rs = rstd[row], a = 0.f, bb = 0.f;
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < VE; e++) xv[i][e] = (xv[i][e] - mu) * rs;   /* xhat (unused past nvec) */
        if (pw)
#pragma unroll
            for (int i = 0; i < NV; i++)
                if (lane + 32 * i < nvec)
#pragma unroll
                    for (int e = 0; e < VE; e++) {
                        sw[(i * VE + e) * 32] += gv[i][e] * xv[i][e];
                        sb[(i * VE + e) * 32] += gv[i][e];
                    }
        if (w) {   /* gv becomes w g; w re-read per row from L1 */
            float wv[NV][VE];
            bt__k_row_ld<T, NV>(wv, w, nvec);
#pragma unroll
            for (int i = 0; i < NV; i++)
#pragma unroll
                for (int e = 0; e < VE; e++) gv[i][e] *= wv[i][e];
        }
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < VE; e++) { a += gv[i][e]; bb += gv[i][e] * xv[i][e]; }   /* g is zero past nvec */
        a = bt__k_wsum(a) / (float)C;
        bb = bt__k_wsum(bb) / (float)C;
        if (gx) {
#pragma unroll
            for (int i = 0; i < NV; i++)
#pragma unroll
                for (int e = 0; e < VE; e++) xv[i][e] = rs * (gv[i][e] - a - xv[i][e] * bb);
            if (gx_add) {   /* the residual's gradient so far: gv is free again */
                bt__k_row_ld<T, NV>(gv, gx + row * C, nvec);
#pragma unroll
                for (int i = 0; i < NV; i++)
#pragma unroll
                    for (int e = 0; e < VE; e++) xv[i][e] += gv[i][e];
            }
            bt__k_row_st<T, NV>(gx + row * C, xv, nvec);
            if (pr)   /* the sums of the fp32 values before their rounding to T */
#pragma unroll
                for (int i = 0; i < NV; i++)
                    if (lane + 32 * i < nvec)
#pragma unroll
                        for (int e = 0; e < VE; e++) sr[(i * VE + e) * 32] += xv[i][e];
        }
    }
    if (!pw && !pr) return;
    __syncthreads();
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        int c = j / VE, slot = ((c >> 5) * VE + (j - c * VE)) * 32 + (c & 31);
        float aw = 0.f, ab = 0.f, ar = 0.f;
        for (int k = 0; k < 8; k++) {
            if (pw) { aw += bt__k_ln_sh[k * R + slot]; ab += bt__k_ln_sh[(8 + k) * R + slot]; }
            if (pr) ar += bt__k_ln_sh[(16 + k) * R + slot];
        }
        if (pw) { pw[(int64_t)blockIdx.x * C + j] = aw; pb[(int64_t)blockIdx.x * C + j] = ab; }
        if (pr) pr[(int64_t)blockIdx.x * C + j] = ar;
    }
}
/* gw[c] += sum_z pw[z, c], gb likewise, for many partials z: 32 columns x 32 threads per block; each
   thread adds the partials z = ty, ty + 32, ... in order, then the column's 32 sums are added in ty
   order (fixed: the same bits every run). Parallel over z, where the fallback's add walks z serially. */
template <typename T>
__global__ void __launch_bounds__(1024) bt__k_layernorm_bwd_add32(T *gw, T *gb, float *gr, const float *pw, const float *pb,
                                                                  const float *pr, int splits, int64_t C) {
    __shared__ float sw[32][33], sb[32][33], sr[32][33];
    int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    int64_t c = blockIdx.x * (int64_t)32 + tx;
    float aw = 0.f, ab = 0.f, ar = 0.f;
    if (c < C)
#pragma unroll 4
        for (int z = ty; z < splits; z += 32) {
            if (pw) { aw += pw[(int64_t)z * C + c]; ab += pb[(int64_t)z * C + c]; }
            if (pr) ar += pr[(int64_t)z * C + c];
        }
    sw[ty][tx] = aw; sb[ty][tx] = ab; sr[ty][tx] = ar;
    __syncthreads();
    if (ty == 0 && c < C) {
        for (int y = 1; y < 32; y++) { aw += sw[y][tx]; ab += sb[y][tx]; ar += sr[y][tx]; }
        if (gw) gw[c] = bt__k_from<T>(bt__k_tof(gw[c]) + aw);
        if (gb) gb[c] = bt__k_from<T>(bt__k_tof(gb[c]) + ab);
        if (gr) gr[c] = ar;   /* written, not added */
    }
}
template <typename T>
__global__ void bt__k_layernorm_kernel(T *out, float *mean, float *rstd, const T *x, const T *w, const T *b,
                                       int64_t rows, int64_t C, float eps) {
    __shared__ float sh[32];
    BT__K_ROW_LOOP(row, rows) {
        const T *xr = x + row * C;
        T *orow = out + row * C;
        float acc = 0.f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) acc += bt__k_tof(xr[j]);
        float mu = bt__k_rsum(acc, sh) / (float)C;
        acc = 0.f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) { float d = bt__k_tof(xr[j]) - mu; acc += d * d; }
        float rs = 1.f / sqrtf(bt__k_rsum(acc, sh) / (float)C + eps);
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float v = (bt__k_tof(xr[j]) - mu) * rs;
            if (w) v *= bt__k_tof(w[j]);
            if (b) v += bt__k_tof(b[j]);
            orow[j] = bt__k_from<T>(v);
        }
        if (threadIdx.x == 0) {
            if (mean) mean[row] = mu;
            if (rstd) rstd[row] = rs;
        }
    }
}
template <typename T>
__global__ void bt__k_layernorm_bwd_gx(T *gx, int gx_add, const T *g, const T *x, const T *w, const float *mean,
                                       const float *rstd, int64_t rows, int64_t C) {
    __shared__ float sh[32];
    BT__K_ROW_LOOP(row, rows) {
        const T *gr = g + row * C, *xr = x + row * C;
        float mu = mean[row], rs = rstd[row], a = 0.f, bb = 0.f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float wg = bt__k_tof(gr[j]) * (w ? bt__k_tof(w[j]) : 1.f);
            a += wg; bb += wg * (bt__k_tof(xr[j]) - mu) * rs;
        }
        a = bt__k_rsum(a, sh) / (float)C;
        bb = bt__k_rsum(bb, sh) / (float)C;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float wg = bt__k_tof(gr[j]) * (w ? bt__k_tof(w[j]) : 1.f), xh = (bt__k_tof(xr[j]) - mu) * rs;
            float d = rs * (wg - a - xh * bb);
            gx[row * C + j] = bt__k_from<T>(gx_add ? bt__k_tof(gx[row * C + j]) + d : d);
        }
    }
}
template <typename T>
__global__ void bt__k_layernorm_bwd_wb(float *pw, float *pb, const T *g, const T *x, const float *mean, const float *rstd,
                                       int64_t rows, int64_t C, int64_t chunk) {
    __shared__ float sw[8][33], sb[8][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t c = blockIdx.x * (int64_t)32 + tx, r0 = blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    float aw = 0.f, ab = 0.f;
    if (c < C)
        for (int64_t r = r0 + ty; r < r1; r += 8) {
            float gv = bt__k_tof(g[r * C + c]);
            aw += gv * (bt__k_tof(x[r * C + c]) - mean[r]) * rstd[r];
            ab += gv;
        }
    sw[ty][tx] = aw; sb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && c < C) {
        for (int y = 1; y < 8; y++) { aw += sw[y][tx]; ab += sb[y][tx]; }
        pw[blockIdx.y * C + c] = aw; pb[blockIdx.y * C + c] = ab;
    }
}
template <typename T>
__global__ void bt__k_layernorm_bwd_add(T *gw, T *gb, const float *pw, const float *pb, int splits, int64_t C) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        float aw = 0.f, ab = 0.f;
        for (int z = 0; z < splits; z++) { aw += pw[z * C + c]; ab += pb[z * C + c]; }
        if (gw) gw[c] = bt__k_from<T>(bt__k_tof(gw[c]) + aw);
        if (gb) gb[c] = bt__k_from<T>(bt__k_tof(gb[c]) + ab);
    }
}
BTDEF void bt_k_layernorm(bt_dtype dt, void *out, float *mean, float *rstd, const void *x, const void *w, const void *b,
                          int64_t rows, int64_t C, float eps, cudaStream_t s) {
    if (rows <= 0 || C <= 0) return;
    dim3 blk; unsigned grid;
    bt__k_rowcfg(rows, C, &blk, &grid);
    BT__K_DISPATCH3(dt, "bt_k_layernorm", {
        if (bt__k_rowfast(C, sizeof(T), out, x, w ? w : x, b ? b : x)) {
            int nv = bt__k_pick_nv(C / (int64_t)(16 / sizeof(T)));
            BT__K_NV_DISPATCH(nv, bt__k_layernorm_warp<T, NV><<<bt__k_warprows_grid(rows), 256, 0, s>>>(
                                      (T *)out, mean, rstd, (const T *)x, (const T *)w, (const T *)b, rows, (int)C, eps))
        } else {
            bt__k_layernorm_kernel<T><<<grid, blk, 0, s>>>((T *)out, mean, rstd, (const T *)x, (const T *)w, (const T *)b,
                                                           rows, C, eps);
        }
    })
    BT__K_LAUNCHED("bt_k_layernorm");
}
BTDEF void bt_k_layernorm_backward(bt_dtype dt, void *gx, int gx_add, void *gw, void *gb, float *gx_colsum, const void *gout,
                                   const void *x, const void *w, const float *mean, const float *rstd, int64_t rows, int64_t C,
                                   cudaStream_t s) {
    if (rows <= 0 || C <= 0) return;
    if (gx_colsum && !gx) bt_error("bt_k_layernorm_backward: gx_colsum without gx");
    dim3 blk; unsigned grid;
    bt__k_rowcfg(rows, C, &blk, &grid);
    int64_t sms = bt__k_cur()->sm_count, cb = (C + 31) / 32;
    BT__K_DISPATCH3(dt, "bt_k_layernorm_backward", {
        if (bt__k_rowfast(C, sizeof(T), gx ? gx : gout, gout, x, w ? w : x)) {
            /* one pass: gx and the block partials of gw, gb (and of gx's column sums); then their
               fixed-order sum */
            int64_t nblk = (rows + 7) / 8, cap = 3 * sms;
            if (nblk > cap) nblk = cap;
            int parts = (gw || gb ? 2 : 0) + (gx_colsum ? 1 : 0);
            float *scr = parts ? (float *)bt__k_scratch((size_t)(parts * nblk * C) * sizeof(float), s) : NULL;
            float *pw = gw || gb ? scr : NULL, *pb = pw ? pw + nblk * C : NULL, *pr = gx_colsum ? scr + (parts - 1) * nblk * C : NULL;
            size_t shb = 0;
            int nv = bt__k_pick_nv(C / (int64_t)(16 / sizeof(T)));
            BT__K_NV_DISPATCH(nv, {
                if (parts) shb = (size_t)(pr ? 24 : 16) * NV * (16 / sizeof(T)) * 32 * sizeof(float);   /* 8 warps a part */
                BT__K_CUDA(cudaFuncSetAttribute(bt__k_layernorm_bwd_warp<T, NV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                (int)shb), "bt_k_layernorm_backward");
                bt__k_layernorm_bwd_warp<T, NV><<<(unsigned)nblk, 256, shb, s>>>((T *)gx, gx_add, pw, pb, pr, (const T *)gout,
                                                                              (const T *)x, (const T *)w, mean, rstd, rows, (int)C);
            })
            BT__K_LAUNCHED("bt_k_layernorm_backward");
            if (scr) {
                bt__k_layernorm_bwd_add32<T><<<(unsigned)((C + 31) / 32), 1024, 0, s>>>((T *)gw, (T *)gb, gx_colsum, pw, pb, pr,
                                                                                        (int)nblk, C);
                BT__K_LAUNCHED("bt_k_layernorm_backward");
                bt_free(scr);
            }
        } else {
            int64_t splits = (4 * sms + cb - 1) / cb, maxs = (rows + 7) / 8;
            if (splits > maxs) splits = maxs;
            if (splits > 1024) splits = 1024;
            if (splits < 1) splits = 1;
            int64_t chunk = (rows + splits - 1) / splits;
            splits = (rows + chunk - 1) / chunk;
            if (gx) {
                bt__k_layernorm_bwd_gx<T><<<grid, blk, 0, s>>>((T *)gx, gx_add, (const T *)gout, (const T *)x, (const T *)w, mean,
                                                               rstd, rows, C);
                BT__K_LAUNCHED("bt_k_layernorm_backward");
            }
            if (gx_colsum) {   /* general shapes: a pass of its own over the gx written */
                BT__K_CUDA(cudaMemsetAsync(gx_colsum, 0, (size_t)C * sizeof(float), s), "bt_k_layernorm_backward");
                bt_k_sum_rows_acc(dt, gx_colsum, gx, rows, C, s);
            }
            if (gw || gb) {
                float *pw = (float *)bt__k_scratch((size_t)(2 * splits * C) * sizeof(float), s), *pb = pw + splits * C;
                bt__k_layernorm_bwd_wb<T><<<dim3((unsigned)cb, (unsigned)splits), dim3(32, 8), 0, s>>>(
                    pw, pb, (const T *)gout, (const T *)x, mean, rstd, rows, C, chunk);
                BT__K_LAUNCHED("bt_k_layernorm_backward");
                bt__k_layernorm_bwd_add<T><<<bt__k_blocks(C, 256), 256, 0, s>>>((T *)gw, (T *)gb, pw, pb, (int)splits, C);
                BT__K_LAUNCHED("bt_k_layernorm_backward");
                bt_free(pw);
            }
        }
    })
}

/* ---- 7. embedding ----------------------------------------------------------------------------------
   Forward: out[i, :] = table[idx[i], :]: C elements read and written per row (16-byte vectors when
   C and the pointers allow), 4 bytes of index per row; an index outside [0, V) writes a zero row
   and sets *bad.
   Backward, gtable[v, :] += sum_{i: idx[i] = v} gout[i, :]; out-of-range indices are skipped.
     atomics: one fp32 atomicAdd per element of gout (f32 tables directly; bf16/f16 tables go
       through an fp32 scratch [V, C], zeroed, then added: 4 V C bytes extra each way).
     deterministic: LSD radix sort of (idx, i) pairs, 8 bits per pass, each pass a per-warp-tile
       histogram, one exclusive scan and a stable scatter (warp tiles walk their elements in order,
       ranking equal digits with __match_any_sync); then one block per run of equal keys sums its
       rows of gout in sorted (= ascending i) order and adds into gtable. No float atomics, the
       same bits on every run; costs about 16 n bytes per pass plus one read of gout. */
template <typename T>
__global__ void bt__k_embedding_kernel(T *out, const T *table, const int32_t *idx, int64_t n, int64_t C, int64_t V,
                                       int *bad, int vec) {
    const int VE = vec ? 16 / (int)sizeof(T) : 1;
    int64_t cpr = C / VE, total = n * cpr;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / cpr, cc = (e - i * cpr) * VE;
        int64_t v = idx[i];
        int ok = v >= 0 && v < V;
        if (!ok && bad) *bad = 1;
        if (vec) {
            uint4 u = make_uint4(0, 0, 0, 0);
            if (ok) u = __ldg(reinterpret_cast<const uint4 *>(table + v * C + cc));
            *reinterpret_cast<uint4 *>(out + i * C + cc) = u;
        } else {
            out[i * C + cc] = ok ? table[v * C + cc] : bt__k_from<T>(0.f);
        }
    }
}
BTDEF void bt_k_embedding(bt_dtype dt, void *out, const void *table, const int32_t *idx, int64_t n, int64_t C, int64_t V,
                          int *bad, cudaStream_t s) {
    if (n <= 0 || C <= 0) return;
    BT__K_DISPATCH3(dt, "bt_k_embedding", {
        const int VE = 16 / sizeof(T);
        int vec = C % VE == 0 && bt__k_aligned16(out) && bt__k_aligned16(table);
        bt__k_embedding_kernel<T><<<bt__k_blocks(n * (vec ? C / VE : C), 256), 256, 0, s>>>(
            (T *)out, (const T *)table, idx, n, C, V, bad, vec);
    })
    BT__K_LAUNCHED("bt_k_embedding");
}

template <typename T>
__global__ void bt__k_embedding_bwd_atomic(float *acc, const T *g, const int32_t *idx, int64_t n, int64_t C, int64_t V,
                                           float scale) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * C; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / C, c = e - i * C, v = idx[i];
        if (v >= 0 && v < V) atomicAdd(acc + v * C + c, scale * bt__k_tof(g[e]));
    }
}
template <typename T> __global__ void bt__k_add_f32_into(T *dst, const float *src, int64_t n) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x)
        dst[e] = bt__k_from<T>(bt__k_tof(dst[e]) + src[e]);
}

#define BT__K_TILE 2048   /* elements per warp tile in the radix sort */
__global__ void bt__k_sort_init(int32_t *keys, int32_t *vals, const int32_t *idx, int64_t n, int32_t V) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int32_t v = idx[i];
        keys[i] = (v >= 0 && v < V) ? v : V;   /* V: the bucket of skipped indices, sorted last */
        vals[i] = (int32_t)i;
    }
}
/* one warp per tile: hist[d * ntiles + tile] = number of keys of the tile whose digit is d */
__global__ void bt__k_sort_hist(const int32_t *keys, int64_t n, int shift, int32_t *hist, int64_t ntiles) {
    __shared__ int32_t cnt[256];
    int64_t tile = blockIdx.x;
    for (int d = threadIdx.x; d < 256; d += 32) cnt[d] = 0;
    __syncwarp();
    int64_t b = tile * BT__K_TILE, e = b + BT__K_TILE < n ? b + BT__K_TILE : n;
    for (int64_t j = b + threadIdx.x; j < e; j += 32) atomicAdd(&cnt[(keys[j] >> shift) & 255], 1);
    __syncwarp();
    for (int d = threadIdx.x; d < 256; d += 32) hist[d * ntiles + tile] = cnt[d];
}
/* exclusive prefix sum of m ints in place, one block of 1024 threads (m is 256 x tiles: small) */
__global__ void bt__k_scan_excl(int32_t *a, int64_t m) {
    __shared__ int32_t sh[1024];
    int t = threadIdx.x;
    int64_t per = (m + 1023) / 1024, b = t * per, e = b + per < m ? b + per : m;
    int32_t sum = 0;
    for (int64_t j = b; j < e; j++) sum += a[j];
    sh[t] = sum;
    __syncthreads();
    for (int off = 1; off < 1024; off <<= 1) {
        int32_t v = t >= off ? sh[t - off] : 0;
        __syncthreads();
        sh[t] += v;
        __syncthreads();
    }
    int32_t run = t ? sh[t - 1] : 0;
    for (int64_t j = b; j < e; j++) { int32_t c = a[j]; a[j] = run; run += c; }
}
/* stable scatter: the warp walks its tile 32 keys at a time; lanes with equal digits rank among
   themselves by lane order, and the running offset of each digit advances after each step */
__global__ void bt__k_sort_scatter(const int32_t *ki, const int32_t *vi, int32_t *ko, int32_t *vo, int64_t n, int shift,
                                   const int32_t *hist, int64_t ntiles) {
    __shared__ int32_t off[256];
    int64_t tile = blockIdx.x;
    int lane = threadIdx.x;
    for (int d = lane; d < 256; d += 32) off[d] = hist[d * ntiles + tile];
    __syncwarp();
    int64_t b = tile * BT__K_TILE, e = b + BT__K_TILE < n ? b + BT__K_TILE : n;
    for (int64_t base = b; base < e; base += 32) {
        int64_t j = base + lane;
        int active = j < e;
        unsigned mask = __ballot_sync(0xffffffffu, active);
        int32_t key = 0, d = 0, leader = 0;
        unsigned peers = 0;
        if (active) {
            key = ki[j]; d = (key >> shift) & 255;
            peers = __match_any_sync(mask, d);
            leader = __ffs(peers) - 1;
            int rank = __popc(peers & ((1u << lane) - 1u));
            int32_t pos = off[d] + rank;
            ko[pos] = key; vo[pos] = vi[j];
        }
        __syncwarp();
        if (active && lane == leader) off[d] += __popc(peers);
        __syncwarp();
    }
}
/* one block per sorted position; the first position of each run of equal keys sums the run */
template <typename T, typename TT>
__global__ void bt__k_embedding_bwd_segsum(TT *gtable, const T *g, const int32_t *sk, const int32_t *sv, int64_t n,
                                           int64_t C, int32_t V, float scale) {
    for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
        int32_t key = sk[p];
        if (key >= V || (p > 0 && sk[p - 1] == key)) continue;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            float acc = 0.f;
            for (int64_t q = p; q < n && sk[q] == key; q++) acc += bt__k_tof(g[(int64_t)sv[q] * C + c]);
            gtable[(int64_t)key * C + c] = bt__k_from<TT>(bt__k_tof(gtable[(int64_t)key * C + c]) + scale * acc);
        }
    }
}
/* table_f32: gtable is fp32 whatever dt is (scale 1 adds the rows as they are, bit for bit) */
static void bt__k_embedding_backward(bt_dtype dt, void *gtable, int table_f32, const void *gout, const int32_t *idx, int64_t n,
                                     int64_t C, int64_t V, float scale, int deterministic, cudaStream_t s) {
    if (n <= 0 || C <= 0 || V <= 0) return;
    if (V >= INT32_MAX || n >= INT32_MAX) bt_error("bt_k_embedding_backward: V = %lld, n = %lld beyond int32", (long long)V, (long long)n);
    if (!deterministic) {
        BT__K_DISPATCH3(dt, "bt_k_embedding_backward", {
            float *acc = (float *)gtable;
            if (dt != BT_F32 && !table_f32) {
                acc = (float *)bt__k_scratch((size_t)(V * C) * sizeof(float), s);
                BT__K_CUDA(cudaMemsetAsync(acc, 0, (size_t)(V * C) * sizeof(float), s), "bt_k_embedding_backward");
            }
            bt__k_embedding_bwd_atomic<T><<<bt__k_blocks(n * C, 256), 256, 0, s>>>(acc, (const T *)gout, idx, n, C, V, scale);
            BT__K_LAUNCHED("bt_k_embedding_backward");
            if (dt != BT_F32 && !table_f32) {
                bt__k_add_f32_into<T><<<bt__k_blocks(V * C, 256), 256, 0, s>>>((T *)gtable, acc, V * C);
                BT__K_LAUNCHED("bt_k_embedding_backward");
                bt_free(acc);
            }
        })
        return;
    }
    int64_t ntiles = (n + BT__K_TILE - 1) / BT__K_TILE;
    int32_t *buf = (int32_t *)bt__k_scratch((size_t)(4 * n + 256 * ntiles) * sizeof(int32_t), s);
    int32_t *ka = buf, *va = buf + n, *kb = buf + 2 * n, *vb = buf + 3 * n, *hist = buf + 4 * n;
    bt__k_sort_init<<<bt__k_blocks(n, 256), 256, 0, s>>>(ka, va, idx, n, (int32_t)V);
    BT__K_LAUNCHED("bt_k_embedding_backward");
    int bits = 1;
    while (bits < 31 && ((int64_t)1 << bits) <= V) bits++;   /* keys are in [0, V] */
    for (int shift = 0; shift < bits; shift += 8) {
        bt__k_sort_hist<<<(unsigned)ntiles, 32, 0, s>>>(ka, n, shift, hist, ntiles);
        BT__K_LAUNCHED("bt_k_embedding_backward");
        bt__k_scan_excl<<<1, 1024, 0, s>>>(hist, 256 * ntiles);
        BT__K_LAUNCHED("bt_k_embedding_backward");
        bt__k_sort_scatter<<<(unsigned)ntiles, 32, 0, s>>>(ka, va, kb, vb, n, shift, hist, ntiles);
        BT__K_LAUNCHED("bt_k_embedding_backward");
        int32_t *t = ka; ka = kb; kb = t; t = va; va = vb; vb = t;
    }
    BT__K_DISPATCH3(dt, "bt_k_embedding_backward", {
        unsigned nb = (unsigned)(n < 65535 ? n : 65535);
        int th = C >= 256 ? 256 : (int)((C + 31) / 32 * 32);
        if (table_f32) bt__k_embedding_bwd_segsum<T, float><<<nb, th, 0, s>>>((float *)gtable, (const T *)gout, ka, va, n, C, (int32_t)V, scale);
        else bt__k_embedding_bwd_segsum<T, T><<<nb, th, 0, s>>>((T *)gtable, (const T *)gout, ka, va, n, C, (int32_t)V, scale);
    })
    BT__K_LAUNCHED("bt_k_embedding_backward");
    bt_free(buf);
}
BTDEF void bt_k_embedding_backward(bt_dtype dt, void *gtable, const void *gout, const int32_t *idx, int64_t n, int64_t C,
                                   int64_t V, int deterministic, cudaStream_t s) {
    bt__k_embedding_backward(dt, gtable, dt == BT_F32, gout, idx, n, C, V, 1.f, deterministic, s);
}
BTDEF void bt_k_embedding_backward_f32(bt_dtype dt, float *gtable, const void *gout, const int32_t *idx, int64_t n, int64_t C,
                                       int64_t V, float scale, int deterministic, cudaStream_t s) {
    bt__k_embedding_backward(dt, gtable, 1, gout, idx, n, C, V, scale, deterministic, s);
}

/* ---- 8. fused cross-entropy over a padded vocabulary ----------------------------------------------
   Forward, per row i: lse = log sum_{j < V} exp(x_j), loss = lse - x_{t_i} (0 for ignored rows).
   One block of 256 threads per row, one pass over the V real logits: each thread loads 4 16-byte
   vectors at a time (all in flight before the first use), takes their max, rescales its running
   sum once per chunk, and adds the chunk's exp(x - m) in 4 independent partial sums (the old loop
   updated (max, sum) element by element, a serial chain that kept one load in flight); the
   threads' (m, s) are merged at the end. Reads the V logits once (16-byte vectors when Vp and the
   pointer allow, else element loads), writes 8 bytes per row.
   Backward: glogits = gloss_i (exp(x_j - lse) - [j == t_i]) for j < V, 0 for V <= j < Vp and for
   ignored rows: reads V and writes Vp logits per row, no max/sum pass (lse is saved). */
/* 2^x in one MUFU instruction (2 ulp; -inf gives 0) */
__device__ __forceinline__ float bt__k_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
/* a chunk of U x VE logits into a thread's running (max m, sum sm of exp(x - m)): one rescale per
   chunk, the exps in U independent partial sums (added in a fixed order: the same bits in both
   cross-entropy kernels) */
template <int U, int VE>
__device__ __forceinline__ void bt__k_ms_chunk(const float (&xv)[U][VE], float &m, float &sm) {
    static_assert(U == 4, "the partial sums are added as (0 + 1) + (2 + 3)");
    float cm = -INFINITY, part[U];
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int e = 0; e < VE; e++) cm = fmaxf(cm, xv[u][e]);
    if (cm > m) { sm *= expf(m - cm); m = cm; }
    if (m == -INFINITY) return;
    float nm = -m * 1.4426950408889634f;   /* exp(x - m) = 2^(x log2 e - m log2 e): one FFMA, one MUFU */
#pragma unroll
    for (int u = 0; u < U; u++) {
        part[u] = 0.f;
#pragma unroll
        for (int e = 0; e < VE; e++) part[u] += bt__k_ex2(fmaf(xv[u][e], 1.4426950408889634f, nm));
    }
    sm += (part[0] + part[1]) + (part[2] + part[3]);
}
/* thread 0 of a row: loss = lse - x_t (0 for an ignored row; a target outside [0, V) sets *bad) */
template <typename T>
__device__ __forceinline__ void bt__k_xent_row_loss(float *losses, float *lse, int64_t row, float l, int32_t t, const T *xr,
                                                    int64_t V, int ignore, int *bad) {
    float loss = 0.f;
    if (t != ignore) {
        if (t >= 0 && t < V) loss = l - bt__k_tof(xr[t]);
        else if (bad) *bad = 1;
    }
    losses[row] = loss;
    if (lse) lse[row] = l;
}
template <typename T>
__global__ void __launch_bounds__(256) bt__k_xent_kernel(float *losses, float *lse, const T *logits, const int32_t *tg,
                                                         int64_t N, int64_t V, int64_t Vp, int ignore, int *bad, int vec) {
    __shared__ float sh[64];
    const int VE = 16 / sizeof(T), U = 4;
    for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
        const T *xr = logits + row * Vp;
        float m = -INFINITY, sm = 0.f;
        if (vec) {
            int64_t nc = (V + VE - 1) / VE;
            for (int64_t c0 = threadIdx.x; c0 < nc; c0 += (int64_t)U * blockDim.x) {
                float xv[U][VE];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    int64_t c = c0 + (int64_t)u * blockDim.x;
                    if (c < nc) {
                        T a[VE];
                        bt__k_ld16(a, xr + c * VE);
#pragma unroll
                        for (int e = 0; e < VE; e++) xv[u][e] = c * VE + e < V ? bt__k_tof(a[e]) : -INFINITY;
                    } else {
#pragma unroll
                        for (int e = 0; e < VE; e++) xv[u][e] = -INFINITY;
                    }
                }
                bt__k_ms_chunk<U, VE>(xv, m, sm);
            }
        } else {
            for (int64_t j = threadIdx.x; j < V; j += blockDim.x) bt__k_ms_add(m, sm, bt__k_tof(xr[j]));
        }
        bt__k_rms(m, sm, sh);
        if (threadIdx.x == 0) bt__k_xent_row_loss(losses, lse, row, m + logf(sm), tg[row], xr, V, ignore, bad);
    }
}
template <typename T>
__global__ void bt__k_xent_bwd_kernel(T *gl, const T *logits, const float *lse, const int32_t *tg, const float *gloss,
                                      int64_t N, int64_t V, int64_t Vp, int ignore, int vec) {
    const int VE = 16 / sizeof(T);
    for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
        const T *xr = logits + row * Vp;
        T *gr = gl + row * Vp;
        int32_t t = tg[row];
        float gv = t == ignore ? 0.f : gloss[row], l = lse[row];
        if (vec) {
            for (int64_t c = threadIdx.x; c < Vp / VE; c += blockDim.x) {
                T a[VE];
                if (c * VE < V) bt__k_ld16(a, xr + c * VE);
#pragma unroll
                for (int e = 0; e < VE; e++) {
                    int64_t j = c * VE + e;
                    a[e] = bt__k_from<T>(j < V ? gv * (expf(bt__k_tof(a[e]) - l) - (j == t ? 1.f : 0.f)) : 0.f);
                }
                bt__k_st16(gr + c * VE, a);
            }
        } else {
            for (int64_t j = threadIdx.x; j < Vp; j += blockDim.x)
                gr[j] = bt__k_from<T>(j < V ? gv * (expf(bt__k_tof(xr[j]) - l) - (j == t ? 1.f : 0.f)) : 0.f);
        }
    }
}
BTDEF void bt_k_cross_entropy(bt_dtype dt, float *losses, float *lse, const void *logits, const int32_t *targets,
                              int64_t N, int64_t V, int64_t Vp, int ignore_index, int *bad, cudaStream_t s) {
    if (N <= 0) return;
    if (V <= 0 || V > Vp) bt_error("bt_k_cross_entropy: V = %lld, Vp = %lld (need 0 < V <= Vp)", (long long)V, (long long)Vp);
    unsigned nb = (unsigned)(N < 1048576 ? N : 1048576);
    BT__K_DISPATCH3(dt, "bt_k_cross_entropy", {
        int vec = (Vp * (int64_t)sizeof(T)) % 16 == 0 && bt__k_aligned16(logits);
        bt__k_xent_kernel<T><<<nb, 256, 0, s>>>(losses, lse, (const T *)logits, targets, N, V, Vp, ignore_index, bad, vec);
    })
    BT__K_LAUNCHED("bt_k_cross_entropy");
}
BTDEF void bt_k_cross_entropy_backward(bt_dtype dt, void *glogits, const void *logits, const float *lse,
                                       const int32_t *targets, const float *gloss, int64_t N, int64_t V, int64_t Vp,
                                       int ignore_index, cudaStream_t s) {
    if (N <= 0) return;
    if (V <= 0 || V > Vp) bt_error("bt_k_cross_entropy_backward: V = %lld, Vp = %lld", (long long)V, (long long)Vp);
    unsigned nb = (unsigned)(N < 1048576 ? N : 1048576);
    BT__K_DISPATCH3(dt, "bt_k_cross_entropy_backward", {
        int vec = (Vp * (int64_t)sizeof(T)) % 16 == 0 && bt__k_aligned16(logits) && bt__k_aligned16(glogits);
        bt__k_xent_bwd_kernel<T><<<nb, 256, 0, s>>>((T *)glogits, (const T *)logits, lse, targets, gloss, N, V, Vp,
                                                    ignore_index, vec);
    })
    BT__K_LAUNCHED("bt_k_cross_entropy_backward");
}
/* Fused forward + backward, in place, a block of 512 threads a row. The row is staged in shared
   memory in chunks of 4 x 512 16-byte vectors, all requested at the start; thread tid reads the
   vectors c = tid + 512 i of a chunk. Pass 1 folds each chunk into the thread's running (max, sum
   of exp) as soon as it has landed (the forward kernel's online form, the same partition of the
   row: the same bits), the block merges the pairs into lse; pass 2 writes the gradient
   gv (exp(x - lse) - [j = t]) over the row. On sm_90 a chunk is one bulk copy by the copy engine
   completing an mbarrier; elsewhere each thread cp.asyncs its vectors (a commit group a chunk). The
   target's owner writes the loss. Two rows of GPT-2's bf16 vocabulary (100 KB each) fit an SM, so
   one block's sums and gradient overlap the other's loads. Global traffic per row: V read, Vp
   written. Measured on an H100 (bench/RESULTS.md): the element path, not the memory, was the limit;
   persistent blocks loading the next row during this row's gradient gained nothing over a block a
   row and were removed. Rows wider than the shared memory a block may have, or unaligned ones,
   take the two kernels. */
#define BT__K_XF_THREADS 512
#define BT__K_XF_U 4        /* slots a thread has in a chunk */
#define BT__K_XF_CHUNKS 8   /* at most, a row (the host checks) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define BT__K_XF_BULK 1
#endif
/* wait until at most n of the thread's commit groups are in flight (n >= 4 waits for 4: sooner) */
__device__ __forceinline__ void bt__k_cp_wait_upto(int n) {
    if (n <= 0) bt__k_cp_wait<0>();
    else if (n == 1) bt__k_cp_wait<1>();
    else if (n == 2) bt__k_cp_wait<2>();
    else if (n == 3) bt__k_cp_wait<3>();
    else bt__k_cp_wait<4>();
}
/* start loading chunk k of row xr into the block's (fresh) staging row */
template <typename T>
__device__ __forceinline__ void bt__k_xf_fetch(uint4 *slots, const T *xr, int64_t nc, int k, uint64_t *bars) {
    const int VE = 16 / sizeof(T);
    const int64_t c0 = (int64_t)k * BT__K_XF_U * blockDim.x;
#ifdef BT__K_XF_BULK
    if (threadIdx.x == 0) {
        int64_t n = nc - c0 < (int64_t)BT__K_XF_U * blockDim.x ? nc - c0 : (int64_t)BT__K_XF_U * blockDim.x;
        bt__k_bulk_load((uint32_t)__cvta_generic_to_shared(slots + c0), xr + c0 * VE, (uint32_t)(n * 16),
                        (uint32_t)__cvta_generic_to_shared(bars + k));
    }
#else
    (void)bars;
#pragma unroll
    for (int u = 0; u < BT__K_XF_U; u++) {
        int64_t c = c0 + threadIdx.x + (int64_t)u * blockDim.x;
        if (c < nc) bt__k_cp16(&slots[c], xr + c * VE);
    }
    bt__k_cp_commit();
#endif
}
/* wait for chunk k of the row (of nch chunks) */
__device__ __forceinline__ void bt__k_xf_wait(int k, int nch, uint64_t *bars) {
#ifdef BT__K_XF_BULK
    (void)nch;
    bt__k_mbar_wait((uint32_t)__cvta_generic_to_shared(bars + k), 0);
#else
    (void)k; (void)bars;
    bt__k_cp_wait_upto(nch - 1 - k);
#endif
}
/* The per-element work is the limit (ncu: the kernel at ~45% of DRAM bandwidth), so a vector wholly
   inside the row's V logits and without the target (all but one or two a row) takes the short path:
   p = 2^(x log2 e - lse log2 e) (one FFMA, one MUFU), gv p, no compares; the others the checked one. */
/* the gradient of the row's vector c (below V / VE, staged) in place, short path */
template <typename T>
__device__ __forceinline__ void bt__k_xf_grad_fast(T *xr, int64_t c, const uint4 *staged, float gv, float nls) {
    const int VE = 16 / sizeof(T);
    T a[VE];
    memcpy(a, staged, 16);
#pragma unroll
    for (int e = 0; e < VE; e++) a[e] = bt__k_from<T>(gv * bt__k_ex2(fmaf(bt__k_tof(a[e]), 1.4426950408889634f, nls)));
    bt__k_st16(xr + c * VE, a);
}
/* checked path: the vector holding the target (its owner writes the loss), the one across V, and
   the padding past V (staged NULL, written 0) */
template <typename T>
__device__ __noinline__ void bt__k_xf_grad_edge(T *xr, int64_t c, const uint4 *staged, int64_t V, int32_t t, int scored, float gv,
                                                float ls, float nls, float *loss) {
    const int VE = 16 / sizeof(T);
    T a[VE];
    if (staged) memcpy(a, staged, 16);
#pragma unroll
    for (int e = 0; e < VE; e++) {
        int64_t j = c * VE + e;
        float x = staged ? bt__k_tof(a[e]) : 0.f;
        if (scored && j == t) *loss = ls - x;
        a[e] = bt__k_from<T>(j < V ? gv * (bt__k_ex2(fmaf(x, 1.4426950408889634f, nls)) - (j == t ? 1.f : 0.f)) : 0.f);
    }
    bt__k_st16(xr + c * VE, a);
}
template <typename T>
__global__ void __launch_bounds__(BT__K_XF_THREADS, 2) bt__k_xent_fused_kernel(float *losses, float *lse, T *logits, const int32_t *tg,
                                                                             const float *gloss, int64_t V, int64_t Vp, int ignore,
                                                                             int *bad) {
    extern __shared__ uint4 bt__k_xf_row[];   /* the row's first nc vectors */
    __shared__ float sh[64];
    __shared__ uint64_t bars[BT__K_XF_CHUNKS];
    const int VE = 16 / sizeof(T), U = BT__K_XF_U;
    const int64_t nc = (V + VE - 1) / VE, nfull = V / VE, nvec = Vp / VE, step = (int64_t)U * blockDim.x;
    const int nch = (int)((nc + step - 1) / step);
#ifdef BT__K_XF_BULK
    if (threadIdx.x == 0)
        for (int k = 0; k < nch; k++) bt__k_mbar_init((uint32_t)__cvta_generic_to_shared(bars + k), 1);
    __syncthreads();
#endif
    const int64_t row = blockIdx.x;
    T *xr = logits + row * Vp;
    for (int k = 0; k < nch; k++) bt__k_xf_fetch(bt__k_xf_row, xr, nc, k, bars);
    float m = -INFINITY, sm = 0.f;
    for (int k = 0; k < nch; k++) {
        bt__k_xf_wait(k, nch, bars);
        float xv[U][VE];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t c = threadIdx.x + (k * step) + (int64_t)u * blockDim.x;
            T a[VE];
            if (c < nc) memcpy(a, &bt__k_xf_row[c], 16);
            if (c < nfull) {
#pragma unroll
                for (int e = 0; e < VE; e++) xv[u][e] = bt__k_tof(a[e]);
            } else {
#pragma unroll
                for (int e = 0; e < VE; e++) xv[u][e] = c < nc && c * VE + e < V ? bt__k_tof(a[e]) : -INFINITY;
            }
        }
        bt__k_ms_chunk<U, VE>(xv, m, sm);
    }
    bt__k_rms(m, sm, sh);
    const float ls = m + logf(sm), nls = -ls * 1.4426950408889634f;
    const int32_t t = tg[row];
    const int scored = t != ignore && t >= 0 && t < V;
    const int64_t ct = scored ? t / VE : -1;   /* the target's vector */
    if (threadIdx.x == 0) {
        if (lse) lse[row] = ls;
        if (!scored) losses[row] = 0.f;
        if (!scored && t != ignore && bad) *bad = 1;
    }
    const float gv = t == ignore ? 0.f : gloss[row];
    for (int64_t c = threadIdx.x; c < nvec; c += blockDim.x) {   /* the staged vectors each thread read */
        if (c < nfull && c != ct) bt__k_xf_grad_fast(xr, c, &bt__k_xf_row[c], gv, nls);
        else bt__k_xf_grad_edge(xr, c, c < nc ? &bt__k_xf_row[c] : NULL, V, t, scored, gv, ls, nls, losses + row);
    }
}
BTDEF void bt_k_cross_entropy_fused(bt_dtype dt, float *losses, float *lse, void *logits, const int32_t *targets,
                                    const float *gloss, int64_t N, int64_t V, int64_t Vp, int ignore_index, int *bad,
                                    cudaStream_t s) {
    if (N <= 0) return;
    if (V <= 0 || V > Vp) bt_error("bt_k_cross_entropy_fused: V = %lld, Vp = %lld (need 0 < V <= Vp)", (long long)V, (long long)Vp);
    int done = 0, optin = 0;
    BT__K_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, bt__k_device()), "bt_k_cross_entropy_fused");
    BT__K_DISPATCH3(dt, "bt_k_cross_entropy_fused", {
        const int64_t VE = 16 / (int64_t)sizeof(T);
        size_t smem = (size_t)((V + VE - 1) / VE) * 16;
        int64_t nch = ((V + VE - 1) / VE + BT__K_XF_U * BT__K_XF_THREADS - 1) / (BT__K_XF_U * BT__K_XF_THREADS);   /* chunks a row */
        if (Vp % VE == 0 && bt__k_aligned16(logits) && smem + 512 <= (size_t)optin && nch <= BT__K_XF_CHUNKS) {
            BT__K_CUDA(cudaFuncSetAttribute(bt__k_xent_fused_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                       "bt_k_cross_entropy_fused");
            const int64_t most = (int64_t)1 << 30;   /* rows a launch (a block each) */
            for (int64_t r0 = 0; r0 < N; r0 += most) {
                unsigned nb = (unsigned)(N - r0 < most ? N - r0 : most);
                bt__k_xent_fused_kernel<T><<<nb, BT__K_XF_THREADS, smem, s>>>(losses + r0, lse ? lse + r0 : NULL, (T *)logits + r0 * Vp,
                                                                              targets + r0, gloss + r0, V, Vp, ignore_index, bad);
            }
            done = 1;
        }
    })
    if (done) { BT__K_LAUNCHED("bt_k_cross_entropy_fused"); return; }
    float *tmp = lse ? NULL : (float *)bt__k_scratch((size_t)N * sizeof(float), s);   /* the backward needs lse */
    bt_k_cross_entropy(dt, losses, lse ? lse : tmp, logits, targets, N, V, Vp, ignore_index, bad, s);
    bt_k_cross_entropy_backward(dt, logits, logits, lse ? lse : tmp, targets, gloss, N, V, Vp, ignore_index, s);
    bt_free(tmp);
}

/* ---- 9. attention: tiled, online softmax (flash-style), strided, causal or not -----------------
   Per head: S = scale Q K^T with S_ij = -inf for j > i, P = softmax_j(S), out = P V,
   lse_i = log sum_j exp(S_ij). Nothing of size T x T touches memory: tiles of 64 queries x 64
   keys live in registers and shared memory.
   Forward, one block per (64-query tile, b h), heaviest (last) tiles launched first: Q tile in
   shared memory; for each key tile up to the diagonal (tiles above it are skipped) load K, V,
   S = Q K^T, keep per row a running max m and sum l of exp2(S log2e - m), rescale the output
   accumulator by exp2(m_old - m_new), add P V; out = acc / l, lse = (m + log2 l) ln 2.
   Backward (lse saved, P recomputed), with Dvec_i = sum_d dO_id O_id (one small kernel):
     dP = dO V^T, dS = P (dP - Dvec), dV = P^T dO, dK = scale dS^T Q, dQ = scale dS K.
   Two kernels and no atomics (deterministic): one block per key tile walks the query tiles at
   and below the diagonal and accumulates dK, dV in registers (S^T, dP^T computed directly in the
   transposed orientation); one block per query tile walks the key tiles and accumulates dQ.
   The price of determinism is recomputing S and dP in the dQ pass: 7 tile products instead of 5.
   Flops (causal half): 4 B H T^2 D / 2 forward; backward 14 B H T^2 D / 2 (10 / 2 useful).
   Traffic: per query tile, the K and V rows below it (Q tile count / 2 re-reads of K, V per head,
   mostly from L2); outputs written once; lse 4 bytes per row; Dvec 4 bytes per row of scratch.
   Paths:
     bf16 / f16: tensor cores, mma.sync m16n8k16 (fp32 accumulate) fed by ldmatrix from shared
       memory tiles (rows padded by 16 bytes: conflict-free), 4 warps x 16 rows, K/V (resp. Q/dO)
       tiles double-buffered with cp.async; P and dS rounded to the dtype for their products.
     f32: FFMA only (fp32 parity with PyTorch with TF32 off): 128 threads, each an 8 x 4 block of
       the 64 x 64 score tile and of the output; row-major tiles with XOR-swizzled 16-byte chunks
       (conflict-free float4 reads along rows and down columns); the backward computes dS once
       (dK/dV kernel) and keeps it in a scratch buffer for the dQ kernel.
     f32 with precision BT_MATMUL_TF32: the same kernels (templates over the MMA shape) on mma.sync m16n8k8 tf32 (fp32
       accumulate), fp32 shared tiles of pitch D + 4, operands rounded by cvt.rna.tf32 as they are
       read; 10-bit mantissa operands, so about 1e-3 relative error instead of fp32's 1e-6.
   Q, K, V, out and the gradients are [B, H, T, D] read or written through element strides
   {batch, head, token} (D contiguous): the GPT-2 [B, T, H, D] layout needs no copies. Any D up
   to 128: it is padded with zeros to 32, 64 or 128 inside the kernels. */
#define BT__K_ATT_LOG2E 1.4426950408889634f
#define BT__K_ATT_LN2 0.6931471805599453f

typedef struct {
    const void *q, *k, *v, *o, *go;
    void *out, *gq, *gk, *gv;
    int64_t sq[3], sk[3], sv[3], so[3], sgo[3], sgq[3], sgk[3], sgv[3];
    float *lse_out;
    const float *lse, *dvec;
    float *lse2;        /* fused wgmma backward: -lse log2(e) a row, written by the Dvec pre-pass (a multiply a
                           row there instead of one for every two scores in the kernel; the same fp32 product) */
    float *ds;          /* f32 backward: dS scratch of heads bh0 .. bh1 - 1 */
    int64_t BH, bh0, bh1;   /* heads of this launch: bh0 .. bh1 - 1 */
    int64_t sec;        /* wgmma kernels: heads per section of the work order (bt__k_att_work) */
    float *dvec_out;    /* wgmma dQ kernel: writes Dvec of its rows here (no pre-pass) when set */
    int turns;          /* wgmma backward kernels: the two warpgroups take turns issuing products; the forward's
                           variants with turns: in items of at least this many key tiles */
    int *ctr;           /* persistent wgmma forward: work items taken from this counter (zeroed per launch),
                           as the SMs free up; NULL: a fixed snake order (bt__k_att_item) */
    float *dqacc;       /* fused wgmma backward: fp32 dQ sums, a 128 x 64 tile per (head - bh0, query tile) */
    int *dqcnt;         /* fused wgmma backward: dQ parts added per (head - bh0, query tile), zeroed per launch */
    unsigned long long *trace;   /* wgmma forward, BT_ATT_TRACE: 8 clocks a work item (bt__k_att_fwd_trace) */
    float *cs_part;     /* fused wgmma backward, may be NULL: column sums of gq, gk, gv over each warp's 16 rows,
                           fp32 [B][cs_slabs][3][H][D] (bt__k_wg_colsum) */
    int cs_slabs;       /* (T + 15) / 16 */
    int H, T, D, vec, vec_out;
    int out16;          /* wgmma forward: every output row 16-byte aligned (O then leaves through shared memory) */
    int causal;         /* 1: key j > query i masked; 0: every query sees every key */
    int qoff;           /* wgmma forward: query tile qt starts at row qt BM - qoff (causal, BM not dividing T:
                           the tiles end at T, so the partial tile is the first, which sees fewest keys) */
    float c2, scale;   /* c2 = scale log2(e) */
} bt__k_attp;
/* the wgmma forward's tensor maps (a __grid_constant__ parameter of its own: the other kernels' bt__k_attp
   stays small): q (boxes of BM rows), k, v (128 rows), 64 columns a box, 128-byte swizzle; bit i of hrow:
   m[i]'s dimensions are (D, H, T, B) (a head's stride below a row's), else (D, T, H, B) */
typedef struct {
    CUtensorMap m[3];
    int hrow;
} bt__k_att_maps;
typedef void (*bt__k_att_fwd_kern)(bt__k_attp, bt__k_att_maps);

__device__ __forceinline__ int64_t bt__k_att_off(const int64_t *s, int64_t bh, int H) {
    int64_t b = bh / H;
    return b * s[0] + (bh - b * H) * s[1];
}
/* key hidden from query row: above the diagonal when causal, past the end (key >= T) when not
   (causal covers the end for every row < T; rows >= T are computed but never stored) */
__device__ __forceinline__ int bt__k_att_masked(const bt__k_attp &p, int key, int row) {
    return p.causal ? key > row : key >= p.T;
}
__device__ __forceinline__ void bt__k_ldsm4(uint32_t r[4], const void *p) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
__device__ __forceinline__ void bt__k_ldsm4t(uint32_t r[4], const void *p) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
/* c (16 x 8, fp32) += a (16 x 16) b (16 x 8). Fragments (g = lane / 4, t = lane % 4):
   a: {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}, b: {(k 2t..2t+1, n g), (k 2t+8.., n g)},
   c: {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}. */
__device__ __forceinline__ void bt__k_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, __nv_bfloat16 *) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void bt__k_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, __half *) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t bt__k_pack2(float x, float y, __nv_bfloat16 *) {
    __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    uint32_t u; memcpy(&u, &v, 4); return u;
}
__device__ __forceinline__ uint32_t bt__k_pack2(float x, float y, __half *) {
    __half2 v = __floats2half2_rn(x, y);
    uint32_t u; memcpy(&u, &v, 4); return u;
}
/* fragments from a shared tile of pitch ld: A (16 x 16) at (m0, k0) of a row-major [m][k] tile;
   B for the two n-tiles n0 and n0 + 8 (b[0..1], b[2..3]) at k0 of an [n][k] tile (nk) or of a
   [k][n] tile (kn, transposing load) */
template <typename T> __device__ __forceinline__ void bt__k_fragA(uint32_t a[4], const T *sm, int ld, int m0, int k0) {
    int l = threadIdx.x & 31, i = l >> 3;
    bt__k_ldsm4(a, sm + (m0 + (i & 1) * 8 + (l & 7)) * ld + k0 + (i >> 1) * 8);
}
template <typename T> __device__ __forceinline__ void bt__k_fragB_nk(uint32_t b[4], const T *sm, int ld, int n0, int k0) {
    int l = threadIdx.x & 31, i = l >> 3;
    bt__k_ldsm4(b, sm + (n0 + (i >> 1) * 8 + (l & 7)) * ld + k0 + (i & 1) * 8);
}
template <typename T> __device__ __forceinline__ void bt__k_fragB_kn(uint32_t b[4], const T *sm, int ld, int k0, int n0) {
    int l = threadIdx.x & 31, i = l >> 3;
    bt__k_ldsm4t(b, sm + (k0 + (i & 1) * 8 + (l & 7)) * ld + n0 + (i >> 1) * 8);
}
/* rows [r0, r0 + 64) of one head (row r at g + r st) into a [64][DP + VE] shared tile (VE = the
   elements of 16 bytes: 8 for bf16/f16, 4 for f32), zeros past row T or column D; 16-byte cp.async
   chunks where whole and aligned, else element loads. */
template <typename T, int DP>
__device__ __forceinline__ void bt__k_att_tile(T *sm, const T *g, int64_t st, int r0, int Tn, int D, int vec) {
    const int VE = 16 / (int)sizeof(T), CH = DP / VE, LD = DP + VE;
    for (int c = threadIdx.x; c < 64 * CH; c += blockDim.x) {
        int r = c / CH, d0 = (c - r * CH) * VE;
        T *dst = sm + r * LD + d0;
        int ok = r0 + r < Tn;
        const T *src = g + (int64_t)(r0 + r) * st + d0;
        if (ok && vec && d0 + VE <= D) {
            bt__k_cp16(dst, src);
        } else {
            T tmp[VE];
#pragma unroll
            for (int e = 0; e < VE; e++) tmp[e] = (ok && d0 + e < D) ? src[e] : bt__k_from<T>(0.f);
            bt__k_st16(dst, tmp);
        }
    }
}
/* store the pair (x, y) to columns d, d + 1 of a row (d even), as one 4-byte store when allowed */
template <typename T> __device__ __forceinline__ void bt__k_att_st2(T *row, int d, int D, float x, float y, int vec) {
    if (vec && d + 1 < D) {
        uint32_t u = bt__k_pack2(x, y, (T *)0);
        *reinterpret_cast<uint32_t *>(row + d) = u;
    } else {
        if (d < D) row[d] = bt__k_from<T>(x);
        if (d + 1 < D) row[d + 1] = bt__k_from<T>(y);
    }
}

/* float rows: element stores (vec_out asks only 4-byte alignment) */
__device__ __forceinline__ void bt__k_att_st2(float *row, int d, int D, float x, float y, int) {
    if (d < D) row[d] = x;
    if (d + 1 < D) row[d + 1] = y;
}

/* -- f32 data on TF32 tensor cores (precision BT_MATMUL_TF32): the tensor-core kernels below on
   mma.sync m16n8k8 tf32 (fp32 accumulate) with fp32 shared tiles of pitch DP + 4 floats. Operands
   are rounded to tf32 (cvt.rna: 10-bit mantissa) as they are read from shared memory; the softmax
   statistics, P and dS stay fp32 in registers and are rounded only as operands of their products.
   A pitch of DP + 4 (4 mod 32 banks) makes every fragment read below conflict-free: lane (g, t)
   reads row g, column t (bank 4 g + t), or rows 2t, 2t + 1, column g (banks 8 t + g, 8 t + 4 + g).
   Fragments (g = lane / 4, t = lane % 4): a {(g, t), (g+8, t), (g, t+4), (g+8, t+4)}, b {(k t, n g),
   (k t+4, n g)}, c as in m16n8k16. A product whose A comes from an accumulator (P V, dS K, P^T dO,
   dS^T Q) sums its k in a permuted order: the accumulator holds columns 2t, 2t+1 of an n-tile where
   the A fragment wants k = t, t+4, so k = t is taken as column 2t and k = t+4 as column 2t+1, and
   B's rows are read in the same order (rows 2t, 2t+1 of the [k][n] tile). -- */
__device__ __forceinline__ uint32_t bt__k_tf32(float x) {
    uint32_t u;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x));
    return u;
}
__device__ __forceinline__ void bt__k_mma8(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* A (16 x 8) at (m0, k0) of a row-major [m][k] fp32 tile of pitch ld */
__device__ __forceinline__ void bt__k_fragA8(uint32_t a[4], const float *sm, int ld, int m0, int k0) {
    int l = threadIdx.x & 31;
    const float *x = sm + (m0 + (l >> 2)) * ld + k0 + (l & 3);
    a[0] = bt__k_tf32(x[0]); a[1] = bt__k_tf32(x[8 * ld]); a[2] = bt__k_tf32(x[4]); a[3] = bt__k_tf32(x[8 * ld + 4]);
}
/* B (8 x 8) of n-tile n0 at k0 of an [n][k] tile (b[0..1]) */
__device__ __forceinline__ void bt__k_fragB8_nk(uint32_t b[2], const float *sm, int ld, int n0, int k0) {
    int l = threadIdx.x & 31;
    const float *x = sm + (n0 + (l >> 2)) * ld + k0 + (l & 3);
    b[0] = bt__k_tf32(x[0]); b[1] = bt__k_tf32(x[4]);
}
/* B of n-tile n0 at k0 of a [k][n] tile, k in the permuted order (rows k0 + 2t, k0 + 2t + 1) */
__device__ __forceinline__ void bt__k_fragB8_kn(uint32_t b[2], const float *sm, int ld, int k0, int n0) {
    int l = threadIdx.x & 31;
    const float *x = sm + (k0 + 2 * (l & 3)) * ld + n0 + (l >> 2);
    b[0] = bt__k_tf32(x[0]); b[1] = bt__k_tf32(x[ld]);
}
/* A from an accumulator n-tile, in the permuted k order */
__device__ __forceinline__ void bt__k_fragA8_acc(uint32_t a[4], const float c[4]) {
    a[0] = bt__k_tf32(c[0]); a[1] = bt__k_tf32(c[2]); a[2] = bt__k_tf32(c[1]); a[3] = bt__k_tf32(c[3]);
}

/* -- the MMA shapes the tensor-core kernels are written over. E: the shared tiles' element type;
   KS: the k of one MMA. frag_a: A (16 x KS) at (m0, k0) of a row-major [m][k] tile; mma_nk /
   mma_kn: c0 += A B and c1 += A B' for the n-tiles n0 and n0 + 8 of an [n][k] / a [k][n] tile;
   frag_acc: A for k step kk from a 16 x 64 accumulator (8 n-tiles), as the product's k order
   wants it; st2: a pair of outputs into a row. -- */
template <typename T> struct bt__k_mma16 {   /* bf16 / f16: m16n8k16 fed by ldmatrix */
    typedef T E;
    enum { KS = 16 };
    static __device__ __forceinline__ void frag_a(uint32_t a[4], const E *sm, int ld, int m0, int k0) {
        bt__k_fragA(a, sm, ld, m0, k0);
    }
    static __device__ __forceinline__ void mma_nk(float c0[4], float c1[4], const uint32_t a[4], const E *sm, int ld, int n0, int k0) {
        uint32_t b[4];
        bt__k_fragB_nk(b, sm, ld, n0, k0);
        bt__k_mma(c0, a, b[0], b[1], (E *)0);
        bt__k_mma(c1, a, b[2], b[3], (E *)0);
    }
    static __device__ __forceinline__ void mma_kn(float c0[4], float c1[4], const uint32_t a[4], const E *sm, int ld, int k0, int n0) {
        uint32_t b[4];
        bt__k_fragB_kn(b, sm, ld, k0, n0);
        bt__k_mma(c0, a, b[0], b[1], (E *)0);
        bt__k_mma(c1, a, b[2], b[3], (E *)0);
    }
    static __device__ __forceinline__ void frag_acc(uint32_t a[4], const float c[8][4], int kk) {
        a[0] = bt__k_pack2(c[2 * kk][0], c[2 * kk][1], (E *)0); a[1] = bt__k_pack2(c[2 * kk][2], c[2 * kk][3], (E *)0);
        a[2] = bt__k_pack2(c[2 * kk + 1][0], c[2 * kk + 1][1], (E *)0); a[3] = bt__k_pack2(c[2 * kk + 1][2], c[2 * kk + 1][3], (E *)0);
    }
};
struct bt__k_mma_tf32 {   /* f32 data: m16n8k8 tf32 */
    typedef float E;
    enum { KS = 8 };
    static __device__ __forceinline__ void frag_a(uint32_t a[4], const E *sm, int ld, int m0, int k0) {
        bt__k_fragA8(a, sm, ld, m0, k0);
    }
    static __device__ __forceinline__ void mma_nk(float c0[4], float c1[4], const uint32_t a[4], const E *sm, int ld, int n0, int k0) {
        uint32_t b[2];
        bt__k_fragB8_nk(b, sm, ld, n0, k0);
        bt__k_mma8(c0, a, b[0], b[1]);
        bt__k_fragB8_nk(b, sm, ld, n0 + 8, k0);
        bt__k_mma8(c1, a, b[0], b[1]);
    }
    static __device__ __forceinline__ void mma_kn(float c0[4], float c1[4], const uint32_t a[4], const E *sm, int ld, int k0, int n0) {
        uint32_t b[2];
        bt__k_fragB8_kn(b, sm, ld, k0, n0);
        bt__k_mma8(c0, a, b[0], b[1]);
        bt__k_fragB8_kn(b, sm, ld, k0, n0 + 8);
        bt__k_mma8(c1, a, b[0], b[1]);
    }
    static __device__ __forceinline__ void frag_acc(uint32_t a[4], const float c[8][4], int kk) { bt__k_fragA8_acc(a, c[kk]); }
};
/* c[nt] += A (16 rows at m0 of As) B^T for the 8 n-tiles of a 64-row [n][k] tile Bs, k < DP */
template <typename P, int DP>
__device__ __forceinline__ void bt__k_tc_abt(float c[8][4], const typename P::E *As, const typename P::E *Bs, int ld, int m0) {
#pragma unroll
    for (int kd = 0; kd < DP / P::KS; kd++) {
        uint32_t a[4];
        P::frag_a(a, As, ld, m0, kd * P::KS);
#pragma unroll
        for (int nt = 0; nt < 8; nt += 2) P::mma_nk(c[nt], c[nt + 1], a, Bs, ld, nt * 8, kd * P::KS);
    }
}
/* o[dn] += X B for X a 16 x 64 accumulator and B a [64][DP] tile */
template <typename P, int DP>
__device__ __forceinline__ void bt__k_tc_xb(float o[DP / 8][4], const float x[8][4], const typename P::E *Bs, int ld) {
#pragma unroll
    for (int kk = 0; kk < 64 / P::KS; kk++) {
        uint32_t a[4];
        P::frag_acc(a, x, kk);
#pragma unroll
        for (int dn = 0; dn < DP / 8; dn += 2) P::mma_kn(o[dn], o[dn + 1], a, Bs, ld, kk * P::KS, dn * 8);
    }
}

/* o[dn] += X B and o2[dn] += X2 B2 in one pass over k (the dK/dV pair) */
template <typename P, int DP>
__device__ __forceinline__ void bt__k_tc_xb2(float o[DP / 8][4], const float x[8][4], const typename P::E *Bs, float o2[DP / 8][4],
                                             const float x2[8][4], const typename P::E *B2s, int ld) {
#pragma unroll
    for (int kk = 0; kk < 64 / P::KS; kk++) {
        uint32_t a[4], a2[4];
        P::frag_acc(a, x, kk);
        P::frag_acc(a2, x2, kk);
#pragma unroll
        for (int dn = 0; dn < DP / 8; dn += 2) {
            P::mma_kn(o[dn], o[dn + 1], a, Bs, ld, kk * P::KS, dn * 8);
            P::mma_kn(o2[dn], o2[dn + 1], a2, B2s, ld, kk * P::KS, dn * 8);
        }
    }
}

/* the forward's and dQ's double-buffered K/V: start loading key tile j + 1 into the other buffer,
   then wait for tile j (after the last tile, only wait) */
template <typename T, int DP>
__device__ __forceinline__ void bt__k_att_kv_next(T *Ks, T *Vs, int ld, int j, int last, const T *k, const T *v, const bt__k_attp &p) {
    if (j < last) {
        int nb = (j & 1) ^ 1;
        bt__k_att_tile<T, DP>(Ks + nb * 64 * ld, k, p.sk[2], (j + 1) * 64, p.T, p.D, p.vec);
        bt__k_att_tile<T, DP>(Vs + nb * 64 * ld, v, p.sv[2], (j + 1) * 64, p.T, p.D, p.vec);
        bt__k_cp_commit();
        bt__k_cp_wait<1>();
    } else {
        bt__k_cp_wait<0>();
    }
}

/* -- tensor-core forward: 128 threads, warp w owns query rows q0 + 16 w .. + 15 -- */
template <typename P, int DP> __global__ void __launch_bounds__(128) bt__k_att_fwd_tc(bt__k_attp p) {
    typedef typename P::E T;
    extern __shared__ __align__(16) unsigned char bt__k_att_sm[];
    const int LD = DP + 16 / (int)sizeof(T), ND = DP / 8, NQ = DP / P::KS, QF = NQ <= 8 ? NQ : 1;   /* Q fragments kept in registers up to 8 */
    T *Qs = (T *)bt__k_att_sm, *Ks = Qs + 64 * LD, *Vs = Ks + 2 * 64 * LD;
    int nqt = (p.T + 63) / 64, qt = nqt - 1 - (int)blockIdx.y, q0 = qt * 64, jlast = p.causal ? qt : nqt - 1;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
    int row0 = q0 + warp * 16 + g;   /* this thread's rows: row0 and row0 + 8 */
    for (int64_t bh = blockIdx.x; bh < p.BH; bh += gridDim.x) {
        const T *q = (const T *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const T *)p.k + bt__k_att_off(p.sk, bh, p.H),
                *v = (const T *)p.v + bt__k_att_off(p.sv, bh, p.H);
        bt__k_att_tile<T, DP>(Qs, q, p.sq[2], q0, p.T, p.D, p.vec);
        bt__k_att_tile<T, DP>(Ks, k, p.sk[2], 0, p.T, p.D, p.vec);
        bt__k_att_tile<T, DP>(Vs, v, p.sv[2], 0, p.T, p.D, p.vec);
        bt__k_cp_commit();
        float o[ND][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
        uint32_t qf[QF][4];
#pragma unroll
        for (int i = 0; i < ND; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
        for (int j = 0; j <= jlast; j++) {
            int cur = j & 1;
            bt__k_att_kv_next<T, DP>(Ks, Vs, LD, j, jlast, k, v, p);
            __syncthreads();
            if (NQ <= 8 && j == 0)
#pragma unroll
                for (int kd = 0; kd < QF; kd++) P::frag_a(qf[kd], Qs, LD, warp * 16, kd * P::KS);
            const T *Kc = Ks + cur * 64 * LD, *Vc = Vs + cur * 64 * LD;
            float s[8][4];
#pragma unroll
            for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
            if (NQ <= 8) {
#pragma unroll
                for (int kd = 0; kd < QF; kd++)
#pragma unroll
                    for (int nt = 0; nt < 8; nt += 2) P::mma_nk(s[nt], s[nt + 1], qf[kd], Kc, LD, nt * 8, kd * P::KS);
            } else {
                bt__k_tc_abt<P, DP>(s, Qs, Kc, LD, warp * 16);
            }
            /* m is kept in raw score units (scale > 0 commutes with max); P = 2^(S c2 - m c2), one FFMA
               and one MUFU per element; the mask only on the last tile (the diagonal when causal) */
            if (j == jlast)
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (bt__k_att_masked(p, j * 64 + nt * 8 + tg * 2 + (e & 1), row0 + (e >> 1) * 8)) s[nt][e] = -INFINITY;
            float mx[2] = {m[0], m[1]}, mc[2];
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                float al = bt__k_ex2((m[r] - mx[r]) * p.c2);   /* key 0 is in every row: mx is finite */
                m[r] = mx[r];
                mc[r] = -mx[r] * p.c2;
                l[r] *= al;
#pragma unroll
                for (int i = 0; i < ND; i++) { o[i][2 * r] *= al; o[i][2 * r + 1] *= al; }
            }
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float pv = bt__k_ex2(fmaf(s[nt][e], p.c2, mc[e >> 1]));
                    s[nt][e] = pv;
                    l[e >> 1] += pv;
                }
            bt__k_tc_xb<P, DP>(o, s, Vc, LD);
            __syncthreads();
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
            int row = row0 + r * 8;
            if (row >= p.T) continue;
            float inv = 1.f / l[r];
            T *orow = (T *)p.out + bt__k_att_off(p.so, bh, p.H) + (int64_t)row * p.so[2];
#pragma unroll
            for (int dn = 0; dn < ND; dn++)
                bt__k_att_st2(orow, dn * 8 + tg * 2, p.D, o[dn][2 * r] * inv, o[dn][2 * r + 1] * inv, p.vec_out);
            if (tg == 0 && p.lse_out) p.lse_out[bh * p.T + row] = (m[r] * p.c2 + log2f(l[r])) * BT__K_ATT_LN2;
        }
    }
}

/* -- tensor-core dQ: one block per query tile, walks the key tiles up to the diagonal -- */
template <typename P, int DP> __global__ void __launch_bounds__(128) bt__k_att_dq_tc(bt__k_attp p) {
    typedef typename P::E T;
    extern __shared__ __align__(16) unsigned char bt__k_att_sm[];
    const int LD = DP + 16 / (int)sizeof(T), ND = DP / 8;
    T *Qs = (T *)bt__k_att_sm, *Gs = Qs + 64 * LD, *Ks = Gs + 64 * LD, *Vs = Ks + 2 * 64 * LD;
    int nqt = (p.T + 63) / 64, qt = nqt - 1 - (int)blockIdx.y, q0 = qt * 64, jlast = p.causal ? qt : nqt - 1;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
    int row0 = q0 + warp * 16 + g;
    for (int64_t bh = blockIdx.x; bh < p.BH; bh += gridDim.x) {
        const T *q = (const T *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const T *)p.k + bt__k_att_off(p.sk, bh, p.H),
                *v = (const T *)p.v + bt__k_att_off(p.sv, bh, p.H), *go = (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H);
        bt__k_att_tile<T, DP>(Qs, q, p.sq[2], q0, p.T, p.D, p.vec);
        bt__k_att_tile<T, DP>(Gs, go, p.sgo[2], q0, p.T, p.D, p.vec);
        bt__k_att_tile<T, DP>(Ks, k, p.sk[2], 0, p.T, p.D, p.vec);
        bt__k_att_tile<T, DP>(Vs, v, p.sv[2], 0, p.T, p.D, p.vec);
        bt__k_cp_commit();
        float lse2[2], dv[2], dq[ND][4];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = row0 + r * 8;
            lse2[r] = row < p.T ? p.lse[bh * p.T + row] * BT__K_ATT_LOG2E : 0.f;
            dv[r] = row < p.T ? p.dvec[bh * p.T + row] : 0.f;
        }
#pragma unroll
        for (int i = 0; i < ND; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
        for (int j = 0; j <= jlast; j++) {
            int cur = j & 1;
            bt__k_att_kv_next<T, DP>(Ks, Vs, LD, j, jlast, k, v, p);
            __syncthreads();
            const T *Kc = Ks + cur * 64 * LD, *Vc = Vs + cur * 64 * LD;
            float s[8][4], dp[8][4];
#pragma unroll
            for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = dp[i][0] = dp[i][1] = dp[i][2] = dp[i][3] = 0.f;
            bt__k_tc_abt<P, DP>(s, Qs, Kc, LD, warp * 16);
            bt__k_tc_abt<P, DP>(dp, Gs, Vc, LD, warp * 16);
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float pv = bt__k_ex2(fmaf(s[nt][e], p.c2, -lse2[e >> 1]));
                    if (j == jlast && bt__k_att_masked(p, j * 64 + nt * 8 + tg * 2 + (e & 1), row0 + (e >> 1) * 8)) pv = 0.f;
                    s[nt][e] = pv * (dp[nt][e] - dv[e >> 1]);   /* dS / scale */
                }
            bt__k_tc_xb<P, DP>(dq, s, Kc, LD);
            __syncthreads();
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = row0 + r * 8;
            if (row >= p.T) continue;
            T *grow = (T *)p.gq + bt__k_att_off(p.sgq, bh, p.H) + (int64_t)row * p.sgq[2];
#pragma unroll
            for (int dn = 0; dn < ND; dn++)
                bt__k_att_st2(grow, dn * 8 + tg * 2, p.D, dq[dn][2 * r] * p.scale, dq[dn][2 * r + 1] * p.scale, p.vec_out);
        }
    }
}

/* -- tensor-core dK, dV: one block per key tile, walks the query tiles from the diagonal down;
   warp w owns keys k0 + 16 w .. + 15, so S^T = K Q^T and dP^T = V dO^T come out key-major -- */
template <typename P, int DP> __global__ void __launch_bounds__(128) bt__k_att_dkv_tc(bt__k_attp p) {
    typedef typename P::E T;
    extern __shared__ __align__(16) unsigned char bt__k_att_sm[];
    const int LD = DP + 16 / (int)sizeof(T), ND = DP / 8;
    T *Ks = (T *)bt__k_att_sm, *Vs = Ks + 64 * LD, *Qs = Vs + 64 * LD, *Gs = Qs + 2 * 64 * LD;
    float *Ls = (float *)(Gs + 2 * 64 * LD), *Dv = Ls + 2 * 64;   /* [2][64] each: lse log2e, Dvec */
    int nqt = (p.T + 63) / 64, kt = (int)blockIdx.y, k0 = kt * 64, i0 = p.causal ? kt : 0;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
    int key0 = k0 + warp * 16 + g;   /* this thread's keys: key0 and key0 + 8 */
    for (int64_t bh = blockIdx.x; bh < p.BH; bh += gridDim.x) {
        const T *q = (const T *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const T *)p.k + bt__k_att_off(p.sk, bh, p.H),
                *v = (const T *)p.v + bt__k_att_off(p.sv, bh, p.H), *go = (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H);
        const float *lse = p.lse + bh * p.T, *dvec = p.dvec + bh * p.T;
        bt__k_att_tile<T, DP>(Ks, k, p.sk[2], k0, p.T, p.D, p.vec);
        bt__k_att_tile<T, DP>(Vs, v, p.sv[2], k0, p.T, p.D, p.vec);
        bt__k_att_tile<T, DP>(Qs, q, p.sq[2], i0 * 64, p.T, p.D, p.vec);
        bt__k_att_tile<T, DP>(Gs, go, p.sgo[2], i0 * 64, p.T, p.D, p.vec);
        if (threadIdx.x < 64) {
            int r = i0 * 64 + threadIdx.x;
            Ls[threadIdx.x] = r < p.T ? lse[r] * BT__K_ATT_LOG2E : 0.f;
            Dv[threadIdx.x] = r < p.T ? dvec[r] : 0.f;
        }
        bt__k_cp_commit();
        float dk[ND][4], dvv[ND][4];
#pragma unroll
        for (int i = 0; i < ND; i++) dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = dvv[i][0] = dvv[i][1] = dvv[i][2] = dvv[i][3] = 0.f;
        for (int i = i0; i < nqt; i++) {
            int cur = (i - i0) & 1;
            if (i + 1 < nqt) {
                int nb = cur ^ 1;
                bt__k_att_tile<T, DP>(Qs + nb * 64 * LD, q, p.sq[2], (i + 1) * 64, p.T, p.D, p.vec);
                bt__k_att_tile<T, DP>(Gs + nb * 64 * LD, go, p.sgo[2], (i + 1) * 64, p.T, p.D, p.vec);
                if (threadIdx.x < 64) {
                    int r = (i + 1) * 64 + threadIdx.x;
                    Ls[nb * 64 + threadIdx.x] = r < p.T ? lse[r] * BT__K_ATT_LOG2E : 0.f;
                    Dv[nb * 64 + threadIdx.x] = r < p.T ? dvec[r] : 0.f;
                }
                bt__k_cp_commit();
                bt__k_cp_wait<1>();
            } else {
                bt__k_cp_wait<0>();
            }
            __syncthreads();
            const T *Qc = Qs + cur * 64 * LD, *Gc = Gs + cur * 64 * LD;
            const float *Lc = Ls + cur * 64, *Dc = Dv + cur * 64;
            float s[8][4], dp[8][4];
#pragma unroll
            for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.f;
            bt__k_tc_abt<P, DP>(s, Ks, Qc, LD, warp * 16);
            bt__k_tc_abt<P, DP>(dp, Vs, Gc, LD, warp * 16);
            int edge = (p.causal && i == kt) || (i + 1) * 64 > p.T;
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int qc = nt * 8 + tg * 2 + (e & 1), qrow = i * 64 + qc;
                    float pv = bt__k_ex2(fmaf(s[nt][e], p.c2, -Lc[qc]));
                    if (edge && (qrow >= p.T || (p.causal && key0 + (e >> 1) * 8 > qrow))) pv = 0.f;
                    s[nt][e] = pv;
                    dp[nt][e] = pv * (dp[nt][e] - Dc[qc]);   /* dS^T / scale */
                }
            bt__k_tc_xb2<P, DP>(dvv, s, Gc, dk, dp, Qc, LD);
            __syncthreads();
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int key = key0 + r * 8;
            if (key >= p.T) continue;
            T *krow = (T *)p.gk + bt__k_att_off(p.sgk, bh, p.H) + (int64_t)key * p.sgk[2];
            T *vrow = (T *)p.gv + bt__k_att_off(p.sgv, bh, p.H) + (int64_t)key * p.sgv[2];
#pragma unroll
            for (int dn = 0; dn < ND; dn++) {
                bt__k_att_st2(krow, dn * 8 + tg * 2, p.D, dk[dn][2 * r] * p.scale, dk[dn][2 * r + 1] * p.scale, p.vec_out);
                bt__k_att_st2(vrow, dn * 8 + tg * 2, p.D, dvv[dn][2 * r], dvv[dn][2 * r + 1], p.vec_out);
            }
        }
    }
}

/* -- f32 (FFMA) path, strict fp32. 128 threads; thread (ty, tx) = (tid / 16, tid % 16) owns rows
   8 ty .. 8 ty + 7 and columns 4 tx .. 4 tx + 3 (plus 64 for D 128) of a 64-row output tile.
   Why 8 x 4: a float4 shared-memory load is served a quarter-warp (8 lanes) per cycle, so each
   float a thread loads costs the SM a quarter of a cycle whatever the broadcast, while its 4 FFMA
   pipes retire 4 warp-FMAs per cycle. An m x n block does m n FMAs per m + n floats loaded: 4 x 4
   caps the FMA pipes at 2/4 = 50% busy, 8 x 4 at 67%.
   Tiles are row-major [64][W] floats (W = DP, or 64 for P and dS), 16-byte chunk c of row r stored at
   chunk c ^ ((r / 4) mod 8). A quarter-warp is 8 lanes of one ty and consecutive tx, so every read
   is conflict-free: A (rows of ty) is one address per quarter; B along rows (rows 4 tx + j, one
   chunk) meets 8 different XORs, B down columns (one row, chunks tx) 8 different chunks.
   The products, c[m][n] += sum_k ...:
     abt: A[m][k] B[n][k]   S = Q K^T, dP = dO V^T
     atb: A[k][m] B[k][n]   dV = P^T dO, dK = dS^T Q
     ab:  A[m][k] B[k][n]   O = P V, dQ = dS K
   Backward: the dK/dV kernel (a 64-key block over the query tiles) computes S, dP and dS once and
   writes dS to a scratch buffer; the dQ kernel reads it back. Five products instead of the seven of
   recomputing S and dP for dQ, and deterministic (no atomics). -- */
static size_t bt__k_att_scratch_cap = (size_t)512 << 20;   /* dS scratch cap; B H is split into chunks under it */
template <int W> __device__ __forceinline__ int bt__k_swz(int r, int c) { return r * W + ((c ^ ((r >> 2) & 7)) << 2); }
__device__ __forceinline__ float4 bt__k_lds4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ float bt__k_f4(float4 v, int e) { return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w; }
/* rows [r0, r0 + 64) of a matrix (row r at g + r st, D columns) into a swizzled [64][W] tile, zeros
   past row Tn or column D; 16-byte cp.async where whole and aligned (the caller commits and waits) */
template <int W> __device__ __forceinline__ void bt__k_f32_load(float *sm, const float *g, int64_t st, int r0, int Tn, int D,
                                                                int vec) {
    const int CH = W / 4;
    for (int c = threadIdx.x; c < 64 * CH; c += blockDim.x) {
        int r = c / CH, ch = c - r * CH, d0 = ch * 4, ok = r0 + r < Tn;
        float *dst = sm + bt__k_swz<W>(r, ch);
        const float *src = g + (int64_t)(r0 + r) * st + d0;
        if (ok && vec && d0 + 4 <= D) {
            bt__k_cp16(dst, src);
        } else {
            float4 x;
            x.x = ok && d0 < D ? src[0] : 0.f; x.y = ok && d0 + 1 < D ? src[1] : 0.f;
            x.z = ok && d0 + 2 < D ? src[2] : 0.f; x.w = ok && d0 + 3 < D ? src[3] : 0.f;
            *reinterpret_cast<float4 *>(dst) = x;
        }
    }
}
/* c[i][j] += sum_k A[8 ty + i][k] B[4 tx + j][k], k < W */
template <int W> __device__ __forceinline__ void bt__k_f32_abt(float c[8][4], const float *A, const float *B, int ty, int tx) {
    const float *a0 = A + 8 * ty * W, *b0 = B + 4 * tx * W;
    int sa0 = (2 * ty) & 7, sa1 = (2 * ty + 1) & 7, sb = tx & 7;
#pragma unroll 2
    for (int ch = 0; ch < W / 4; ch++) {
        float4 b[4];
#pragma unroll
        for (int j = 0; j < 4; j++) b[j] = bt__k_lds4(b0 + j * W + ((ch ^ sb) << 2));
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float4 a = bt__k_lds4(a0 + i * W + ((ch ^ (i < 4 ? sa0 : sa1)) << 2));
#pragma unroll
            for (int e = 0; e < 4; e++)
#pragma unroll
                for (int j = 0; j < 4; j++) c[i][j] = fmaf(bt__k_f4(a, e), bt__k_f4(b[j], e), c[i][j]);
        }
    }
}
/* c[i][4 jb + j] += sum_k A[k][8 ty + i] B[k][64 jb + 4 tx + j], k < 64; A [64][64], B [64][W] */
template <int W> __device__ __forceinline__ void bt__k_f32_atb(float c[8][W / 16], const float *A, const float *B, int ty,
                                                               int tx) {
#pragma unroll 4
    for (int k = 0; k < 64; k++) {
        int s = (k >> 2) & 7;
        float4 a0 = bt__k_lds4(A + k * 64 + (((2 * ty) ^ s) << 2)), a1 = bt__k_lds4(A + k * 64 + (((2 * ty + 1) ^ s) << 2));
#pragma unroll
        for (int jb = 0; jb < W / 64; jb++) {
            float4 b = bt__k_lds4(B + k * W + (((16 * jb + tx) ^ s) << 2));
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    c[i][4 * jb + j] = fmaf(bt__k_f4(i < 4 ? a0 : a1, i & 3), bt__k_f4(b, j), c[i][4 * jb + j]);
        }
    }
}
/* c[i][4 jb + j] += sum_k A[8 ty + i][k] B[k][64 jb + 4 tx + j], k < 64; A [64][64], B [64][W] */
template <int W> __device__ __forceinline__ void bt__k_f32_ab(float c[8][W / 16], const float *A, const float *B, int ty,
                                                              int tx) {
    const float *a0 = A + 8 * ty * 64;
    int sa0 = (2 * ty) & 7, sa1 = (2 * ty + 1) & 7;
#pragma unroll 1
    for (int ch = 0; ch < 16; ch++) {
        float4 a[8];
#pragma unroll
        for (int i = 0; i < 8; i++) a[i] = bt__k_lds4(a0 + i * 64 + ((ch ^ (i < 4 ? sa0 : sa1)) << 2));
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int k = 4 * ch + e;
#pragma unroll
            for (int jb = 0; jb < W / 64; jb++) {
                float4 b = bt__k_lds4(B + k * W + (((16 * jb + tx) ^ (ch & 7)) << 2));
#pragma unroll
                for (int i = 0; i < 8; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        c[i][4 * jb + j] = fmaf(bt__k_f4(a[i], e), bt__k_f4(b, j), c[i][4 * jb + j]);
            }
        }
    }
}
/* the four values at row 8 ty + i, columns 4 tx .. 4 tx + 3 of a swizzled [64][64] tile */
__device__ __forceinline__ void bt__k_f32_st4(float *sm, int ty, int tx, int i, const float v[4]) {
    *reinterpret_cast<float4 *>(sm + bt__k_swz<64>(8 * ty + i, tx)) = make_float4(v[0], v[1], v[2], v[3]);
}
/* rows 8 ty + i of an output tile at row r0 (row r at g + r st), columns 4 tx + j (+ 64 jb), times mul */
template <int W> __device__ __forceinline__ void bt__k_f32_store(float *g, int64_t st, int r0, int Tn, int D, const float c[8][W / 16],
                                                                 const float mul[8], int ty, int tx) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int r = r0 + 8 * ty + i;
        if (r >= Tn) continue;
        float *row = g + (int64_t)r * st;
#pragma unroll
        for (int jb = 0; jb < W / 64; jb++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int d = 64 * jb + 4 * tx + j;
                if (d < D) row[d] = c[i][4 * jb + j] * mul[i];
            }
    }
}
/* a sum or max over the 16 lanes of one ty (half a warp) */
__device__ __forceinline__ float bt__k_hsum16(float x) {
    for (int o = 8; o; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float bt__k_hmax16(float x) {
    for (int o = 8; o; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
/* dS tile (qt, kt) in a head's scratch (floats): causal, the tiles at and below the diagonal
   row by row; else all nqt x nqt. Tiles (qt, 0 ..) are contiguous; (nqt, 0) is the head's size. */
__device__ __forceinline__ int64_t bt__k_ds_tile(const bt__k_attp &p, int nqt, int qt, int kt) {
    return (p.causal ? (int64_t)qt * (qt + 1) / 2 + kt : (int64_t)qt * nqt + kt) * 4096;
}

template <int DP> __global__ void __launch_bounds__(128) bt__k_att_fwd_f32(bt__k_attp p) {
    extern __shared__ __align__(16) unsigned char bt__k_att_sm[];
    const int NJ = DP / 16;
    /* K and V double-buffered: tile kt + 1 loads while tile kt is multiplied */
    float *Qs = (float *)bt__k_att_sm, *KV = Qs + 64 * DP, *Ps = KV + 4 * 64 * DP;
    int nqt = (p.T + 63) / 64, qt = nqt - 1 - (int)blockIdx.y, q0 = qt * 64, ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    int klast = p.causal ? qt : nqt - 1;
    for (int64_t bh = p.bh0 + blockIdx.x; bh < p.bh1; bh += gridDim.x) {
        const float *q = (const float *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const float *)p.k + bt__k_att_off(p.sk, bh, p.H),
                    *v = (const float *)p.v + bt__k_att_off(p.sv, bh, p.H);
        __syncthreads();
        bt__k_f32_load<DP>(Qs, q, p.sq[2], q0, p.T, p.D, p.vec);
        bt__k_f32_load<DP>(KV, k, p.sk[2], 0, p.T, p.D, p.vec);
        bt__k_f32_load<DP>(KV + 64 * DP, v, p.sv[2], 0, p.T, p.D, p.vec);
        bt__k_cp_commit();
        float o[8][NJ], m[8], l[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            m[i] = -INFINITY; l[i] = 0.f;
#pragma unroll
            for (int j = 0; j < NJ; j++) o[i][j] = 0.f;
        }
        for (int kt = 0; kt <= klast; kt++) {
            float *Ks = KV + (kt & 1) * 2 * 64 * DP, *Vs = Ks + 64 * DP;
            bt__k_cp_wait<0>();
            __syncthreads();   /* tile kt is in; every thread is done with tile kt - 1's buffers and P */
            if (kt < klast) {
                float *Kn = KV + ((kt + 1) & 1) * 2 * 64 * DP;
                bt__k_f32_load<DP>(Kn, k, p.sk[2], (kt + 1) * 64, p.T, p.D, p.vec);
                bt__k_f32_load<DP>(Kn + 64 * DP, v, p.sv[2], (kt + 1) * 64, p.T, p.D, p.vec);
                bt__k_cp_commit();
            }
            float s[8][4] = {{0.f}};
            bt__k_f32_abt<DP>(s, Qs, Ks, ty, tx);
            /* online softmax in base 2; a row's 64 columns are the 16 lanes of its ty */
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int row = q0 + 8 * ty + i;
                float mx = m[i];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float x = s[i][j] * p.c2;
                    if (kt == klast && bt__k_att_masked(p, kt * 64 + 4 * tx + j, row)) x = -INFINITY;
                    s[i][j] = x;
                    mx = fmaxf(mx, x);
                }
                mx = bt__k_hmax16(mx);
                float al = exp2f(m[i] - mx);
                m[i] = mx;
                l[i] *= al;
#pragma unroll
                for (int j = 0; j < NJ; j++) o[i][j] *= al;
#pragma unroll
                for (int j = 0; j < 4; j++) { s[i][j] = exp2f(s[i][j] - mx); l[i] += s[i][j]; }
                bt__k_f32_st4(Ps, ty, tx, i, s[i]);
            }
            __syncthreads();
            bt__k_f32_ab<DP>(o, Ps, Vs, ty, tx);
        }
        float inv[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float lt = bt__k_hsum16(l[i]);
            int row = q0 + 8 * ty + i;
            inv[i] = 1.f / lt;
            if (tx == 0 && row < p.T && p.lse_out) p.lse_out[bh * p.T + row] = (m[i] + log2f(lt)) * BT__K_ATT_LN2;
        }
        bt__k_f32_store<DP>((float *)p.out + bt__k_att_off(p.so, bh, p.H), p.so[2], q0, p.T, p.D, o, inv, ty, tx);
    }
}

/* dK, dV of key tile kt over query tiles kt .. nqt - 1; dS (scale not applied) to p.ds */
template <int DP> __global__ void __launch_bounds__(128) bt__k_att_dkv_f32(bt__k_attp p) {
    extern __shared__ __align__(16) unsigned char bt__k_att_sm[];
    const int NJ = DP / 16;
    float *Ks = (float *)bt__k_att_sm, *Vs = Ks + 64 * DP, *Qs = Vs + 64 * DP, *Gs = Qs + 64 * DP, *Ps = Gs + 64 * DP,
          *Ds = Ps + 64 * 64, *Ls = Ds + 64 * 64, *Dv = Ls + 64;
    int nqt = (p.T + 63) / 64, kt = (int)blockIdx.y, k0 = kt * 64, ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    int64_t per_bh = bt__k_ds_tile(p, nqt, nqt, 0);
    for (int64_t bh = p.bh0 + blockIdx.x; bh < p.bh1; bh += gridDim.x) {
        const float *q = (const float *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const float *)p.k + bt__k_att_off(p.sk, bh, p.H),
                    *v = (const float *)p.v + bt__k_att_off(p.sv, bh, p.H),
                    *go = (const float *)p.go + bt__k_att_off(p.sgo, bh, p.H);
        const float *lse = p.lse + bh * p.T, *dvec = p.dvec + bh * p.T;
        float *ds = p.ds + (bh - p.bh0) * per_bh;
        __syncthreads();
        bt__k_f32_load<DP>(Ks, k, p.sk[2], k0, p.T, p.D, p.vec);
        bt__k_f32_load<DP>(Vs, v, p.sv[2], k0, p.T, p.D, p.vec);
        float dk[8][NJ], dv[8][NJ];
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < NJ; j++) dk[i][j] = dv[i][j] = 0.f;
        for (int it = p.causal ? kt : 0; it < nqt; it++) {
            __syncthreads();
            bt__k_f32_load<DP>(Qs, q, p.sq[2], it * 64, p.T, p.D, p.vec);
            bt__k_f32_load<DP>(Gs, go, p.sgo[2], it * 64, p.T, p.D, p.vec);
            if (threadIdx.x < 64) {
                int r = it * 64 + threadIdx.x;
                Ls[threadIdx.x] = r < p.T ? lse[r] * BT__K_ATT_LOG2E : 0.f;
                Dv[threadIdx.x] = r < p.T ? dvec[r] : 0.f;
            }
            bt__k_cp_commit(); bt__k_cp_wait<0>();
            __syncthreads();
            float s[8][4] = {{0.f}}, dp[8][4] = {{0.f}};
            bt__k_f32_abt<DP>(s, Qs, Ks, ty, tx);   /* rows: queries, columns: keys */
            bt__k_f32_abt<DP>(dp, Gs, Vs, ty, tx);
            int edge = (p.causal && it == kt) || (it + 1) * 64 > p.T;
            float *dst = ds + bt__k_ds_tile(p, nqt, it, kt);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int qr = 8 * ty + i, qrow = it * 64 + qr;
                float ls = Ls[qr], dvq = Dv[qr];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float pv = exp2f(s[i][j] * p.c2 - ls);
                    if (edge && (qrow >= p.T || (p.causal && k0 + 4 * tx + j > qrow))) pv = 0.f;
                    s[i][j] = pv;
                    dp[i][j] = pv * (dp[i][j] - dvq);
                }
                bt__k_f32_st4(Ps, ty, tx, i, s[i]);
                bt__k_f32_st4(Ds, ty, tx, i, dp[i]);
                *reinterpret_cast<float4 *>(dst + qr * 64 + 4 * tx) = make_float4(dp[i][0], dp[i][1], dp[i][2], dp[i][3]);
            }
            __syncthreads();
            bt__k_f32_atb<DP>(dv, Ps, Gs, ty, tx);
            bt__k_f32_atb<DP>(dk, Ds, Qs, ty, tx);
        }
        float sc[8], one[8];
#pragma unroll
        for (int i = 0; i < 8; i++) { sc[i] = p.scale; one[i] = 1.f; }
        bt__k_f32_store<DP>((float *)p.gk + bt__k_att_off(p.sgk, bh, p.H), p.sgk[2], k0, p.T, p.D, dk, sc, ty, tx);
        bt__k_f32_store<DP>((float *)p.gv + bt__k_att_off(p.sgv, bh, p.H), p.sgv[2], k0, p.T, p.D, dv, one, ty, tx);
    }
}

/* dQ of query tile qt = scale sum_kt dS(qt, kt) K(kt), from the scratch the dK/dV kernel wrote;
   the next (dS, K) pair is loaded while this one is multiplied */
template <int DP> __global__ void __launch_bounds__(128) bt__k_att_dq_f32(bt__k_attp p) {
    extern __shared__ __align__(16) unsigned char bt__k_att_sm[];
    const int NJ = DP / 16;
    float *Ss = (float *)bt__k_att_sm, *Ks = Ss + 2 * 64 * 64;
    int nqt = (p.T + 63) / 64, qt = nqt - 1 - (int)blockIdx.y, q0 = qt * 64, ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    int klast = p.causal ? qt : nqt - 1;
    int64_t per_bh = bt__k_ds_tile(p, nqt, nqt, 0);
    for (int64_t bh = p.bh0 + blockIdx.x; bh < p.bh1; bh += gridDim.x) {
        const float *k = (const float *)p.k + bt__k_att_off(p.sk, bh, p.H), *ds = p.ds + (bh - p.bh0) * per_bh + bt__k_ds_tile(p, nqt, qt, 0);
        float dq[8][NJ];
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < NJ; j++) dq[i][j] = 0.f;
        __syncthreads();
        bt__k_f32_load<64>(Ss, ds, 64, 0, 64, 64, 1);
        bt__k_f32_load<DP>(Ks, k, p.sk[2], 0, p.T, p.D, p.vec);
        bt__k_cp_commit();
        for (int kt = 0; kt <= klast; kt++) {
            int b = kt & 1;
            if (kt < klast) {
                bt__k_f32_load<64>(Ss + (b ^ 1) * 4096, ds + (int64_t)(kt + 1) * 4096, 64, 0, 64, 64, 1);
                bt__k_f32_load<DP>(Ks + (b ^ 1) * 64 * DP, k, p.sk[2], (kt + 1) * 64, p.T, p.D, p.vec);
                bt__k_cp_commit();
                bt__k_cp_wait<1>();
            } else {
                bt__k_cp_wait<0>();
            }
            __syncthreads();
            bt__k_f32_ab<DP>(dq, Ss + b * 4096, Ks + b * 64 * DP, ty, tx);
            __syncthreads();
        }
        float sc[8];
#pragma unroll
        for (int i = 0; i < 8; i++) sc[i] = p.scale;
        bt__k_f32_store<DP>((float *)p.gq + bt__k_att_off(p.sgq, bh, p.H), p.sgq[2], q0, p.T, p.D, dq, sc, ty, tx);
    }
}

/* Dvec[bh, t] = sum_d dO[bh, t, d] O[bh, t, d]: a warp per row, 16-byte loads when aligned */
template <typename T> __global__ void bt__k_att_dvec(float *dvec, bt__k_attp p) {
    const int VE = 16 / sizeof(T);
    int64_t rows = p.BH * p.T;
    int lane = threadIdx.x & 31;
    for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; r < rows; r += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        int64_t bh = r / p.T;
        int t = (int)(r - bh * p.T);
        const T *go = (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H) + (int64_t)t * p.sgo[2];
        const T *o = (const T *)p.o + bt__k_att_off(p.so, bh, p.H) + (int64_t)t * p.so[2];
        float acc = 0.f;
        if (p.vec) {
            for (int d0 = lane * VE; d0 < p.D; d0 += 32 * VE) {
                if (d0 + VE <= p.D) {
                    T a[VE], b[VE];
                    bt__k_ld16(a, go + d0); bt__k_ld16(b, o + d0);
#pragma unroll
                    for (int e = 0; e < VE; e++) acc += bt__k_tof(a[e]) * bt__k_tof(b[e]);
                } else {
                    for (int d = d0; d < p.D; d++) acc += bt__k_tof(go[d]) * bt__k_tof(o[d]);
                }
            }
        } else {
            for (int d = lane; d < p.D; d += 32) acc += bt__k_tof(go[d]) * bt__k_tof(o[d]);
        }
        acc = bt__k_wsum(acc);
        if (lane == 0) dvec[r] = acc;
    }
}

/* -- Hopper (sm_90a) path: bf16 / f16, D = 64 or 128, 16-byte aligned rows ------------------------
   The same math on warpgroup MMAs (wgmma.mma_async: a 64 x N x 16 product issued by 4 warps, B
   and optionally A read by the tensor cores straight from shared memory, fp32 accumulators in
   registers). Every CTA is 384 threads: two consumer warpgroups (warps 0-3 and 4-7) that compute
   and a producer warpgroup (warps 8-11, registers handed to the consumers by setmaxnreg) that
   loads (and in the fused backward adds dQ parts). The producer streams tiles with cp.async into
   a two-stage ring per operand and completes an mbarrier per stage ("full": cp.async.mbarrier.arrive
   fires when its copies land; the forward's producer instead has one thread ask the tensor memory
   accelerator for each tile, a 4-d tensor-map box in the same swizzle whose bytes complete the
   barrier: 1.3% faster at T 1024, 2026-11-24); the consumers wait on it, multiply, and give the
   stage back on its "empty" mbarrier (one arrival per consumer warp, after its wgmma.wait_group
   says the tensor cores are done reading). The stage counts give a phase parity per use: the n-th
   use of a stage waits for the n-th completion, parity n & 1.
   Shared tiles hold R rows of D elements as D / 64 column blocks of [R][64] (128 bytes a row), the
   16-byte chunk c of row r stored at chunk c ^ (r & 7) of its row: the 128-byte swizzle the MMA
   descriptors name, so a tile is read conflict-free both as a K-major operand (rows = M or N, D =
   the product's k: Q K^T, dO V^T, K Q^T, V dO^T) and as an MN-major one (rows = the product's k:
   P V, dS K, P^T dO, dS^T Q). P and dS go from the accumulators to the A operand in registers
   (the accumulator's pairs are the A fragment's pairs), rounded to the dtype.
   Forward: a CTA owns 128 queries (64 per warpgroup) and walks 128-key tiles; K and V have their
   own rings (3 stages at D 64, 2 at D 128) and Q two buffers (items alternate), so the next
   tiles load while a tile's softmax runs. The two warpgroups take turns at the tensor cores
   (named barriers 1 and 2, "ping-pong"): a warpgroup issues S = Q K(j)^T and O += P(j-1) V(j-1),
   lets the other issue its pair, and runs its softmax while the other's products run (at D 64 also
   while its own P V runs: BT__K_FWD_OVL); the exp2 of the softmax (MUFU, 16 a clock an SM) is then
   hidden under the MMAs. At D 64 the default (BT__K_FWD_WG3, session attnf3) has three consumer
   warpgroups on 192-query tiles (512 threads), which issue without turns: three warps a scheduler
   hide each other's softmax chains; a warpgroup past its last key tile (causal) or wholly past T
   only lets the stages go.
   Backward: causal D 64 in one fused kernel (below: 5 products, dQ summed in a fixed order);
   else the two kernels above (deterministic, no atomics): dK/dV over 128-key CTAs (64 keys a
   warpgroup, S^T = K Q^T and dP^T = V dO^T from shared memory, dV += P^T dO and dK += dS^T Q
   with A from registers), dQ over 128-query CTAs (S, dP, dQ += dS K). Registers bound the tiles:
   D = 64 walks 128-row tiles, D = 128 64-row ones. */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BT__K_WG 1   /* this device pass compiles the wgmma kernels (sm_90a) */
#endif
#define BT__K_WG_THREADS 384   /* consumer warpgroups 0 and 1, producer warpgroup 2 */
#define BT__K_WG_PRODUCER_REGS 56
#define BT__K_WG_CONSUMER_REGS 224   /* per SM sub-partition: 2 consumer warps + 1 producer warp, 2 x 224 + 56 <= 512 */
#define BT__K_WG_R32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
                     "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define BT__K_WG_R64 BT__K_WG_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define BT__K_WG_F8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                          "+f"(d[i + 6]), "+f"(d[i + 7])
#define BT__K_WG_F32(d, i) BT__K_WG_F8(d, i), BT__K_WG_F8(d, i + 8), BT__K_WG_F8(d, i + 16), BT__K_WG_F8(d, i + 24)
#define BT__K_WG_F64(d) BT__K_WG_F32(d, 0), BT__K_WG_F32(d, 32)
/* d (64 x N fp32: N / 2 a thread, the m16n8 accumulator layout per warp and n-tile of 8) for one
   k step of 16: ss: d = A B (+ d when acc), A and B K-major in shared memory (descriptors);
   rs: d += A B, A from registers (the m16n8k16 A fragment of the warp's 16 rows), B MN-major
   (imm-trans-b 1). The 4th operand of .f32 wgmma is the scale-d predicate. */
#define BT__K_WG_DEF(N, NR, REGS, OPS, SA, SB, SC, RA, RB, PT, CT)                                                        \
    __device__ __forceinline__ void bt__k_wg_ss(float (&d)[NR], uint64_t a, uint64_t b, int acc, CT *) {               \
        asm volatile("{ .reg .pred p; setp.ne.b32 p, " SC ", 0;\n"                                                      \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PT "." PT " {" REGS "}, " SA ", " SB             \
                     ", p, 1, 1, 0, 0; }\n" : OPS : "l"(a), "l"(b), "r"(acc));                                           \
    }                                                                                                                    \
    __device__ __forceinline__ void bt__k_wg_rs(float (&d)[NR], const uint32_t (&a)[4], uint64_t b, CT *) {            \
        asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PT "." PT " {" REGS "}, " RA ", " RB             \
                     ", 1, 1, 1, 1;\n" : OPS : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));                       \
    }
BT__K_WG_DEF(64, 32, BT__K_WG_R32, BT__K_WG_F32(d, 0), "%32", "%33", "%34", "{%32, %33, %34, %35}", "%36", "bf16", __nv_bfloat16)
BT__K_WG_DEF(64, 32, BT__K_WG_R32, BT__K_WG_F32(d, 0), "%32", "%33", "%34", "{%32, %33, %34, %35}", "%36", "f16", __half)
BT__K_WG_DEF(128, 64, BT__K_WG_R64, BT__K_WG_F64(d), "%64", "%65", "%66", "{%64, %65, %66, %67}", "%68", "bf16", __nv_bfloat16)
BT__K_WG_DEF(128, 64, BT__K_WG_R64, BT__K_WG_F64(d), "%64", "%65", "%66", "{%64, %65, %66, %67}", "%68", "f16", __half)
__device__ __forceinline__ void bt__k_wg_arrive(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void bt__k_wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void bt__k_wg_wait0(void) { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void bt__k_wg_wait1(void) { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
/* the compiler sees an accumulator written when the wgmma is issued: this pins its reads after the
   wait (and its writes before the issue) */
template <int N> __device__ __forceinline__ void bt__k_wg_pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* a branch that splits ptxas's scheduling regions, on a condition the caller knows never holds (a
   kernel argument the host checked): instructions such as a wgmma wait do not move across it */
__device__ __forceinline__ void bt__k_sched_split(bool never) {
    if (never) __trap();
}
/* A fragments read by an issued product stay live (their registers not reused) until after the wait */
template <int KS> __device__ __forceinline__ void bt__k_wg_pin_u(uint32_t (&a)[KS][4]) {
#pragma unroll
    for (int i = 0; i < KS; i++) asm volatile("" : "+r"(a[i][0]), "+r"(a[i][1]), "+r"(a[i][2]), "+r"(a[i][3])::"memory");
}
__device__ __forceinline__ uint32_t bt__k_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
/* shared-memory matrix descriptor, 128-byte swizzle: start, leading byte offset, stride byte offset
   1024 (8 rows of 128 bytes) */
__device__ __forceinline__ uint64_t bt__k_wg_desc(uint32_t addr, uint32_t lbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
/* descriptor d moved `bytes` further (a multiple of 16): only the 14-bit start field changes (shared
   addresses stay under 2^18, so it never carries into the next field). Descriptors of one tile are
   thus its base's plus a constant: one integer add a product instead of the whole encoding (the
   backward step issued ~9 uniform instructions a product before) */
__device__ __forceinline__ uint64_t bt__k_wg_desc_at(uint64_t d, uint32_t bytes) {
    return (d & 0xFFFFFFFF00000000ull) | (uint32_t)((uint32_t)d + (bytes >> 4));
}
/* K-major operand: rows r0 .. of an R-row tile, k step kd (columns 16 kd .. 16 kd + 15); the
   leading byte offset is unused for this layout (1 by convention) */
__device__ __forceinline__ uint64_t bt__k_wg_kmaj(uint32_t tile, int R, int r0, int kd) {
    return bt__k_wg_desc_at(bt__k_wg_desc(tile, 16), (uint32_t)((kd >> 2) * R * 128 + r0 * 128 + (kd & 3) * 32));
}
/* MN-major operand: rows 16 kk .. 16 kk + 15 of an R-row tile are the product's k; its columns
   the n, 64 a column block, blocks R * 128 bytes apart (the leading byte offset) */
__device__ __forceinline__ uint64_t bt__k_wg_mnmaj(uint32_t tile, int R, int kk) {
    return bt__k_wg_desc_at(bt__k_wg_desc(tile, (uint32_t)(R * 128)), (uint32_t)(kk * 2048));
}
/* four 8 x 8 16-bit matrices from mma fragments (a[j]: matrix j, this lane's two elements of row
   lane / 4) into shared memory, lanes 8 j .. 8 j + 7 giving the addresses of matrix j's rows */
__device__ __forceinline__ void bt__k_stmatrix4(uint32_t addr, const uint32_t (&a)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a[0]), "r"(a[1]), "r"(a[2]),
                 "r"(a[3])
                 : "memory");
}
/* byte offset of 16-byte chunk c of row r in a swizzled R-row tile */
__device__ __forceinline__ uint32_t bt__k_sw(int r, int c, int R) {
    return (uint32_t)((c >> 3) * R * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}
/* the barrier's pending count drops by one when every earlier cp.async of this thread has landed */
__device__ __forceinline__ void bt__k_cp_mbar_arrive(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/* named barrier id for n threads (the forward's output: 4 + warpgroup, its 128 threads; turns use 1 .. 3) */
__device__ __forceinline__ void bt__k_bar_sync_n(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bt__k_bar_sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void bt__k_bar_arrive(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }
/* turns of the two consumer warpgroups at the tensor cores (named barriers 1 and 2): warpgroup w
   waits for its turn, issues a group of products, hands the turn over. Warpgroup 1 hands one turn
   over before its first (bt__k_turn_open) and none after its last, so both barriers see as many
   arrivals as waits; a warpgroup with nothing to issue still takes and gives its turn. */
__device__ __forceinline__ void bt__k_turn_open(int on, int w) { if (on && w == 1) bt__k_bar_arrive(1); }
__device__ __forceinline__ void bt__k_turn_take(int on, int w) { if (on) bt__k_bar_sync(1 + w); }
__device__ __forceinline__ void bt__k_turn_give(int on, int w, int last) { if (on && (w == 0 || !last)) bt__k_bar_arrive(2 - w); }
/* 16 bytes (n = 16) or zeros (n = 0) into shared memory */
__device__ __forceinline__ void bt__k_cp16z(uint32_t dst, const void *src, int n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void bt__k_cp4z(uint32_t dst, const void *src, int n) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
/* the producer's NT loading threads (thread t of NT): rows r0 .. r0 + R - 1 of one head (row r at
   g + r st) into a swizzled tile, zeros for rows outside 0 .. Tn - 1 (the source then stays at row 0,
   never read) */
template <typename T, int R, int D, int NT = 128>
__device__ __forceinline__ void bt__k_wg_load(uint32_t tile, const T *g, int64_t st, int r0, int Tn, int t) {
    const int CPR = D / 8;
#pragma unroll 4
    for (int c = t; c < R * CPR; c += NT) {
        int r = c / CPR, ch = c - r * CPR, ok = (unsigned)(r0 + r) < (unsigned)Tn;
        bt__k_cp16z(tile + bt__k_sw(r, ch, R), g + (ok ? (int64_t)(r0 + r) * st + ch * 8 : 0), ok ? 16 : 0);
    }
}
/* the same for a producer warpgroup with registers to spare (the forward's, the fused backward's):
   r0 may be < 0 (the forward's end-aligned query tiles). Thread t's chunk (t % CPR) and first row
   (t / CPR) are the same in each of its R / RP copies (RP = NT / CPR rows a pass, a multiple of 8:
   the swizzle repeats), so its addresses are computed once and stepped (RP 128 bytes here, RP st
   there): ~3 instructions a copy instead of ~20 (the fused backward's loader warps issued about as
   many instructions a step as a consumer warp with the loop above). Fully unrolled: the two-kernel
   backward, whose loads share the consumers' registers, would spill with it */
template <typename T, int R, int D, int NT = 128>
__device__ __forceinline__ void bt__k_wg_load_lean(uint32_t tile, const T *g, int64_t st, int r0, int Tn, int t) {
    enum { CPR = D / 8, RP = NT / CPR, N = R / RP };
    static_assert(NT % CPR == 0 && RP % 8 == 0 && R % RP == 0, "bt__k_wg_load_lean: rows a pass must tile R in multiples of 8");
    const int rr = t / CPR, ch = t % CPR;
    const uint32_t dst = tile + bt__k_sw(rr, ch, R);
    const T *src = g + (int64_t)(r0 + rr) * st + ch * 8;
    const int64_t step = (int64_t)RP * st;
    if (r0 >= 0 && r0 + R <= Tn) {
#pragma unroll
        for (int i = 0; i < N; i++) bt__k_cp16z(dst + i * RP * 128, src + i * step, 16);
    } else {
#pragma unroll
        for (int i = 0; i < N; i++) {
            const int ok = (unsigned)(r0 + rr + i * RP) < (unsigned)Tn;
            bt__k_cp16z(dst + i * RP * 128, ok ? src + i * step : g, ok ? 16 : 0);
        }
    }
}
/* the producer's NT loading threads: n floats x[r0 ..] (zeros past Tn) into shared memory */
template <int NT = 128>
__device__ __forceinline__ void bt__k_wg_load_row(uint32_t dst, const float *x, int r0, int n, int Tn, int t) {
    for (int i = t; i < n; i += NT) bt__k_cp4z(dst + 4 * i, x + (r0 + i < Tn ? r0 + i : 0), r0 + i < Tn ? 4 : 0);
}
/* A fragments (k steps of 16 columns) of a 64 x 16 KS accumulator, rounded to T: the accumulator's
   n-tiles 2 kk and 2 kk + 1 are k step kk */
template <typename T, int KS>
__device__ __forceinline__ void bt__k_wg_afrag(uint32_t (&a)[KS][4], const float (&c)[KS * 8]) {
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        a[kk][0] = bt__k_pack2(c[8 * kk], c[8 * kk + 1], (T *)0);
        a[kk][1] = bt__k_pack2(c[8 * kk + 2], c[8 * kk + 3], (T *)0);
        a[kk][2] = bt__k_pack2(c[8 * kk + 4], c[8 * kk + 5], (T *)0);
        a[kk][3] = bt__k_pack2(c[8 * kk + 6], c[8 * kk + 7], (T *)0);
    }
}
/* rows row0 and row0 + 8 of a 64 x D accumulator (times mul) into rows of g (stride st), rows 0 .. Tn - 1 */
template <typename T, int D>
__device__ __forceinline__ void bt__k_wg_store(T *g, int64_t st, int row0, int Tn, const float (&c)[D / 2], const float mul[2]) {
    int tg = threadIdx.x & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = row0 + 8 * r;
        if ((unsigned)row >= (unsigned)Tn) continue;
        T *x = g + (int64_t)row * st;
#pragma unroll
        for (int dn = 0; dn < D / 8; dn++)
            *reinterpret_cast<uint32_t *>(x + dn * 8 + 2 * tg) =
                bt__k_pack2(c[4 * dn + 2 * r] * mul[r], c[4 * dn + 2 * r + 1] * mul[r], (T *)0);
    }
}
/* The column sums of what bt__k_wg_store writes (scaled, before the rounding) over the warp's 16 rows
   below Tn (rows row0 - g .. + 15), as one fp32 row of D at part + (row0 >> 4) slab (lanes 0 - 3
   store it): summed over B and the slabs they are the bias gradient of a packed qkv projection,
   with no pass over the [B T, 3 C] gradient of its own. */
template <int D>
__device__ __forceinline__ void bt__k_wg_colsum(float *part, int64_t slab, int slabs, int row0, int Tn, const float (&c)[D / 2],
                                                const float mul[2]) {
    float cs[D / 4];
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float v = 0.f;
#pragma unroll
            for (int r = 0; r < 2; r++) if ((unsigned)(row0 + 8 * r) < (unsigned)Tn) v += c[4 * dn + 2 * r + e] * mul[r];
            cs[2 * dn + e] = v;
        }
#pragma unroll
    for (int o = 4; o < 32; o <<= 1)   /* over g: the lanes holding the same columns */
#pragma unroll
        for (int j = 0; j < D / 4; j++) cs[j] += __shfl_xor_sync(0xffffffffu, cs[j], o);
    int sl = row0 >> 4;
    if ((threadIdx.x & 31) < 4 && sl < slabs) {
        float *dst = part + sl * slab + 2 * (threadIdx.x & 3);
#pragma unroll
        for (int dn = 0; dn < D / 8; dn++) *reinterpret_cast<float2 *>(dst + 8 * dn) = make_float2(cs[2 * dn], cs[2 * dn + 1]);
    }
}
/* where bt__k_wg_colsum puts part `which` (0 q, 1 k, 2 v) of head bh */
__device__ __forceinline__ float *bt__k_att_cs_at(const bt__k_attp &p, int64_t bh, int which) {
    int64_t b = bh / p.H, h = bh - b * p.H;
    return p.cs_part + ((b * p.cs_slabs) * 3 + which) * (int64_t)p.H * p.D + h * p.D;
}
/* registers move from the producer warpgroup to the consumers (sm_90a; the kernel starts at the
   __launch_bounds__ cap of 168, 65536 / 384) */
template <int N> __device__ __forceinline__ void bt__k_wg_regs_dec(void) { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void bt__k_wg_regs_inc(void) { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
/* the warp index as a value the compiler knows to be warp-uniform (the wgmma code runs in
   warp-uniform branches only) */
__device__ __forceinline__ int bt__k_warp_id(void) { return __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0); }
/* the 1024-aligned start of the dynamic shared memory (the launch asks 1 KiB more) */
__device__ __forceinline__ uint32_t bt__k_wg_base(const unsigned char *sm) { return (bt__k_smem(sm) + 1023u) & ~1023u; }

/* work item L (0 .. heads x ntiles - 1) of a wgmma kernel -> its head (returned) and tile rank
   (0 = the tile with the most key / query tiles to walk when causal). Heads go in sections of
   p.sec, a section's tiles rank by rank: the CTAs running at once share the re-read operands (K, V
   or Q, dO) of a few heads in L2 instead of streaming those of every head from memory, and within
   a section the longest tiles start first. */
__device__ __forceinline__ int64_t bt__k_att_work(const bt__k_attp &p, int64_t L, int ntiles, int &rank) {
    /* in 32 bits (a launch has at most INT32_MAX items, bt__k_att_wg_use): two inline divisions
       instead of two calls of the 64-bit one, on the consumers' path at every item's start */
    const uint32_t nbh = (uint32_t)(p.bh1 - p.bh0), sec = (uint32_t)p.sec, per = sec * (uint32_t)ntiles, l = (uint32_t)L;
    const uint32_t sct = l / per, h0 = sct * sec, nh = nbh - h0 < sec ? nbh - h0 : sec, r = l - sct * per, tr = r / nh;
    rank = (int)tr;
    return (int64_t)(h0 + (r - tr * nh));
}
/* the n-th work item of this CTA: item n G + c on even rounds n, n G + G - 1 - c on odd ones (CTA c
   of G; a snake, so that with a persistent grid the long tiles of each round alternate ends and
   the CTAs' sums of tile lengths even out) */
__device__ __forceinline__ int64_t bt__k_att_item(int64_t n) {
    const int64_t G = gridDim.x, c = blockIdx.x;
    return n * G + ((n & 1) ? G - 1 - c : c);
}
/* the CTA's n-th work item, the same in every thread. With p.ctr the producer's first thread
   (threadIdx.x 256) takes items from the counter and hands each to all 12 warps through shared
   memory: *slot written, then ifull (1 arrival); every warp reads it, then iempty (one arrival a warp)
   lets the next be written. ahead: the next item is taken from the counter a whole item ahead
   (its latency hidden); else only when that thread asks for it (an item taken is then started at
   once: the fused backward's items wait for earlier ones). next: that thread's taken item (starts
   at blockIdx.x). pt: that thread (the producer's first: 256, or 384 in the forward's 3-warpgroup
   variant). Else the fixed order bt__k_att_item(n). */
__device__ __forceinline__ int64_t bt__k_att_next(const bt__k_attp &p, int64_t n, int64_t nitems, volatile int64_t *slot,
                                                 uint32_t ifull, uint32_t iempty, int64_t &next, int ahead = 1,
                                                 int pt = 256) {
    if (!p.ctr) return bt__k_att_item(n);
    if ((int)threadIdx.x == pt) {
        if (n > 0) bt__k_mbar_wait(iempty, (int)((n - 1) & 1));
        if (!ahead && n > 0) next = (int64_t)gridDim.x + atomicAdd(p.ctr, 1);
        *slot = next;
        bt__k_mbar_arrive(ifull);
        if (ahead && next < nitems) next = (int64_t)gridDim.x + atomicAdd(p.ctr, 1);
    }
    bt__k_mbar_wait(ifull, (int)(n & 1));
    const int64_t L = *slot;
    __syncwarp();
    if ((threadIdx.x & 31) == 0) bt__k_mbar_arrive(iempty);
    return L;
}
/* the forward's variants and timing-only ablations (template argument M of bt__k_att_fwd_wg; the
   run-time choice in bt__k_att_fwd_wg_run). Variants (correct results): BT__K_FWD_OVL, the softmax
   of tile j under the warpgroup's own O += P(j-1) V(j-1) (issued together, waited for apart; the
   default at D 64); BT__K_FWD_LEAN, fewer instructions a step (descriptors as offsets of per-item
   bases, the diagonal tile's mask as one compare a score). Ablations (BT_ATT_FWD_ABL=1..6, results
   wrong on purpose, compiled only with -DBT_ATT_FWD_ABLATIONS, on the variant without OVL): 1 no
   softmax (S converted to P as is), 2 exp2 replaced by a multiply, 3 every K / V / Q stage loaded
   only the first time, 4 no turns at the tensor cores, 5 no output store, 6 no products (S made up
   from registers). BT__K_FWD_WG3 (D 64):
   three consumer warpgroups and 192-query tiles (512 threads; bt__k_att_fwd_nw); BT__K_FWD_SKIP: a
   row keeps its running max unless a tile raises it by more than BT__K_FWD_SKIP_LOG2 (log2 units),
   and a warp whose rows all kept theirs skips the O rescale (bt__k_att_fwd_p); BT__K_FWD_NOTURN
   (with WG3): no turns at the tensor cores (the default at D 64: WG3 | OVL | LEAN, with turns in
   items of at least p.turns key tiles, 7 when causal; NOTURN where no item has that many) */
enum { BT__K_FWD_ABL = 7, BT__K_FWD_OVL = 8, BT__K_FWD_LEAN = 16, BT__K_FWD_WG3 = 32, BT__K_FWD_SKIP = 64, BT__K_FWD_NOTURN = 128 };
/* SKIP: P = 2^(S c2 - m c2) stays below 2^8 with a stale max m (within bf16 / f16 range, and l, O
   are in the same stale units, so O / l and lse stay exact) */
#define BT__K_FWD_SKIP_LOG2 8.f
/* consumer warpgroups of the forward's variant M: 2 (64 query rows each, 384 threads) or, WG3, 3
   (512 threads: per SM sub-partition three consumer warps whose softmax chains hide each other's
   latency, registers 3 x 160 + 32 = 512 after setmaxnreg) */
__host__ __device__ constexpr int bt__k_att_fwd_nw(int M) { return (M & BT__K_FWD_WG3) ? 3 : 2; }
/* S = Q K^T for warpgroup w: rows 64 w .. of the Q tile, the 128 keys of a K stage */
template <typename T, int D>
__device__ __forceinline__ void bt__k_att_fwd_s(float (&sc)[64], uint32_t sQ, uint32_t sKs, int w) {
#pragma unroll
    for (int kd = 0; kd < D / 16; kd++)
        bt__k_wg_ss(sc, bt__k_wg_kmaj(sQ, 128, 64 * w, kd), bt__k_wg_kmaj(sKs, 128, 0, kd), kd > 0, (T *)0);
}
/* LEAN: S = Q K^T from the descriptors of k step 0 (dq: warpgroup w's rows of the Q tile, dk: a K
   stage); k step kd starts (kd / 4) column blocks and (kd % 4) 32-byte steps further */
template <typename T, int D>
__device__ __forceinline__ void bt__k_att_fwd_s_lean(float (&sc)[64], uint64_t dq, uint64_t dk) {
#pragma unroll
    for (int kd = 0; kd < D / 16; kd++) {
        const uint32_t off = (uint32_t)((kd >> 2) * 128 * 128 + (kd & 3) * 32);
        bt__k_wg_ss(sc, bt__k_wg_desc_at(dq, off), bt__k_wg_desc_at(dk, off), kd > 0, (T *)0);
    }
}
/* O += P V for warpgroup w: P from the A fragments pf, V a stage at sVs (dv: the descriptor of the V
   ring's start, used when LEAN) */
template <typename T, int D, int LEAN>
__device__ __forceinline__ void bt__k_att_fwd_pv(float (&o)[D / 2], const uint32_t (&pf)[8][4], uint32_t sVs, uint64_t dv, uint32_t voff) {
    const uint64_t dvs = bt__k_wg_desc_at(dv, voff);   /* the stage's, once: then a constant a product */
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        bt__k_wg_rs(o, pf[kk], LEAN ? bt__k_wg_desc_at(dvs, kk * 2048) : bt__k_wg_mnmaj(sVs, 128, kk), (T *)0);
}
/* BT_ATT_TRACE (timing only): thread th writes the SM clock into slot k of work item L's 8 */
__device__ __forceinline__ void bt__k_att_mark(const bt__k_attp &p, int64_t L, int k, int th) {
    if (p.trace && threadIdx.x == th) p.trace[L * 8 + k] = clock64();
}
/* BT_ATT_TRACE in builds with -DBT_ATT_FWD_ABLATIONS, the steps of CTA 0 (its first BT__K_FWD_TSTEPS): warpgroup w's thread 0 writes the
   clock at phase k (0 step start, 1 K / V landed, 2 turn taken, 3 products waited for, 4 step end, 5 S issued, 6 P V issued)
   into slot (u + j) * 24 + 8 w + k behind the items' marks */
#define BT__K_FWD_TSTEPS 512
__device__ __forceinline__ void bt__k_att_fwd_tmark(const bt__k_attp &p, int64_t nitems, int step, int w, int k) {
#ifdef BT_ATT_FWD_ABLATIONS
    if (p.trace && blockIdx.x == 0 && (threadIdx.x & 127) == 0 && step < BT__K_FWD_TSTEPS)
        p.trace[nitems * 8 + (int64_t)step * 24 + 8 * w + k] = clock64();
#else
    (void)p; (void)nitems; (void)step; (void)w; (void)k;
#endif
}
/* the exp2 of the softmax under variant M */
template <int M> __device__ __forceinline__ float bt__k_att_fwd_ex2(float x) {
    if ((M & BT__K_FWD_ABL) == 2) return x * 0.5f;
    return bt__k_ex2(x);
}
/* the mask of an edge tile (keys k0 .., rows r0 and r0 + 8 of this thread), LEAN: score i's key minus
   its row is a constant of i plus k0 + 2 tg - r0, so each score is one compare with an immediate
   (causal: key > row; else key > T - 1, the row not in it) */
template <int NS> __device__ __forceinline__ void bt__k_att_fwd_mask_lean(const bt__k_attp &p, float (&sc)[NS], int k0, int r0, int tg) {
    if (p.causal) {
        const int lim = r0 - k0 - 2 * tg;
#pragma unroll
        for (int i = 0; i < NS; i++)
            if ((i >> 2) * 8 + (i & 1) - ((i >> 1) & 1) * 8 > lim) sc[i] = -INFINITY;
    } else {
        const int lim = p.T - 1 - k0 - 2 * tg;
#pragma unroll
        for (int i = 0; i < NS; i++)
            if ((i >> 2) * 8 + (i & 1) > lim) sc[i] = -INFINITY;
    }
}
/* the forward's online softmax of this thread's part of a 64 x 128 score tile (keys k0 .., rows r0 and
   r0 + 8; masked first when edge), in raw score units (scale > 0 commutes with max): m the row max,
   l the row sum (in units of m), al = 2^((m_old - m) c2) the factor O is to be rescaled by, sc
   becomes P = 2^(S c2 - m c2) (fp32). One chain a row for the max and the sum (4 chains measured
   2-3% more cycles a tile) */
template <int M, int NS>
__device__ __forceinline__ void bt__k_att_fwd_p(const bt__k_attp &p, float (&sc)[NS], float (&m)[2], float (&l)[2], float (&al)[2],
                                                int edge, int k0, int r0, int tg) {
    if (edge && (M & BT__K_FWD_LEAN))
        bt__k_att_fwd_mask_lean(p, sc, k0, r0, tg);
    else if (edge)
#pragma unroll
        for (int i = 0; i < NS; i++)
            if (bt__k_att_masked(p, k0 + (i >> 2) * 8 + 2 * tg + (i & 1), r0 + ((i >> 1) & 1) * 8)) sc[i] = -INFINITY;
    float mx[2] = {m[0], m[1]}, mc[2];
#pragma unroll
    for (int i = 0; i < NS; i++) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], sc[i]);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        if ((M & BT__K_FWD_SKIP) && (mx[r] - m[r]) * p.c2 <= BT__K_FWD_SKIP_LOG2) mx[r] = m[r];   /* m[r] = -inf: never */
        al[r] = bt__k_att_fwd_ex2<M>((m[r] - mx[r]) * p.c2);   /* key 0 is in every row's first tile: mx finite */
        m[r] = mx[r];
        mc[r] = -mx[r] * p.c2;
        l[r] *= al[r];
    }
#pragma unroll
    for (int i = 0; i < NS; i++) {
        float pv = bt__k_att_fwd_ex2<M>(fmaf(sc[i], p.c2, mc[(i >> 1) & 1]));
        sc[i] = pv;
        l[(i >> 1) & 1] += pv;
    }
}
/* O *= al (per row), P (sc) rounded into the A fragments pf. SKIP: not when every row of the warp
   kept its max (al exactly 1; a warp-uniform vote) */
template <typename T, int NS, int NO, int SKIP>
__device__ __forceinline__ void bt__k_att_fwd_rescale(float (&o)[NO], const float (&al)[2], const float (&sc)[NS],
                                                      uint32_t (&pf)[NS / 8][4]) {
    if (!SKIP || __any_sync(0xffffffffu, al[0] != 1.f || al[1] != 1.f))
#pragma unroll
        for (int i = 0; i < NO; i++) o[i] *= al[(i >> 1) & 1];
    bt__k_wg_afrag<T, NS / 8>(pf, sc);
}
/* a barrier of the calling warp alone (named barrier 4 + its index, 32 threads: ids 4 .. 15 for the
   forward's 12 consumer warps; 1 .. 3 are the turns') */
__device__ __forceinline__ void bt__k_att_fwd_warp_bar(void) { bt__k_bar_sync_n(4 + ((int)threadIdx.x >> 5), 32); }
/* the forward's output rows r0 and r0 + 8 of head bh: O / l (the quad's sums) and lse. With p.out16
   the warp's 16 rows are staged by stmatrix in its own rows of the O tile (sO, BM rows; srow0: the
   warp's first) and go out later, by bt__k_att_fwd_out_flush under the next item's first S; else they
   are stored from the registers now. The warp's barriers here and in the flush are named barriers
   of its own (bt__k_att_fwd_warp_bar), not __syncwarp: ptxas wraps every step of the item loop in
   convergence barriers (BSSY, WARPSYNC before each product: 10-18% slower) around a __syncwarp
   between a product's issue and its wait, and leaves a bar.sync alone (bench/runs/h100s16p.sh,
   h100s16u.sh) */
template <typename T, int D, int BM>
__device__ __forceinline__ void bt__k_att_fwd_out(const bt__k_attp &p, int64_t bh, int r0, int tg, const float (&o)[D / 2],
                                                  float (&l)[2], const float (&m)[2], uint32_t sO, int srow0, int lane) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = 1.f / l[r];
        int row = r0 + 8 * r;
        if (tg == 0 && (unsigned)row < (unsigned)p.T && p.lse_out)
            p.lse_out[bh * p.T + row] = (m[r] * p.c2 + log2f(l[r])) * BT__K_ATT_LN2;
    }
    if (!p.out16) {
        bt__k_wg_store<T, D>((T *)p.out + bt__k_att_off(p.so, bh, p.H), p.so[2], r0, p.T, o, inv);
        return;
    }
    const int rs = srow0 + ((lane >> 3) & 1) * 8 + (lane & 7), ch = lane >> 4;
    bt__k_att_fwd_warp_bar();   /* the last flush's reads of these rows done in every lane */
#pragma unroll
    for (int dp = 0; dp < D / 16; dp++) {
        const uint32_t a[4] = {bt__k_pack2(o[8 * dp] * inv[0], o[8 * dp + 1] * inv[0], (T *)0),
                               bt__k_pack2(o[8 * dp + 2] * inv[1], o[8 * dp + 3] * inv[1], (T *)0),
                               bt__k_pack2(o[8 * dp + 4] * inv[0], o[8 * dp + 5] * inv[0], (T *)0),
                               bt__k_pack2(o[8 * dp + 6] * inv[1], o[8 * dp + 7] * inv[1], (T *)0)};
        bt__k_stmatrix4(sO + bt__k_sw(rs, 2 * dp + ch, BM), a);
    }
}
/* the warp's 16 staged rows out to `out` (a head's first row; the warp's first is wrow0, rows at or
   past T or below 0 skipped), 16-byte rows (4 stores a lane at D 64 instead of 32 of 4 bytes). Run
   between the next item's first S and its wait, the loads and stores overlap that product instead of
   standing between items (the output had taken 8 of 84 us at T 1024, bench/runs/h100s16a.sh): T 1024
   81.2-82.1 us against 82.3-83.0, T 2048 -1.3%, T 4096 -0.7% (H100, h100s16u.sh) */
template <typename T, int D, int BM>
__device__ __forceinline__ void bt__k_att_fwd_out_flush(const bt__k_attp &p, T *out, int wrow0, uint32_t sO, int srow0, int lane) {
    enum { CPR = D / 8 };
    bt__k_att_fwd_warp_bar();   /* every lane's stmatrix landed */
#pragma unroll
    for (int i = 0; i < 16 * CPR / 32; i++) {
        const int c = i * 32 + lane, rr = c / CPR, cc = c % CPR, row = wrow0 + rr;
        uint4 x;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w)
                     : "r"(sO + bt__k_sw(srow0 + rr, cc, BM)));
        if ((unsigned)row < (unsigned)p.T) *reinterpret_cast<uint4 *>(out + (int64_t)row * p.so[2] + cc * 8) = x;
    }
}
/* ablation 5 (no output store): the results stay live through one store that never happens */
template <int NO>
__device__ __forceinline__ void bt__k_att_fwd_out_none(const bt__k_attp &p, const float (&o)[NO], const float (&l)[2]) {
    float a = l[0] + l[1];
#pragma unroll
    for (int i = 0; i < NO; i++) a += o[i];
    if (a == 1.2345e-30f && p.lse_out) p.lse_out[0] = a;
}
/* ablation 6 (no products): scores made up from the tile index, the same cost as none */
template <int NS> __device__ __forceinline__ void bt__k_att_fwd_fake_s(float (&sc)[NS], int j) {
#pragma unroll
    for (int i = 0; i < NS; i++) sc[i] = (float)(i & 7) * 0.125f + (float)j;
}
/* stages of the forward's K and V rings: 3 at D 64 (the next item's first tiles load under the last
   item's end; 4, whose stage and phase are a mask and a shift, measured the same: 91.0-91.6 us
   against 90.9-91.7 at T 1024, 896-901 against 903-912 at T 4096, 2026-11-24), 2 at D 128 (shared
   memory) */
__host__ __device__ constexpr int bt__k_att_fwd_st(int D) { return D == 64 ? 3 : 2; }
/* key tiles of BN that queries below row `end` (exclusive) see: causal, those up to min(end, T) - 1;
   else all */
__device__ __forceinline__ int bt__k_att_fwd_nt(const bt__k_attp &p, int end, int BN) {
    return ((p.causal && end < p.T ? end : p.T) + BN - 1) / BN;
}
/* what a consumer's forward step needs of its item: the shared tiles and barriers, the item (L, its
   first ring use u, nt key tiles), the warpgroup (w; ntw <= nt key tiles it multiplies,
   the rest idle turns; ke its first key tile with masked scores when causal), the thread (lane, rows
   r0 and r0 + 8, tg = lane % 4) */
struct bt__k_att_fwd_ctx {
    const bt__k_attp &p;
    uint32_t sQ, sK, sV, kfull, kempty, vfull, vempty;
    uint64_t dq, dk, dv;   /* LEAN: descriptors of this warpgroup's Q rows, the K ring's and V ring's starts */
    int64_t L, nitems;
    int u, nt, ntw, ke, w, lane, r0, tg;
    int tn;   /* the item's warpgroups take turns at the tensor cores (variants with turns: nt >= p.turns) */
};
/* S = Q K(stage s)^T for the step's warpgroup under variant M */
template <typename T, int D, int M>
__device__ __forceinline__ void bt__k_att_fwd_qk(float (&sc)[64], const bt__k_att_fwd_ctx &c, int s) {
    enum { TILE = 128 * D * 2 };
    if (M & BT__K_FWD_LEAN) bt__k_att_fwd_s_lean<T, D>(sc, c.dq, bt__k_wg_desc_at(c.dk, (uint32_t)(s * TILE)));
    else bt__k_att_fwd_s<T, D>(sc, c.sQ, c.sK + s * TILE, c.w);
}
/* the turn at the tensor cores goes from warpgroup w to w + 1 (mod NW) after step j: named barrier
   1 + w is warpgroup w's, the one before it arrives on it; warpgroup NW - 1 opens each item's first
   turn (bt__k_att_fwd_turn_open) and hands none over after its last, so every barrier sees as many
   arrivals as waits (nt a warpgroup and item) */
template <int NW> __device__ __forceinline__ void bt__k_att_fwd_turn_give(int on, const bt__k_att_fwd_ctx &c, int j) {
    if (on && (c.w != NW - 1 || j + 1 < c.nt)) bt__k_bar_arrive(1 + (c.w + 1) % NW);
}
template <int NW> __device__ __forceinline__ void bt__k_att_fwd_turn_open(int on, int w) {
    if (on && w == NW - 1) bt__k_bar_arrive(1);
}
/* WG3: a warpgroup's key tile j past its last row (causal) or an item's warpgroup with no query
   below T: its K and V stages wait to be full and go back, its turn is taken and handed on (the
   other warpgroups multiply this tile) */
template <int NW, int TURNS>
__device__ __forceinline__ void bt__k_att_fwd_idle(const bt__k_att_fwd_ctx &c, int j, int ST) {
    const int uj = c.u + j, s = uj % ST;
    bt__k_mbar_wait(c.kfull + 8 * s, (uj / ST) & 1);
    bt__k_mbar_wait(c.vfull + 8 * s, (uj / ST) & 1);
    if (TURNS && c.tn) bt__k_bar_sync(1 + c.w);
    bt__k_att_fwd_turn_give<NW>(TURNS && c.tn, c, j);
    if (c.lane == 0) {
        bt__k_mbar_arrive(c.kempty + 8 * s);
        bt__k_mbar_arrive(c.vempty + 8 * s);
    }
}
/* a consumer warpgroup's step j of its item: S(j) = Q K(j)^T, then O += P(j-1) V(j-1) (O in the
   units of m(j-1)), two groups issued in this warpgroup's turn at the tensor cores; the softmax of
   S(j) into the A fragments pf (P(j)) and O rescaled. Without OVL: both products waited for before
   the softmax. OVL (the default at D 64): the softmax after S(j) alone (wait_group 1) while
   P(j-1) V(j-1) runs, O rescaled and P(j) written into pf only after it (wait_group 0): no
   register of the product in flight is touched. KIND: 0 any step (j > 0 known at run time), 1 the first, 2 a later one (the
   OVL loop: ptxas needs the in-flight products known in the code's shape, else C7514 / C7515).
   first(): run in the first step while its S is in flight */
template <typename T, int D, int M, int KIND, typename F>
__device__ __forceinline__ void bt__k_att_fwd_step(const bt__k_att_fwd_ctx &c, int j, float (&o)[D / 2], float (&m)[2], float (&l)[2],
                                                   uint32_t (&pf)[8][4], F &&first) {
    enum { BN = 128, ST = bt__k_att_fwd_st(D), TILE = BN * D * 2, NS = BN / 2, NO = D / 2 };
    enum { ABL = M & BT__K_FWD_ABL, TURNS = ABL != 4 && !(M & BT__K_FWD_NOTURN), LEAN = (M & BT__K_FWD_LEAN) != 0 };
    enum { NW = bt__k_att_fwd_nw(M) };
    const bt__k_attp &p = c.p;
    const int later = KIND == 2 || (KIND == 0 && j > 0), ovl = (M & BT__K_FWD_OVL) && KIND == 2;
    const int uj = c.u + j, s = uj % ST, sp = (uj + ST - 1) % ST;
    float sc[NS], al[2];   /* this tile's scores (the first product overwrites them): nothing carried between tiles */
    bt__k_att_fwd_tmark(p, c.nitems, uj, c.w, 0);
    bt__k_mbar_wait(c.kfull + 8 * s, (uj / ST) & 1);
    if (later) bt__k_mbar_wait(c.vfull + 8 * sp, ((uj - 1) / ST) & 1);
    /* no proxy fence: K and V land by TMA and are read by wgmma, both the async proxy, and no thread
       writes those stages (its removal alone: T 4096 843-846 us against 846-847, within the noise;
       H100, bench/runs/h100s15a.sh) */
    bt__k_att_fwd_tmark(p, c.nitems, uj, c.w, 1);
    if (TURNS && c.tn) bt__k_bar_sync(1 + c.w);   /* this warpgroup's turn at the tensor cores */
    bt__k_att_fwd_tmark(p, c.nitems, uj, c.w, 2);
    /* each branch fences right before its products (no register of theirs touched between) */
    if (ABL == 6) {
        bt__k_att_fwd_fake_s(sc, j);
        if (!later) first();
    } else if (later) {
        bt__k_wg_pin(o);
        bt__k_wg_arrive();
        bt__k_att_fwd_qk<T, D, M>(sc, c, s);
        bt__k_wg_commit();
        bt__k_att_fwd_tmark(p, c.nitems, uj, c.w, 5);
        if (ovl) bt__k_wg_arrive();   /* a pipeline stage of its own for ptxas (else C7514) */
        bt__k_att_fwd_pv<T, D, LEAN>(o, pf, c.sV + sp * TILE, c.dv, (uint32_t)(sp * TILE));
        bt__k_wg_commit();
        bt__k_att_fwd_tmark(p, c.nitems, uj, c.w, 6);
    } else {
        bt__k_wg_arrive();
        bt__k_att_fwd_qk<T, D, M>(sc, c, s);
        bt__k_wg_commit();
        first();   /* the first step's work under its S (the last item's output) */
    }
    bt__k_att_fwd_turn_give<NW>(TURNS && c.tn, c, j);
    if (ovl) {
        bt__k_wg_wait1();   /* S(j) landed, P(j-1) V(j-1) may run on */
        bt__k_wg_pin(sc);
    } else {
        bt__k_wg_wait0();
        bt__k_wg_pin(sc); bt__k_wg_pin(o); bt__k_wg_pin_u(pf);   /* P(j-1)'s registers free from here */
    }
    bt__k_att_fwd_tmark(p, c.nitems, uj, c.w, 3);
    if (j == 0) bt__k_att_mark(p, c.L, 2, 0);
    if (c.lane == 0) {
        bt__k_mbar_arrive(c.kempty + 8 * s);
        if (later && !ovl) bt__k_mbar_arrive(c.vempty + 8 * sp);
    }
    const int edge = (p.causal && j >= c.ke) || (j + 1) * BN > p.T;
    if (ABL != 1) bt__k_att_fwd_p<M, NS>(p, sc, m, l, al, edge, j * BN, c.r0, c.tg);
    if (ovl) {
        /* ptxas hoists the wait for P V above the softmax's row max unless a branch stands between
           (it moves no wgmma wait across one): P V then ran alone. With this never-taken one the wait
           lands among the exponentials, which interleave with P's packing: T 4096 814-816 us against
           850-853, T 1024 84.6 against 85.4-85.9. Waiting after every exponential (a branch on the
           row sums) was slower, 870 (H100, bench/runs/h100s15b.sh, h100s15c.sh) */
        bt__k_sched_split(p.T < 0);
        bt__k_wg_wait0();
        bt__k_wg_pin(o); bt__k_wg_pin_u(pf);
        if (c.lane == 0) bt__k_mbar_arrive(c.vempty + 8 * sp);
    }
    if (ABL == 1 || KIND == 1) bt__k_wg_afrag<T, NS / 8>(pf, sc);   /* the first step: O is still 0 */
    else bt__k_att_fwd_rescale<T, NS, NO, (M & BT__K_FWD_SKIP) != 0>(o, al, sc, pf);
    if (ABL == 6) bt__k_wg_pin_u(pf);
    bt__k_att_fwd_tmark(p, c.nitems, uj, c.w, 4);
}
/* one K or V tile (rows r0 .. of head h, batch b; map's dimension order hr) into ring stage s at its use
   u: once the consumers let the stage go (use u - ST, parity ph), its bytes expected on `full`.
   Ablation 3: only the first fills load */
template <int D, int ST, int ABL>
__device__ __forceinline__ void bt__k_att_fwd_tma_tile(const CUtensorMap *map, int hr, int r0, int h, int b, uint32_t dst, uint32_t full,
                                                       uint32_t empty, int u, int ph) {
    if (u >= ST) bt__k_mbar_wait(empty, ph);
    if (ABL == 3 && u >= ST) {
        bt__k_mbar_arrive(full);
        return;
    }
    bt__k_mbar_expect(full, 128 * D * 2);
#pragma unroll
    for (int cb = 0; cb < D / 64; cb++) bt__k_tma_load4(dst + cb * 128 * 128, map, cb * 64, hr ? h : r0, hr ? r0 : h, b, full);
}
/* one thread loads item n's Q (rows q0 .., buffer sQ) and its nt K and V tiles (ring uses u ..) by the
   tensor memory accelerator: a box of 64 columns a column block, each tile's bytes expected on its full
   barrier; stages are refilled once the consumers let them go. Ablation 3: only the first fills */
template <int D, int BM, int ST, int ABL>
__device__ __forceinline__ void bt__k_att_fwd_tma_item(const bt__k_attp &p, const bt__k_att_maps &tm, int64_t bh, int q0, int nt,
                                                       int64_t n, int u, uint32_t sQ, uint32_t sK, uint32_t sV, uint32_t qfull,
                                                       uint32_t qempty, uint32_t kfull, uint32_t kempty, uint32_t vfull,
                                                       uint32_t vempty) {
    enum { TILE = 128 * D * 2 };
    const int b = (int)(bh / p.H), h = (int)(bh - (int64_t)b * p.H), hq = tm.hrow & 1, hk = tm.hrow >> 1 & 1, hv = tm.hrow >> 2 & 1;
    if (n >= 2) bt__k_mbar_wait(qempty, (int)(((n >> 1) - 1) & 1));
    if (ABL == 3 && n >= 2) {
        bt__k_mbar_arrive(qfull);
    } else {
        bt__k_mbar_expect(qfull, BM * D * 2);
#pragma unroll
        for (int cb = 0; cb < D / 64; cb++) bt__k_tma_load4(sQ + cb * BM * 128, &tm.m[0], cb * 64, hq ? h : q0, hq ? q0 : h, b, qfull);
    }
    for (int j = 0; j < nt; j++, u++) {
        const int s = u % ST, ph = (u / ST - 1) & 1;
        bt__k_att_fwd_tma_tile<D, ST, ABL>(&tm.m[1], hk, j * 128, h, b, sK + s * TILE, kfull + 8 * s, kempty + 8 * s, u, ph);
        bt__k_att_fwd_tma_tile<D, ST, ABL>(&tm.m[2], hv, j * 128, h, b, sV + s * TILE, vfull + 8 * s, vempty + 8 * s, u, ph);
    }
}
/* -- forward: work items (head, query tile of BM = 64 NW, longest first; bt__k_att_work), one per CTA or,
   with a persistent grid (one CTA per SM), several a CTA: the producer then loads the next item's
   Q (its own buffer: items alternate between two), K(0), V(0) while the consumers finish the last
   one. smem Q 2 x BM x D, K and V ST x 128 x D, O BM x D (bt__k_att_fwd_out). M: the variant or
   ablation (BT__K_FWD_*); NW consumer warpgroups (bt__k_att_fwd_nw), then the producer warpgroup -- */
template <typename T, int D, int M>
__global__ void __launch_bounds__(128 * (bt__k_att_fwd_nw(M) + 1), 1) bt__k_att_fwd_wg(bt__k_attp p, const __grid_constant__ bt__k_att_maps tm) {
#ifdef BT__K_WG
    enum { NW = bt__k_att_fwd_nw(M), BM = 64 * NW, BN = 128, ST = bt__k_att_fwd_st(D), TILE = BN * D * 2, NS = BN / 2, NO = D / 2 };
    enum { QT = BM * D * 2, PT = 128 * NW };   /* PT: the producer's first thread */
    enum { ABL = M & BT__K_FWD_ABL, OVL = (M & BT__K_FWD_OVL) != 0, TURNS = ABL != 4 && !(M & BT__K_FWD_NOTURN) };
    /* K full, K empty, V full, V empty (ST each), Q full, Q empty (2 each), item full, item empty
       (static: marks the sm_90a build) */
    __shared__ __align__(8) uint64_t bars[4 * ST + 6];
    __shared__ int64_t item_slot;
    extern __shared__ __align__(16) unsigned char bt__k_att_sm[];
    const uint32_t sQ0 = bt__k_wg_base(bt__k_att_sm), sK = sQ0 + 2 * QT, sV = sK + ST * TILE, sO = sV + ST * TILE;
    const uint32_t kfull = bt__k_smem(bars), kempty = kfull + 8 * ST, vfull = kempty + 8 * ST, vempty = vfull + 8 * ST,
                   qfull = vempty + 8 * ST, qempty = qfull + 16, ifull = qempty + 16, iempty = ifull + 8;
    const int nqt = (p.T + BM - 1) / BM;
    const int64_t nitems = (p.bh1 - p.bh0) * nqt;
    const int warp = bt__k_warp_id(), lane = threadIdx.x & 31, t = threadIdx.x & 127;
    int64_t next = blockIdx.x;   /* the item fetched ahead (thread PT, the producer's first, with p.ctr) */
    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; s++) {   /* full: one arrival (the loading thread's expected bytes) */
            bt__k_mbar_init(kfull + 8 * s, 1); bt__k_mbar_init(vfull + 8 * s, 1);
            bt__k_mbar_init(kempty + 8 * s, 4 * NW); bt__k_mbar_init(vempty + 8 * s, 4 * NW);
        }
        for (int b = 0; b < 2; b++) { bt__k_mbar_init(qfull + 8 * b, 1); bt__k_mbar_init(qempty + 8 * b, 4 * NW); }
        bt__k_mbar_init(ifull, 1); bt__k_mbar_init(iempty, 4 * NW + 4);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (warp >= 4 * NW) {   /* producer: its first thread loads each item's Q, K(j), V(j) (bt__k_att_fwd_tma_item) */
        if (NW == 3) bt__k_wg_regs_dec<32>();
        else bt__k_wg_regs_dec<BT__K_WG_PRODUCER_REGS>();
        int u = 0;   /* K, V tiles loaded so far: use u of the rings is stage u % ST, its (u / ST)-th */
        for (int64_t n = 0;; n++) {
            const int64_t L = bt__k_att_next(p, n, nitems, &item_slot, ifull, iempty, next, 1, PT);
            if (L >= nitems) break;
            bt__k_att_mark(p, L, 6, PT);
            int rank;
            const int64_t bh = bt__k_att_work(p, L, nqt, rank);
            const int qt = nqt - 1 - rank, q0 = qt * BM - p.qoff, nt = bt__k_att_fwd_nt(p, q0 + BM, BN);
            if (t == 0)   /* one thread loads the item: Q into buffer n % 2, then its K(j), V(j) */
                bt__k_att_fwd_tma_item<D, BM, ST, ABL>(p, tm, bh, q0, nt, n, u, sQ0 + (n & 1) * QT, sK, sV, qfull + 8 * (n & 1),
                                                       qempty + 8 * (n & 1), kfull, kempty, vfull, vempty);
            u += nt;
            bt__k_att_mark(p, L, 7, PT);   /* the loading thread, after the item's last load */
        }
    } else {
        if (NW == 3) bt__k_wg_regs_inc<160>();
        else bt__k_wg_regs_inc<BT__K_WG_CONSUMER_REGS>();
        const int w = warp >> 2, g = lane >> 2, tg = lane & 3, srow0 = 64 * w + 16 * (warp & 3);
        int u = 0;   /* K, V tiles consumed so far (as the producer's u) */
        /* the last item's staged output: its head's first row, the warp's first row (none yet, or not
           staged: rows below 0, which the flush skips; it runs in every item, unconditionally) */
        T *pout = (T *)p.out;
        int prow = INT_MIN / 2;
        for (int64_t n = 0;; n++) {
            const int64_t L = bt__k_att_next(p, n, nitems, &item_slot, ifull, iempty, next, 1, PT);
            if (L >= nitems) {
                bt__k_att_fwd_out_flush<T, D, BM>(p, pout, prow, sO, srow0, lane);
                break;
            }
            bt__k_att_mark(p, L, 0, 0);
            int rank;
            const int64_t bh = bt__k_att_work(p, L, nqt, rank);
            const int qt = nqt - 1 - rank, q0 = qt * BM - p.qoff, nt = bt__k_att_fwd_nt(p, q0 + BM, BN);
            /* warpgroup w owns queries q0 + 64 w ..; this thread rows r0 and r0 + 8. It multiplies
               its first ntw key tiles (at least one: a warpgroup wholly past T, or wholly before row
               0 in an end-aligned first tile, multiplies zero rows once, unmasked, so that no product
               is issued under a run-time condition); ke: its first key tile with a key above its
               first row (the causal mask). Rows < 0 of a warpgroup that also holds rows >= 0 are
               wholly masked (their NaNs stay in their own rows, which are never stored) */
            const int rw = q0 + 64 * w, r0 = rw + 16 * (warp & 3) + g, dead = rw >= p.T || rw + 64 <= 0;
            const int ntw = NW == 2 ? nt : dead ? 1 : bt__k_att_fwd_nt(p, rw + 64, BN), ke = dead ? ntw : (rw + 1) / BN;
            float o[NO], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
            uint32_t pf[BN / 16][4];
#pragma unroll
            for (int i = 0; i < NO; i++) o[i] = 0.f;
            const int qb = (int)(n & 1);
            const uint32_t sQ = sQ0 + qb * QT;
            bt__k_mbar_wait(qfull + 8 * qb, (int)((n >> 1) & 1));
            bt__k_att_mark(p, L, 1, 0);
            const int tn = NW == 2 || nt >= p.turns;
            bt__k_att_fwd_turn_open<NW>(TURNS && tn, w);   /* warpgroup 0 issues first */
            const bt__k_att_fwd_ctx c = {p, sQ, sK, sV, kfull, kempty, vfull, vempty, bt__k_wg_kmaj(sQ, BM, 64 * w, 0),
                                         bt__k_wg_kmaj(sK, 128, 0, 0), bt__k_wg_mnmaj(sV, 128, 0), L, nitems, u, nt, ntw, ke, w,
                                         lane, r0, tg, tn};
            auto flush = [&]() { bt__k_att_fwd_out_flush<T, D, BM>(p, pout, prow, sO, srow0, lane); };
            auto none = []() {};
            if (OVL) {   /* the first step apart: ptxas then knows which products are in flight where (else C7514) */
                bt__k_att_fwd_step<T, D, M, 1>(c, 0, o, m, l, pf, flush);
                for (int j = 1; j < ntw; j++) bt__k_att_fwd_step<T, D, M, 2>(c, j, o, m, l, pf, none);
            } else {
                bt__k_att_fwd_step<T, D, M, 0>(c, 0, o, m, l, pf, flush);
                for (int j = 1; j < ntw; j++) bt__k_att_fwd_step<T, D, M, 0>(c, j, o, m, l, pf, none);
            }
            bt__k_att_mark(p, L, 3, 0);
            {   /* the last O += P V, then V's stage goes back */
                const int ul = u + ntw - 1, sp = ul % ST;
                bt__k_mbar_wait(vfull + 8 * sp, (ul / ST) & 1);
                bt__k_fence_async();
                if (ABL != 6) {
                    bt__k_wg_pin(o);
                    bt__k_wg_arrive();
                    bt__k_att_fwd_pv<T, D, (M & BT__K_FWD_LEAN) != 0>(o, pf, sV + sp * TILE, c.dv, (uint32_t)(sp * TILE));
                    bt__k_wg_commit();
                    bt__k_wg_wait0();
                    bt__k_wg_pin(o);
                }
                if (lane == 0) bt__k_mbar_arrive(vempty + 8 * sp);
            }
            if (NW != 2)
                for (int j = ntw; j < nt; j++) bt__k_att_fwd_idle<NW, TURNS>(c, j, ST);
            u += nt;
            if (ABL == 5) bt__k_att_fwd_out_none<NO>(p, o, l);
            else bt__k_att_fwd_out<T, D, BM>(p, bh, r0, tg, o, l, m, sO, srow0, lane);
            pout = (T *)p.out + bt__k_att_off(p.so, bh, p.H);
            prow = p.out16 && ABL != 5 ? rw + 16 * (warp & 3) : INT_MIN / 2;
            if (lane == 0) bt__k_mbar_arrive(qempty + 8 * qb);   /* the Q tile read for the last time (by the tensor cores only) */
            bt__k_att_mark(p, L, 4, 0);
            if (p.trace && threadIdx.x == 0) {
                unsigned sm;
                asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
                p.trace[L * 8 + 5] = sm | (unsigned long long)nt << 16;
            }
        }
    }
#else
    __trap();
#endif
}

/* bytes of a dK/dV stage (Q, dO tiles of BQ rows, lse and Dvec rows), rounded up to 1024: every
   tile must start on a 1024-byte boundary (the swizzle repeats every 8 rows of 128 bytes, and the
   descriptors assume a tile starts at the pattern's start) */
__host__ __device__ constexpr int bt__k_att_dkv_stage(int D, int BQ) { return (2 * BQ * D * 2 + 2 * BQ * 4 + 1023) / 1024 * 1024; }

/* d (64 x 64 fp32) = A B (+ d when acc), B MN-major in shared memory (a [k][n] tile read transposed);
   ss_t: A K-major; ss_tt: A MN-major too (A's rows, the product's m, are the columns of a [k][m] tile) */
#define BT__K_WG_SST(NAME, TA, PT, CT)                                                                                   \
    __device__ __forceinline__ void NAME(float (&d)[32], uint64_t a, uint64_t b, int acc, CT *) {                        \
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"                                                           \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." PT "." PT " {" BT__K_WG_R32 "}, %32, %33, p, 1, 1, " TA \
                     ", 1; }\n" : BT__K_WG_F32(d, 0) : "l"(a), "l"(b), "r"(acc));                                       \
    }
BT__K_WG_SST(bt__k_wg_ss_t, "0", "bf16", __nv_bfloat16)
BT__K_WG_SST(bt__k_wg_ss_t, "0", "f16", __half)
BT__K_WG_SST(bt__k_wg_ss_tt, "1", "bf16", __nv_bfloat16)
BT__K_WG_SST(bt__k_wg_ss_tt, "1", "f16", __half)
/* the tile work of dK, dV (the dK/dV kernel and the fused backward), warpgroup w: keys 64 w .. of the
   K, V tiles, the BQ queries of a stage (Q, dO tiles, lse and Dvec rows). kv_sdp issues S^T = K Q^T
   and dP^T = V dO^T (SS, one commit group); kv_grads waits for them and leaves P^T = 2^(S^T c2 -
   lse log2e) (0 where masked) and dS^T / scale = P^T (dP^T - Dvec) as A fragments; kv_acc issues
   dV += P^T dO and dK += dS^T Q (RS, one commit group, not waited for). Column c of the tile is
   query i BQ + c; this thread's keys key0 and key0 + 8. */
template <typename T, int D, int BQ>
__device__ __forceinline__ void bt__k_att_kv_sdp(float (&sc)[BQ / 2], float (&dp)[BQ / 2], uint32_t sK, uint32_t sV, uint32_t sQ,
                                                 uint32_t sG, int w) {
    bt__k_wg_arrive();
#pragma unroll
    for (int kd = 0; kd < D / 16; kd++)
        bt__k_wg_ss(sc, bt__k_wg_kmaj(sK, 128, 64 * w, kd), bt__k_wg_kmaj(sQ, BQ, 0, kd), kd > 0, (T *)0);
#pragma unroll
    for (int kd = 0; kd < D / 16; kd++)
        bt__k_wg_ss(dp, bt__k_wg_kmaj(sV, 128, 64 * w, kd), bt__k_wg_kmaj(sG, BQ, 0, kd), kd > 0, (T *)0);
    bt__k_wg_commit();
}
/* P^T = 2^(S^T c2 - lse log2e) (0 where MASK and masked) into sc, dS^T / scale = P^T (dP^T - Dvec)
   into dp; Ls: the stage's lse row (L2: -lse log2e already), Dvec right after it. The mask as one
   compare with a constant a score: this thread's query column i BQ + 8 nt + 2 tg + (e & 1) against
   its key key0 + 8 (e >> 1) (causal: key > query) and against T */
template <int BQ, int MASK, int L2>
__device__ __forceinline__ void bt__k_att_kv_p_ds(const bt__k_attp &p, float (&sc)[BQ / 2], float (&dp)[BQ / 2], const float *Ls,
                                                  int i, int key0, int tg) {
    const float *Dc = Ls + BQ;
    const int lim = i * BQ + 2 * tg - key0, end = p.T - i * BQ - 2 * tg;
#pragma unroll
    for (int nt = 0; nt < BQ / 8; nt++) {
        int c = nt * 8 + 2 * tg;
        float2 lv = *reinterpret_cast<const float2 *>(Ls + c), dvv = *reinterpret_cast<const float2 *>(Dc + c);
        if (!L2) { lv.x *= -BT__K_ATT_LOG2E; lv.y *= -BT__K_ATT_LOG2E; }
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float pv = bt__k_ex2(fmaf(sc[4 * nt + e], p.c2, (e & 1) ? lv.y : lv.x));
            if (MASK && (8 * nt + (e & 1) >= end || (p.causal && 8 * (e >> 1) - 8 * nt - (e & 1) > lim))) pv = 0.f;
            sc[4 * nt + e] = pv;
            dp[4 * nt + e] = pv * (dp[4 * nt + e] - ((e & 1) ? dvv.y : dvv.x));
        }
    }
}
template <typename T, int BQ, int L2 = 0>
__device__ __forceinline__ void bt__k_att_kv_grads(const bt__k_attp &p, uint32_t (&pa)[BQ / 16][4], uint32_t (&da)[BQ / 16][4],
                                                   float (&sc)[BQ / 2], float (&dp)[BQ / 2], const float *Ls, int i, int k0,
                                                   int key0, int tg) {
    bt__k_wg_wait0();
    bt__k_wg_pin(sc); bt__k_wg_pin(dp);
    /* edge tiles (the causal diagonal, rows past T) in a loop of their own: with the mask inside the
       one loop ptxas if-converted it into every step (a branch, select and predicate op a score) */
    if ((p.causal && i * BQ < k0 + 128) || (i + 1) * BQ > p.T) bt__k_att_kv_p_ds<BQ, 1, L2>(p, sc, dp, Ls, i, key0, tg);
    else bt__k_att_kv_p_ds<BQ, 0, L2>(p, sc, dp, Ls, i, key0, tg);
    bt__k_wg_afrag<T, BQ / 16>(pa, sc);
    bt__k_wg_afrag<T, BQ / 16>(da, dp);
}
template <typename T, int D, int BQ>
__device__ __forceinline__ void bt__k_att_kv_acc(float (&dv)[D / 2], float (&dk)[D / 2], const uint32_t (&pa)[BQ / 16][4],
                                                 const uint32_t (&da)[BQ / 16][4], uint32_t sQ, uint32_t sG) {
    bt__k_wg_pin(dv); bt__k_wg_pin(dk);
    bt__k_wg_arrive();
#pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++) bt__k_wg_rs(dv, pa[kk], bt__k_wg_mnmaj(sG, BQ, kk), (T *)0);   /* dV += P^T dO */
#pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++) bt__k_wg_rs(dk, da[kk], bt__k_wg_mnmaj(sQ, BQ, kk), (T *)0);   /* dK += dS^T Q */
    bt__k_wg_commit();
}
/* the same at D 64 with dS^T read from shared memory (the fused backward's swizzled [128 keys][BQ]
   tile, this warpgroup's rows 64 w ..: K-major A, SS): da's registers are free while the products run */
template <typename T, int BQ>
__device__ __forceinline__ void bt__k_att_kv_acc_ss(float (&dv)[32], float (&dk)[32], const uint32_t (&pa)[BQ / 16][4],
                                                    uint32_t sDS, int w, uint32_t sQ, uint32_t sG) {
    bt__k_wg_pin(dv); bt__k_wg_pin(dk);
    bt__k_wg_arrive();
#pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++) bt__k_wg_rs(dv, pa[kk], bt__k_wg_mnmaj(sG, BQ, kk), (T *)0);   /* dV += P^T dO */
#pragma unroll
    for (int kk = 0; kk < BQ / 16; kk++)   /* dK += dS^T Q */
        bt__k_wg_ss_t(dk, bt__k_wg_kmaj(sDS, 128, 64 * w, kk), bt__k_wg_mnmaj(sQ, BQ, kk), 1, (T *)0);
    bt__k_wg_commit();
}

/* -- dK, dV: grid (B H, key tiles of 128); warpgroup w owns keys k0 + 64 w ..; query tiles of BQ
   (from the first one reaching k0 when causal); smem K, V 128 x D, stages of Q, dO (BQ x D) and
   lse, Dvec (BQ floats) -- */
template <typename T, int D, int BQ> __global__ void __launch_bounds__(BT__K_WG_THREADS, 1) bt__k_att_dkv_wg(bt__k_attp p) {
#ifdef BT__K_WG
    enum { BK = 128, ST = 2, QB = BQ * D * 2, STAGE = bt__k_att_dkv_stage(D, BQ), NS = BQ / 2, NO = D / 2 };
    __shared__ __align__(8) uint64_t bars[2 * ST];   /* full, empty */
    extern __shared__ __align__(16) unsigned char bt__k_att_sm[];
    const uint32_t sK = bt__k_wg_base(bt__k_att_sm), sV = sK + BK * D * 2, sS = sV + BK * D * 2;
    const unsigned char *gS = bt__k_att_sm + (sS - bt__k_smem(bt__k_att_sm));   /* sS as a generic pointer */
    const uint32_t full = bt__k_smem(bars), empty = full + 8 * ST;
    int kt;
    const int64_t bh = bt__k_att_work(p, blockIdx.x, (p.T + BK - 1) / BK, kt);   /* rank = key tile: tile 0 walks the most */
    const int nqt = (p.T + BQ - 1) / BQ, k0 = kt * BK, i0 = p.causal ? k0 / BQ : 0, n = nqt - i0;
    const int warp = bt__k_warp_id(), lane = threadIdx.x & 31, t = threadIdx.x & 127;
    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; s++) { bt__k_mbar_init(full + 8 * s, 128); bt__k_mbar_init(empty + 8 * s, 8); }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (warp >= 8) {   /* producer: K, V once, then (Q, dO, lse, Dvec) of query tile i0 + it */
        bt__k_wg_regs_dec<BT__K_WG_PRODUCER_REGS>();
        const T *q = (const T *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const T *)p.k + bt__k_att_off(p.sk, bh, p.H),
                *v = (const T *)p.v + bt__k_att_off(p.sv, bh, p.H), *go = (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H);
        const float *lse = p.lse + bh * p.T, *dvec = p.dvec + bh * p.T;
        for (int it = 0; it < n; it++) {
            int s = it % ST, r = (i0 + it) * BQ;
            uint32_t st = sS + s * STAGE;
            if (it >= ST) bt__k_mbar_wait(empty + 8 * s, (it / ST - 1) & 1);
            if (it == 0) {
                bt__k_wg_load<T, BK, D>(sK, k, p.sk[2], k0, p.T, t);
                bt__k_wg_load<T, BK, D>(sV, v, p.sv[2], k0, p.T, t);
            }
            bt__k_wg_load<T, BQ, D>(st, q, p.sq[2], r, p.T, t);
            bt__k_wg_load<T, BQ, D>(st + QB, go, p.sgo[2], r, p.T, t);
            bt__k_wg_load_row(st + 2 * QB, lse, r, BQ, p.T, t);
            bt__k_wg_load_row(st + 2 * QB + BQ * 4, dvec, r, BQ, p.T, t);
            bt__k_cp_mbar_arrive(full + 8 * s);
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");   /* every copy landed before this warpgroup exits */
    } else {
        bt__k_wg_regs_inc<BT__K_WG_CONSUMER_REGS>();
        const int w = warp >> 2, g = lane >> 2, tg = lane & 3, key0 = k0 + 64 * w + 16 * (warp & 3) + g;
        float dk[NO], dv[NO], sc[NS], dp[NS];
#pragma unroll
        for (int i = 0; i < NO; i++) dk[i] = dv[i] = 0.f;
#pragma unroll
        for (int i = 0; i < NS; i++) sc[i] = dp[i] = 0.f;
        /* turns (p.turns): products S^T, dP^T of warpgroup 0, then of 1, then dV, dK of 0, then of 1,
           ...: one warpgroup's exponentials run under the other's products */
        bt__k_turn_open(p.turns, w);
        for (int it = 0; it < n; it++) {
            const int s = it % ST, i = i0 + it;
            const uint32_t sQ = sS + s * STAGE, sG = sQ + QB;
            /* a tile whose queries all precede this warpgroup's keys (D 128: warpgroup 1's first) is
               multiplied anyway, all masked (P = 0 adds nothing): straight-line code, every product
               fenced and waited for on one path */
            bt__k_mbar_wait(full + 8 * s, (it / ST) & 1);
            bt__k_fence_async();
            bt__k_turn_take(p.turns, w);
            bt__k_att_kv_sdp<T, D, BQ>(sc, dp, sK, sV, sQ, sG, w);
            bt__k_turn_give(p.turns, w, 0);
            uint32_t pa[BQ / 16][4], da[BQ / 16][4];
            bt__k_att_kv_grads<T, BQ>(p, pa, da, sc, dp, (const float *)(gS + s * STAGE + 2 * QB), i, k0, key0, tg);
            bt__k_turn_take(p.turns, w);
            bt__k_att_kv_acc<T, D, BQ>(dv, dk, pa, da, sQ, sG);
            bt__k_turn_give(p.turns, w, it == n - 1);
            bt__k_wg_wait0();
            bt__k_wg_pin(dv); bt__k_wg_pin(dk);
            if (lane == 0) bt__k_mbar_arrive(empty + 8 * s);
        }
        const float sc2[2] = {p.scale, p.scale}, one[2] = {1.f, 1.f};
        bt__k_wg_store<T, D>((T *)p.gk + bt__k_att_off(p.sgk, bh, p.H), p.sgk[2], key0, p.T, dk, sc2);
        bt__k_wg_store<T, D>((T *)p.gv + bt__k_att_off(p.sgv, bh, p.H), p.sgv[2], key0, p.T, dv, one);
    }
#else
    __trap();
#endif
}

/* -- dQ: grid (B H, query tiles of 128, last first); warpgroup w owns queries q0 + 64 w ..; key
   tiles of BK; smem Q, dO 128 x D, stages of K, V (BK x D) -- */
template <typename T, int D, int BK> __global__ void __launch_bounds__(BT__K_WG_THREADS, 1) bt__k_att_dq_wg(bt__k_attp p) {
#ifdef BT__K_WG
    enum { BM = 128, ST = 2, KB = BK * D * 2, NS = BK / 2, NO = D / 2 };
    __shared__ __align__(8) uint64_t bars[2 * ST];   /* full, empty */
    extern __shared__ __align__(16) unsigned char bt__k_att_sm[];
    const uint32_t sQ = bt__k_wg_base(bt__k_att_sm), sG = sQ + BM * D * 2, sK = sG + BM * D * 2, sV = sK + ST * KB;
    const uint32_t full = bt__k_smem(bars), empty = full + 8 * ST;
    int rank;
    const int nqt = (p.T + BM - 1) / BM;
    const int64_t bh = bt__k_att_work(p, blockIdx.x, nqt, rank);
    const int qt = nqt - 1 - rank, q0 = qt * BM, nkt = (p.T + BK - 1) / BK;
    const int nt = p.causal && (q0 + BM - 1) / BK + 1 < nkt ? (q0 + BM - 1) / BK + 1 : nkt;
    const int warp = bt__k_warp_id(), lane = threadIdx.x & 31, t = threadIdx.x & 127;
    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; s++) { bt__k_mbar_init(full + 8 * s, 128); bt__k_mbar_init(empty + 8 * s, 8); }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (warp >= 8) {   /* producer: Q, dO once, then K(j), V(j) */
        bt__k_wg_regs_dec<BT__K_WG_PRODUCER_REGS>();
        const T *q = (const T *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const T *)p.k + bt__k_att_off(p.sk, bh, p.H),
                *v = (const T *)p.v + bt__k_att_off(p.sv, bh, p.H), *go = (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H);
        for (int j = 0; j < nt; j++) {
            int s = j % ST;
            if (j >= ST) bt__k_mbar_wait(empty + 8 * s, (j / ST - 1) & 1);
            if (j == 0) {
                bt__k_wg_load<T, BM, D>(sQ, q, p.sq[2], q0, p.T, t);
                bt__k_wg_load<T, BM, D>(sG, go, p.sgo[2], q0, p.T, t);
            }
            bt__k_wg_load<T, BK, D>(sK + s * KB, k, p.sk[2], j * BK, p.T, t);
            bt__k_wg_load<T, BK, D>(sV + s * KB, v, p.sv[2], j * BK, p.T, t);
            bt__k_cp_mbar_arrive(full + 8 * s);
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");   /* every copy landed before this warpgroup exits */
    } else {
        bt__k_wg_regs_inc<BT__K_WG_CONSUMER_REGS>();
        const int w = warp >> 2, g = lane >> 2, tg = lane & 3, r0 = q0 + 64 * w + 16 * (warp & 3) + g;
        float dq[NO], sc[NS], dp[NS], lse2[2], dvr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = r0 + 8 * r;
            lse2[r] = row < p.T ? p.lse[bh * p.T + row] * BT__K_ATT_LOG2E : 0.f;
            if (p.dvec_out) {   /* Dvec_row = sum_d dO O: the quad's 4 lanes D / 4 columns each, 16-byte loads */
                float a = 0.f;
                if (row < p.T) {
                    const T *go = (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H) + (int64_t)row * p.sgo[2] + tg * (D / 4),
                            *o = (const T *)p.o + bt__k_att_off(p.so, bh, p.H) + (int64_t)row * p.so[2] + tg * (D / 4);
#pragma unroll
                    for (int c = 0; c < D / 32; c++) {
                        T x[8], y[8];
                        bt__k_ld16(x, go + 8 * c); bt__k_ld16(y, o + 8 * c);
#pragma unroll
                        for (int e = 0; e < 8; e++) a = fmaf(bt__k_tof(x[e]), bt__k_tof(y[e]), a);
                    }
                }
                a += __shfl_xor_sync(0xffffffffu, a, 1);
                a += __shfl_xor_sync(0xffffffffu, a, 2);
                dvr[r] = a;
                if (tg == 0 && row < p.T) p.dvec_out[bh * p.T + row] = a;   /* for the dK/dV kernel */
            } else {
                dvr[r] = row < p.T ? p.dvec[bh * p.T + row] : 0.f;
            }
        }
#pragma unroll
        for (int i = 0; i < NO; i++) dq[i] = 0.f;
#pragma unroll
        for (int i = 0; i < NS; i++) sc[i] = dp[i] = 0.f;
        /* turns (p.turns) as in the dK/dV kernel: S, dP of warpgroup 0, of 1, dQ of 0, of 1, ... */
        bt__k_turn_open(p.turns, w);
        for (int j = 0; j < nt; j++) {
            const int s = j % ST;
            const uint32_t kb = sK + s * KB, vb = sV + s * KB;
            /* a tile whose keys all follow this warpgroup's queries (D 128: warpgroup 0's last) is
               multiplied anyway, all masked (dS = 0): straight-line code as in the dK/dV kernel */
            bt__k_mbar_wait(full + 8 * s, (j / ST) & 1);
            bt__k_fence_async();
            bt__k_turn_take(p.turns, w);
            {
                bt__k_wg_arrive();
#pragma unroll
                for (int kd = 0; kd < D / 16; kd++)   /* S = Q K^T, dP = dO V^T */
                    bt__k_wg_ss(sc, bt__k_wg_kmaj(sQ, BM, 64 * w, kd), bt__k_wg_kmaj(kb, BK, 0, kd), kd > 0, (T *)0);
#pragma unroll
                for (int kd = 0; kd < D / 16; kd++)
                    bt__k_wg_ss(dp, bt__k_wg_kmaj(sG, BM, 64 * w, kd), bt__k_wg_kmaj(vb, BK, 0, kd), kd > 0, (T *)0);
                bt__k_wg_commit();
            }
            bt__k_turn_give(p.turns, w, 0);
            uint32_t da[BK / 16][4];
            {
                bt__k_wg_wait0();
                bt__k_wg_pin(sc); bt__k_wg_pin(dp);
                const int edge = (p.causal && j * BK + BK - 1 > q0) || (j + 1) * BK > p.T;
#pragma unroll
                for (int i = 0; i < NS; i++) {
                    int r = (i >> 1) & 1;
                    float pv = bt__k_ex2(fmaf(sc[i], p.c2, -lse2[r]));
                    if (edge && bt__k_att_masked(p, j * BK + (i >> 2) * 8 + 2 * tg + (i & 1), r0 + 8 * r)) pv = 0.f;
                    dp[i] = pv * (dp[i] - dvr[r]);   /* dS / scale */
                }
                bt__k_wg_afrag<T, BK / 16>(da, dp);
            }
            bt__k_turn_take(p.turns, w);
            {
                bt__k_wg_pin(dq);
                bt__k_wg_arrive();
#pragma unroll
                for (int kk = 0; kk < BK / 16; kk++) bt__k_wg_rs(dq, da[kk], bt__k_wg_mnmaj(kb, BK, kk), (T *)0);   /* dQ += dS K */
                bt__k_wg_commit();
            }
            bt__k_turn_give(p.turns, w, j == nt - 1);
            bt__k_wg_wait0();
            bt__k_wg_pin(dq);
            if (lane == 0) bt__k_mbar_arrive(empty + 8 * s);
        }
        const float sc2[2] = {p.scale, p.scale};
        bt__k_wg_store<T, D>((T *)p.gq + bt__k_att_off(p.sgq, bh, p.H), p.sgq[2], r0, p.T, dq, sc2);
    }
#else
    __trap();
#endif
}

/* -- fused backward (causal, D 64): every product once (S^T, dP^T, dV, dK, dQ: 5 where the two
   kernels above take 7). Work items (head, key tile kt of 128) on a persistent grid, shortest first
   (kt = nkt - 1 - rank: see the order of dQ below); warpgroup w owns keys 128 kt + 64 w ..; the
   query tiles i = kt .. nqt - 1 (128 rows) stream through two stages as in the dK/dV kernel.
   Per query tile: S^T, dP^T (SS, turns), P^T and dS^T in registers, dS^T also to shared memory
   (bf16/f16, the 128-byte swizzle, key rows), dV += P^T dO and dK += dS^T Q (RS, turns), then,
   once both warpgroups wrote their half, dQ_part = dS K (SS, A read transposed from the dS^T
   tile: warpgroup w the queries 64 w ..), and dQ_part (fp32, 32 KiB) to shared memory.
   dQ, deterministic without atomics in arbitrary order: query tile i receives one part from each
   key tile 0 .. i, always in the order kt = i, i - 1, .., 0 (rank i - kt, the step at which key
   tile kt reaches query tile i: a CTA one key tile higher got there one step earlier). A counter
   per (head, query tile) holds the ranks done. For key tiles > 0 one producer thread (threadIdx
   256 + 64, the "reducer") waits for the counter to reach the part's rank, then rank 0 stores the
   part into an fp32 scratch tile and ranks 1 .. i - 1 add it there (the copy engine:
   cp.async.bulk, cp.reduce.async.bulk .add.f32), waits for the writes and publishes rank + 1;
   key tile 0 (rank i) is the consumers' own: they wait for rank i, add the scratch to their part
   in registers and write dQ scaled and rounded into gq. The fp32 sums are thus always taken in
   the same order: the bits do not depend on timing. No deadlock: an item waits only for items
   earlier in the work order (key tile kt + 1 of the same head), which CTAs took before it from
   the counter (taken only when the CTA is about to start it) or the fixed order, and run.
   Warps 8-9 load (K, V per item into one of two buffers; Q, dO, -lse log2e (p.lse2), Dvec per query tile).
   smem: 2 x (K, V) 64 KiB, 2 stages 66 KiB, dS^T 32 KiB, dQ part 32 KiB. -- */
__host__ __device__ constexpr int bt__k_att_bwd_smem_bytes(void) {
    return 4 * 128 * 64 * 2 + 2 * bt__k_att_dkv_stage(64, 128) + 128 * 128 * 2 + 128 * 64 * 4 + 1024;
}
/* bulk copies (the copy engine) of a shared block to global memory, plain or added into fp32, in
   bulk groups: wait_read = the source may be overwritten, wait = the writes are done */
__device__ __forceinline__ void bt__k_bulk_store(void *g, uint32_t s, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(g), "r"(s), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bt__k_bulk_add_f32(float *g, uint32_t s, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(g), "r"(s), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bt__k_bulk_commit(void) { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bt__k_bulk_wait_read(void) { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void bt__k_bulk_wait(void) { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
/* rank counters: wait until *c == v (acquire at gpu scope; later copy-engine accesses ordered after
   it), and publish v after this thread's earlier writes, the copy engine's included (release) */
__device__ __forceinline__ void bt__k_seq_wait(const int *c, int v) {
    int x;
    do { asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(x) : "l"(c) : "memory"); } while (x != v);
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
__device__ __forceinline__ void bt__k_seq_pass(int *c, int v) {
    asm volatile("fence.proxy.async.global;\nfence.acq_rel.gpu;\nst.relaxed.gpu.global.b32 [%0], %1;\n" ::"l"(c), "r"(v)
                 : "memory");
}
template <typename T> __global__ void __launch_bounds__(BT__K_WG_THREADS, 1) bt__k_att_bwd_wg(bt__k_attp p) {
#ifdef BT__K_WG
    enum { D = 64, BK = 128, BQ = 128, ST = 2, KT = BK * D * 2, QB = BQ * D * 2, STAGE = bt__k_att_dkv_stage(D, BQ),
           NS = BQ / 2, NO = D / 2, DQB = BQ * D * 4 };
    /* stage full, empty (ST each), K/V full, empty (2 each), dS^T free, dQ part full, empty, item full, empty */
    __shared__ __align__(8) uint64_t bars[2 * ST + 4 + 5];
    __shared__ int64_t item_slot;
    extern __shared__ __align__(16) unsigned char bt__k_att_sm[];
    const uint32_t sm0 = bt__k_smem(bt__k_att_sm), sKV = bt__k_wg_base(bt__k_att_sm), sS = sKV + 4 * KT, sDS = sS + ST * STAGE,
                   sDQ = sDS + BK * BQ * 2;
    const uint32_t full = bt__k_smem(bars), empty = full + 8 * ST, kvfull = empty + 8 * ST, kvempty = kvfull + 16,
                   dsfree = kvempty + 16, dqfull = dsfree + 8, dqempty = dqfull + 8, ifull = dqempty + 8, iempty = ifull + 8;
    const int nkt = (p.T + BK - 1) / BK;
    const int64_t nitems = (p.bh1 - p.bh0) * nkt;
    const int warp = bt__k_warp_id(), lane = threadIdx.x & 31;
    int64_t next = blockIdx.x;
    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; s++) { bt__k_mbar_init(full + 8 * s, 64); bt__k_mbar_init(empty + 8 * s, 8); }
        for (int b = 0; b < 2; b++) { bt__k_mbar_init(kvfull + 8 * b, 64); bt__k_mbar_init(kvempty + 8 * b, 8); }
        bt__k_mbar_init(dsfree, 8); bt__k_mbar_init(dqfull, 256); bt__k_mbar_init(dqempty, 1);
        bt__k_mbar_init(ifull, 1); bt__k_mbar_init(iempty, 12);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (warp >= 8) {
        bt__k_wg_regs_dec<BT__K_WG_PRODUCER_REGS>();
        const int t = threadIdx.x - 256;   /* 0 .. 63 loader, 64 reducer */
        int u = 0, uq = 0;                 /* query tiles so far (all items of this CTA); those with a part to add */
        for (int64_t n = 0;; n++) {
            const int64_t L = bt__k_att_next(p, n, nitems, &item_slot, ifull, iempty, next, 0);
            if (L >= nitems) break;
            int rank;
            const int64_t hr = bt__k_att_work(p, L, nkt, rank), bh = p.bh0 + hr;
            const int kt = nkt - 1 - rank, ns = nkt - kt;
            if (t < 64) {   /* loader */
                const T *q = (const T *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const T *)p.k + bt__k_att_off(p.sk, bh, p.H),
                        *v = (const T *)p.v + bt__k_att_off(p.sv, bh, p.H), *go = (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H);
                const float *lse2 = p.lse2 + bh * p.T, *dvec = p.dvec + bh * p.T;
                const int kb = (int)(n & 1);
                if (n >= 2) bt__k_mbar_wait(kvempty + 8 * kb, (int)(((n >> 1) - 1) & 1));
                bt__k_wg_load_lean<T, BK, D, 64>(sKV + kb * 2 * KT, k, p.sk[2], kt * BK, p.T, t);
                bt__k_wg_load_lean<T, BK, D, 64>(sKV + kb * 2 * KT + KT, v, p.sv[2], kt * BK, p.T, t);
                bt__k_cp_mbar_arrive(kvfull + 8 * kb);
                for (int s = 0; s < ns; s++, u++) {
                    const int su = u % ST, r = (kt + s) * BQ;
                    const uint32_t st = sS + su * STAGE;
                    if (u >= ST) bt__k_mbar_wait(empty + 8 * su, (u / ST - 1) & 1);
                    bt__k_wg_load_lean<T, BQ, D, 64>(st, q, p.sq[2], r, p.T, t);
                    bt__k_wg_load_lean<T, BQ, D, 64>(st + QB, go, p.sgo[2], r, p.T, t);
                    bt__k_wg_load_row<64>(st + 2 * QB, lse2, r, BQ, p.T, t);
                    bt__k_wg_load_row<64>(st + 2 * QB + BQ * 4, dvec, r, BQ, p.T, t);
                    bt__k_cp_mbar_arrive(full + 8 * su);
                }
            } else if (t == 64) {   /* reducer (one thread): the parts of key tiles > 0 into the sums */
                for (int s = kt > 0 ? 0 : 1; s < ns; s++, uq++) {
                    const int i = kt + s;
                    float *acc = p.dqacc + (hr * nkt + i) * (int64_t)(BQ * D);
                    int *cnt = p.dqcnt + hr * nkt + i;
                    bt__k_mbar_wait(dqfull, uq & 1);
                    if (s > 0) bt__k_seq_wait(cnt, s);   /* ranks 0 .. s - 1 (key tiles i .. kt + 1) added */
                    if (kt == 0) {   /* the consumers' last part: tell them the sum is complete */
                        bt__k_mbar_arrive(dqempty);
                        continue;
                    }
                    if (s == 0) bt__k_bulk_store(acc, sDQ, DQB);
                    else bt__k_bulk_add_f32(acc, sDQ, DQB);
                    bt__k_bulk_commit();
                    bt__k_bulk_wait_read();
                    bt__k_mbar_arrive(dqempty);
                    bt__k_bulk_wait();
                    bt__k_seq_pass(cnt, s + 1);
                }
            }
        }
        if (t < 64) asm volatile("cp.async.wait_all;\n" ::: "memory");   /* every copy landed before this warp exits */
        if (t == 64) bt__k_bulk_wait();
    } else {
        bt__k_wg_regs_inc<BT__K_WG_CONSUMER_REGS>();
        const int w = warp >> 2, g = lane >> 2, tg = lane & 3;
        int u = 0, uq = 0;   /* query tiles so far; those whose part went to the reducer */
        for (int64_t n = 0;; n++) {
            const int64_t L = bt__k_att_next(p, n, nitems, &item_slot, ifull, iempty, next, 0);
            if (L >= nitems) break;
            int rank;
            const int64_t hr = bt__k_att_work(p, L, nkt, rank), bh = p.bh0 + hr;
            const int kt = nkt - 1 - rank, ns = nkt - kt, k0 = kt * BK, key0 = k0 + 64 * w + 16 * (warp & 3) + g;
            const int kb = (int)(n & 1);
            const uint32_t sK = sKV + kb * 2 * KT, sV = sK + KT;
            float dk[NO], dv[NO], sc[NS], dp[NS], dq[NO];
#pragma unroll
            for (int i = 0; i < NO; i++) dk[i] = dv[i] = 0.f;
#pragma unroll
            for (int i = 0; i < NS; i++) sc[i] = dp[i] = 0.f;
            bt__k_mbar_wait(kvfull + 8 * kb, (int)((n >> 1) & 1));
            bt__k_turn_open(p.turns, w);
            for (int s = 0; s < ns; s++, u++) {
                const int su = u % ST, i = kt + s;
                const uint32_t sQ = sS + su * STAGE, sG = sQ + QB;
                const int pre = kt == 0 && s > 0;   /* dQ of query tile i = the sum of key tiles 1 .. i + this part */
                bt__k_mbar_wait(full + 8 * su, (u / ST) & 1);
                if (pre) {   /* ask the reducer for the sum (its last exchange with us ended: at most one ahead) */
                    if (uq > 0) bt__k_mbar_wait(dqempty, (uq - 1) & 1);
                    bt__k_mbar_arrive(dqfull);
                }
                bt__k_fence_async();
                bt__k_turn_take(p.turns, w);
                bt__k_att_kv_sdp<T, D, BQ>(sc, dp, sK, sV, sQ, sG, w);
                bt__k_turn_give(p.turns, w, 0);
                uint32_t pa[BQ / 16][4], da[BQ / 16][4];
                bt__k_att_kv_grads<T, BQ, 1>(p, pa, da, sc, dp, (const float *)(bt__k_att_sm + (sQ + 2 * QB - sm0)), i, k0, key0,
                                             tg);
                /* dS^T to shared memory: key rows 64 w + 16 wi + g (+ 8), query columns 16 kk + 2 tg (+ 8);
                   one stmatrix a kk: its four 8 x 8 matrices are da[kk][0..3] (rows +0 / +8, chunks 2 kk / 2 kk + 1),
                   lane l giving row l % 8 of matrix l / 8 */
                if (u > 0) bt__k_mbar_wait(dsfree, (u - 1) & 1);   /* both warpgroups' dQ products of the last tile done */
                {
                    const int r = 64 * w + 16 * (warp & 3) + ((lane >> 3) & 1) * 8 + (lane & 7), ch = lane >> 4;
#pragma unroll
                    for (int kk = 0; kk < BQ / 16; kk++) bt__k_stmatrix4(sDS + bt__k_sw(r, 2 * kk + ch, BK), da[kk]);
                }
                bt__k_fence_async();   /* the tensor cores read the tile next */
                if (!p.turns) bt__k_bar_sync_n(4 + w, 128);   /* this warpgroup's rows written (else the turn's barrier) */
                bt__k_turn_take(p.turns, w);
                bt__k_att_kv_acc_ss<T, BQ>(dv, dk, pa, sDS, w, sQ, sG);
                bt__k_turn_give(p.turns, w, s == ns - 1);
                /* key tile 0 (the last part of query tile i): dQ starts from the sum of key tiles 1 .. i,
                   loaded straight into the accumulator (no extra registers while dV, dK are in flight), once
                   the reducer saw the sum complete (a wait on the counter here, a loop on a global load, made
                   ptxas serialize every wgmma of the kernel: C7512) */
                if (pre) { bt__k_mbar_wait(dqempty, uq & 1); uq++; }
                bt__k_bar_sync(3);   /* both halves of dS^T written */
                {
                    if (pre) {
                        const float4 *sum = (const float4 *)(p.dqacc + (hr * nkt + i) * (int64_t)(BQ * D)) + (threadIdx.x & 255);
#pragma unroll
                        for (int j = 0; j < D / 8; j++) {
                            const float4 x = __ldcg(sum + 256 * j);
                            dq[4 * j] = x.x; dq[4 * j + 1] = x.y; dq[4 * j + 2] = x.z; dq[4 * j + 3] = x.w;
                        }
                    } else {
#pragma unroll
                        for (int i = 0; i < NO; i++) dq[i] = 0.f;   /* not live across the softmax */
                    }
                    bt__k_wg_arrive();
#pragma unroll
                    for (int kk = 0; kk < BK / 16; kk++)   /* dQ_part (+)= dS K: queries 64 w .. (columns of dS^T), keys kk */
                        bt__k_wg_ss_tt(dq, bt__k_wg_mnmaj(sDS + w * BK * 128, BK, kk), bt__k_wg_mnmaj(sK, BK, kk), kk > 0 || pre, (T *)0);
                    bt__k_wg_commit();
                }
                bt__k_wg_wait0();
                bt__k_wg_pin(dv); bt__k_wg_pin(dk); bt__k_wg_pin(dq);
                bt__k_wg_pin_u(pa);   /* read by dV until the wait: not reused for dQ's registers */
                if (lane == 0) { bt__k_mbar_arrive(empty + 8 * su); bt__k_mbar_arrive(dsfree); }
                /* float4 j of consumer thread c (its dQ part, columns 8 j ..) at (j 256 + c) 16 bytes of the
                   shared part (conflict-free) and of the scratch sum */
                if (kt > 0) {   /* the part to the reducer */
                    if (uq > 0) bt__k_mbar_wait(dqempty, (uq - 1) & 1);
                    float4 *dst = (float4 *)(bt__k_att_sm + (sDQ - sm0)) + (threadIdx.x & 255);
#pragma unroll
                    for (int j = 0; j < D / 8; j++) dst[256 * j] = make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
                    bt__k_fence_async();   /* read next by the copy engine */
                    bt__k_mbar_arrive(dqfull);
                    uq++;
                } else {   /* key tile 0: dQ complete, scaled, rounded, into gq */
                    const float sc2[2] = {p.scale, p.scale};
                    const int row0 = i * BQ + 64 * w + 16 * (warp & 3) + g;
                    bt__k_wg_store<T, D>((T *)p.gq + bt__k_att_off(p.sgq, bh, p.H), p.sgq[2], row0, p.T, dq, sc2);
                    if (p.cs_part) bt__k_wg_colsum<D>(bt__k_att_cs_at(p, bh, 0), 3 * (int64_t)p.H * D, p.cs_slabs, row0, p.T, dq, sc2);
                }
            }
            if (lane == 0) bt__k_mbar_arrive(kvempty + 8 * kb);
            const float sc2[2] = {p.scale, p.scale}, one[2] = {1.f, 1.f};
            bt__k_wg_store<T, D>((T *)p.gk + bt__k_att_off(p.sgk, bh, p.H), p.sgk[2], key0, p.T, dk, sc2);
            bt__k_wg_store<T, D>((T *)p.gv + bt__k_att_off(p.sgv, bh, p.H), p.sgv[2], key0, p.T, dv, one);
            if (p.cs_part) {
                bt__k_wg_colsum<D>(bt__k_att_cs_at(p, bh, 1), 3 * (int64_t)p.H * D, p.cs_slabs, key0, p.T, dk, sc2);
                bt__k_wg_colsum<D>(bt__k_att_cs_at(p, bh, 2), 3 * (int64_t)p.H * D, p.cs_slabs, key0, p.T, dv, one);
            }
        }
    }
#else
    __trap();
#endif
}
/* Dvec = rowsum(dO o O) for the fused backward (16-bit data, rows 16-byte aligned): D / 8 lanes a
   row, 16 bytes of each a lane, U rows a thread in flight */
template <typename T, int D> __global__ void __launch_bounds__(256) bt__k_att_dvec16(float *dvec, bt__k_attp p) {
    enum { L = D / 8, U = 4 };
    const int64_t n = (p.bh1 - p.bh0) * (int64_t)p.T, groups = (int64_t)gridDim.x * (blockDim.x / L);
    const int64_t g0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / L, wg0 = g0 - (threadIdx.x & 31) / L;
    const int c = (threadIdx.x % L) * 8;
    for (int64_t b = 0; wg0 + b < n; b += U * groups) {   /* the same trip count in a whole warp */
        float a[U];
#pragma unroll
        for (int e = 0; e < U; e++) {
            const int64_t r = g0 + b + e * groups;
            a[e] = 0.f;
            if (r < n) {
                const int64_t bh = p.bh0 + r / p.T, t = r - (r / p.T) * p.T;
                T x[8], y[8];
                bt__k_ld16(x, (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H) + t * p.sgo[2] + c);
                bt__k_ld16(y, (const T *)p.o + bt__k_att_off(p.so, bh, p.H) + t * p.so[2] + c);
#pragma unroll
                for (int k = 0; k < 8; k++) a[e] = fmaf(bt__k_tof(x[k]), bt__k_tof(y[k]), a[e]);
            }
        }
#pragma unroll
        for (int e = 0; e < U; e++) {
#pragma unroll
            for (int o = L / 2; o; o >>= 1) a[e] += __shfl_xor_sync(0xffffffffu, a[e], o);
            const int64_t r = g0 + b + e * groups;
            if (c == 0 && r < n) {
                dvec[p.bh0 * p.T + r] = a[e];
                if (p.lse2) p.lse2[p.bh0 * p.T + r] = -BT__K_ATT_LOG2E * p.lse[p.bh0 * p.T + r];
            }
        }
    }
}

/* used by section 10 too */
static cudaDataType_t bt__k_cuda_dt(bt_dtype dt) {
    switch (dt) {
    case BT_F64: return CUDA_R_64F;
    case BT_BF16: return CUDA_R_16BF;
    case BT_F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
    }
}
static int bt__k_att_dp(int64_t D) { return D <= 32 ? 32 : D <= 64 ? 64 : 128; }
/* every row start 16-byte aligned: the base 16-byte aligned, every stride a multiple of 16 bytes */
static int bt__k_att_al(const void *ptr, const int64_t *st, size_t es, size_t al) {
    if ((uintptr_t)ptr % al) return 0;
    for (int i = 0; i < 3; i++) if (((size_t)st[i] * es) % al) return 0;
    return 1;
}
static void bt__k_att_check(const char *op, bt_dtype dt, int64_t B, int64_t H, int64_t Tn, int64_t D) {
    if (dt != BT_F32 && dt != BT_BF16 && dt != BT_F16)
        bt_error("%s: dtype %s not supported (f32, bf16, f16)", op, bt_dtype_name(dt));
    if (D > 128) bt_error("%s: head dim D = %lld not supported (1..128)", op, (long long)D);
    if (Tn > 64 * (int64_t)65535 || H > INT32_MAX || B * H > ((int64_t)1 << 40))
        bt_error("%s: B = %lld, H = %lld, T = %lld too large (T at most %d)", op, (long long)B, (long long)H, (long long)Tn,
                 64 * 65535);
}
static void bt__k_att_run(void (*kern)(bt__k_attp), const bt__k_attp *p, unsigned tiles, int threads, size_t smem,
                          cudaStream_t s, const char *op) {
    BT__K_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), op);
    int64_t nbh = p->bh1 - p->bh0;
    unsigned gx = (unsigned)(nbh < (1 << 30) ? nbh : (1 << 30));
    kern<<<dim3(gx, tiles), threads, smem, s>>>(*p);
    BT__K_LAUNCHED(op);
}
static void bt__k_att_params(bt__k_attp *p, bt_dtype dt, int64_t B, int64_t H, int64_t Tn, int64_t D, float scale) {
    memset(p, 0, sizeof *p);
    p->BH = p->bh1 = B * H; p->H = (int)H; p->T = (int)Tn; p->D = (int)D;
    p->scale = scale; p->c2 = scale * BT__K_ATT_LOG2E;
    (void)dt;
}
#define BT__K_ATT_DP(DPV, ...) switch (DPV) { \
    case 32: { const int DP = 32; __VA_ARGS__; } break; \
    case 64: { const int DP = 64; __VA_ARGS__; } break; \
    default: { const int DP = 128; __VA_ARGS__; } break; }
/* the tensor-core kernels on MMA shape P: tiles of pitch DP + 16 bytes; forward Q and K/V x 2,
   backward 6 tiles (+ the dK/dV kernel's lse and Dvec rows, x 2) */
template <typename P> static void bt__k_att_fwd_tc_run(const bt__k_attp *p, unsigned tiles, int dp, cudaStream_t s, const char *op) {
    const size_t es = sizeof(typename P::E);
    BT__K_ATT_DP(dp, bt__k_att_run(bt__k_att_fwd_tc<P, DP>, p, tiles, 128, 5 * 64 * (DP + 16 / es) * es, s, op))
}
template <typename P> static void bt__k_att_bwd_tc_run(const bt__k_attp *p, unsigned tiles, int dp, cudaStream_t s, const char *op) {
    const size_t es = sizeof(typename P::E);
    BT__K_ATT_DP(dp, {
        bt__k_att_run(bt__k_att_dq_tc<P, DP>, p, tiles, 128, 6 * 64 * (DP + 16 / es) * es, s, op);
        bt__k_att_run(bt__k_att_dkv_tc<P, DP>, p, tiles, 128, 6 * 64 * (DP + 16 / es) * es + 4 * 64 * 4, s, op);
    })
}
/* the f32 kernels' thread tiles cover 64 columns: D is padded to 64 or 128 */
#define BT__K_ATT_DP_F32(DPV, ...) if ((DPV) <= 64) { const int DP = 64; __VA_ARGS__; } else { const int DP = 128; __VA_ARGS__; }

/* the Hopper path: on unless bt_k_attention_hopper(0) */
static int bt__k_att_hopper_on = 1;
static int bt__k_att_wg_ready(void);
BTDEF int bt_k_attention_hopper(int on) {
    int prev = bt__k_att_hopper_on | (bt_k_device_count() > 0 && bt__k_att_wg_ready() ? 2 : 0);
    if (on >= 0) bt__k_att_hopper_on = on != 0;
    return prev;
}
/* 1 when the current device runs the wgmma kernels: compute capability 9.0 and kernels compiled
   for sm_90a (only that device pass gives them static shared memory: any other pass, e.g. a
   `make CUDA_ARCH=80` build JIT-compiled on an H100, compiles them empty). Asked once per device. */
static int bt__k_att_wg_ready(void) {
    static signed char ready[BT_MAX_GPUS];
    int dev = bt__k_device();
    if (dev < 0 || dev >= BT_MAX_GPUS) return 0;
    if (!ready[dev]) {
        int major = 0, minor = 0, ok = 0;
        cudaFuncAttributes a;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess && major == 9 && minor == 0) {
            if (cudaFuncGetAttributes(&a, (const void *)bt__k_att_fwd_wg<__nv_bfloat16, 64, 0>) == cudaSuccess) ok = a.sharedSizeBytes > 0;
            else (void)cudaGetLastError();   /* no image for this device: not an error of the caller's */
        }
        ready[dev] = ok ? 1 : -1;
    }
    return ready[dev] > 0;
}
/* the cases the wgmma kernels take: 16-bit data, D 64 or 128, rows 16-byte aligned (inputs) and
   4-byte aligned (outputs), one CTA column per head */
static int bt__k_att_wg_use(bt_dtype dt, const bt__k_attp *p) {
    return bt__k_att_hopper_on && (dt == BT_BF16 || dt == BT_F16) && (p->D == 64 || p->D == 128) && p->vec && p->vec_out &&
           p->BH * ((p->T + 63) / 64) <= INT32_MAX && bt__k_att_wg_ready();   /* a 1-D grid of work items */
}
/* tuning of the wgmma path (developer switches, read from the environment at each call; the
   defaults are the measured best): BT_ATT_L2_MB, the L2 bytes (MiB) a section of heads may re-read (0: one
   section of all heads, the plain order; default 24 for the forward, 16 for the two-kernel backward),
   BT_ATT_L2_ONE_MB: one section when all heads' re-read bytes fit in this many MiB;
   BT_ATT_PERSIST=0|1, the forward on a persistent grid; BT_ATT_DYN=0|1, its work items from an
   atomic counter as SMs free up (else a fixed snake order; default 1, but 0 for the forward where
   every causal item has at most 4 key tiles);
   BT_ATT_DVEC_FUSED=0|1, Dvec computed by the dQ kernel (else by a pre-pass kernel);
   BT_ATT_BWD_TURNS=0|1, the backward kernels' warpgroups taking turns at the tensor cores;
   BT_ATT_FUSED_BWD=0|1, the causal D 64 backward in one kernel (else the dQ and dK/dV kernels) when
   T <= BT_ATT_FUSED_TMAX (default 4096); BT_ATT_FWD_OVL=0|1 (default 1), the forward's softmax under
   its warpgroup's P V at D 64; BT_ATT_FWD_LEAN=0|1 (default 1), its leaner
   steps (BT__K_FWD_LEAN); BT_ATT_FWD_WG3=0|1 (default 1), three consumer warpgroups and 192-query
   tiles at D 64 (BT__K_FWD_WG3, always with LEAN); BT_ATT_FWD_SKIP=0|1 (default 0), the O rescale
   skipped while no row max rises by more than 2^8 (with OVL and LEAN); BT_ATT_FWD_TURNS=K (WG3
   with OVL only; K >= 1: its warpgroups take turns at the tensor cores in items of at least K key
   tiles, 0: never (the default); the two-warpgroup kernel always takes them); BT_ATT_FWD_ABL=1..6 (with BT_ATT_FWD_WG3=0), timing-only ablations (builds with
   -DBT_ATT_FWD_ABLATIONS); BT_ATT_TRACE=T, clocks per work item of one
   forward call at that T (bt__k_att_fwd_trace_print) */
static int bt__k_att_tune(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}
/* the launch itself: the forward's kernels take its tensor maps too */
static void bt__k_att_wg_start(void (*kern)(bt__k_attp), unsigned grid, unsigned threads, size_t smem, cudaStream_t s,
                               const bt__k_attp &p, const bt__k_att_maps *) {
    kern<<<grid, threads, smem, s>>>(p);
}
static void bt__k_att_wg_start(bt__k_att_fwd_kern kern, unsigned grid, unsigned threads, size_t smem, cudaStream_t s,
                               const bt__k_attp &p, const bt__k_att_maps *tm) {
    kern<<<grid, threads, smem, s>>>(p, *tm);
}
/* a wgmma kernel over heads x ntiles work items, heads in sections whose re-read operands (head_bytes
   each) fit in the L2 share (head_bytes 0: one head a section, the items of a head one after the
   other); a grid of one CTA per item, or (persistent) one per SM */
template <typename K>
static void bt__k_att_wg_launch(K kern, bt__k_attp p, int64_t ntiles, size_t head_bytes, int persistent, size_t smem, cudaStream_t s,
                                const char *op, unsigned threads = BT__K_WG_THREADS, int l2_mb_default = 16,
                                const bt__k_att_maps *tm = NULL, int dyn_default = 1) {
    int64_t nbh = p.bh1 - p.bh0, items = nbh * ntiles, sms = bt__k_cur()->sm_count;
    /* one_mb 16, not the L2's 50 MiB: data that every SM reads is held in both halves of the L2. At
       B 16, H 12, T 1024 (48 MiB of K and V) one section of all heads read 190 MB from DRAM a forward
       (K, V re-read ~3x) against 77 MB in sections of 16 MiB, and took 100 us against 94 (H100,
       ncu and CUDA events, 2026-11-23 16:29 UTC, bench/runs/modes2.sh) */
    int l2_mb = bt__k_att_tune("BT_ATT_L2_MB", l2_mb_default), one_mb = bt__k_att_tune("BT_ATT_L2_ONE_MB", 16);
    int64_t sec = 1;
    if (head_bytes) {
        sec = l2_mb > 0 ? (int64_t)(((size_t)l2_mb << 20) / head_bytes) : nbh;
        if ((double)nbh * (double)head_bytes <= (double)one_mb * 1048576.0) sec = nbh;   /* all heads fit: one section */
    }
    p.sec = sec < 1 ? 1 : sec > nbh ? nbh : sec;
    int64_t grid = persistent && items > sms ? sms : items;
    p.ctr = NULL;
    if (grid < items && bt__k_att_tune("BT_ATT_DYN", dyn_default)) {   /* items handed out as the SMs free up */
        p.ctr = (int *)bt__k_scratch(sizeof(int), s);
        BT__K_CUDA(cudaMemsetAsync(p.ctr, 0, sizeof(int), s), op);
    }
    BT__K_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), op);
    /* BT_ATT_CARVEOUT=0..100: the shared-memory share of the L1 asked for (percent; unset: the driver's choice) */
    int carve = bt__k_att_tune("BT_ATT_CARVEOUT", -1);
    if (carve >= 0) BT__K_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, carve), op);
    bt__k_att_wg_start(kern, (unsigned)grid, threads, smem, s, p, tm);
    BT__K_LAUNCHED(op);
    if (p.ctr) bt_free(p.ctr);
}
/* shared memory (bytes, + 1 KiB for the 1024-byte alignment): forward 2 x Q + ST x (K, V) tiles of
   128 rows + the O tile (BM rows; 225 KiB in all at D 128, of the 227 a block may have); dK/dV K, V
   + 2 x (Q, dO of BQ rows, lse, Dvec); dQ Q, dO + 2 x (K, V of BK rows) */
static size_t bt__k_att_wg_smem_fwd(int D, int BM = 128) {
    return ((size_t)3 * BM + (size_t)2 * bt__k_att_fwd_st(D) * 128) * D * 2 + 1024;
}
/* bytes of a head that the CTAs of a section re-read: K and V (forward, dQ), Q, dO, lse, Dvec (dK/dV) */
static size_t bt__k_att_wg_kv_bytes(const bt__k_attp *p) { return (size_t)p->T * p->D * 2 * 2; }
static size_t bt__k_att_wg_smem_dkv(int D, int BQ) { return (size_t)2 * 128 * D * 2 + 2 * (size_t)bt__k_att_dkv_stage(D, BQ) + 1024; }
static size_t bt__k_att_wg_smem_dq(int D, int BK) { return (size_t)2 * 128 * D * 2 + (size_t)4 * BK * D * 2 + 1024; }
/* BT_ATT_TRACE=T (a developer's timing aid): the third forward call at that T records SM clocks per
   work item (consumer thread 0: 0 item start, 1 Q landed, 2 first S done, 3 last softmax done, 4 O
   stored; 5 SM and tile count; producer thread: 6 item taken, 7 last load issued) and prints, per
   tile count, the mean cycles of each phase, and the mean gap between an SM's items, to stderr */
static void bt__k_att_fwd_trace_print(const unsigned long long *tr, int64_t items, int T) {
    double sum[33][7] = {{0}};
    int64_t cnt[33] = {0};
    for (int64_t L = 0; L < items; L++) {
        const unsigned long long *x = tr + L * 8;
        int nt = (int)(x[5] >> 16);
        if (nt < 1 || nt > 32) continue;
        double d[7] = {(double)(x[1] - x[0]), (double)(x[2] - x[1]), nt > 1 ? (double)(x[3] - x[2]) / (nt - 1) : 0.,
                       (double)(x[4] - x[3]), (double)(x[4] - x[0]), (double)x[0] - (double)x[6], (double)x[7] - (double)x[0]};
        for (int k = 0; k < 7; k++) sum[nt][k] += d[k];
        cnt[nt]++;
    }
    fprintf(stderr, "att_fwd trace T %d: tiles items | Q wait | first S | per later tile | last PV + store | item | producer took it before | its last load issued after start (cycles)\n", T);
    for (int nt = 1; nt <= 32; nt++) {
        if (!cnt[nt]) continue;
        fprintf(stderr, "att_fwd trace %2d %5lld", nt, (long long)cnt[nt]);
        for (int k = 0; k < 7; k++) fprintf(stderr, " | %8.0f", sum[nt][k] / cnt[nt]);
        fprintf(stderr, "\n");
    }
    /* gaps: an SM's items in start order, the next start minus the last end */
    double gap = 0., busy = 0., span = 0.;
    int64_t ng = 0;
    for (int sm = 0; sm < 1024; sm++) {
        unsigned long long first = ~0ull, last = 0, prev_end = 0, prev_start = 0;
        int any = 0;
        for (;;) {   /* the item with the least start after prev_start (items per SM are few) */
            int64_t best = -1;
            for (int64_t L = 0; L < items; L++) {
                const unsigned long long *x = tr + L * 8;
                if ((int)(x[5] & 0xffff) != sm || (x[5] >> 16) == 0 || (any && x[0] <= prev_start)) continue;
                if (best < 0 || x[0] < tr[best * 8]) best = L;
            }
            if (best < 0) break;
            const unsigned long long *x = tr + best * 8;
            if (any) { gap += (double)x[0] - (double)prev_end; ng++; }
            busy += (double)(x[4] - x[0]);
            if (x[0] < first) first = x[0];
            if (x[4] > last) last = x[4];
            prev_end = x[4]; prev_start = x[0]; any = 1;
        }
        if (any) span += (double)(last - first);
    }
    fprintf(stderr, "att_fwd trace T %d: mean gap between an SM's items %.0f cycles (%lld gaps); items busy %.1f%% of the SMs' spans\n", T,
            ng ? gap / ng : 0., (long long)ng, span > 0 ? 100. * busy / span : 0.);
}
/* BT_ATT_TRACE: CTA 0's steps (bt__k_att_fwd_tmark), per warpgroup the mean cycles of each phase over
   the recorded steps and the mean period (a step's start to the next one's) */
static void bt__k_att_fwd_tsteps_print(const unsigned long long *st, int T) {
    for (int w = 0; w < 3; w++) {
        double sum[5] = {0}, per = 0., iss[2] = {0, 0};
        int n = 0, np = 0, ni = 0;
        for (int k = 0; k < BT__K_FWD_TSTEPS; k++) {
            const unsigned long long *x = st + k * 24 + 8 * w;
            if (!x[0] || !x[4]) continue;
            sum[0] += (double)(x[1] - x[0]); sum[1] += (double)(x[2] - x[1]); sum[2] += (double)(x[3] - x[2]);
            sum[3] += (double)(x[4] - x[3]); sum[4] += (double)(x[4] - x[0]);
            n++;
            if (x[5] && x[6]) { iss[0] += (double)(x[5] - x[2]); iss[1] += (double)(x[6] - x[5]); ni++; }
            if (k + 1 < BT__K_FWD_TSTEPS && x[24] && x[24 + 4]) { per += (double)x[24] - (double)x[0]; np++; }
        }
        if (n)
            fprintf(stderr, "att_fwd steps T %d wg %d: %d steps | K/V wait %.0f | turn wait %.0f | issue + products %.0f | "
                            "softmax %.0f | step %.0f | period %.0f (cycles); later steps: S issued after %.0f, P V issued after %.0f more\n",
                    T, w, n, sum[0] / n, sum[1] / n, sum[2] / n, sum[3] / n, sum[4] / n, np ? per / np : 0., ni ? iss[0] / ni : 0.,
                    ni ? iss[1] / ni : 0.);
    }
    /* a window of steps 20 .. 27 (in CTA 0's first item where it has that many key tiles): each
       warpgroup's seven marks against warpgroup 0's start of step 20, to see whether they stagger */
    const unsigned long long t0 = st[20 * 24];
    for (int k = 20; k < 28 && t0; k++)
        for (int w = 0; w < 3; w++) {
            const unsigned long long *x = st + k * 24 + 8 * w;
            if (!x[0] || !x[4]) continue;
            fprintf(stderr, "att_fwd step %d wg %d:", k, w);
            for (int i = 0; i < 7; i++) fprintf(stderr, " %6.0f", x[i] ? (double)x[i] - (double)t0 : 0.);
            fprintf(stderr, "\n");
        }
}
/* the forward kernel of variant v (BT__K_FWD_OVL, LEAN, WG3 bits; D 64 only, D 128 runs variant 0; WG3
   always with LEAN) or,
   built with -DBT_ATT_FWD_ABLATIONS, of timing-only ablation abl 1..6 (D 64, variant 0) */
template <typename T> static bt__k_att_fwd_kern bt__k_att_fwd_pick(int D, int v, int abl) {
    if (D != 64) return bt__k_att_fwd_wg<T, 128, 0>;
#ifdef BT_ATT_FWD_ABLATIONS
    switch (abl) {
    case 1: return bt__k_att_fwd_wg<T, 64, 1>;
    case 2: return bt__k_att_fwd_wg<T, 64, 2>;
    case 3: return bt__k_att_fwd_wg<T, 64, 3>;
    case 4: return bt__k_att_fwd_wg<T, 64, 4>;
    case 5: return bt__k_att_fwd_wg<T, 64, 5>;
    case 6: return bt__k_att_fwd_wg<T, 64, 6>;
    default: break;
    }
#else
    (void)abl;
#endif
    enum { W = BT__K_FWD_WG3 | BT__K_FWD_LEAN, OL = BT__K_FWD_OVL | BT__K_FWD_LEAN, SK = BT__K_FWD_SKIP, NT = BT__K_FWD_NOTURN };
    if (v & BT__K_FWD_WG3) {
        if (!(v & BT__K_FWD_OVL)) return bt__k_att_fwd_wg<T, 64, W>;
        if (v & NT) return (v & SK) ? bt__k_att_fwd_wg<T, 64, W | OL | NT | SK> : bt__k_att_fwd_wg<T, 64, W | OL | NT>;
        return (v & SK) ? bt__k_att_fwd_wg<T, 64, W | OL | SK> : bt__k_att_fwd_wg<T, 64, W | OL>;
    }
    if ((v & (OL | SK)) == (OL | SK)) return bt__k_att_fwd_wg<T, 64, OL | SK>;
    switch (v & (BT__K_FWD_OVL | BT__K_FWD_LEAN)) {
    case BT__K_FWD_OVL: return bt__k_att_fwd_wg<T, 64, BT__K_FWD_OVL>;
    case BT__K_FWD_LEAN: return bt__k_att_fwd_wg<T, 64, BT__K_FWD_LEAN>;
    case BT__K_FWD_OVL | BT__K_FWD_LEAN: return bt__k_att_fwd_wg<T, 64, BT__K_FWD_OVL | BT__K_FWD_LEAN>;
    default: return bt__k_att_fwd_wg<T, 64, 0>;
    }
}
/* cuTensorMapEncodeTiled, found through the runtime (nothing links libcuda); NULL where the driver has none */
typedef CUresult (*bt__k_tmap_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                         const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                         CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static bt__k_tmap_encode_fn bt__k_tmap_encoder(void) {
    static bt__k_tmap_encode_fn f;
    static int tried;
    if (!tried) {
        void *e = NULL;
        cudaDriverEntryPointQueryResult q;
        tried = 1;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &e, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            f = (bt__k_tmap_encode_fn)e;
        else
            cudaGetLastError();
    }
    return f;
}
static CUtensorMapDataType bt__k_tmap_type(const __nv_bfloat16 *) { return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; }
static CUtensorMapDataType bt__k_tmap_type(const __half *) { return CU_TENSOR_MAP_DATA_TYPE_FLOAT16; }
/* the tensor map of attention operand x (B x H heads of T rows of D, strides s in elements: batch, head,
   row) for boxes of 64 columns x `rows` rows in the wgmma tiles' 128-byte swizzle, zeros outside the
   tensor. Dimensions (D, T, H, B), or (D, H, T, B) (*hrow = 1) when a head's stride is below a row's
   (q, k, v of one [B, T, 3, H, D] buffer), so that the strides grow outward. 0: the driver cannot */
template <typename T>
static int bt__k_att_tmap(CUtensorMap *m, int *hrow, const void *x, const int64_t *s, int64_t B, int64_t H, int64_t Tn, int64_t D,
                          int rows) {
    bt__k_tmap_encode_fn enc = bt__k_tmap_encoder();
    if (!enc) return 0;
    *hrow = s[1] < s[2];
    const cuuint64_t dim[4] = {(cuuint64_t)D, (cuuint64_t)(*hrow ? H : Tn), (cuuint64_t)(*hrow ? Tn : H), (cuuint64_t)B};
    int64_t st[3] = {(*hrow ? s[1] : s[2]) * 2, (*hrow ? s[2] : s[1]) * 2, s[0] * 2};
    cuuint64_t str[3];
    for (int i = 0; i < 3; i++) {
        if (dim[i + 1] == 1) st[i] = st[i] > 0 ? (st[i] + 15) / 16 * 16 : 16;   /* never stepped: any legal stride */
        if (st[i] <= 0 || st[i] % 16 || st[i] >= ((int64_t)1 << 40)) return 0;
        str[i] = (cuuint64_t)st[i];
    }
    const cuuint32_t box[4] = {64, (cuuint32_t)(*hrow ? 1 : rows), (cuuint32_t)(*hrow ? rows : 1), 1}, one[4] = {1, 1, 1, 1};
    return enc(m, bt__k_tmap_type((const T *)0), 4, (void *)x, dim, str, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
/* the forward's three maps; 0 where the driver cannot make one (the caller then runs the sm_80 kernels) */
template <typename T> static int bt__k_att_fwd_maps(bt__k_att_maps *tm, const bt__k_attp *p, int BM) {
    const int64_t B = p->BH / p->H;
    int hq = 0, hk = 0, hv = 0;
    memset(tm, 0, sizeof *tm);
    if (!bt__k_att_tmap<T>(&tm->m[0], &hq, p->q, p->sq, B, p->H, p->T, p->D, BM) ||
        !bt__k_att_tmap<T>(&tm->m[1], &hk, p->k, p->sk, B, p->H, p->T, p->D, 128) ||
        !bt__k_att_tmap<T>(&tm->m[2], &hv, p->v, p->sv, B, p->H, p->T, p->D, 128))
        return 0;
    tm->hrow = hq | hk << 1 | hv << 2;
    return 1;
}
/* the wgmma forward; 0: not run (no tensor maps) */
template <typename T> static int bt__k_att_fwd_wg_run(const bt__k_attp *p, cudaStream_t s, const char *op) {
    const int wg3 = p->D == 64 && bt__k_att_tune("BT_ATT_FWD_WG3", 1), BM = wg3 ? 192 : 128;
    const unsigned threads = wg3 ? 512 : BT__K_WG_THREADS;
    const size_t smem = bt__k_att_wg_smem_fwd((int)p->D, BM);
    int64_t tiles = (p->T + BM - 1) / BM;
    size_t hb = bt__k_att_wg_kv_bytes(p);
    int per = bt__k_att_tune("BT_ATT_PERSIST", 1) != 0;
    /* OVL: measured 1281 - 1293 us against 1318 - 1364 without at T 4096 (B 16, H 12, causal; H100);
       LEAN + OVL at T 1024: 103.2 / 103.4 / 127.5 us in three processes against OVL alone 115.8 /
       135.6 / 145.5 and the code before both 143.3 / 150.5 (H100, 13:03 UTC, bench/runs/attnf_call2.sh).
       WG3 without turns (the default since session attnf3): T 1024 112.6 / 100.5 us against LEAN + OVL
       116.8 / 103.3, T 4096 1073 / 1063 against 1231 / 1187 (process pairs; H100, 13:18 UTC,
       bench/runs/attnf3_call.sh); WG3 with turns 1067 - 1134 at T 4096 but not faster at T 1024.
       Turns only in items of at least 7 key tiles (BT_ATT_FWD_TURNS=7, the causal default; the kernel
       without turns where no item has that many, T <= 768): T 1024 86.0 / 86.3 / 86.6 us against 87.0
       / 86.7 / 87.6 without turns, T 4096 854.4-855.5 against 888.2-892.0; turns in every item 88.6-89.2
       and 857.5-860.2, T 512 39.6-39.7 against 36.9-37.0 (B 16, H 12, three alternating rounds; H100,
       2026-11-24 14:47 UTC, bench/runs/h100s13g.sh). Not measured without the causal mask: none there.
       Since the wait for P V stays below the softmax's max (bt__k_sched_split), no turns is best again:
       T 1024 83.6 / 84.7 / 84.3 us against K 7 84.3 / 84.5 / 84.7, T 4096 800.1-802.3 against
       813.5-815.1, T 512 36.5-36.6 against 36.9-37.1 (K 9, 12: between; three alternating rounds;
       H100, 2026-11-24 20:23 UTC, bench/runs/h100s15e.sh): the default is 0 */
    const int kt_max = (p->T + 127) / 128;   /* an item's key tiles: at most this many */
    int turns = bt__k_att_tune("BT_ATT_FWD_TURNS", 0);
    if (kt_max < turns) turns = 0;   /* no item reaches it */
    const int v = (bt__k_att_tune("BT_ATT_FWD_OVL", 1) ? BT__K_FWD_OVL : 0) | (bt__k_att_tune("BT_ATT_FWD_LEAN", 1) ? BT__K_FWD_LEAN : 0) |
                  (wg3 ? BT__K_FWD_WG3 : 0) | (bt__k_att_tune("BT_ATT_FWD_SKIP", 0) ? BT__K_FWD_SKIP : 0) |
                  (turns ? 0 : BT__K_FWD_NOTURN);
    bt__k_att_fwd_kern kern = bt__k_att_fwd_pick<T>((int)p->D, v, wg3 ? 0 : bt__k_att_tune("BT_ATT_FWD_ABL", 0));
    /* QEND (BT_ATT_FWD_QEND, default 1): causal query tiles of 192 rows end at T when the last tile
       would hold one live warpgroup of three (192 - T % 192 >= 128); at T 1024 the items of a head
       then walk 8 7 5 4 2 1 key tiles (27) instead of 2 3 5 6 8 8 (32). Measured (B 16, H 12, causal,
       two rounds of alternating processes): T 1024 92.0 / 92.4 us against 94.2 / 94.5, T 4096 894.3 /
       895.6 against 918.0 / 918.3; where the last tile holds two live warpgroups it did not pay
       (T 512: 41.3 / 41.5 against 40.5 / 40.6; T 2048: 264.8 / 267.6 against 267.9 / 268.3) (H100,
       2026-11-23 17:03 UTC, bench/runs/h100s6c.sh) */
    bt__k_attp pq = *p;
    const int qoff = (int)(tiles * BM - p->T);
    pq.qoff = p->causal && BM == 192 && qoff >= 128 && bt__k_att_tune("BT_ATT_FWD_QEND", 1) ? qoff : 0;
    pq.turns = turns;
    bt__k_att_maps tm;
    if (!bt__k_att_fwd_maps<T>(&tm, &pq, BM)) return 0;
    p = &pq;
    /* the forward's sections of 24 MiB: 88.1-88.4 us against 89.6-89.7 with 16 at T 1024, 36.5-36.8
       against 38.8-39.1 at T 512 (one section there), 893.7-895.7 against 902.8-903.5 at T 4096
       (B 16, H 12, causal, three rounds of alternating processes; H100, 2026-11-24 03:06 UTC,
       bench/runs/h100s9j.sh); the two-kernel backward keeps 16 */
    enum { L2_MB = 24 };
    /* the item order: fixed (snake) where every causal item is short (at most 4 key tiles: items of
       near-equal length, nothing for the counter to even out), else taken from the counter as SMs free
       up. Forward at B 16, H 12, causal, fixed against counter: T 256 18.2-18.3 us against 20.1-20.2,
       T 384 22.4-22.7 against 24.4-24.7, T 512 33.5-34.1 against 36.4-36.7; T 640-896 within 2% either
       way, T 1024 84.9-85.4 against 83.3-83.5 (two alternating rounds; H100, 2026-11-24 21:46 UTC,
       bench/runs/h100s15k.sh). The backward keeps the counter (fixed is slower there from T 384) */
    const int dyn = !(p->causal && kt_max <= 4);
    static int calls_at_T = 0;   /* the third call at that T is traced (warm caches and clocks) */
    if (bt__k_att_tune("BT_ATT_TRACE", 0) != p->T || ++calls_at_T != 3) {
        bt__k_att_wg_launch(kern, *p, tiles, hb, per, smem, s, op, threads, L2_MB, &tm, dyn);
        return 1;
    }
    bt__k_attp q = *p;
    const int64_t items = (p->bh1 - p->bh0) * tiles;
    const size_t bytes = (size_t)items * 64 + (size_t)BT__K_FWD_TSTEPS * 24 * 8;
    q.trace = (unsigned long long *)bt__k_scratch(bytes, s);
    BT__K_CUDA(cudaMemsetAsync(q.trace, 0, bytes, s), op);
    bt__k_att_wg_launch(kern, q, tiles, hb, per, smem, s, op, threads, L2_MB, &tm, dyn);
    unsigned long long *h = (unsigned long long *)malloc(bytes);
    if (!h) bt_error("%s: trace: out of host memory (%lld items)", op, (long long)items);
    BT__K_CUDA(cudaMemcpyAsync(h, q.trace, bytes, cudaMemcpyDeviceToHost, s), op);
    BT__K_CUDA(cudaStreamSynchronize(s), op);
    bt__k_att_fwd_trace_print(h, items, p->T);
    bt__k_att_fwd_tsteps_print(h + items * 8, p->T);
    free(h);
    bt_free(q.trace);
    return 1;
}
/* the fused backward (causal, D 64): Dvec by the pre-pass, then the kernel over chunks of heads
   whose fp32 dQ sums (32 KiB a query tile of 128: 50 MiB at B 16, H 12, T 1024; 403 MB at B 128)
   fit under bt__k_att_scratch_cap; the rank counters zeroed per chunk */
template <typename T> static void bt__k_att_bwd_fused_run(bt__k_attp *p, cudaStream_t s, const char *op) {
    const int64_t nqt = (p->T + 127) / 128, rows = p->BH * (int64_t)p->T;
    const size_t per_bh = (size_t)nqt * 128 * 64 * 4;
    int64_t chunk = (int64_t)(bt__k_att_scratch_cap / per_bh);
    if (chunk < 1) chunk = 1;
    if (chunk > p->BH) chunk = p->BH;
    bt__k_att_dvec16<T, 64><<<bt__k_blocks(rows * 8 / 4, 256), 256, 0, s>>>((float *)p->dvec, *p);
    BT__K_LAUNCHED(op);
    p->dqacc = (float *)bt__k_scratch((size_t)chunk * per_bh, s);
    p->dqcnt = (int *)bt__k_scratch((size_t)(chunk * nqt) * sizeof(int), s);
    for (int64_t b0 = 0; b0 < p->BH; b0 += chunk) {
        p->bh0 = b0;
        p->bh1 = b0 + chunk < p->BH ? b0 + chunk : p->BH;
        BT__K_CUDA(cudaMemsetAsync(p->dqcnt, 0, (size_t)((p->bh1 - b0) * nqt) * sizeof(int), s), op);
        /* head by head (all key tiles of a head at once, shortest first: each waits for the one before) */
        bt__k_att_wg_launch(bt__k_att_bwd_wg<T>, *p, nqt, 0, 1, bt__k_att_bwd_smem_bytes(), s, op);
    }
    bt_free(p->dqacc); bt_free(p->dqcnt);
    p->dqacc = NULL; p->dqcnt = NULL; p->bh0 = 0; p->bh1 = p->BH;
}
/* D 64: 128-row query / key tiles in both kernels; D 128: 64 (the accumulators' registers) */
template <typename T> static void bt__k_att_bwd_wg_run(const bt__k_attp *p, cudaStream_t s, const char *op) {
    int64_t tiles = (p->T + 127) / 128;
    size_t kv = bt__k_att_wg_kv_bytes(p), qg = kv + (size_t)p->T * 8;
    if (p->D == 64) {
        bt__k_att_wg_launch(bt__k_att_dq_wg<T, 64, 128>, *p, tiles, kv, 0, bt__k_att_wg_smem_dq(64, 128), s, op);
        bt__k_att_wg_launch(bt__k_att_dkv_wg<T, 64, 128>, *p, tiles, qg, 0, bt__k_att_wg_smem_dkv(64, 128), s, op);
    } else {
        bt__k_att_wg_launch(bt__k_att_dq_wg<T, 128, 64>, *p, tiles, kv, 0, bt__k_att_wg_smem_dq(128, 64), s, op);
        bt__k_att_wg_launch(bt__k_att_dkv_wg<T, 128, 64>, *p, tiles, qg, 0, bt__k_att_wg_smem_dkv(128, 64), s, op);
    }
}

BTDEF void bt_k_attention_strided(bt_dtype dt, void *out, const int64_t *so, float *lse, const void *q, const int64_t *sq,
                                  const void *k, const int64_t *sk, const void *v, const int64_t *sv, int64_t B, int64_t H,
                                  int64_t Tn, int64_t D, float scale, int causal, bt_matmul_precision precision, cudaStream_t s) {
    const char *op = "bt_k_attention";
    if (B <= 0 || H <= 0 || Tn <= 0 || D <= 0) return;
    bt__k_att_check(op, dt, B, H, Tn, D);
    bt__k_attp p;
    bt__k_att_params(&p, dt, B, H, Tn, D, scale);
    p.causal = causal != 0;
    p.q = q; p.k = k; p.v = v; p.out = out; p.lse_out = lse;
    memcpy(p.sq, sq, sizeof p.sq); memcpy(p.sk, sk, sizeof p.sk); memcpy(p.sv, sv, sizeof p.sv); memcpy(p.so, so, sizeof p.so);
    size_t es = bt_dtype_size(dt);
    p.vec = bt__k_att_al(q, sq, es, 16) && bt__k_att_al(k, sk, es, 16) && bt__k_att_al(v, sv, es, 16);
    p.vec_out = bt__k_att_al(out, so, es, 4);
    p.out16 = bt__k_att_al(out, so, es, 16);
    if (bt__k_att_wg_use(dt, &p) &&
        (dt == BT_BF16 ? bt__k_att_fwd_wg_run<__nv_bfloat16>(&p, s, op) : bt__k_att_fwd_wg_run<__half>(&p, s, op)))
        return;
    unsigned tiles = (unsigned)((Tn + 63) / 64);
    int dp = bt__k_att_dp(D);
    switch (dt) {
    case BT_F32:
        if (precision == BT_MATMUL_TF32)
            bt__k_att_fwd_tc_run<bt__k_mma_tf32>(&p, tiles, dp, s, op);
        else
            BT__K_ATT_DP_F32(dp, bt__k_att_run(bt__k_att_fwd_f32<DP>, &p, tiles, 128, (size_t)(5 * 64 * DP + 64 * 64) * 4, s, op))
        break;
    case BT_BF16: bt__k_att_fwd_tc_run<bt__k_mma16<__nv_bfloat16> >(&p, tiles, dp, s, op); break;
    default: bt__k_att_fwd_tc_run<bt__k_mma16<__half> >(&p, tiles, dp, s, op); break;
    }
}

BTDEF size_t bt_k_attention_scratch_cap(size_t bytes) {
    size_t prev = bt__k_att_scratch_cap;
    if (bytes) bt__k_att_scratch_cap = bytes;
    return prev;
}
/* dK/dV kernel then dQ kernel, over chunks of heads whose dS scratch (the 64 x 64 tiles, fp32: at and
   below the diagonal when causal, all when not) fits under bt__k_att_scratch_cap (one head at least) */
static void bt__k_att_bwd_f32(bt__k_attp *p, unsigned tiles, int dp, cudaStream_t s, const char *op) {
    size_t ntile = p->causal ? (size_t)tiles * (tiles + 1) / 2 : (size_t)tiles * tiles;
    size_t per_bh = ntile * 4096 * sizeof(float);
    int64_t chunk = (int64_t)(bt__k_att_scratch_cap / per_bh);
    if (chunk < 1) chunk = 1;
    if (chunk > p->BH) chunk = p->BH;
    p->ds = (float *)bt__k_scratch((size_t)chunk * per_bh, s);
    for (int64_t b0 = 0; b0 < p->BH; b0 += chunk) {
        p->bh0 = b0;
        p->bh1 = b0 + chunk < p->BH ? b0 + chunk : p->BH;
        BT__K_ATT_DP_F32(dp, {
            bt__k_att_run(bt__k_att_dkv_f32<DP>, p, tiles, 128, (size_t)(4 * 64 * DP + 2 * 64 * 64 + 128) * 4, s, op);
            bt__k_att_run(bt__k_att_dq_f32<DP>, p, tiles, 128, (size_t)(2 * 64 * 64 + 2 * 64 * DP) * 4, s, op);
        })
    }
    bt_free(p->ds);
    p->ds = NULL; p->bh0 = 0; p->bh1 = p->BH;
}

BTDEF int bt_k_attention_backward_colsum(bt_dtype dt, void *gq, const int64_t *sgq, void *gk, const int64_t *sgk, void *gv,
                                          const int64_t *sgv, const void *gout, const int64_t *sgo, const void *q,
                                          const int64_t *sq, const void *k, const int64_t *sk, const void *v, const int64_t *sv,
                                          const void *out, const int64_t *so, const float *lse, int64_t B, int64_t H, int64_t Tn,
                                          int64_t D, float scale, int causal, bt_matmul_precision precision, float *colsum,
                                          cudaStream_t s) {
    const char *op = "bt_k_attention_backward";
    if (B <= 0 || H <= 0 || Tn <= 0 || D <= 0) return 0;
    bt__k_att_check(op, dt, B, H, Tn, D);
    if (!gq || !gk || !gv) bt_error("%s: gq, gk and gv must all be given", op);
    bt__k_attp p;
    bt__k_att_params(&p, dt, B, H, Tn, D, scale);
    p.causal = causal != 0;
    p.q = q; p.k = k; p.v = v; p.o = out; p.go = gout; p.gq = gq; p.gk = gk; p.gv = gv; p.lse = lse;
    memcpy(p.sq, sq, sizeof p.sq); memcpy(p.sk, sk, sizeof p.sk); memcpy(p.sv, sv, sizeof p.sv); memcpy(p.so, so, sizeof p.so);
    memcpy(p.sgo, sgo, sizeof p.sgo); memcpy(p.sgq, sgq, sizeof p.sgq); memcpy(p.sgk, sgk, sizeof p.sgk);
    memcpy(p.sgv, sgv, sizeof p.sgv);
    size_t es = bt_dtype_size(dt);
    p.vec = bt__k_att_al(q, sq, es, 16) && bt__k_att_al(k, sk, es, 16) && bt__k_att_al(v, sv, es, 16) &&
            bt__k_att_al(gout, sgo, es, 16) && bt__k_att_al(out, so, es, 16);
    p.vec_out = bt__k_att_al(gq, sgq, es, 4) && bt__k_att_al(gk, sgk, es, 4) && bt__k_att_al(gv, sgv, es, 4);
    float *dvec = (float *)bt__k_scratch((size_t)(B * H * Tn) * sizeof(float), s);
    p.dvec = dvec;
    unsigned tiles = (unsigned)((Tn + 63) / 64), nb = bt__k_blocks(B * H * Tn * 32, 256);
    int dp = bt__k_att_dp(D), wg = bt__k_att_wg_use(dt, &p);
    if (wg) p.turns = bt__k_att_tune("BT_ATT_BWD_TURNS", 1) != 0;
    /* one kernel, 5 products: measured faster than the two kernels at T 512 - 4096 (3288 vs 3867 us at T 4096,
       H100, session attn4); longer T not measured */
    if (wg && D == 64 && p.causal && bt__k_att_tune("BT_ATT_FUSED_BWD", 1) &&
        Tn <= bt__k_att_tune("BT_ATT_FUSED_TMAX", 4096)) {
        if (colsum) {   /* [B slabs rows, 3 H D]: their column sums are colsum */
            p.cs_slabs = (int)((Tn + 15) / 16);
            p.cs_part = (float *)bt__k_scratch((size_t)(B * p.cs_slabs * 3 * H * D) * sizeof(float), s);
        }
        p.lse2 = (float *)bt__k_scratch((size_t)(B * H * Tn) * sizeof(float), s);
        if (dt == BT_BF16) bt__k_att_bwd_fused_run<__nv_bfloat16>(&p, s, op);
        else bt__k_att_bwd_fused_run<__half>(&p, s, op);
        bt_free(p.lse2);
        bt_free(dvec);
        if (colsum) {
            BT__K_CUDA(cudaMemsetAsync(colsum, 0, (size_t)(3 * H * D) * sizeof(float), s), op);
            bt_k_sum_rows_acc(BT_F32, colsum, p.cs_part, B * p.cs_slabs, 3 * H * D, s);
            bt_free(p.cs_part);
        }
        return colsum != NULL;
    }
    if (wg && bt__k_att_tune("BT_ATT_DVEC_FUSED", 1)) {
        p.dvec_out = dvec;   /* the dQ kernel computes it, before the dK/dV kernel reads it */
    } else {
        BT__K_DISPATCH3(dt, op, { bt__k_att_dvec<T><<<nb, 256, 0, s>>>(dvec, p); })
        BT__K_LAUNCHED(op);
    }
    if (wg) {
        if (dt == BT_BF16) bt__k_att_bwd_wg_run<__nv_bfloat16>(&p, s, op);
        else bt__k_att_bwd_wg_run<__half>(&p, s, op);
        bt_free(dvec);
        return 0;
    }
    switch (dt) {
    case BT_F32:
        if (precision == BT_MATMUL_TF32) bt__k_att_bwd_tc_run<bt__k_mma_tf32>(&p, tiles, dp, s, op);
        else bt__k_att_bwd_f32(&p, tiles, dp, s, op);
        break;
    case BT_BF16: bt__k_att_bwd_tc_run<bt__k_mma16<__nv_bfloat16> >(&p, tiles, dp, s, op); break;
    default: bt__k_att_bwd_tc_run<bt__k_mma16<__half> >(&p, tiles, dp, s, op); break;
    }
    bt_free(dvec);
    return 0;
}
BTDEF void bt_k_attention_backward_strided(bt_dtype dt, void *gq, const int64_t *sgq, void *gk, const int64_t *sgk, void *gv,
                                           const int64_t *sgv, const void *gout, const int64_t *sgo, const void *q,
                                           const int64_t *sq, const void *k, const int64_t *sk, const void *v, const int64_t *sv,
                                           const void *out, const int64_t *so, const float *lse, int64_t B, int64_t H, int64_t Tn,
                                           int64_t D, float scale, int causal, bt_matmul_precision precision, cudaStream_t s) {
    bt_k_attention_backward_colsum(dt, gq, sgq, gk, sgk, gv, sgv, gout, sgo, q, sq, k, sk, v, sv, out, so, lse, B, H, Tn, D, scale,
                                   causal, precision, NULL, s);
}

/* the same on contiguous [B, H, T, D] tensors */
BTDEF void bt_k_attention(bt_dtype dt, void *out, float *lse, const void *q, const void *k, const void *v, int64_t B,
                          int64_t H, int64_t Tn, int64_t D, float scale, cudaStream_t s) {
    int64_t st[3] = {H * Tn * D, Tn * D, D};
    bt_k_attention_strided(dt, out, st, lse, q, st, k, st, v, st, B, H, Tn, D, scale, 1, BT_MATMUL_FP32, s);
}
BTDEF void bt_k_attention_backward(bt_dtype dt, void *gq, void *gk, void *gv, const void *gout, const void *q,
                                   const void *k, const void *v, const void *out, const float *lse, int64_t B, int64_t H,
                                   int64_t Tn, int64_t D, float scale, cudaStream_t s) {
    int64_t st[3] = {H * Tn * D, Tn * D, D};
    bt_k_attention_backward_strided(dt, gq, st, gk, st, gv, st, gout, st, q, st, k, st, v, st, out, st, lse, B, H, Tn, D,
                                    scale, 1, BT_MATMUL_FP32, s);
}

/* ---- 10. matmul (cuBLASLt) ------------------------------------------------------------------------
   Row-major C = A B is column-major C^T = B^T A^T, so cuBLASLt gets (B, A) as its (A, B) with m = N,
   n = M: a row-major [R, S] matrix is a column-major [S, R] one with ld = S, and a transposed
   operand is the other layout plus CUBLAS_OP_T. Compute: fp32 data in CUBLAS_COMPUTE_32F (no
   tensor cores) or CUBLAS_COMPUTE_32F_FAST_TF32; bf16/f16 data in CUBLAS_COMPUTE_32F; f64 in 64F.
   The bias rides the BIAS epilogue (a vector over cuBLASLt's m = our N) when batch == 1 and
   cuBLASLt offers an algorithm for it, else a separate kernel adds it afterwards.
   Plans (the operation and layout descriptors and the heuristic's algorithm) are cached per device
   in an open-addressed table keyed by the whole shape tuple, dtype, precision and the pointers'
   alignments, so the hot path is a hash lookup and one cublasLtMatmul. Traffic: (MK + KN + MN
   (+ MN if beta != 0)) elements per matrix; 2 M N K flops. */
static uint32_t bt__k_align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}
template <typename T>
__global__ void bt__k_bias_add(T *C, const T *bias, int64_t batch, int64_t M, int64_t N, int64_t strideC) {
    int64_t mn = M * N;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < batch * mn; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = e / mn, r = e - b * mn;
        T *p = C + b * strideC + r;
        *p = bt__k_from<T>(bt__k_tof(*p) + bt__k_tof(bias[r % N]));
    }
}
static void bt__k_matmul_bias(bt_dtype dt, void *C, const void *bias, int64_t batch, int64_t M, int64_t N, int64_t strideC,
                              cudaStream_t s) {
    BT__K_DISPATCH4(dt, "bt_k_matmul", {
        bt__k_bias_add<T><<<bt__k_blocks(batch * M * N, 256), 256, 0, s>>>((T *)C, (const T *)bias, batch, M, N, strideC);
    })
    BT__K_LAUNCHED("bt_k_matmul (bias)");
}
static int bt__k_mm_make(bt__k_ctx *c, bt__k_mm_plan *p, bt_dtype dt, bt_dtype dt_c, bt_matmul_precision prec, int64_t M,
                         int64_t N, int64_t K, int transA, int transB, int64_t batch, int64_t sA, int64_t sB, int64_t sC,
                         bt_k_epilogue epi, const void *bias, const void *aux, const uint32_t al[4]) {
    const char *op = "bt_k_matmul";
    cudaDataType_t cdt = bt__k_cuda_dt(dt), odt = bt__k_cuda_dt(dt_c), sct = dt == BT_F64 ? CUDA_R_64F : CUDA_R_32F;
    cublasComputeType_t ct = dt == BT_F64 ? CUBLAS_COMPUTE_64F
                           : (dt == BT_F32 && prec == BT_MATMUL_TF32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    BT__K_BLAS(cublasLtMatmulDescCreate(&p->op, ct, sct), op);
    cublasOperation_t opa = transB ? CUBLAS_OP_T : CUBLAS_OP_N, opb = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), op);
    BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), op);
    if (transB) BT__K_BLAS(cublasLtMatrixLayoutCreate(&p->la, cdt, (uint64_t)K, (uint64_t)N, K), op);
    else BT__K_BLAS(cublasLtMatrixLayoutCreate(&p->la, cdt, (uint64_t)N, (uint64_t)K, N), op);
    if (transA) BT__K_BLAS(cublasLtMatrixLayoutCreate(&p->lb, cdt, (uint64_t)M, (uint64_t)K, M), op);
    else BT__K_BLAS(cublasLtMatrixLayoutCreate(&p->lb, cdt, (uint64_t)K, (uint64_t)M, K), op);
    BT__K_BLAS(cublasLtMatrixLayoutCreate(&p->lc, odt, (uint64_t)N, (uint64_t)M, N), op);
    if (batch > 1) {
        int32_t bc = (int32_t)batch;
        cublasLtMatrixLayout_t ls[3] = {p->la, p->lb, p->lc};
        int64_t st[3] = {sB, sA, sC};
        for (int i = 0; i < 3; i++) {
            BT__K_BLAS(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc), op);
            BT__K_BLAS(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st[i], sizeof st[i]), op);
        }
    }
    cublasLtMatmulPreference_t pref;
    BT__K_BLAS(cublasLtMatmulPreferenceCreate(&pref), op);
    uint64_t wsb = BT__K_WS_BYTES;
    BT__K_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb), op);
    /* cuBLASLt's A is our B and vice versa */
    BT__K_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[1], sizeof al[1]), op);
    BT__K_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[0], sizeof al[0]), op);
    BT__K_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]), op);
    BT__K_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2]), op);
    cublasLtMatmulHeuristicResult_t res[BT__K_MM_CANDIDATES];
    int nres = 0;
    p->epi_bias = 0; p->no_algo = 0;
    if (epi != BT_K_EPI_NONE) {
        cublasLtEpilogue_t e = epi == BT_K_EPI_BIAS ? CUBLASLT_EPILOGUE_BIAS : epi == BT_K_EPI_GELU_AUX_BIAS ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                             : epi == BT_K_EPI_DGELU_BGRAD ? CUBLASLT_EPILOGUE_DGELU_BGRAD
                             : epi == BT_K_EPI_DGELU ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_BGRADB;
        BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), op);
        BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), op);
        if (aux) {   /* the pre-activation, laid out like C: cuBLASLt's rows are our N */
            int64_t ld = N;
            BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux), op);
            BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld), op);
        }
        if (cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, BT__K_MM_CANDIDATES, res, &nres) ==
                CUBLAS_STATUS_SUCCESS && nres > 0)
            p->epi_bias = 1;
        else if (epi != BT_K_EPI_BIAS) {   /* the fused epilogue or nothing: the caller has another way */
            cublasLtMatmulPreferenceDestroy(pref);
            p->used = 1;
            bt__k_mm_plan_drop(p);
            p->used = 1; p->no_algo = 1;
            return -1;
        } else {
            e = CUBLASLT_EPILOGUE_DEFAULT;
            BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), op);
            nres = 0;
        }
    }
    if (!p->epi_bias) {
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, BT__K_MM_CANDIDATES,
                                                           res, &nres);
        if (st != CUBLAS_STATUS_SUCCESS) nres = 0;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (nres <= 0) {
        p->used = 1;
        bt__k_mm_plan_drop(p);
        return 0;
    }
    p->algo = res[0].algo;
    p->n_cand = 0;
    for (int i = 0; i < nres; i++) p->cand[p->n_cand++] = res[i].algo;
    p->used = 1;
    return 1;
}

/* Autotuning: the heuristic's order is a guess; on a shape's first use, time each candidate twice
   after a warm-up run (into C when beta = 0, else into a scratch copy's place, so C's data survive)
   and keep the fastest. One host sync per new shape, none in the steady state. Off
   (bt_k_matmul_set_autotune(0) or BT_MATMUL_AUTOTUNE=0): the heuristic's first choice, the same
   algorithm, so the same bits, on every run. Choices made earlier (another run's, saved with
   bt_k_matmul_tuning_export) can be loaded: a plan whose key was loaded takes that algorithm. */
static int bt__k_autotune = -1;
static int bt__k_autotune_on(void) {
    if (bt__k_autotune < 0) { const char *e = getenv("BT_MATMUL_AUTOTUNE"); bt__k_autotune = !(e && e[0] == '0'); }
    return bt__k_autotune;
}
BTDEF void bt_k_matmul_set_autotune(int on) { bt__k_autotune = on != 0; }
typedef struct { int64_t key[18]; cublasLtMatmulAlgo_t algo; } bt__k_tuned;
static struct { bt__k_tuned *e; int n; } bt__k_loaded[BT_MAX_GPUS];
/* the loaded choice for a plan key, if any */
static const cublasLtMatmulAlgo_t *bt__k_loaded_algo(int device, const int64_t *key) {
    for (int i = 0; i < bt__k_loaded[device].n; i++)
        if (!memcmp(bt__k_loaded[device].e[i].key, key, sizeof bt__k_loaded[device].e[i].key)) return &bt__k_loaded[device].e[i].algo;
    return NULL;
}
BTDEF size_t bt_k_matmul_tuning_export(int device, void *buf, size_t cap) {
    bt__k_ctx *c = bt__k_ctx_of(device);
    size_t n = 0;
    for (int i = 0; i < BT__K_MM_SLOTS; i++) {
        if (!c->mm[i].used || c->mm[i].no_algo) continue;   /* a key with no algorithm has none to export */
        if (buf && (n + 1) * sizeof(bt__k_tuned) <= cap) {
            bt__k_tuned t;
            memcpy(t.key, c->mm[i].key, sizeof t.key); t.algo = c->mm[i].algo;
            memcpy((char *)buf + n * sizeof t, &t, sizeof t);
        }
        n++;
    }
    return n * sizeof(bt__k_tuned);
}
BTDEF void bt_k_matmul_tuning_import(int device, const void *buf, size_t n) {
    (void)bt__k_ctx_of(device);
    if (n % sizeof(bt__k_tuned)) bt_error("bt_k_matmul_tuning_import: %zu bytes is not a whole number of entries of %zu", n, sizeof(bt__k_tuned));
    free(bt__k_loaded[device].e);
    bt__k_loaded[device].n = (int)(n / sizeof(bt__k_tuned));
    bt__k_loaded[device].e = (bt__k_tuned *)malloc(n ? n : 1);
    if (!bt__k_loaded[device].e) bt_error("bt_k_matmul_tuning_import: out of host memory");
    memcpy(bt__k_loaded[device].e, buf, n);
}
static void bt__k_mm_autotune(bt__k_ctx *c, bt__k_mm_plan *p, const void *alpha, const void *A, const void *B,
                              const void *beta, const void *Cin, void *C, cudaStream_t s) {
    if (p->n_cand < 2 || !bt__k_autotune_on()) { p->n_cand = 0; return; }
    cudaEvent_t e0, e1;
    BT__K_CUDA(cudaEventCreate(&e0), "bt_k_matmul (autotune)");
    BT__K_CUDA(cudaEventCreate(&e1), "bt_k_matmul (autotune)");
    float best = 0;
    int have = 0;
    for (int i = 0; i < p->n_cand; i++) {
        int ok = 1;
        for (int r = 0; r < 3 && ok; r++) {
            if (r == 1) BT__K_CUDA(cudaEventRecord(e0, s), "bt_k_matmul (autotune)");
            ok = cublasLtMatmul(c->lt, p->op, alpha, B, p->la, A, p->lb, beta, Cin ? Cin : C, p->lc, C, p->lc, &p->cand[i],
                                bt__k_workspace(c, s), BT__K_WS_BYTES, s) == CUBLAS_STATUS_SUCCESS;
        }
        BT__K_CUDA(cudaEventRecord(e1, s), "bt_k_matmul (autotune)");
        BT__K_CUDA(cudaEventSynchronize(e1), "bt_k_matmul (autotune)");
        float ms = 0;
        BT__K_CUDA(cudaEventElapsedTime(&ms, e0, e1), "bt_k_matmul (autotune)");
        if (ok && (!have || ms < best)) { best = ms; p->algo = p->cand[i]; have = 1; }
    }
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    p->n_cand = 0;
}
static void bt__k_mm_check(bt_dtype dt, bt_dtype dt_c) {
    if (dt != BT_F32 && dt != BT_F64 && dt != BT_BF16 && dt != BT_F16)
        bt_error("bt_k_matmul: dtype %s not supported (f32, f64, bf16, f16)", bt_dtype_name(dt));
    if (dt_c != dt && !(dt_c == BT_F32 && (dt == BT_BF16 || dt == BT_F16)))
        bt_error("bt_k_matmul: %s operands into a %s C not supported (the same dtype, or bf16/f16 into f32)", bt_dtype_name(dt),
                 bt_dtype_name(dt_c));
}
/* the plan for a key (made on first use) and one cublasLtMatmul, reading beta's C from Cin when
   that is given (else from C): 2 when it ran with the epilogue, 1 without (the plain BIAS one may
   be dropped), 0 when a fused epilogue has no algorithm (nothing ran) */
static int bt__k_mm_run(bt_dtype dt, bt_dtype dt_c, void *C, const void *A, const void *B, int64_t M, int64_t N, int64_t K,
                        int transA, int transB, int64_t batch, int64_t strideA, int64_t strideB, int64_t strideC, float alpha,
                        float beta, bt_matmul_precision precision, bt_k_epilogue epi, const void *bias, const void *aux,
                        const void *Cin, cudaStream_t s) {
    bt__k_ctx *c = bt__k_cur();
    if (dt != BT_F32) precision = BT_MATMUL_FP32;
    if (batch == 1) strideA = strideB = strideC = 0;
    if (Cin == C) Cin = NULL;   /* in place: autotuning must then time into a scratch C, not accumulate into C */
    uint32_t al[4] = {bt__k_align_of(A), bt__k_align_of(B), bt__k_align_of(C), bias ? bt__k_align_of(bias) : 0};
    if (Cin && bt__k_align_of(Cin) < al[2]) al[2] = bt__k_align_of(Cin);   /* C read from Cin, written to C: both aligned */
    int64_t key[18] = {dt, precision, M, N, K, transA != 0, transB != 0, batch, strideA, strideB, strideC, epi == BT_K_EPI_BIAS,
                       al[0], al[1], al[2], al[3], dt_c, epi > BT_K_EPI_BIAS ? (int64_t)epi | (int64_t)(aux ? bt__k_align_of(aux) : 0) << 8 : 0};
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 18; i++) { h ^= (uint64_t)key[i]; h *= 1099511628211ull; h ^= h >> 29; }
    bt__k_mm_plan *p = NULL;
    for (int i = 0; i < 8 && !p; i++) {
        bt__k_mm_plan *q = &c->mm[(h + i) % BT__K_MM_SLOTS];
        if (q->used && !memcmp(q->key, key, sizeof key)) p = q;
    }
    if (!p) {
        for (int i = 0; i < 8 && !p; i++) {
            bt__k_mm_plan *q = &c->mm[(h + i) % BT__K_MM_SLOTS];
            if (!q->used) p = q;
        }
        if (!p) { p = &c->mm[h % BT__K_MM_SLOTS]; bt__k_mm_plan_drop(p); }
        int made = bt__k_mm_make(c, p, dt, dt_c, precision, M, N, K, transA, transB, batch, strideA, strideB, strideC, epi, bias, aux, al);
        if (!made)
            bt_error("bt_k_matmul: cuBLASLt has no algorithm for %s -> %s M=%lld N=%lld K=%lld transA=%d transB=%d batch=%lld",
                     bt_dtype_name(dt), bt_dtype_name(dt_c), (long long)M, (long long)N, (long long)K, transA, transB, (long long)batch);
        memcpy(p->key, key, sizeof key);
        if (made > 0) {
            const cublasLtMatmulAlgo_t *loaded = bt__k_loaded_algo(bt__k_device(), key);
            if (loaded) { p->algo = *loaded; p->n_cand = 0; }
        }
    }
    if (p->no_algo) return 0;
    if (p->epi_bias)
        BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "bt_k_matmul");
    if (aux && p->epi_bias)
        BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux), "bt_k_matmul");
    double ad = alpha, bd = beta;
    const void *pa = dt == BT_F64 ? (const void *)&ad : (const void *)&alpha;
    const void *pb = dt == BT_F64 ? (const void *)&bd : (const void *)&beta;
    if (p->n_cand) {
        void *scratch = NULL;
        if (beta != 0 && !Cin) {     /* C holds data to accumulate into: time the candidates elsewhere */
            size_t nb = (size_t)((batch - 1) * strideC + M * N) * bt_dtype_size(dt_c);
            scratch = bt__k_scratch(nb, s);
            BT__K_CUDA(cudaMemsetAsync(scratch, 0, nb, s), "bt_k_matmul (autotune)");
        }
        bt__k_mm_autotune(c, p, pa, A, B, pb, Cin, scratch ? scratch : C, s);   /* epilogue outputs: rewritten by the last run */
        bt_free(scratch);
    }
    BT__K_BLAS(cublasLtMatmul(c->lt, p->op, pa, B, p->la, A, p->lb, pb, Cin ? Cin : C, p->lc, C, p->lc, &p->algo, bt__k_workspace(c, s),
                              BT__K_WS_BYTES, s), "bt_k_matmul");
    return 1 + p->epi_bias;
}
BTDEF int bt_k_matmul_epi(bt_dtype dt, bt_dtype dt_c, void *C, const void *A, const void *B, int64_t M, int64_t N, int64_t K,
                          int transA, int transB, float beta, bt_k_epilogue epi, void *vec, void *aux,
                          bt_matmul_precision precision, cudaStream_t s) {
    bt__k_mm_check(dt, dt_c);
    if (epi <= BT_K_EPI_BIAS || epi > BT_K_EPI_DGELU) bt_error("bt_k_matmul_epi: epilogue %d is not one of the fused kinds", (int)epi);
    if (dt == BT_F64) return 0;
    if ((!vec && epi != BT_K_EPI_DGELU) || (epi != BT_K_EPI_BGRADB && !aux))
        bt_error("bt_k_matmul_epi: epilogue %d needs its %s", (int)epi,
                 epi == BT_K_EPI_BGRADB ? "vector" : epi == BT_K_EPI_DGELU ? "aux matrix" : "vector and aux matrix");
    if (epi != BT_K_EPI_BGRADB && beta != 0) bt_error("bt_k_matmul_epi: beta = %g with a GELU epilogue (0 expected)", (double)beta);
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    if (aux && N % 8) return 0;      /* cuBLASLt wants the aux leading dimension a multiple of 8 */
    return bt__k_mm_run(dt, dt_c, C, A, B, M, N, K, transA, transB, 1, 0, 0, 0, 1.f, beta, precision, epi,
                        epi == BT_K_EPI_DGELU ? NULL : vec, epi == BT_K_EPI_BGRADB ? NULL : aux, NULL, s) == 2;
}
BTDEF void bt_k_matmul_out(bt_dtype dt, bt_dtype dt_c, void *C, const void *A, const void *B, const void *bias, int64_t M,
                           int64_t N, int64_t K, int transA, int transB, int64_t batch, int64_t strideA, int64_t strideB,
                           int64_t strideC, float alpha, float beta, bt_matmul_precision precision, cudaStream_t s) {
    if (batch <= 0 || M <= 0 || N <= 0) return;
    bt__k_mm_check(dt, dt_c);
    if (K <= 0) {   /* empty product: C = beta C (+ bias) */
        for (int64_t b = 0; b < batch; b++)
            bt_k_affine(dt_c, (char *)C + (size_t)(b * strideC) * bt_dtype_size(dt_c), (char *)C + (size_t)(b * strideC) * bt_dtype_size(dt_c),
                        beta, 0.0, M * N, s);
        if (bias) bt__k_matmul_bias(dt_c, C, bias, batch, M, N, strideC, s);
        return;
    }
    int try_bias = bias != NULL && batch == 1;
    int fused = bt__k_mm_run(dt, dt_c, C, A, B, M, N, K, transA, transB, batch, strideA, strideB, strideC, alpha, beta, precision,
                             try_bias ? BT_K_EPI_BIAS : BT_K_EPI_NONE, try_bias ? bias : NULL, NULL, NULL, s) == 2;
    if (bias && !fused) bt__k_matmul_bias(dt_c, C, bias, batch, M, N, batch == 1 ? M * N : strideC, s);
}
BTDEF void bt_k_matmul_add(bt_dtype dt, void *D, const void *A, const void *B, const void *bias, const void *R, int64_t M, int64_t N,
                           int64_t K, int transA, int transB, bt_matmul_precision precision, cudaStream_t s) {
    if (M <= 0 || N <= 0) return;
    bt__k_mm_check(dt, dt);
    if (K <= 0) {   /* empty product: D = R (+ bias) */
        if (D != R) BT__K_CUDA(cudaMemcpyAsync(D, R, (size_t)(M * N) * bt_dtype_size(dt), cudaMemcpyDeviceToDevice, s), "bt_k_matmul_add");
        if (bias) bt__k_matmul_bias(dt, D, bias, 1, M, N, M * N, s);
        return;
    }
    int fused = bt__k_mm_run(dt, dt, D, A, B, M, N, K, transA, transB, 1, 0, 0, 0, 1.f, 1.f, precision,
                             bias ? BT_K_EPI_BIAS : BT_K_EPI_NONE, bias, NULL, R, s) == 2;
    if (bias && !fused) bt__k_matmul_bias(dt, D, bias, 1, M, N, M * N, s);
}
BTDEF void bt_k_matmul(bt_dtype dt, void *C, const void *A, const void *B, const void *bias, int64_t M, int64_t N,
                       int64_t K, int transA, int transB, int64_t batch, int64_t strideA, int64_t strideB,
                       int64_t strideC, float alpha, float beta, bt_matmul_precision precision, cudaStream_t s) {
    bt_k_matmul_out(dt, dt, C, A, B, bias, M, N, K, transA, transB, batch, strideA, strideB, strideC, alpha, beta, precision, s);
}

/* ---- 11. AdamW ------------------------------------------------------------------------------------
   Per parameter: g' = g scale, m = b1 m + (1 - b1) g', v = b2 v + (1 - b2) g'^2,
   p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p). Reads p, m, v (fp32) and g,
   writes p, m, v: 24 + sizeof(g) bytes per parameter; p, m, v move as float4 when aligned. The
   decay-run table is read from L1: a thread's chunks go up in index (grid-stride), so it walks the
   table forward once. */
template <typename G>
__global__ void bt__k_adamw_kernel(float *p, const G *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                                   float eps, float wd0, const bt_k_decay_run *runs, float bc1, float bc2,
                                   const float *gscale, int vec) {
    float sc = gscale ? *gscale : 1.f;
    int64_t nc = (n + 3) / 4;
    int r = 0;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < nc; c += (int64_t)gridDim.x * blockDim.x) {
        int64_t i0 = c * 4;
        float pp[4], mm[4], vv[4];
        int cnt = n - i0 < 4 ? (int)(n - i0) : 4, full = vec && cnt == 4;
        if (full) {
            float4 a = *reinterpret_cast<const float4 *>(p + i0), b = *reinterpret_cast<const float4 *>(m + i0),
                   d = *reinterpret_cast<const float4 *>(v + i0);
            pp[0] = a.x; pp[1] = a.y; pp[2] = a.z; pp[3] = a.w; mm[0] = b.x; mm[1] = b.y; mm[2] = b.z; mm[3] = b.w;
            vv[0] = d.x; vv[1] = d.y; vv[2] = d.z; vv[3] = d.w;
        } else {
            for (int e = 0; e < 4; e++) {
                pp[e] = e < cnt ? p[i0 + e] : 0.f; mm[e] = e < cnt ? m[i0 + e] : 0.f; vv[e] = e < cnt ? v[i0 + e] : 0.f;
            }
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float gi = e < cnt ? bt__k_tof(g[i0 + e]) * sc : 0.f, wd = wd0;
            if (runs) { while (i0 + e >= runs[r].end && e < cnt) r++; wd = runs[r].wd; }
            mm[e] = b1 * mm[e] + (1.f - b1) * gi;
            vv[e] = b2 * vv[e] + (1.f - b2) * gi * gi;
            pp[e] -= lr * ((mm[e] / bc1) / (sqrtf(vv[e] / bc2) + eps) + wd * pp[e]);
        }
        if (full) {
            *reinterpret_cast<float4 *>(p + i0) = make_float4(pp[0], pp[1], pp[2], pp[3]);
            *reinterpret_cast<float4 *>(m + i0) = make_float4(mm[0], mm[1], mm[2], mm[3]);
            *reinterpret_cast<float4 *>(v + i0) = make_float4(vv[0], vv[1], vv[2], vv[3]);
        } else {
            for (int e = 0; e < cnt; e++) { p[i0 + e] = pp[e]; m[i0 + e] = mm[e]; v[i0 + e] = vv[e]; }
        }
    }
}
BTDEF void bt_k_adamw(float *p, const void *g, bt_dtype gdt, float *m, float *v, int64_t n, float lr, float b1, float b2,
                      float eps, float wd, const bt_k_decay_run *runs, int nruns, int step, const float *grad_scale,
                      cudaStream_t s) {
    if (n <= 0) return;
    if (step < 1) bt_error("bt_k_adamw: step %d (counts from 1)", step);
    if (runs && nruns < 1) bt_error("bt_k_adamw: %d decay runs", nruns);
    float bc1 = (float)(1.0 - pow((double)b1, (double)step)), bc2 = (float)(1.0 - pow((double)b2, (double)step));
    int vec = bt__k_aligned16(p) && bt__k_aligned16(m) && bt__k_aligned16(v);
    unsigned nb = bt__k_blocks((n + 3) / 4, 256);
    BT__K_DISPATCH3(gdt, "bt_k_adamw (grad)", {
        bt__k_adamw_kernel<T><<<nb, 256, 0, s>>>(p, (const T *)g, m, v, n, lr, b1, b2, eps, wd, runs, bc1, bc2, grad_scale, vec);
    })
    BT__K_LAUNCHED("bt_k_adamw");
}

/* ---- 12. less common paths ---------------------------------------------------
   axpy: two reads and one write per element.
   copy_general: one read and one write per element, index decoded for both sides (dims merged
   where both step through them as one). scatter_rows: one read of g and one write per kept
   element. inv_count_ne: one pass over n int32 in a single block (n is a batch of targets). */
struct bt__k_axpy_f {
    const float *a;
    __device__ __forceinline__ float operator()(float y, float x) const { return y + *a * x; }
};
BTDEF void bt_k_axpy_f32(float *y, const float *a, const float *x, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    bt__k_axpy_f f = {a};
    bt__k_map_run<float, 2>(y, y, x, n, bt__k_aligned16(y) && bt__k_aligned16(x), f, s);
    BT__K_LAUNCHED("bt_k_axpy_f32");
}
__global__ void bt__k_copy_general_kernel(int dtd, void *dst, int dts, const void *src, bt__k_geom g, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, so = 0, dof = 0;
        for (int d = g.ndim - 1; d >= 0; d--) {
            int64_t q = rem / g.shape[d], c = rem - q * g.shape[d];
            so += c * g.sa[d]; dof += c * g.sb[d]; rem = q;
        }
        bt__st(dst, (bt_dtype)dtd, dof, bt__ld(src, (bt_dtype)dts, so));
    }
}
BTDEF void bt_k_copy_general(bt_dtype dt_dst, void *dst, const int64_t *dst_strides, bt_dtype dt_src, const void *src,
                             const int64_t *src_strides, int ndim, const int64_t *shape, cudaStream_t s) {
    if (ndim < 0 || ndim > BT_MAX_DIMS) bt_error("bt_k_copy_general: %d dims (at most %d)", ndim, BT_MAX_DIMS);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    if (n <= 0) return;
    bt__k_geom g;
    bt__k_coalesce(ndim, shape, src_strides, dst_strides, &g);
    bt__k_copy_general_kernel<<<bt__k_blocks(n, 256), 256, 0, s>>>((int)dt_dst, dst, (int)dt_src, src, g, n);
    BT__K_LAUNCHED("bt_k_copy_general");
}

__global__ void bt__k_scatter_rows_kernel(int dt, void *gx, const void *g, const int32_t *am, int64_t outer, int64_t r,
                                          int64_t inner) {
    int64_t n = outer * inner;
    for (int64_t oi = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; oi < n; oi += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = oi / inner, i = oi - o * inner;
        bt__st(gx, (bt_dtype)dt, (o * r + am[oi]) * inner + i, bt__ld(g, (bt_dtype)dt, oi));
    }
}
BTDEF void bt_k_scatter_rows(bt_dtype dt, void *gx, const void *g, const int32_t *argmax, int64_t outer, int64_t r,
                             int64_t inner, cudaStream_t s) {
    if (outer * inner <= 0) return;
    bt__k_scatter_rows_kernel<<<bt__k_blocks(outer * inner, 256), 256, 0, s>>>((int)dt, gx, g, argmax, outer, r, inner);
    BT__K_LAUNCHED("bt_k_scatter_rows");
}

__global__ void bt__k_inv_count_ne_kernel(float *out, const int32_t *x, int64_t n, int value) {
    __shared__ int64_t part[1024];
    int64_t c = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) c += x[i] != value;
    part[threadIdx.x] = c;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = 1.0f / (float)(part[0] > 0 ? part[0] : 1);
}
BTDEF void bt_k_inv_count_ne(float *out, const int32_t *x, int64_t n, int value, cudaStream_t s) {
    bt__k_inv_count_ne_kernel<<<1, 1024, 0, s>>>(out, x, n, value);
    BT__K_LAUNCHED("bt_k_inv_count_ne");
}

#endif /* BT_KERNELS_IMPLEMENTATION_DONE */
#endif /* BT_KERNELS_IMPLEMENTATION */
