/* bt_kernels.cuh - BluTrain-C CUDA kernels, v0.1: the device side of every op in bt_tensor.h.

   Included by bt_tensor.h's implementation when compiled by nvcc (BT_CUDA); it sees bt_tensor.h's
   declarations and its shared host/device code (the dtype list, the element loads and stores,
   the op list BT_UNARY_OPS, Philox). Every function here works on raw device pointers to
   contiguous row-major data, runs on the current CUDA device (bt_tensor.h's device guard sets
   it to the tensor's) and launches on the stream it is given; none allocates with cudaMalloc
   (scratch comes from bt_alloc on that stream) and none synchronizes with the host. Every
   launch and library call is checked; an error names the op (bt_error).

   Floating dtypes: BT_F32, BT_BF16 and BT_F16 everywhere (math in fp32 registers); BT_F64 for
   the elementwise, reduction and copy kernels. Index tensors are BT_I32. The FP8 storage dtypes
   (BT_F8E4M3, BT_F8E5M2) go through the copy, cast and fill kernels and bt_fp8.cuh's only.
   Device code is CUDA C++ used sparingly: templates instantiate a kernel per dtype and per op of
   the op list, and, where a tile shape or an MMA shape varies, per shape (the attention kernels).

   SECTIONS
     1. context: devices, stream stacks, cuBLASLt, checks
     2. copy, cast, fill, random (Philox, bit-identical counters with the CPU)
     3. elementwise: unary, scalar affine, broadcasting binary
     4. reductions (sum, mean, max with argmax), sum of squares
     5. softmax / log_softmax
     6. layernorm and RMSNorm; SwiGLU; RoPE
     7. embedding
     8. fused cross-entropy over a padded vocabulary
     9. attention, causal or not: bt_attention.cuh (sm_80 tensor-core, strict fp32 and sm_90a wgmma
        kernels), included here for its declarations and inside the implementation for its kernels
    10. matmul (cuBLASLt: fp32, tf32, bf16; epilogues: bias, residual add, GELU / dGELU, bias
        gradient; the fastest candidate timed per shape)
    11. AdamW, fused over a flat parameter buffer
    12. less common paths: strided-to-strided copy, max's backward scatter, a device-side count
        for the cross-entropy mean
    13. FP8: bt_fp8.cuh (per-tensor scaled casts to e4m3 / e5m2 with their amax and transpose, the
        scaling state's update, cuBLASLt FP8 products with device scale pointers), included here
        for its declarations and at the end of the implementation for its kernels
*/
#ifndef BT_KERNELS_CUH
#define BT_KERNELS_CUH
#ifndef BT_TENSOR_H      /* included first: its declarations (bt_tensor.h includes this one at their end under nvcc) */
#include "bt_tensor.h"
#endif
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
/* RMSNorm (Llama) over the last dim C: out = round_T(x rstd) w, rstd = 1 / sqrt(mean x^2 + eps) fp32
   [rows] saved; w may be NULL. Backward as layernorm's without the mean: gx written or added
   (gx_add), gw accumulated (+=), gx_colsum as above; the same kernels, deterministic sums. */
BTDEF void bt_k_rmsnorm(bt_dtype dt, void *out, float *rstd, const void *x, const void *w, int64_t rows, int64_t C, float eps,
                        cudaStream_t s);
BTDEF void bt_k_rmsnorm_backward(bt_dtype dt, void *gx, int gx_add, void *gw, float *gx_colsum, const void *gout, const void *x,
                                 const void *w, const float *rstd, int64_t rows, int64_t C, cudaStream_t s);
/* SwiGLU on x [rows, 2F] (gate then up): out [rows, F] = round_T(silu(gate)) up; backward writes both
   halves of gx [rows, 2F] from gout [rows, F] in one pass. f32, f64, bf16, f16. */
BTDEF void bt_k_swiglu(bt_dtype dt, void *out, const void *x, int64_t rows, int64_t F, cudaStream_t s);
BTDEF void bt_k_swiglu_backward(bt_dtype dt, void *gx, const void *gout, const void *x, int64_t rows, int64_t F, cudaStream_t s);
/* RoPE: out [B, T, H, D] = x [B, T, H, D] with, in heads h < Hr, each pair (i, i + D/2) rotated by
   sign * a, a = float(pos0 + t) * inv_freq[i] in fp32 (inv_freq: D/2 host floats, D <= 512, passed by
   value); heads Hr .. H - 1 copied as they are (the v of a packed qkv). Element strides os, xs for B,
   T, H (D's stride 1); out may be x (in place). f32, f64, bf16, f16. */
BTDEF void bt_k_rope(bt_dtype dt, void *out, const int64_t *os, const void *x, const int64_t *xs, int64_t B, int64_t Tn, int64_t H,
                     int64_t Hr, int64_t D, int64_t pos0, const float *inv_freq, int sign, cudaStream_t s);

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

/* ---- 9. attention, causal or not: bt_attention.cuh ---- */
#include "bt_attention.cuh"

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
/* Autotuning (timing cuBLASLt's candidates on a shape's first use) on (the default) or off; off, the
   heuristic's first pick: the same bits on every run. The choices made on
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
   rows in docs/history/results-journal.md) at GPT-2's MLP shape: DGELU_BGRAD ran at 20% of the bf16 product
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
   different decays is one launch. The ends count from run_base elements before p: a launch over
   part of a buffer passes the table from the run its first element is in, and its start as
   run_base. p_bf16 (may be NULL): the new p rounded to bf16 (as bt_k_cast does) is written there
   too, the compute copy of the weights without a pass of its own.
   p_lo != NULL: the weights are held in two halves (bt__f32_hi16 / lo16): p is not used, each p
   is read from and written back to (p_bf16, p_lo), the same fp32 math and bits as from p. */
typedef struct { int64_t end; float wd; } bt_k_decay_run;
BTDEF void bt_k_adamw(float *p, const void *g, bt_dtype gdt, float *m, float *v, int64_t n, float lr, float b1, float b2,
                      float eps, float wd, const bt_k_decay_run *runs, int nruns, int64_t run_base, int step, const float *grad_scale,
                      uint16_t *p_bf16, uint16_t *p_lo, cudaStream_t s);
/* n f32 values into their two halves (hi = bt__f32_hi16, lo = bt__f32_lo16), and back (join) */
BTDEF void bt_k_f32_split(const float *x, uint16_t *hi, uint16_t *lo, int64_t n, cudaStream_t s);
BTDEF void bt_k_f32_join(const uint16_t *hi, const uint16_t *lo, float *x, int64_t n, cudaStream_t s);

/* ---- 12. less common paths ---- */
/* y += a[0] x, fp32, a a device scalar (a gradient scaled by the upstream one, added into a buffer) */
BTDEF void bt_k_axpy_f32(float *y, const float *a, const float *x, int64_t n, cudaStream_t s);
/* dst (dtype dt: f32, bf16, f16) = dst + src, summed in fp32 and rounded once (an fp32 bias
   gradient added into a bf16 gradient buffer) */
BTDEF void bt_k_add_f32_into(bt_dtype dt, void *dst, const float *src, int64_t n, cudaStream_t s);
/* dst = src elementwise, both read/written through element strides (a write into a view) */
BTDEF void bt_k_copy_general(bt_dtype dt_dst, void *dst, const int64_t *dst_strides, bt_dtype dt_src, const void *src,
                             const int64_t *src_strides, int ndim, const int64_t *shape, cudaStream_t s);
/* gx[o, argmax[o, i], i] = g[o, i] for gx [outer, r, inner] (already zeroed): max's backward */
BTDEF void bt_k_scatter_rows(bt_dtype dt, void *gx, const void *g, const int32_t *argmax, int64_t outer, int64_t r,
                             int64_t inner, cudaStream_t s);
/* *out = 1 / max(1, #{i : x[i] != value}): a mean that skips ignored targets, with no host sync */
BTDEF void bt_k_inv_count_ne(float *out, const int32_t *x, int64_t n, int value, cudaStream_t s);

/* ---- 13. FP8 scaled casts, the scaling state's update, cuBLASLt FP8 products: bt_fp8.cuh ---- */
#include "bt_fp8.cuh"

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
/* cuBLASLt algorithms timed per new shape: its heuristic lists 8 for the default d12 run's products
   (262,144 rows), where the 7th or 8th ran 7-11% faster than the best of the first 6 for fc's and
   the MLP projection's forward in FP8 (biases 128 bytes off) and bf16's MLP projection dx
   (bench_gemm_fp8 768 262144 [bf16], H200, 2026-12-04) */
#define BT__K_MM_CANDIDATES 8
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
/* f32 <-> bf16 / f16 with both pointers 16-byte aligned (the bf16 copy of a model's weights after
   each update, gradients into f32): 8 elements a thread through 16-byte loads and stores, where the
   loop above moves 2 or 4 bytes an access; the same conversion functions, so the same bits.
   n8 = n / 8 groups; the caller does the tail. */
__global__ void bt__k_cast8_kernel(int dtd, void *dst, int dts, const void *src, int64_t n8) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
        float v[8];
        if (dts == BT_F32) {
            float4 a = ((const float4 *)src)[2 * i], b = ((const float4 *)src)[2 * i + 1];
            v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
        } else {
            uint4 a = ((const uint4 *)src)[i];
            const uint16_t *h = (const uint16_t *)&a;
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = dts == BT_BF16 ? bt__bf16_to_f32(h[e]) : bt__f16_to_f32(h[e]);
        }
        if (dtd == BT_F32) {
            ((float4 *)dst)[2 * i] = make_float4(v[0], v[1], v[2], v[3]);
            ((float4 *)dst)[2 * i + 1] = make_float4(v[4], v[5], v[6], v[7]);
        } else {
            uint4 o;
            uint16_t *h = (uint16_t *)&o;
#pragma unroll
            for (int e = 0; e < 8; e++) h[e] = dtd == BT_BF16 ? bt__f32_to_bf16(v[e]) : bt__f32_to_f16(v[e]);
            ((uint4 *)dst)[i] = o;
        }
    }
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
    int half_d = dt_dst == BT_BF16 || dt_dst == BT_F16, half_s = dt_src == BT_BF16 || dt_src == BT_F16;
    if (((dt_src == BT_F32 && half_d) || (half_s && dt_dst == BT_F32)) && bt__k_aligned16(dst) && bt__k_aligned16(src) && n >= 8) {
        int64_t n8 = n / 8, done = n8 * 8;
        bt__k_cast8_kernel<<<bt__k_blocks(n8, 256), 256, 0, s>>>((int)dt_dst, dst, (int)dt_src, src, n8);
        BT__K_LAUNCHED("bt_k_cast");
        if (done == n) return;
        dst = (char *)dst + (size_t)done * bt_dtype_size(dt_dst);
        src = (const char *)src + (size_t)done * bt_dtype_size(dt_src);
        n -= done;
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
   d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) (in f32 evaluated through
   the logistic function, bt__k_gelu_f32 below; f64 as written).
   backward: gx = gout * f'(x): 2 reads + 1 write per element. The derivative is taken from x
   (recomputing exp/tanh costs less than reading y); from y only when x is NULL.
   affine: out = alpha x + beta. binary: out = a op b, 2 reads + 1 write when nothing broadcasts.
   Contiguous operands 16-byte aligned move in 16-byte vectors (4 f32 / 8 bf16 per access). */
/* GELU in f32 through the logistic function: 0.5 (1 + tanh u) = 1 / (1 + e^(-2u)) =: s with
   u = sqrt(2/pi) (x + 0.044715 x^3), so gelu(x) = x s and gelu'(x) = s + x s (1 - s) 2u'(x),
   2u' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2). e^(-2u) = 2^(x (k1 + k3 x^2)), k1 = -2 log2(e) sqrt(2/pi),
   k3 = 0.044715 k1: one 2^x and one reciprocal on the MUFU and 5 FMAs, where tanhf costs ~20
   instructions (the folded FP8 casts of bt_fp8.cuh do this per element of the hidden layer and
   are bound by it). Error: 2 ulps each for 2^x and the reciprocal, and the f32 rounding of the
   exponent (relative |2u| 2^-24 in e^(-2u)): ~1e-6 relative where e^(-2u) reaches 2^20, far below
   a bf16 output's half ulp. Limits as the tanh form: x -> -inf gives -0 (s = 0 once 1 + e^(-2u) >
   2^126), +inf gives inf, NaN stays NaN. */
__device__ __forceinline__ float bt__k_gelu_s(float x) {
    const float k1 = -2.302208198144325f, k3 = -0.1029432395800235f;
    return __fdividef(1.f, 1.f + exp2f(x * __fmaf_rn(k3, x * x, k1)));
}
__device__ __forceinline__ float bt__k_gelu_f32(float x) { return x * bt__k_gelu_s(x); }
__device__ __forceinline__ float bt__k_gelu_grad_f32(float x) {
    const float s = bt__k_gelu_s(x), du = __fmaf_rn(0.21406444881780076f, x * x, 1.5957691216057308f);   /* 2u' */
    return __fmaf_rn(x * s * (1.f - s), du, s);
}
/* f(x) and f'(x) of the op list (bt_tensor.h's BT_UNARY_OPS), in the accumulation type A; GELU in f32
   by the functions above (the same function as the table's tanh form) */
template <int OP, typename A> __device__ __forceinline__ A bt__k_uop(A x) {
    typedef A bt_op_t;
    if (OP == BT_UOP_GELU && sizeof(A) == 4) return (A)bt__k_gelu_f32((float)x);
    switch (OP) {
#define BT__X(N, n, f, df) case BT_UOP_##N: return f;
    BT_UNARY_OPS(BT__X)
#undef BT__X
    }
    return x;
}
template <int OP, typename A> __device__ __forceinline__ A bt__k_uop_grad(A x) {
    typedef A bt_op_t;
    if (OP == BT_UOP_GELU && sizeof(A) == 4) return (A)bt__k_gelu_grad_f32((float)x);
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
/* rows of whole 16-byte vectors: n elements a multiple of the vector, pointers 16-byte aligned */
static int bt__k_rowvec(int64_t n, size_t es, const void *a, const void *b, const void *c, const void *d) {
    return n % (int64_t)(16 / es) == 0 && bt__k_aligned16(a) && bt__k_aligned16(b) && bt__k_aligned16(c) && bt__k_aligned16(d);
}
/* rows of the fast path (a warp a row): whole vectors, at most 1024 elements */
static int bt__k_rowfast(int64_t n, size_t es, const void *a, const void *b, const void *c, const void *d) {
    return n <= 1024 && bt__k_rowvec(n, es, a, b, c, d);
}
static unsigned bt__k_warprows_grid(int64_t rows) {
    int64_t g = (rows + 7) / 8, cap = (int64_t)bt__k_cur()->sm_count * 32;
    return (unsigned)(g < cap ? (g < 1 ? 1 : g) : cap);
}
#define BT__K_WARP_ROW_LOOP(row, rows) \
    for (int64_t row = blockIdx.x * (int64_t)8 + (threadIdx.x >> 5); row < (rows); row += (int64_t)gridDim.x * 8)
/* a thread's vectors i = 0..NV-1 of a row: x[i][e] = row[(first + step i) VE + e] as fp32, 0 past
   nvec. A warp a row: first = lane, step = 32 (bt__k_row_ld); a block a row: threadIdx.x, blockDim.x. */
template <typename T, int NV>
__device__ __forceinline__ void bt__k_vecs_ld(float x[NV][16 / sizeof(T)], const T *row, int nvec, int first, int step) {
    const int VE = 16 / sizeof(T);
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int c = first + step * i;
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
__device__ __forceinline__ void bt__k_vecs_st(T *row, const float x[NV][16 / sizeof(T)], int nvec, int first, int step) {
    const int VE = 16 / sizeof(T);
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int c = first + step * i;
        if (c < nvec) {
            T a[VE];
#pragma unroll
            for (int e = 0; e < VE; e++) a[e] = bt__k_from<T>(x[i][e]);
            bt__k_st16(row + c * VE, a);
        }
    }
}
template <typename T, int NV>
__device__ __forceinline__ void bt__k_row_ld(float x[NV][16 / sizeof(T)], const T *row, int nvec) {
    bt__k_vecs_ld<T, NV>(x, row, nvec, threadIdx.x & 31, 32);
}
template <typename T, int NV>
__device__ __forceinline__ void bt__k_row_st(T *row, const float x[NV][16 / sizeof(T)], int nvec) {
    bt__k_vecs_st<T, NV>(row, x, nvec, threadIdx.x & 31, 32);
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
   Block rows (1024 < C <= 1024 VE, the same alignment: GPT-2 1.5B's 1600, Llama's 2048, 4096): a
   block of 32 ceil(C / (2 VE 32)) threads a row, two vectors a thread, the same single reads and
   writes; the gw/gb partials stay in the registers of the thread that owns the column and go out
   once per block, summed by the same fixed-order add (at C 1600 the fallback below moved ~1 TB/s
   of the least traffic on an H200: its forward 55.8 us for 8192 rows).
   Fallback: one warp (C <= 1024) or block (larger C) per row re-reading x three times forward;
   backward a row kernel for gx plus a column kernel (32 columns x 8 rows per block, row chunks
   over grid.y, fp32 partials [splits, C]) for gw, gb, then the same fixed-order add.
   RMSNorm (Llama) is the same kernels with RMS = 1: mean = 0 and no b, rstd = 1 / sqrt(mean x^2 +
   eps), out = round_T(x rstd) w (the cast back before the weight, as transformers), and in the
   backward the mean_j(wg) term drops out: gx = rstd (wg - xhat mean_j(wg xhat)), gw += sum g xhat.
   Its dw sums are as deterministic as layernorm's (no atomics on either path). */
/* The row sums of the two register-row layouts: a warp's lanes or a block's threads. */
struct bt__k_warp_sum { __device__ float operator()(float v) const { return bt__k_wsum(v); } };
struct bt__k_block_sum { float *sh; __device__ float operator()(float v) const { return bt__k_bsum(v, sh); } };
/* One row of the forward held in registers as vectors first + step i (bt__k_vecs_ld): v becomes the
   output (before its rounding to T); mu and rs are the row's mean and rstd. */
template <typename T, int NV, int RMS, class Sum>
__device__ __forceinline__ void bt__k_ln_row(float v[NV][16 / sizeof(T)], const T *w, const T *b, int nvec, int first, int step,
                                             int C, float eps, Sum sum, float &mu, float &rs) {
    const int VE = 16 / sizeof(T);
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < NV; i++)
#pragma unroll
        for (int e = 0; e < VE; e++) acc += v[i][e];   /* padded vectors hold zeros */
    mu = RMS ? 0.f : sum(acc) / (float)C;
    acc = 0.f;
#pragma unroll
    for (int i = 0; i < NV; i++)
        if (first + step * i < nvec)
#pragma unroll
            for (int e = 0; e < VE; e++) { float d = v[i][e] - mu; acc += d * d; }
    rs = 1.f / sqrtf(sum(acc) / (float)C + eps);
    float wb[NV][VE];
#pragma unroll
    for (int i = 0; i < NV; i++)
#pragma unroll
        for (int e = 0; e < VE; e++) v[i][e] = RMS ? bt__k_tof(bt__k_from<T>(v[i][e] * rs)) : (v[i][e] - mu) * rs;
    if (w) {
        bt__k_vecs_ld<T, NV>(wb, w, nvec, first, step);
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < VE; e++) v[i][e] *= wb[i][e];
    }
    if (b) {
        bt__k_vecs_ld<T, NV>(wb, b, nvec, first, step);
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < VE; e++) v[i][e] += wb[i][e];
    }
}
/* One row of the backward after the caller's column partials: gv holds g, xv xhat (zero-padded g
   past nvec). gv becomes w g; when gxr (the row of gx) is not NULL, xv becomes the fp32 gx =
   rs (wg - mean(wg) - xhat mean(wg xhat)) (+ gxr's values with gx_add) and is stored to gxr. */
template <typename T, int NV, int RMS, class Sum>
__device__ __forceinline__ void bt__k_ln_row_gx(float gv[NV][16 / sizeof(T)], float xv[NV][16 / sizeof(T)], T *gxr, int gx_add,
                                                const T *w, int nvec, int first, int step, int C, float rs, Sum sum) {
    const int VE = 16 / sizeof(T);
    float a = 0.f, bb = 0.f;
    if (w) {   /* gv becomes w g; w re-read per row from L1 */
        float wv[NV][VE];
        bt__k_vecs_ld<T, NV>(wv, w, nvec, first, step);
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < VE; e++) gv[i][e] *= wv[i][e];
    }
#pragma unroll
    for (int i = 0; i < NV; i++)
#pragma unroll
        for (int e = 0; e < VE; e++) { a += gv[i][e]; bb += gv[i][e] * xv[i][e]; }   /* g is zero past nvec */
    a = RMS ? 0.f : sum(a) / (float)C;
    bb = sum(bb) / (float)C;
    if (!gxr) return;
#pragma unroll
    for (int i = 0; i < NV; i++)
#pragma unroll
        for (int e = 0; e < VE; e++) xv[i][e] = rs * (gv[i][e] - a - xv[i][e] * bb);
    if (gx_add) {   /* the residual's gradient so far: gv is free again */
        bt__k_vecs_ld<T, NV>(gv, gxr, nvec, first, step);
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < VE; e++) xv[i][e] += gv[i][e];
    }
    bt__k_vecs_st<T, NV>(gxr, xv, nvec, first, step);
}
template <typename T, int NV, int RMS>
__global__ void __launch_bounds__(256) bt__k_layernorm_warp(T *out, float *mean, float *rstd, const T *x, const T *w,
                                                            const T *b, int64_t rows, int C, float eps) {
    const int VE = 16 / sizeof(T);
    int nvec = C / VE, lane = threadIdx.x & 31;
    BT__K_WARP_ROW_LOOP(row, rows) {
        float v[NV][VE], mu, rs;
        bt__k_row_ld<T, NV>(v, x + row * C, nvec);
        bt__k_ln_row<T, NV, RMS>(v, w, b, nvec, lane, 32, C, eps, bt__k_warp_sum(), mu, rs);
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
template <typename T, int NV, int RMS>
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
        float mu = RMS ? 0.f : mean[row], rs = rstd[row];
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
        bt__k_ln_row_gx<T, NV, RMS>(gv, xv, gx ? gx + row * C : NULL, gx_add, w, nvec, lane, 32, C, rs, bt__k_warp_sum());
        if (pr)   /* the sums of gx's fp32 values before their rounding to T (pr implies gx) */
#pragma unroll
            for (int i = 0; i < NV; i++)
                if (lane + 32 * i < nvec)
#pragma unroll
                    for (int e = 0; e < VE; e++) sr[(i * VE + e) * 32] += xv[i][e];
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
/* Rows of 1025 to 512 NV VE elements (GPT-2 1.5B's 1600, Llama's 2048 and 4096): a block of
   32 ceil(nvec / 64) threads a row, each holding NV = 2 vectors (c = t and t + blockDim.x), the row
   sums over the block (bt__k_bsum). The traffic of the warp rows: x read once and out written once
   forward; backward g and x read once (gx too with gx_add), gx written once. The column partials of
   g xhat, g (and of gx: pr) stay in the registers of the thread that owns the column, the same
   thread for every row of the block, and are written once at its end ([gridDim.x, C], then summed
   in fixed order by bt__k_layernorm_bwd_add32). */
#define BT__K_BROW_NV 2
static int bt__k_browfast(int64_t n, size_t es, const void *a, const void *b, const void *c, const void *d) {
    return n / (int64_t)(16 / es) <= 512 * BT__K_BROW_NV && bt__k_rowvec(n, es, a, b, c, d);
}
static unsigned bt__k_brow_threads(int64_t nvec) { return (unsigned)(32 * ((nvec + 32 * BT__K_BROW_NV - 1) / (32 * BT__K_BROW_NV))); }
template <typename T, int RMS>
__global__ void __launch_bounds__(512) bt__k_layernorm_brow(T *out, float *mean, float *rstd, const T *x, const T *w, const T *b,
                                                            int64_t rows, int C, float eps) {
    const int VE = 16 / sizeof(T), NV = BT__K_BROW_NV;
    __shared__ float sh[32];
    int nvec = C / VE, t = threadIdx.x, S = blockDim.x;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        float v[NV][VE], mu, rs;
        bt__k_vecs_ld<T, NV>(v, x + row * C, nvec, t, S);
        bt__k_ln_row<T, NV, RMS>(v, w, b, nvec, t, S, C, eps, bt__k_block_sum{sh}, mu, rs);
        bt__k_vecs_st<T, NV>(out + row * C, v, nvec, t, S);
        if (t == 0) {
            if (mean) mean[row] = mu;
            if (rstd) rstd[row] = rs;
        }
    }
}
template <typename T, int RMS>
__global__ void __launch_bounds__(512) bt__k_layernorm_bwd_brow(T *gx, int gx_add, float *pw, float *pb, float *pr, const T *g,
                                                                const T *x, const T *w, const float *mean, const float *rstd,
                                                                int64_t rows, int C) {
    const int VE = 16 / sizeof(T), NV = BT__K_BROW_NV;
    __shared__ float sh[32];
    int nvec = C / VE, t = threadIdx.x, S = blockDim.x;
    float aw[NV][VE], ab[NV][VE], ar[NV][VE];
#pragma unroll
    for (int i = 0; i < NV; i++)
#pragma unroll
        for (int e = 0; e < VE; e++) aw[i][e] = ab[i][e] = ar[i][e] = 0.f;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        float gv[NV][VE], xv[NV][VE];
        bt__k_vecs_ld<T, NV>(gv, g + row * C, nvec, t, S);
        bt__k_vecs_ld<T, NV>(xv, x + row * C, nvec, t, S);
        float mu = RMS ? 0.f : mean[row], rs = rstd[row];
#pragma unroll
        for (int i = 0; i < NV; i++)
#pragma unroll
            for (int e = 0; e < VE; e++) {
                xv[i][e] = (xv[i][e] - mu) * rs;   /* xhat (unused past nvec: g is zero there) */
                aw[i][e] += gv[i][e] * xv[i][e];
                ab[i][e] += gv[i][e];
            }
        bt__k_ln_row_gx<T, NV, RMS>(gv, xv, gx ? gx + row * C : NULL, gx_add, w, nvec, t, S, C, rs, bt__k_block_sum{sh});
        if (pr)   /* the sums of gx's fp32 values before their rounding to T (pr implies gx) */
#pragma unroll
            for (int i = 0; i < NV; i++)
#pragma unroll
                for (int e = 0; e < VE; e++) ar[i][e] += xv[i][e];
    }
#pragma unroll
    for (int i = 0; i < NV; i++) {
        int c = t + S * i;
        if (c >= nvec) continue;
#pragma unroll
        for (int e = 0; e < VE; e++) {
            int64_t j = (int64_t)blockIdx.x * C + c * VE + e;
            if (pw) { pw[j] = aw[i][e]; pb[j] = ab[i][e]; }
            if (pr) pr[j] = ar[i][e];
        }
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
template <typename T, int RMS>
__global__ void bt__k_layernorm_kernel(T *out, float *mean, float *rstd, const T *x, const T *w, const T *b,
                                       int64_t rows, int64_t C, float eps) {
    __shared__ float sh[32];
    BT__K_ROW_LOOP(row, rows) {
        const T *xr = x + row * C;
        T *orow = out + row * C;
        float acc = 0.f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) acc += bt__k_tof(xr[j]);
        float mu = RMS ? 0.f : bt__k_rsum(acc, sh) / (float)C;
        acc = 0.f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) { float d = bt__k_tof(xr[j]) - mu; acc += d * d; }
        float rs = 1.f / sqrtf(bt__k_rsum(acc, sh) / (float)C + eps);
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float v = (bt__k_tof(xr[j]) - mu) * rs;
            if (RMS) v = bt__k_tof(bt__k_from<T>(v));   /* transformers' cast back before the weight */
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
template <typename T, int RMS>
__global__ void bt__k_layernorm_bwd_gx(T *gx, int gx_add, const T *g, const T *x, const T *w, const float *mean,
                                       const float *rstd, int64_t rows, int64_t C) {
    __shared__ float sh[32];
    BT__K_ROW_LOOP(row, rows) {
        const T *gr = g + row * C, *xr = x + row * C;
        float mu = RMS ? 0.f : mean[row], rs = rstd[row], a = 0.f, bb = 0.f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float wg = bt__k_tof(gr[j]) * (w ? bt__k_tof(w[j]) : 1.f);
            a += wg; bb += wg * (bt__k_tof(xr[j]) - mu) * rs;
        }
        a = RMS ? 0.f : bt__k_rsum(a, sh) / (float)C;
        bb = bt__k_rsum(bb, sh) / (float)C;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float wg = bt__k_tof(gr[j]) * (w ? bt__k_tof(w[j]) : 1.f), xh = (bt__k_tof(xr[j]) - mu) * rs;
            float d = rs * (wg - a - xh * bb);
            gx[row * C + j] = bt__k_from<T>(gx_add ? bt__k_tof(gx[row * C + j]) + d : d);
        }
    }
}
template <typename T, int RMS>
__global__ void bt__k_layernorm_bwd_wb(float *pw, float *pb, const T *g, const T *x, const float *mean, const float *rstd,
                                       int64_t rows, int64_t C, int64_t chunk) {
    __shared__ float sw[8][33], sb[8][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t c = blockIdx.x * (int64_t)32 + tx, r0 = blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    float aw = 0.f, ab = 0.f;
    if (c < C)
        for (int64_t r = r0 + ty; r < r1; r += 8) {
            float gv = bt__k_tof(g[r * C + c]);
            aw += gv * (bt__k_tof(x[r * C + c]) - (RMS ? 0.f : mean[r])) * rstd[r];
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
/* the launchers of layernorm (RMS 0) and RMSNorm (RMS 1: mean and b NULL, gb NULL) */
template <int RMS>
static void bt__k_norm(bt_dtype dt, void *out, float *mean, float *rstd, const void *x, const void *w, const void *b,
                       int64_t rows, int64_t C, float eps, cudaStream_t s) {
    if (rows <= 0 || C <= 0) return;
    dim3 blk; unsigned grid;
    bt__k_rowcfg(rows, C, &blk, &grid);
    BT__K_DISPATCH3(dt, "bt_k_layernorm", {
        if (bt__k_rowfast(C, sizeof(T), out, x, w ? w : x, b ? b : x)) {
            int nv = bt__k_pick_nv(C / (int64_t)(16 / sizeof(T)));
            BT__K_NV_DISPATCH(nv, bt__k_layernorm_warp<T, NV, RMS><<<bt__k_warprows_grid(rows), 256, 0, s>>>(
                                      (T *)out, mean, rstd, (const T *)x, (const T *)w, (const T *)b, rows, (int)C, eps))
        } else if (bt__k_browfast(C, sizeof(T), out, x, w ? w : x, b ? b : x)) {
            int64_t g = rows, cap = (int64_t)bt__k_cur()->sm_count * 16;
            bt__k_layernorm_brow<T, RMS><<<(unsigned)(g < cap ? g : cap), bt__k_brow_threads(C / (int64_t)(16 / sizeof(T))), 0, s>>>(
                (T *)out, mean, rstd, (const T *)x, (const T *)w, (const T *)b, rows, (int)C, eps);
        } else {
            bt__k_layernorm_kernel<T, RMS><<<grid, blk, 0, s>>>((T *)out, mean, rstd, (const T *)x, (const T *)w, (const T *)b,
                                                           rows, C, eps);
        }
    })
    BT__K_LAUNCHED("bt_k_layernorm");
}
BTDEF void bt_k_layernorm(bt_dtype dt, void *out, float *mean, float *rstd, const void *x, const void *w, const void *b,
                          int64_t rows, int64_t C, float eps, cudaStream_t s) {
    bt__k_norm<0>(dt, out, mean, rstd, x, w, b, rows, C, eps, s);
}
BTDEF void bt_k_rmsnorm(bt_dtype dt, void *out, float *rstd, const void *x, const void *w, int64_t rows, int64_t C, float eps,
                        cudaStream_t s) {
    bt__k_norm<1>(dt, out, NULL, rstd, x, w, NULL, rows, C, eps, s);
}
template <int RMS>
static void bt__k_norm_backward(bt_dtype dt, void *gx, int gx_add, void *gw, void *gb, float *gx_colsum, const void *gout,
                                const void *x, const void *w, const float *mean, const float *rstd, int64_t rows, int64_t C,
                                cudaStream_t s) {
    if (rows <= 0 || C <= 0) return;
    if (gx_colsum && !gx) bt_error("bt_k_layernorm_backward: gx_colsum without gx");
    dim3 blk; unsigned grid;
    bt__k_rowcfg(rows, C, &blk, &grid);
    int64_t sms = bt__k_cur()->sm_count, cb = (C + 31) / 32;
    BT__K_DISPATCH3(dt, "bt_k_layernorm_backward", {
        int warp = bt__k_rowfast(C, sizeof(T), gx ? gx : gout, gout, x, w ? w : x);
        if (warp || bt__k_browfast(C, sizeof(T), gx ? gx : gout, gout, x, w ? w : x)) {
            /* one pass: gx and the block partials of gw, gb (and of gx's column sums); then their
               fixed-order sum. A warp a row (8 rows a block, 3 blocks an SM) or a block a row. */
            unsigned th = warp ? 256 : bt__k_brow_threads(C / (int64_t)(16 / sizeof(T)));
            int64_t nblk = warp ? (rows + 7) / 8 : rows, cap = warp ? 3 * sms : sms * (th >= 512 ? 1 : 512 / th);   /* ~110 registers a thread: what stays resident */
            if (nblk > cap) nblk = cap;
            int parts = (gw || gb ? 2 : 0) + (gx_colsum ? 1 : 0);
            float *scr = parts ? (float *)bt__k_scratch((size_t)(parts * nblk * C) * sizeof(float), s) : NULL;
            float *pw = gw || gb ? scr : NULL, *pb = pw ? pw + nblk * C : NULL, *pr = gx_colsum ? scr + (parts - 1) * nblk * C : NULL;
            if (warp) {
                size_t shb = 0;
                int nv = bt__k_pick_nv(C / (int64_t)(16 / sizeof(T)));
                BT__K_NV_DISPATCH(nv, {
                    if (parts) shb = (size_t)(pr ? 24 : 16) * NV * (16 / sizeof(T)) * 32 * sizeof(float);   /* 8 warps a part */
                    BT__K_CUDA(cudaFuncSetAttribute(bt__k_layernorm_bwd_warp<T, NV, RMS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    (int)shb), "bt_k_layernorm_backward");
                    bt__k_layernorm_bwd_warp<T, NV, RMS><<<(unsigned)nblk, th, shb, s>>>((T *)gx, gx_add, pw, pb, pr, (const T *)gout,
                                                                                 (const T *)x, (const T *)w, mean, rstd, rows, (int)C);
                })
            } else {
                bt__k_layernorm_bwd_brow<T, RMS><<<(unsigned)nblk, th, 0, s>>>((T *)gx, gx_add, pw, pb, pr, (const T *)gout,
                                                                             (const T *)x, (const T *)w, mean, rstd, rows, (int)C);
            }
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
                bt__k_layernorm_bwd_gx<T, RMS><<<grid, blk, 0, s>>>((T *)gx, gx_add, (const T *)gout, (const T *)x, (const T *)w, mean,
                                                               rstd, rows, C);
                BT__K_LAUNCHED("bt_k_layernorm_backward");
            }
            if (gx_colsum) {   /* general shapes: a pass of its own over the gx written */
                BT__K_CUDA(cudaMemsetAsync(gx_colsum, 0, (size_t)C * sizeof(float), s), "bt_k_layernorm_backward");
                bt_k_sum_rows_acc(dt, gx_colsum, gx, rows, C, s);
            }
            if (gw || gb) {
                float *pw = (float *)bt__k_scratch((size_t)(2 * splits * C) * sizeof(float), s), *pb = pw + splits * C;
                bt__k_layernorm_bwd_wb<T, RMS><<<dim3((unsigned)cb, (unsigned)splits), dim3(32, 8), 0, s>>>(
                    pw, pb, (const T *)gout, (const T *)x, mean, rstd, rows, C, chunk);
                BT__K_LAUNCHED("bt_k_layernorm_backward");
                bt__k_layernorm_bwd_add<T><<<bt__k_blocks(C, 256), 256, 0, s>>>((T *)gw, (T *)gb, pw, pb, (int)splits, C);
                BT__K_LAUNCHED("bt_k_layernorm_backward");
                bt_free(pw);
            }
        }
    })
}
BTDEF void bt_k_layernorm_backward(bt_dtype dt, void *gx, int gx_add, void *gw, void *gb, float *gx_colsum, const void *gout,
                                   const void *x, const void *w, const float *mean, const float *rstd, int64_t rows, int64_t C,
                                   cudaStream_t s) {
    bt__k_norm_backward<0>(dt, gx, gx_add, gw, gb, gx_colsum, gout, x, w, mean, rstd, rows, C, s);
}
BTDEF void bt_k_rmsnorm_backward(bt_dtype dt, void *gx, int gx_add, void *gw, float *gx_colsum, const void *gout, const void *x,
                                 const void *w, const float *rstd, int64_t rows, int64_t C, cudaStream_t s) {
    bt__k_norm_backward<1>(dt, gx, gx_add, gw, NULL, gx_colsum, gout, x, w, NULL, rstd, rows, C, s);
}

/* ---- SwiGLU on x [rows, 2F], gate then up: out = round_T(silu(a)) u -----------------------------------
   Elementwise: per output element 2 reads and 1 write forward, 3 reads and 2 writes backward (both
   halves of gx from one thread), 16-byte vectors when F is a multiple of the vector and the pointers
   allow (the gate and up vectors of one thread are then aligned too), else one element a thread.
   Math in fp32 (f64 for f64). */
template <typename T, int VE> __device__ __forceinline__ void bt__k_ldv(T *v, const T *p) {
    if (VE > 1) bt__k_ld16(v, p); else v[0] = p[0];
}
template <typename T, int VE> __device__ __forceinline__ void bt__k_stv(T *p, const T *v) {
    if (VE > 1) bt__k_st16(p, v); else p[0] = v[0];
}
/* SwiGLU's element math, shared with the FP8 casts that fold it in (bt_fp8.cuh): y = silu(a), rounded
   to T, times u; and with s = sigmoid(a) the gradients ga = g u s (1 + a (1 - s)), gu = g a s */
template <typename T> __device__ __forceinline__ T bt__k_swiglu_f(T a, T u) {
    typedef typename bt__k_acc<T>::t A;
    A av = bt__k_tof(a);
    return bt__k_from<T>(bt__k_tof(bt__k_from<T>(av / ((A)1 + bt_m_exp(-av)))) * bt__k_tof(u));
}
template <typename T> __device__ __forceinline__ void bt__k_swiglu_grad_f(T g, T a, T u, T *ga, T *gu) {
    typedef typename bt__k_acc<T>::t A;
    A av = bt__k_tof(a), uv = bt__k_tof(u), gv = bt__k_tof(g);
    A sg = (A)1 / ((A)1 + bt_m_exp(-av));
    *ga = bt__k_from<T>(gv * uv * sg * ((A)1 + av * ((A)1 - sg)));
    *gu = bt__k_from<T>(gv * av * sg);
}
template <typename T, int VE> __global__ void bt__k_swiglu_kernel(T *out, const T *x, int64_t rows, int64_t F) {
    int64_t fv = F / VE, n = rows * fv;
    for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < n; v += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = v / fv, c = (v - r * fv) * VE;
        T a[VE], u[VE], o[VE];
        bt__k_ldv<T, VE>(a, x + r * 2 * F + c);
        bt__k_ldv<T, VE>(u, x + r * 2 * F + F + c);
#pragma unroll
        for (int e = 0; e < VE; e++) o[e] = bt__k_swiglu_f<T>(a[e], u[e]);
        bt__k_stv<T, VE>(out + r * F + c, o);
    }
}
template <typename T, int VE> __global__ void bt__k_swiglu_bwd_kernel(T *gx, const T *g, const T *x, int64_t rows, int64_t F) {
    int64_t fv = F / VE, n = rows * fv;
    for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < n; v += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = v / fv, c = (v - r * fv) * VE;
        T a[VE], u[VE], gg[VE];
        bt__k_ldv<T, VE>(a, x + r * 2 * F + c);
        bt__k_ldv<T, VE>(u, x + r * 2 * F + F + c);
        bt__k_ldv<T, VE>(gg, g + r * F + c);
#pragma unroll
        for (int e = 0; e < VE; e++) bt__k_swiglu_grad_f<T>(gg[e], a[e], u[e], &a[e], &u[e]);   /* d/d gate, d/d up */
        bt__k_stv<T, VE>(gx + r * 2 * F + c, a);
        bt__k_stv<T, VE>(gx + r * 2 * F + F + c, u);
    }
}
BTDEF void bt_k_swiglu(bt_dtype dt, void *out, const void *x, int64_t rows, int64_t F, cudaStream_t s) {
    if (rows <= 0 || F <= 0) return;
    BT__K_DISPATCH4(dt, "bt_k_swiglu", {
        const int VE = 16 / sizeof(T);
        if (F % VE == 0 && bt__k_aligned16(out) && bt__k_aligned16(x))
            bt__k_swiglu_kernel<T, VE><<<bt__k_blocks(rows * (F / VE), 256), 256, 0, s>>>((T *)out, (const T *)x, rows, F);
        else bt__k_swiglu_kernel<T, 1><<<bt__k_blocks(rows * F, 256), 256, 0, s>>>((T *)out, (const T *)x, rows, F);
    })
    BT__K_LAUNCHED("bt_k_swiglu");
}
BTDEF void bt_k_swiglu_backward(bt_dtype dt, void *gx, const void *gout, const void *x, int64_t rows, int64_t F, cudaStream_t s) {
    if (rows <= 0 || F <= 0) return;
    BT__K_DISPATCH4(dt, "bt_k_swiglu_backward", {
        const int VE = 16 / sizeof(T);
        if (F % VE == 0 && bt__k_aligned16(gx) && bt__k_aligned16(gout) && bt__k_aligned16(x))
            bt__k_swiglu_bwd_kernel<T, VE><<<bt__k_blocks(rows * (F / VE), 256), 256, 0, s>>>((T *)gx, (const T *)gout, (const T *)x,
                                                                                             rows, F);
        else bt__k_swiglu_bwd_kernel<T, 1><<<bt__k_blocks(rows * F, 256), 256, 0, s>>>((T *)gx, (const T *)gout, (const T *)x, rows, F);
    })
    BT__K_LAUNCHED("bt_k_swiglu_backward");
}

/* ---- RoPE on x [B, T, H, D] into out (strides on B, T, H; D contiguous) --------------------------------
   One thread per (b, t, i < D/2): its angle a = float(pos0 + t) inv_freq[i] (fp32, as transformers),
   one sincos (full-range fp32; double for f64), then the pair (i, i + D/2) of each of the first Hr
   heads rotated by it, of the others copied: x read once, out written once (a thread reads its pair
   before writing it: in place is safe); consecutive threads touch consecutive i, so each head's
   half-rows are coalesced, in 16-byte vectors of consecutive i where alignment allows (2 bytes a
   load ran at 48% of a copy's bandwidth on an H200). inv_freq travels by value (__grid_constant__: read in place from
   the parameter bank, no per-thread copy). */
typedef struct { float f[256]; } bt__k_rope_freqs;
__device__ __forceinline__ void bt__k_sincos(float a, float *sn, float *cs) { sincosf(a, sn, cs); }
__device__ __forceinline__ void bt__k_sincos(float a, double *sn, double *cs) { sincos((double)a, sn, cs); }
/* VW consecutive i a thread (16-byte loads and stores when the pointers, strides and D/2 allow; else 1) */
template <typename T, int VW>
__global__ void bt__k_rope_kernel(T *out, int64_t ob, int64_t ot, int64_t oh, const T *x, int64_t sb, int64_t st, int64_t sh,
                                  int64_t Tn, int64_t H, int64_t Hr, int half, int64_t n, int64_t pos0, int sign,
                                  const __grid_constant__ bt__k_rope_freqs fr) {
    typedef typename bt__k_acc<T>::t A;
    struct alignas(sizeof(T) * VW) vec { T e[VW]; };
    const int nv = half / VW;   /* vectors a half-row */
    for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < n; v += (int64_t)gridDim.x * blockDim.x) {
        int64_t bt = v / nv, b = bt / Tn, t = bt - b * Tn;
        int i = (int)(v - bt * nv) * VW;
        A sn[VW], cs[VW];
#pragma unroll
        for (int e = 0; e < VW; e++) {
            bt__k_sincos((float)(pos0 + t) * fr.f[i + e], &sn[e], &cs[e]);
            if (sign < 0) sn[e] = -sn[e];
        }
        const T *xr = x + b * sb + t * st + i;
        T *orow = out + b * ob + t * ot + i;
        for (int64_t h = 0; h < H; h++) {
            vec a = *(const vec *)(xr + h * sh), c = *(const vec *)(xr + h * sh + half);
            if (h < Hr) {
#pragma unroll
                for (int e = 0; e < VW; e++) {
                    A x1 = bt__k_tof(a.e[e]), x2 = bt__k_tof(c.e[e]);
                    a.e[e] = bt__k_from<T>(x1 * cs[e] - x2 * sn[e]);
                    c.e[e] = bt__k_from<T>(x2 * cs[e] + x1 * sn[e]);
                }
            }
            *(vec *)(orow + h * oh) = a;
            *(vec *)(orow + h * oh + half) = c;
        }
    }
}
BTDEF void bt_k_rope(bt_dtype dt, void *out, const int64_t *os, const void *x, const int64_t *xs, int64_t B, int64_t Tn, int64_t H,
                     int64_t Hr, int64_t D, int64_t pos0, const float *inv_freq, int sign, cudaStream_t s) {
    int64_t half = D / 2;
    if (B * Tn * half <= 0 || H <= 0) return;
    if (D % 2 || half > 256) bt_error("bt_k_rope: the head dim D = %lld must be even and at most 512", (long long)D);
    bt__k_rope_freqs fr;
    memset(&fr, 0, sizeof fr);
    memcpy(fr.f, inv_freq, (size_t)half * sizeof(float));
    const int64_t es = (int64_t)bt_dtype_size(dt), vw = 16 / es;
    int vec = half % vw == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)x % 16 == 0;
    for (int j = 0; j < 3; j++) vec = vec && os[j] % vw == 0 && xs[j] % vw == 0;
    BT__K_DISPATCH4(dt, "bt_k_rope", {
        if (vec) {
            int64_t n = B * Tn * (half / (16 / (int64_t)sizeof(T)));
            bt__k_rope_kernel<T, 16 / sizeof(T)><<<bt__k_blocks(n, 256), 256, 0, s>>>((T *)out, os[0], os[1], os[2], (const T *)x, xs[0],
                                                                                      xs[1], xs[2], Tn, H, Hr, (int)half, n, pos0, sign, fr);
        } else {
            int64_t n = B * Tn * half;
            bt__k_rope_kernel<T, 1><<<bt__k_blocks(n, 256), 256, 0, s>>>((T *)out, os[0], os[1], os[2], (const T *)x, xs[0], xs[1], xs[2],
                                                                         Tn, H, Hr, (int)half, n, pos0, sign, fr);
        }
    })
    BT__K_LAUNCHED("bt_k_rope");
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
   written. Measured on an H100 (docs/history/results-journal.md): the element path, not the memory, was the limit;
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
/* The gradient's writer (W below): put(xr, row, c, a) stores the row's vector c of VE values a;
   start() runs first in each thread, done() once the thread has put all of its vectors (every thread
   of the block reaches both). This one writes them in place over the logits; bt_fp8.cuh's
   bt__k_xf_fp8 writes their FP8 bytes. */
template <typename T> struct bt__k_xf_inplace {
    void shift(int64_t) {}                            /* the host's: the launch starts at row r0 */
    __device__ __forceinline__ void start() {}
    __device__ __forceinline__ void put(T *xr, int64_t, int64_t c, const T *a) { bt__k_st16(xr + c * (16 / (int)sizeof(T)), a); }
    __device__ __forceinline__ void done() {}
};
/* the gradient of the row's vector c (below V / VE, staged), short path */
template <typename T, typename W>
__device__ __forceinline__ void bt__k_xf_grad_fast(W &w, T *xr, int64_t row, int64_t c, const uint4 *staged, float gv, float nls) {
    const int VE = 16 / sizeof(T);
    T a[VE];
    memcpy(a, staged, 16);
#pragma unroll
    for (int e = 0; e < VE; e++) a[e] = bt__k_from<T>(gv * bt__k_ex2(fmaf(bt__k_tof(a[e]), 1.4426950408889634f, nls)));
    w.put(xr, row, c, a);
}
/* checked path: the vector holding the target (its owner writes the loss), the one across V, and
   the padding past V (staged NULL, written 0) */
template <typename T, typename W>
__device__ __noinline__ void bt__k_xf_grad_edge(W &w, T *xr, int64_t row, int64_t c, const uint4 *staged, int64_t V, int32_t t, int scored,
                                                float gv, float ls, float nls, float *loss) {
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
    w.put(xr, row, c, a);
}
template <typename T, typename W>
__global__ void __launch_bounds__(BT__K_XF_THREADS, 2) bt__k_xent_fused_kernel(float *losses, float *lse, T *logits, const int32_t *tg,
                                                                             const float *gloss, int64_t V, int64_t Vp, int ignore,
                                                                             int *bad, W w) {
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
    w.start();
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
        if (c < nfull && c != ct) bt__k_xf_grad_fast(w, xr, row, c, &bt__k_xf_row[c], gv, nls);
        else bt__k_xf_grad_edge(w, xr, row, c, c < nc ? &bt__k_xf_row[c] : NULL, V, t, scored, gv, ls, nls, losses + row);
    }
    w.done();
}
/* the fused kernel over N rows with writer w when it can run here (rows aligned, a row fits the shared
   memory): 1 launched, 0 not */
template <typename T, typename W>
static int bt__k_xf_launch(float *losses, float *lse, T *logits, const int32_t *targets, const float *gloss, int64_t N, int64_t V, int64_t Vp,
                           int ignore_index, int *bad, W w, cudaStream_t s) {
    const int64_t VE = 16 / (int64_t)sizeof(T);
    int optin = 0;
    BT__K_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, bt__k_device()), "bt_k_cross_entropy_fused");
    size_t smem = (size_t)((V + VE - 1) / VE) * 16;
    int64_t nch = ((V + VE - 1) / VE + BT__K_XF_U * BT__K_XF_THREADS - 1) / (BT__K_XF_U * BT__K_XF_THREADS);   /* chunks a row */
    if (Vp % VE || !bt__k_aligned16(logits) || smem + 512 > (size_t)optin || nch > BT__K_XF_CHUNKS) return 0;
    BT__K_CUDA(cudaFuncSetAttribute(bt__k_xent_fused_kernel<T, W>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
               "bt_k_cross_entropy_fused");
    const int64_t most = (int64_t)1 << 30;   /* rows a launch (a block each) */
    for (int64_t r0 = 0; r0 < N; r0 += most) {
        unsigned nb = (unsigned)(N - r0 < most ? N - r0 : most);
        W wr = w;
        wr.shift(r0);
        bt__k_xent_fused_kernel<T, W><<<nb, BT__K_XF_THREADS, smem, s>>>(losses + r0, lse ? lse + r0 : NULL, logits + r0 * Vp, targets + r0,
                                                                         gloss + r0, V, Vp, ignore_index, bad, wr);
    }
    return 1;
}
BTDEF void bt_k_cross_entropy_fused(bt_dtype dt, float *losses, float *lse, void *logits, const int32_t *targets,
                                    const float *gloss, int64_t N, int64_t V, int64_t Vp, int ignore_index, int *bad,
                                    cudaStream_t s) {
    if (N <= 0) return;
    if (V <= 0 || V > Vp) bt_error("bt_k_cross_entropy_fused: V = %lld, Vp = %lld (need 0 < V <= Vp)", (long long)V, (long long)Vp);
    int done = 0;
    BT__K_DISPATCH3(dt, "bt_k_cross_entropy_fused", {
        done = bt__k_xf_launch<T>(losses, lse, (T *)logits, targets, gloss, N, V, Vp, ignore_index, bad, bt__k_xf_inplace<T>(), s);
    })
    if (done) { BT__K_LAUNCHED("bt_k_cross_entropy_fused"); return; }
    float *tmp = lse ? NULL : (float *)bt__k_scratch((size_t)N * sizeof(float), s);   /* the backward needs lse */
    bt_k_cross_entropy(dt, losses, lse ? lse : tmp, logits, targets, N, V, Vp, ignore_index, bad, s);
    bt_k_cross_entropy_backward(dt, logits, logits, lse ? lse : tmp, targets, gloss, N, V, Vp, ignore_index, s);
    bt_free(tmp);
}

/* ---- 9. attention: bt_attention.cuh (its kernels use the helpers above) ------------------------ */
#include "bt_attention.cuh"

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
static cudaDataType_t bt__k_cuda_dt(bt_dtype dt) {
    switch (dt) {
    case BT_F64: return CUDA_R_64F;
    case BT_BF16: return CUDA_R_16BF;
    case BT_F16: return CUDA_R_16F;
    case BT_F8E4M3: return CUDA_R_8F_E4M3;
    case BT_F8E5M2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;
    }
}
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
/* a heuristic query's preference: the workspace and the operands' alignments in bytes (al: our A, B,
   C; cuBLASLt's A is our B and vice versa, D is C) */
static cublasLtMatmulPreference_t bt__k_mm_pref(const uint32_t *al, const char *op) {
    cublasLtMatmulPreference_t pref;
    BT__K_BLAS(cublasLtMatmulPreferenceCreate(&pref), op);
    uint64_t wsb = BT__K_WS_BYTES;
    BT__K_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb), op);
    BT__K_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[1], sizeof al[1]), op);
    BT__K_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[0], sizeof al[0]), op);
    BT__K_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]), op);
    BT__K_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2]), op);
    return pref;
}
/* the plan takes the heuristic's nres candidates (the first as its algorithm): 1; none: the plan's
   descriptors destroyed (bt__k_mm_plan_drop), 0 */
static int bt__k_mm_keep(bt__k_mm_plan *p, const cublasLtMatmulHeuristicResult_t *res, int nres) {
    p->used = 1;
    if (nres <= 0) { bt__k_mm_plan_drop(p); return 0; }
    p->algo = res[0].algo;
    p->n_cand = 0;
    for (int i = 0; i < nres; i++) p->cand[p->n_cand++] = res[i].algo;
    return 1;
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
    cublasLtMatmulPreference_t pref = bt__k_mm_pref(al, op);
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
    return bt__k_mm_keep(p, res, nres);
}

/* Autotuning: the heuristic's order is a guess; on a shape's first use, time each candidate twice
   after a warm-up run (into C when beta = 0, else into a scratch copy's place, so C's data survive)
   and keep the fastest. One host sync per new shape, none in the steady state. Off
   (bt_k_matmul_set_autotune(0)): the heuristic's first choice, the same algorithm, so the same bits,
   on every run. Choices made earlier (another run's, saved with
   bt_k_matmul_tuning_export) can be loaded: a plan whose key was loaded takes that algorithm. */
static int bt__k_autotune = 1;
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
    if (p->n_cand < 2 || !bt__k_autotune) { p->n_cand = 0; return; }
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
        if (!ok) continue;   /* a candidate that fails is not kept, nor timed (its first run failed: e0 was never recorded) */
        BT__K_CUDA(cudaEventRecord(e1, s), "bt_k_matmul (autotune)");
        BT__K_CUDA(cudaEventSynchronize(e1), "bt_k_matmul (autotune)");
        float ms = 0;
        BT__K_CUDA(cudaEventElapsedTime(&ms, e0, e1), "bt_k_matmul (autotune)");
        if (!have || ms < best) { best = ms; p->algo = p->cand[i]; have = 1; }
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
/* the plan of `key` in the device's table (open addressing, 8 probes): the one made before (*fresh
   0), else a free slot or, when the 8 are taken, the first one emptied (*fresh 1: the caller makes
   the plan there and stores the key) */
static bt__k_mm_plan *bt__k_mm_slot(bt__k_ctx *c, const int64_t *key, int *fresh) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 18; i++) { h ^= (uint64_t)key[i]; h *= 1099511628211ull; h ^= h >> 29; }
    *fresh = 0;
    for (int i = 0; i < 8; i++) {
        bt__k_mm_plan *q = &c->mm[(h + i) % BT__K_MM_SLOTS];
        if (q->used && !memcmp(q->key, key, sizeof q->key)) return q;
    }
    *fresh = 1;
    for (int i = 0; i < 8; i++) {
        bt__k_mm_plan *q = &c->mm[(h + i) % BT__K_MM_SLOTS];
        if (!q->used) return q;
    }
    bt__k_mm_plan *p = &c->mm[h % BT__K_MM_SLOTS];
    bt__k_mm_plan_drop(p);
    return p;
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
    int fresh = 0;
    bt__k_mm_plan *p = bt__k_mm_slot(c, key, &fresh);
    if (fresh) {
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
   writes p, m, v: 24 + sizeof(g) bytes per parameter (+ 2 with the bf16 copy, against the 6 a
   separate cast would move; in halves the same 24 + sizeof(g), the copy being p's high half);
   p, m, v move as float4 when aligned, the copy and the low halves as 8 bytes. The
   decay-run table is read from L1: a thread's chunks go up in index (grid-stride), so it walks the
   table forward once. */
template <typename G>
__global__ void bt__k_adamw_kernel(float *p, const G *g, float *m, float *v, int64_t n, float lr, float b1, float b2,
                                   float eps, float wd0, const bt_k_decay_run *runs, int64_t run_base, float bc1, float bc2,
                                   const float *gscale, uint16_t *pb, uint16_t *pl, int vec) {
    float sc = gscale ? *gscale : 1.f;
    int64_t nc = (n + 3) / 4;
    int r = 0;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < nc; c += (int64_t)gridDim.x * blockDim.x) {
        int64_t i0 = c * 4;
        float pp[4], mm[4], vv[4];
        int cnt = n - i0 < 4 ? (int)(n - i0) : 4, full = vec && cnt == 4;
        if (full) {
            float4 b = *reinterpret_cast<const float4 *>(m + i0), d = *reinterpret_cast<const float4 *>(v + i0);
            if (pl) {
                uint2 hh = *reinterpret_cast<const uint2 *>(pb + i0), ll = *reinterpret_cast<const uint2 *>(pl + i0);
                const uint16_t *h = (const uint16_t *)&hh, *l = (const uint16_t *)&ll;
#pragma unroll
                for (int e = 0; e < 4; e++) pp[e] = bt__f32_join16(h[e], l[e]);
            } else {
                float4 a = *reinterpret_cast<const float4 *>(p + i0);
                pp[0] = a.x; pp[1] = a.y; pp[2] = a.z; pp[3] = a.w;
            }
            mm[0] = b.x; mm[1] = b.y; mm[2] = b.z; mm[3] = b.w;
            vv[0] = d.x; vv[1] = d.y; vv[2] = d.z; vv[3] = d.w;
        } else {
            for (int e = 0; e < 4; e++) {
                pp[e] = e >= cnt ? 0.f : pl ? bt__f32_join16(pb[i0 + e], pl[i0 + e]) : p[i0 + e];
                mm[e] = e < cnt ? m[i0 + e] : 0.f; vv[e] = e < cnt ? v[i0 + e] : 0.f;
            }
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float gi = e < cnt ? bt__k_tof(g[i0 + e]) * sc : 0.f, wd = wd0;
            if (runs) { while (run_base + i0 + e >= runs[r].end && e < cnt) r++; wd = runs[r].wd; }
            mm[e] = b1 * mm[e] + (1.f - b1) * gi;
            vv[e] = b2 * vv[e] + (1.f - b2) * gi * gi;
            pp[e] -= lr * ((mm[e] / bc1) / (sqrtf(vv[e] / bc2) + eps) + wd * pp[e]);
        }
        if (full) {
            if (!pl) *reinterpret_cast<float4 *>(p + i0) = make_float4(pp[0], pp[1], pp[2], pp[3]);
            *reinterpret_cast<float4 *>(m + i0) = make_float4(mm[0], mm[1], mm[2], mm[3]);
            *reinterpret_cast<float4 *>(v + i0) = make_float4(vv[0], vv[1], vv[2], vv[3]);
        } else {
            for (int e = 0; e < cnt; e++) { if (!pl) p[i0 + e] = pp[e]; m[i0 + e] = mm[e]; v[i0 + e] = vv[e]; }
        }
        if (pl) {
            if (full) {
                uint2 hh, ll;
                uint16_t *h = (uint16_t *)&hh, *l = (uint16_t *)&ll;
#pragma unroll
                for (int e = 0; e < 4; e++) { h[e] = bt__f32_hi16(pp[e]); l[e] = bt__f32_lo16(pp[e]); }
                *reinterpret_cast<uint2 *>(pb + i0) = hh;
                *reinterpret_cast<uint2 *>(pl + i0) = ll;
            } else {
                for (int e = 0; e < cnt; e++) { pb[i0 + e] = bt__f32_hi16(pp[e]); pl[i0 + e] = bt__f32_lo16(pp[e]); }
            }
        } else if (pb) {
            if (full) {
                uint2 o;
                uint16_t *h = (uint16_t *)&o;
#pragma unroll
                for (int e = 0; e < 4; e++) h[e] = bt__f32_to_bf16(pp[e]);
                *reinterpret_cast<uint2 *>(pb + i0) = o;
            } else {
                for (int e = 0; e < cnt; e++) pb[i0 + e] = bt__f32_to_bf16(pp[e]);
            }
        }
    }
}
BTDEF void bt_k_adamw(float *p, const void *g, bt_dtype gdt, float *m, float *v, int64_t n, float lr, float b1, float b2,
                      float eps, float wd, const bt_k_decay_run *runs, int nruns, int64_t run_base, int step, const float *grad_scale,
                      uint16_t *p_bf16, uint16_t *p_lo, cudaStream_t s) {
    if (n <= 0) return;
    if (step < 1) bt_error("bt_k_adamw: step %d (counts from 1)", step);
    if (runs && nruns < 1) bt_error("bt_k_adamw: %d decay runs", nruns);
    if (p_lo && !p_bf16) bt_error("bt_k_adamw: low halves without high ones");
    float bc1 = (float)(1.0 - pow((double)b1, (double)step)), bc2 = (float)(1.0 - pow((double)b2, (double)step));
    int vec = (p_lo || bt__k_aligned16(p)) && bt__k_aligned16(m) && bt__k_aligned16(v) && ((uintptr_t)p_bf16 % 8 == 0) &&
              ((uintptr_t)p_lo % 8 == 0);
    unsigned nb = bt__k_blocks((n + 3) / 4, 256);
    BT__K_DISPATCH3(gdt, "bt_k_adamw (grad)", {
        bt__k_adamw_kernel<T><<<nb, 256, 0, s>>>(p, (const T *)g, m, v, n, lr, b1, b2, eps, wd, runs, run_base, bc1, bc2, grad_scale, p_bf16,
                                                 p_lo, vec);
    })
    BT__K_LAUNCHED("bt_k_adamw");
}
__global__ void bt__k_f32_split_kernel(const float *x, uint16_t *hi, uint16_t *lo, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float f = x[i];
        hi[i] = bt__f32_hi16(f); lo[i] = bt__f32_lo16(f);
    }
}
__global__ void bt__k_f32_join_kernel(const uint16_t *hi, const uint16_t *lo, float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = bt__f32_join16(hi[i], lo[i]);
}
BTDEF void bt_k_f32_split(const float *x, uint16_t *hi, uint16_t *lo, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    bt__k_f32_split_kernel<<<bt__k_blocks(n, 256), 256, 0, s>>>(x, hi, lo, n);
    BT__K_LAUNCHED("bt_k_f32_split");
}
BTDEF void bt_k_f32_join(const uint16_t *hi, const uint16_t *lo, float *x, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    bt__k_f32_join_kernel<<<bt__k_blocks(n, 256), 256, 0, s>>>(hi, lo, x, n);
    BT__K_LAUNCHED("bt_k_f32_join");
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
BTDEF void bt_k_add_f32_into(bt_dtype dt, void *dst, const float *src, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    BT__K_DISPATCH3(dt, "bt_k_add_f32_into", { bt__k_add_f32_into<T><<<bt__k_blocks(n, 256), 256, 0, s>>>((T *)dst, src, n); })
    BT__K_LAUNCHED("bt_k_add_f32_into");
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

/* ---- 13. FP8: bt_fp8.cuh (its kernels use the helpers above and section 10's plan cache) ---------- */
#include "bt_fp8.cuh"

#endif /* BT_KERNELS_IMPLEMENTATION_DONE */
#endif /* BT_KERNELS_IMPLEMENTATION */
