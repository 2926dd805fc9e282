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
    12. the tensor core's less common paths: strided-to-strided copy, max's backward scatter, a
        device-side count for the cross-entropy mean
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
/* Added to the v0.1 API: destroys every device's stream, handles and matmul cache and gives the
   cuBLASLt workspace back to bt_alloc; a later call of any bt_k_ function initializes again. */
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
/* The same over a flat buffer of several parameters in one launch: segment k covers elements
   [end[k-1], end[k]) (end[-1] = 0, end[n-1] = the total) with weight decay wd[k]. */
#define BT_K_MAX_SEGMENTS 48
typedef struct { int n; int64_t end[BT_K_MAX_SEGMENTS]; float wd[BT_K_MAX_SEGMENTS]; } bt_k_segments;
BTDEF void bt_k_adamw_segments(float *p, const void *g, bt_dtype gdt, float *m, float *v, void *p_lowp, bt_dtype lowp_dt,
                               const bt_k_segments *segs, float lr, float b1, float b2, float eps, int step,
                               const float *grad_scale, cudaStream_t s);

/* ---- 12. for the tensor core's less common paths ---- */
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
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <stdio.h>
#include <string.h>
#include <math.h>

/* ---- 1. context: stream, cuBLAS(Lt) handles, checks ------------------------------------------
   One record per device, made on first use: a non-blocking stream, a cuBLAS handle (attention's
   strided-batched products, which mix bf16 inputs with fp32 outputs), a cuBLASLt handle
   (bt_k_matmul) and one 32 MiB workspace from bt_alloc that both libraries share. Work on a
   device is issued from one host thread at a time (the matmul cache is not locked). */
#define BT__K_WS_BYTES ((size_t)32 << 20)
#define BT__K_MM_SLOTS 256                       /* matmul plan cache entries per device */
#define BT__K_ATTN_SCRATCH ((size_t)2 << 30)     /* attention scratch cap per call, bytes */

typedef struct {
    int used;
    int64_t key[18];
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    int epi_bias;                                 /* 1: the bias epilogue is in the plan */
} bt__k_mm_plan;

typedef struct {
    int init;
    cudaStream_t stream, user_stream;
    int has_user_stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *ws;
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

static const char *bt__k_dtname(bt_dtype dt) {
    static const char *names[] = {"f32", "f64", "bf16", "f16", "i32", "u16", "i64"};
    return (unsigned)dt < (unsigned)BT_NDTYPES ? names[dt] : "?";
}
static size_t bt__k_dtsize(bt_dtype dt) {
    static const size_t sizes[] = {4, 8, 2, 2, 4, 2, 8};
    return (unsigned)dt < (unsigned)BT_NDTYPES ? sizes[dt] : 0;
}

BTDEF int bt_k_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
    return n;
}

BTDEF void bt_k_init(int device) {
    if (device < 0 || device >= BT_MAX_GPUS || device >= bt_k_device_count())
        bt_error("bt_k_init: no CUDA device %d (%d present)", device, bt_k_device_count());
    bt__k_ctx *c = &bt__k_ctxs[device];
    if (c->init) return;
    int prev = 0;
    BT__K_CUDA(cudaGetDevice(&prev), "bt_k_init");
    BT__K_CUDA(cudaSetDevice(device), "bt_k_init");
    BT__K_CUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "bt_k_init");
    BT__K_CUDA(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, device), "bt_k_init");
    BT__K_BLAS(cublasCreate(&c->blas), "bt_k_init");
    BT__K_BLAS(cublasLtCreate(&c->lt), "bt_k_init");
    c->ws = bt_alloc(bt_cuda_device(device), BT__K_WS_BYTES, (void *)c->stream);
    c->has_user_stream = 0;
    memset(c->mm, 0, sizeof c->mm);
    c->init = 1;
    BT__K_CUDA(cudaSetDevice(prev), "bt_k_init");
}

static bt__k_ctx *bt__k_cur(void) {
    int d = 0;
    BT__K_CUDA(cudaGetDevice(&d), "bt_kernels");
    if (d < 0 || d >= BT_MAX_GPUS) bt_error("bt_kernels: device %d beyond BT_MAX_GPUS", d);
    if (!bt__k_ctxs[d].init) bt_k_init(d);
    return &bt__k_ctxs[d];
}
static int bt__k_device(void) { int d = 0; BT__K_CUDA(cudaGetDevice(&d), "bt_kernels"); return d; }

BTDEF cudaStream_t bt_k_stream(void) {
    bt__k_ctx *c = bt__k_cur();
    return c->has_user_stream ? c->user_stream : c->stream;
}
/* s == NULL gives the device its own stream back (use cudaStreamLegacy for the legacy default one) */
BTDEF void bt_k_set_stream(cudaStream_t s) {
    bt__k_ctx *c = bt__k_cur();
    c->user_stream = s; c->has_user_stream = s != NULL;
}
BTDEF void bt_k_synchronize(void) {
    BT__K_CUDA(cudaStreamSynchronize(bt_k_stream()), "bt_k_synchronize");
    BT__K_CUDA(cudaGetLastError(), "bt_k_synchronize");
}

static void bt__k_mm_plan_drop(bt__k_mm_plan *p) {
    if (!p->used) return;
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
        BT__K_CUDA(cudaStreamSynchronize(c->stream), "bt_k_shutdown");
        for (int i = 0; i < BT__K_MM_SLOTS; i++) bt__k_mm_plan_drop(&c->mm[i]);
        bt_free(c->ws);
        cublasLtDestroy(c->lt); cublasDestroy(c->blas);
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
__device__ __forceinline__ float bt__k_exp(float x) { return expf(x); }
__device__ __forceinline__ double bt__k_exp(double x) { return exp(x); }
__device__ __forceinline__ float bt__k_log(float x) { return logf(x); }
__device__ __forceinline__ double bt__k_log(double x) { return log(x); }
__device__ __forceinline__ float bt__k_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double bt__k_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float bt__k_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double bt__k_tanh(double x) { return tanh(x); }

/* 16-byte vector access: V = 16 / sizeof(T) elements; the caller checked the alignment */
template <typename T> __device__ __forceinline__ void bt__k_ld16(T *v, const T *p) {
    uint4 u = __ldg(reinterpret_cast<const uint4 *>(p)); memcpy(v, &u, 16);
}
template <typename T> __device__ __forceinline__ void bt__k_st16(T *p, const T *v) {
    uint4 u; memcpy(&u, v, 16); *reinterpret_cast<uint4 *>(p) = u;
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
    default: bt_error("%s: dtype %s not supported (f32, bf16, f16)", opname, bt__k_dtname(dt)); }
#define BT__K_DISPATCH4(dt, opname, ...) switch (dt) { \
    BT__K_CASE(BT_F32, float, __VA_ARGS__) BT__K_CASE(BT_BF16, __nv_bfloat16, __VA_ARGS__) \
    BT__K_CASE(BT_F16, __half, __VA_ARGS__) BT__K_CASE(BT_F64, double, __VA_ARGS__) \
    default: bt_error("%s: dtype %s not supported (f32, f64, bf16, f16)", opname, bt__k_dtname(dt)); }

/* ---- 2. copy, cast, fill, random ---------------------------------------------------------------
   Memory-bound: each element is read once (size of the source dtype) and written once (size of
   the destination). Loads and stores go through a runtime dtype switch in double, which is exact
   for every dtype here except i64 beyond 2^53; bf16/f16 are rounded from fp32, as on the CPU (same-dtype contiguous copies use cudaMemcpyAsync
   and never convert). The strided copy decodes an index per element (div/mod per dim, after
   merging dims that are contiguous with each other on the host). */
__device__ __forceinline__ double bt__k_ldd(int dt, const void *p, int64_t i) {
    switch (dt) {
    case BT_F32: return ((const float *)p)[i];
    case BT_F64: return ((const double *)p)[i];
    case BT_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case BT_F16: return __half2float(((const __half *)p)[i]);
    case BT_I32: return ((const int32_t *)p)[i];
    case BT_U16: return ((const uint16_t *)p)[i];
    case BT_I64: return (double)((const int64_t *)p)[i];
    }
    return 0;
}
__device__ __forceinline__ void bt__k_std(int dt, void *p, int64_t i, double v) {
    switch (dt) {
    case BT_F32: ((float *)p)[i] = (float)v; break;
    case BT_F64: ((double *)p)[i] = v; break;
    case BT_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;   /* via fp32, as the CPU */
    case BT_F16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case BT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case BT_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case BT_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    }
}
typedef struct { int ndim; int64_t shape[BT_MAX_DIMS], sa[BT_MAX_DIMS], sb[BT_MAX_DIMS]; } bt__k_geom;

__global__ void bt__k_cast_kernel(int dtd, void *dst, int dts, const void *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        bt__k_std(dtd, dst, i, bt__k_ldd(dts, src, i));
}
__global__ void bt__k_copy_strided_kernel(int dtd, void *dst, int dts, const void *src, bt__k_geom g, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, off = 0;
        for (int d = g.ndim - 1; d >= 0; d--) {
            int64_t q = rem / g.shape[d];
            off += (rem - q * g.shape[d]) * g.sa[d];
            rem = q;
        }
        bt__k_std(dtd, dst, i, bt__k_ldd(dts, src, off));
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
    if (!bt__k_dtsize(dt_dst) || !bt__k_dtsize(dt_src)) bt_error("bt_k_cast: bad dtype %d -> %d", (int)dt_src, (int)dt_dst);
    if (dt_dst == dt_src) {
        BT__K_CUDA(cudaMemcpyAsync(dst, src, (size_t)n * bt__k_dtsize(dt_dst), cudaMemcpyDeviceToDevice, s), "bt_k_cast");
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
        bt__k_std(dt, dst, i, v);
}
BTDEF void bt_k_fill(bt_dtype dt, void *dst, double value, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    if (!bt__k_dtsize(dt)) bt_error("bt_k_fill: bad dtype %d", (int)dt);
    if (value == 0.0 && !signbit(value)) {   /* +0 is all-zero bits in every dtype */
        BT__K_CUDA(cudaMemsetAsync(dst, 0, (size_t)n * bt__k_dtsize(dt), s), "bt_k_fill");
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
        bt__k_std(dt, dst, i, __dadd_rn(__dmul_rn(r, a), b));
    }
}
BTDEF void bt_k_uniform(bt_dtype dt, void *dst, int64_t n, uint64_t seed, uint64_t offset, double lo, double hi, cudaStream_t s) {
    if (n <= 0) return;
    if (!bt_dtype_is_float(dt)) bt_error("bt_k_uniform: dtype %s is not floating", bt__k_dtname(dt));
    bt__k_random_kernel<<<bt__k_blocks(n, 256), 256, 0, s>>>((int)dt, dst, n, seed, offset, hi - lo, lo, 0);
    BT__K_LAUNCHED("bt_k_uniform");
}
BTDEF void bt_k_normal(bt_dtype dt, void *dst, int64_t n, uint64_t seed, uint64_t offset, double mean, double std, cudaStream_t s) {
    if (n <= 0) return;
    if (!bt_dtype_is_float(dt)) bt_error("bt_k_normal: dtype %s is not floating", bt__k_dtname(dt));
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
template <int OP, typename A> __device__ __forceinline__ A bt__k_uop(A x) {
    switch (OP) {
    case BT_UOP_NEG: return -x;
    case BT_UOP_EXP: return bt__k_exp(x);
    case BT_UOP_LOG: return bt__k_log(x);
    case BT_UOP_SQRT: return bt__k_sqrt(x);
    case BT_UOP_TANH: return bt__k_tanh(x);
    case BT_UOP_RELU: return x > (A)0 ? x : (A)0;
    case BT_UOP_GELU: {
        const A k0 = (A)0.7978845608028654, k1 = (A)0.044715;
        return (A)0.5 * x * ((A)1 + bt__k_tanh(k0 * (x + k1 * x * x * x)));
    }
    case BT_UOP_SQUARE: return x * x;
    case BT_UOP_RECIP: return (A)1 / x;
    }
    return x;
}
/* f'(x) from x (FROMY == 0) or from y = f(x) (FROMY == 1: NEG, EXP, SQRT, TANH, RELU, RECIP) */
template <int OP, int FROMY, typename A> __device__ __forceinline__ A bt__k_uop_grad(A x) {
    switch (OP) {
    case BT_UOP_NEG: return (A)-1;
    case BT_UOP_EXP: return FROMY ? x : bt__k_exp(x);
    case BT_UOP_LOG: return (A)1 / x;
    case BT_UOP_SQRT: return FROMY ? (A)0.5 / x : (A)0.5 / bt__k_sqrt(x);
    case BT_UOP_TANH: { A t = FROMY ? x : bt__k_tanh(x); return (A)1 - t * t; }
    case BT_UOP_RELU: return x > (A)0 ? (A)1 : (A)0;
    case BT_UOP_GELU: {
        const A k0 = (A)0.7978845608028654, k1 = (A)0.044715;
        A x2 = x * x, t = bt__k_tanh(k0 * (x + k1 * x2 * x));
        return (A)0.5 * ((A)1 + t) + (A)0.5 * x * ((A)1 - t * t) * k0 * ((A)1 + (A)3 * k1 * x2);
    }
    case BT_UOP_SQUARE: return (A)2 * x;
    case BT_UOP_RECIP: return FROMY ? -x * x : (A)-1 / (x * x);
    }
    return (A)0;
}

/* The elementwise kernels share one loop shape: grid-stride over 16-byte vectors first when
   vec != 0 (V lanes unrolled in registers), then the scalar tail. */
template <typename T, int OP> __global__ void bt__k_unary_kernel(T *out, const T *x, int64_t n, int vec) {
    typedef typename bt__k_acc<T>::t A;
    const int V = 16 / sizeof(T);
    int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, st = (int64_t)gridDim.x * blockDim.x;
    int64_t nv = vec ? n / V : 0;
    for (int64_t c = tid; c < nv; c += st) {
        T a[V];
        bt__k_ld16(a, x + c * V);
#pragma unroll
        for (int e = 0; e < V; e++) a[e] = bt__k_from<T>(bt__k_uop<OP, A>(bt__k_tof(a[e])));
        bt__k_st16(out + c * V, a);
    }
    for (int64_t i = nv * V + tid; i < n; i += st) out[i] = bt__k_from<T>(bt__k_uop<OP, A>(bt__k_tof(x[i])));
}
template <typename T, int OP, int FROMY>
__global__ void bt__k_unary_bwd_kernel(T *gx, const T *g, const T *x, int64_t n, int vec) {
    typedef typename bt__k_acc<T>::t A;
    const int V = 16 / sizeof(T);
    int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, st = (int64_t)gridDim.x * blockDim.x;
    int64_t nv = vec ? n / V : 0;
    for (int64_t c = tid; c < nv; c += st) {
        T a[V], b[V];
        bt__k_ld16(a, x + c * V); bt__k_ld16(b, g + c * V);
#pragma unroll
        for (int e = 0; e < V; e++) a[e] = bt__k_from<T>(bt__k_tof(b[e]) * bt__k_uop_grad<OP, FROMY, A>(bt__k_tof(a[e])));
        bt__k_st16(gx + c * V, a);
    }
    for (int64_t i = nv * V + tid; i < n; i += st)
        gx[i] = bt__k_from<T>(bt__k_tof(g[i]) * bt__k_uop_grad<OP, FROMY, A>(bt__k_tof(x[i])));
}

#define BT__K_UOPS(X) X(BT_UOP_NEG) X(BT_UOP_EXP) X(BT_UOP_LOG) X(BT_UOP_SQRT) X(BT_UOP_TANH) \
    X(BT_UOP_RELU) X(BT_UOP_GELU) X(BT_UOP_SQUARE) X(BT_UOP_RECIP)

template <typename T>
static void bt__k_unary_t(bt_unary_op op, T *out, const T *x, int64_t n, int vec, cudaStream_t s) {
    const int V = 16 / sizeof(T);
    unsigned nb = bt__k_blocks(vec ? (n + V - 1) / V : n, 256);
    switch (op) {
#define BT__K_X(OPC) case OPC: bt__k_unary_kernel<T, OPC><<<nb, 256, 0, s>>>(out, x, n, vec); break;
    BT__K_UOPS(BT__K_X)
#undef BT__K_X
    default: bt_error("bt_k_unary: unknown op %d", (int)op);
    }
}
template <typename T>
static void bt__k_unary_bwd_t(bt_unary_op op, T *gx, const T *g, const T *in, int fromy, int64_t n, int vec, cudaStream_t s) {
    const int V = 16 / sizeof(T);
    unsigned nb = bt__k_blocks(vec ? (n + V - 1) / V : n, 256);
    switch (op) {
#define BT__K_X(OPC) case OPC: \
        if (fromy) bt__k_unary_bwd_kernel<T, OPC, 1><<<nb, 256, 0, s>>>(gx, g, in, n, vec); \
        else bt__k_unary_bwd_kernel<T, OPC, 0><<<nb, 256, 0, s>>>(gx, g, in, n, vec); \
        break;
    BT__K_UOPS(BT__K_X)
#undef BT__K_X
    default: bt_error("bt_k_unary_backward: unknown op %d", (int)op);
    }
}
BTDEF void bt_k_unary(bt_unary_op op, bt_dtype dt, void *out, const void *x, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    int vec = bt__k_aligned16(out) && bt__k_aligned16(x);
    BT__K_DISPATCH4(dt, "bt_k_unary", { bt__k_unary_t<T>(op, (T *)out, (const T *)x, n, vec, s); })
    BT__K_LAUNCHED("bt_k_unary");
}

BTDEF void bt_k_unary_backward(bt_unary_op op, bt_dtype dt, void *gx, const void *gout, const void *x, const void *y,
                               int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    int fromy = x == NULL;
    if (fromy && (!y || op == BT_UOP_LOG || op == BT_UOP_GELU || op == BT_UOP_SQUARE))
        bt_error("bt_k_unary_backward: op %d needs x (got x = NULL)", (int)op);
    const void *in = fromy ? y : x;
    int vec = bt__k_aligned16(gx) && bt__k_aligned16(gout) && bt__k_aligned16(in);
    BT__K_DISPATCH4(dt, "bt_k_unary_backward",
                    { bt__k_unary_bwd_t<T>(op, (T *)gx, (const T *)gout, (const T *)in, fromy, n, vec, s); })
    BT__K_LAUNCHED("bt_k_unary_backward");
}

template <typename T> __global__ void bt__k_affine_kernel(T *out, const T *x, typename bt__k_acc<T>::t al,
                                                          typename bt__k_acc<T>::t be, int64_t n, int vec) {
    const int V = 16 / sizeof(T);
    int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, st = (int64_t)gridDim.x * blockDim.x;
    int64_t nv = vec ? n / V : 0;
    for (int64_t c = tid; c < nv; c += st) {
        T a[V];
        bt__k_ld16(a, x + c * V);
#pragma unroll
        for (int e = 0; e < V; e++) a[e] = bt__k_from<T>(al * bt__k_tof(a[e]) + be);
        bt__k_st16(out + c * V, a);
    }
    for (int64_t i = nv * V + tid; i < n; i += st) out[i] = bt__k_from<T>(al * bt__k_tof(x[i]) + be);
}
BTDEF void bt_k_affine(bt_dtype dt, void *out, const void *x, double alpha, double beta, int64_t n, cudaStream_t s) {
    if (n <= 0) return;
    int vec = bt__k_aligned16(out) && bt__k_aligned16(x);
    BT__K_DISPATCH4(dt, "bt_k_affine", {
        const int V = 16 / sizeof(T);
        typedef typename bt__k_acc<T>::t A;
        bt__k_affine_kernel<T><<<bt__k_blocks(vec ? (n + V - 1) / V : n, 256), 256, 0, s>>>(
            (T *)out, (const T *)x, (A)alpha, (A)beta, n, vec);
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
template <typename T, int OP> __global__ void bt__k_binary_flat(T *out, const T *a, const T *b, int64_t n, int vec) {
    typedef typename bt__k_acc<T>::t A;
    const int V = 16 / sizeof(T);
    int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, st = (int64_t)gridDim.x * blockDim.x;
    int64_t nv = vec ? n / V : 0;
    for (int64_t c = tid; c < nv; c += st) {
        T u[V], w[V];
        bt__k_ld16(u, a + c * V); bt__k_ld16(w, b + c * V);
#pragma unroll
        for (int e = 0; e < V; e++) u[e] = bt__k_from<T>(bt__k_bop<OP, A>(bt__k_tof(u[e]), bt__k_tof(w[e])));
        bt__k_st16(out + c * V, u);
    }
    for (int64_t i = nv * V + tid; i < n; i += st) out[i] = bt__k_from<T>(bt__k_bop<OP, A>(bt__k_tof(a[i]), bt__k_tof(b[i])));
}
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
template <typename T>
static void bt__k_binary_t(bt_binary_op op, T *out, const T *a, const T *b, int flat, int vec, const bt__k_geom *g,
                           int64_t n, cudaStream_t s) {
    const int V = 16 / sizeof(T);
    unsigned nb = bt__k_blocks(vec ? (n + V - 1) / V : n, 256);
    switch (op) {
#define BT__K_X(OPC) case OPC: \
        if (flat) bt__k_binary_flat<T, OPC><<<nb, 256, 0, s>>>(out, a, b, n, vec); \
        else bt__k_binary_strided<T, OPC><<<nb, 256, 0, s>>>(out, a, b, *g, n); \
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
    int vec = flat && bt__k_aligned16(out) && bt__k_aligned16(a) && bt__k_aligned16(b);
    BT__K_DISPATCH4(dt, "bt_k_binary", { bt__k_binary_t<T>(op, (T *)out, (const T *)a, (const T *)b, flat, vec, &g, n, s); })
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
                                  typename bt__k_acc<TO>::t div) {
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
                out[o] = bt__k_from<TO>(MAX ? acc : acc / div);
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
                                  int32_t *argmax, typename bt__k_acc<TO>::t div) {
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
                out[o * inner + i] = bt__k_from<TO>(MAX ? acc : acc / div);
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
template <typename T>
static void bt__k_reduce_t(int isMax, T *out, int32_t *argmax, const T *in, int64_t outer, int64_t r, int64_t inner,
                           int mean, cudaStream_t s) {
    typedef typename bt__k_acc<T>::t A;
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
        bt__k_reduce_last<T, T, MX><<<dim3((unsigned)splits, gy), 256, 0, s>>>(in, NULL, outer, r, chunk, pval, pidx, \
                                                                               out, argmax, div);             \
        if (splits > 1)                                                                                       \
            bt__k_reduce_last<A, T, MX><<<dim3(1, gy), 256, 0, s>>>(pval, pidx, outer, splits, splits, NULL, NULL, \
                                                                    out, argmax, div);                        \
    } else {                                                                                                  \
        dim3 g((unsigned)((inner + 31) / 32), gy, (unsigned)splits);                                          \
        bt__k_reduce_cols<T, T, MX><<<g, dim3(32, 8), 0, s>>>(in, NULL, outer, r, inner, chunk, pval, pidx, out, argmax, div); \
        if (splits > 1)                                                                                       \
            bt__k_reduce_cols<A, T, MX><<<dim3(g.x, gy, 1), dim3(32, 8), 0, s>>>(pval, pidx, outer, splits, inner, \
                                                                                 splits, NULL, NULL, out, argmax, div); \
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
    BT__K_DISPATCH4(dt, "bt_k_reduce", { bt__k_reduce_t<T>(isMax, (T *)out, argmax, (const T *)in, outer, r, inner, mean, s); })
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
   One warp per row when cols <= 1024 (8 rows per block), else a block of 256 threads per row.
   Forward: pass 1 keeps an online (max m, sum s of exp(x - m)) per thread and merges them; pass 2
   writes exp(x - m) / s, or x - m - log s. Reads the row twice (the second from L1/L2 for rows
   that fit), writes it once. Backward: sum(g * y) (softmax) or sum(g) (log_softmax) in one pass,
   then gx in a second: 2 + 2 reads, 1 write per element. Math in fp32. */
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
        if (log) bt__k_softmax_kernel<T, 1><<<grid, blk, 0, s>>>((T *)out, (const T *)x, rows, cols);
        else bt__k_softmax_kernel<T, 0><<<grid, blk, 0, s>>>((T *)out, (const T *)x, rows, cols);
    })
    BT__K_LAUNCHED("bt_k_softmax");
}
BTDEF void bt_k_softmax_backward(bt_dtype dt, void *gx, const void *gout, const void *y, int64_t rows, int64_t cols,
                                 int log, cudaStream_t s) {
    if (rows <= 0 || cols <= 0) return;
    dim3 blk; unsigned grid;
    bt__k_rowcfg(rows, cols, &blk, &grid);
    BT__K_DISPATCH3(dt, "bt_k_softmax_backward", {
        if (log) bt__k_softmax_bwd_kernel<T, 1><<<grid, blk, 0, s>>>((T *)gx, (const T *)gout, (const T *)y, rows, cols);
        else bt__k_softmax_bwd_kernel<T, 0><<<grid, blk, 0, s>>>((T *)gx, (const T *)gout, (const T *)y, rows, cols);
    })
    BT__K_LAUNCHED("bt_k_softmax_backward");
}

/* ---- 6. layernorm over the last dim C ------------------------------------------------------------
   Forward: mean = sum x / C, var = sum (x - mean)^2 / C (biased; two passes for accuracy),
   rstd = 1 / sqrt(var + eps), out = (x - mean) rstd w + b. One warp per row for C <= 1024, else a
   block per row. Traffic: x read 3 times (passes 2 and 3 mostly from L1/L2), out written once,
   w and b read per row (cached), 8 bytes of mean/rstd per row.
   Backward, with xhat = (x - mean) rstd and wg = w g:
     gx = rstd (wg - mean_j(wg) - xhat mean_j(wg xhat))      (kernel 1: rows, like the forward)
     gw += sum_rows g xhat, gb += sum_rows g                  (kernel 2: 32 columns x 8 rows per
   block, row chunks split over grid.y, fp32 partials [splits, C]; kernel 3 adds the partials in a
   fixed order into gw, gb). No atomics, so the same bits every run. Traffic: g, x read twice
   (once per kernel), gx written once, 8 bytes per column per split of partials. */
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
__global__ void bt__k_layernorm_bwd_gx(T *gx, const T *g, const T *x, const T *w, const float *mean, const float *rstd,
                                       int64_t rows, int64_t C) {
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
            gx[row * C + j] = bt__k_from<T>(rs * (wg - a - xh * bb));
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
        bt__k_layernorm_kernel<T><<<grid, blk, 0, s>>>((T *)out, mean, rstd, (const T *)x, (const T *)w, (const T *)b,
                                                       rows, C, eps);
    })
    BT__K_LAUNCHED("bt_k_layernorm");
}
BTDEF void bt_k_layernorm_backward(bt_dtype dt, void *gx, void *gw, void *gb, const void *gout, const void *x,
                                   const void *w, const float *mean, const float *rstd, int64_t rows, int64_t C,
                                   cudaStream_t s) {
    if (rows <= 0 || C <= 0) return;
    dim3 blk; unsigned grid;
    bt__k_rowcfg(rows, C, &blk, &grid);
    int64_t sms = bt__k_cur()->sm_count, cb = (C + 31) / 32;
    int64_t splits = (4 * sms + cb - 1) / cb, maxs = (rows + 7) / 8;
    if (splits > maxs) splits = maxs;
    if (splits > 1024) splits = 1024;
    if (splits < 1) splits = 1;
    int64_t chunk = (rows + splits - 1) / splits;
    splits = (rows + chunk - 1) / chunk;
    BT__K_DISPATCH3(dt, "bt_k_layernorm_backward", {
        if (gx) {
            bt__k_layernorm_bwd_gx<T><<<grid, blk, 0, s>>>((T *)gx, (const T *)gout, (const T *)x, (const T *)w, mean,
                                                           rstd, rows, C);
            BT__K_LAUNCHED("bt_k_layernorm_backward");
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
__global__ void bt__k_embedding_bwd_atomic(float *acc, const T *g, const int32_t *idx, int64_t n, int64_t C, int64_t V) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * C; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / C, c = e - i * C, v = idx[i];
        if (v >= 0 && v < V) atomicAdd(acc + v * C + c, bt__k_tof(g[e]));
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
template <typename T>
__global__ void bt__k_embedding_bwd_segsum(T *gtable, const T *g, const int32_t *sk, const int32_t *sv, int64_t n,
                                           int64_t C, int32_t V) {
    for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
        int32_t key = sk[p];
        if (key >= V || (p > 0 && sk[p - 1] == key)) continue;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            float acc = 0.f;
            for (int64_t q = p; q < n && sk[q] == key; q++) acc += bt__k_tof(g[(int64_t)sv[q] * C + c]);
            gtable[(int64_t)key * C + c] = bt__k_from<T>(bt__k_tof(gtable[(int64_t)key * C + c]) + acc);
        }
    }
}
BTDEF void bt_k_embedding_backward(bt_dtype dt, void *gtable, const void *gout, const int32_t *idx, int64_t n, int64_t C,
                                   int64_t V, int deterministic, cudaStream_t s) {
    if (n <= 0 || C <= 0 || V <= 0) return;
    if (V >= INT32_MAX || n >= INT32_MAX) bt_error("bt_k_embedding_backward: V = %lld, n = %lld beyond int32", (long long)V, (long long)n);
    if (!deterministic) {
        BT__K_DISPATCH3(dt, "bt_k_embedding_backward", {
            float *acc = (float *)gtable;
            if (dt != BT_F32) {
                acc = (float *)bt__k_scratch((size_t)(V * C) * sizeof(float), s);
                BT__K_CUDA(cudaMemsetAsync(acc, 0, (size_t)(V * C) * sizeof(float), s), "bt_k_embedding_backward");
            }
            bt__k_embedding_bwd_atomic<T><<<bt__k_blocks(n * C, 256), 256, 0, s>>>(acc, (const T *)gout, idx, n, C, V);
            BT__K_LAUNCHED("bt_k_embedding_backward");
            if (dt != BT_F32) {
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
        bt__k_embedding_bwd_segsum<T><<<nb, th, 0, s>>>((T *)gtable, (const T *)gout, ka, va, n, C, (int32_t)V);
    })
    BT__K_LAUNCHED("bt_k_embedding_backward");
    bt_free(buf);
}

/* ---- 8. fused cross-entropy over a padded vocabulary ----------------------------------------------
   Forward, per row i: lse = log sum_{j < V} exp(x_j) (online max/sum, one block of 256 threads
   per row), loss = lse - x_{t_i} (0 for ignored rows). Reads the V real logits once (16-byte
   vectors when Vp and the pointer allow), writes 8 bytes per row.
   Backward: glogits = gloss_i (exp(x_j - lse) - [j == t_i]) for j < V, 0 for V <= j < Vp and for
   ignored rows: reads V and writes Vp logits per row, no max/sum pass (lse is saved). */
template <typename T>
__global__ void bt__k_xent_kernel(float *losses, float *lse, const T *logits, const int32_t *tg, int64_t N, int64_t V,
                                  int64_t Vp, int ignore, int *bad, int vec) {
    __shared__ float sh[64];
    const int VE = 16 / sizeof(T);
    for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
        const T *xr = logits + row * Vp;
        float m = -INFINITY, sm = 0.f;
        if (vec) {
            int64_t nc = (V + VE - 1) / VE;
            for (int64_t c = threadIdx.x; c < nc; c += blockDim.x) {
                T a[VE];
                bt__k_ld16(a, xr + c * VE);
#pragma unroll
                for (int e = 0; e < VE; e++)
                    if (c * VE + e < V) bt__k_ms_add(m, sm, bt__k_tof(a[e]));
            }
        } else {
            for (int64_t j = threadIdx.x; j < V; j += blockDim.x) bt__k_ms_add(m, sm, bt__k_tof(xr[j]));
        }
        bt__k_rms(m, sm, sh);
        if (threadIdx.x == 0) {
            float l = m + logf(sm), loss = 0.f;
            int32_t t = tg[row];
            if (t != ignore) {
                if (t >= 0 && t < V) loss = l - bt__k_tof(xr[t]);
                else if (bad) *bad = 1;
            }
            losses[row] = loss;
            if (lse) lse[row] = l;
        }
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

/* ---- 9. causal self-attention --------------------------------------------------------------------
   v0.1 is the plain three-step form, on cuBLAS strided-batched products (fp32 accumulation):
     S = scale Q K^T            [BH, T, T] fp32 scratch (the upper triangle is computed, then masked)
     P = softmax_causal(S)      in place (fp32), lse = m + log s saved; a dt copy of P for bf16/f16
     out = P V
   Backward recomputes P from S and lse, then dV = P^T dO, dP = dO V^T (fp32), delta = rowsum(dO O),
   dS = P (dP - delta) scale, dQ = dS K, dK = dS^T Q.
   Memory: 4 T^2 bytes per head (+2 T^2 for a bf16/f16 copy of P) forward, 8 T^2 (+2 T^2)
   backward, processed in chunks of heads so that one call's scratch stays under
   BT__K_ATTN_SCRATCH (2 GiB); GPT-2 small (B 8, H 12, T 1024) needs 576 MiB forward and 960 MiB
   backward. Traffic is dominated by the T^2 matrices (written and read about 3 times forward,
   6 times backward): a tiled flash kernel that keeps them on chip replaces this later.
   Flops: 4 B H T^2 D forward, 8 B H T^2 D backward (x2 for the computed upper triangle). */
static void bt__k_gemm_sb(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void *A,
                          cudaDataType_t at, int lda, long long sA, const void *B, cudaDataType_t bt, int ldb,
                          long long sB, void *C, cudaDataType_t ct, int ldc, long long sC, int batch, const char *op) {
    float beta = 0.f;
    BT__K_BLAS(cublasGemmStridedBatchedEx(bt__k_cur()->blas, ta, tb, m, n, k, &alpha, A, at, lda, sA, B, bt, ldb, sB, &beta,
                                          C, ct, ldc, sC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), op);
}
static cudaDataType_t bt__k_cuda_dt(bt_dtype dt) {
    switch (dt) {
    case BT_F64: return CUDA_R_64F;
    case BT_BF16: return CUDA_R_16BF;
    case BT_F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
    }
}
/* P = causal softmax of the rows of S (row r is query t = r % T), in place; lse saved */
template <typename T>
__global__ void bt__k_attn_softmax(float *S, T *Pdt, float *lse, int64_t rows, int64_t Tn) {
    __shared__ float sh[64];
    BT__K_ROW_LOOP(r, rows) {
        int64_t t = r % Tn;
        float *sr = S + r * Tn;
        float m = -INFINITY, sm = 0.f;
        for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) bt__k_ms_add(m, sm, sr[j]);
        bt__k_rms(m, sm, sh);
        float inv = 1.f / sm;
        for (int64_t j = threadIdx.x; j < Tn; j += blockDim.x) {
            float p = j <= t ? expf(sr[j] - m) * inv : 0.f;
            sr[j] = p;
            if (Pdt) Pdt[r * Tn + j] = bt__k_from<T>(p);
        }
        if (threadIdx.x == 0) lse[r] = m + logf(sm);
    }
}
template <typename T>
__global__ void bt__k_attn_probs(float *S, T *Pdt, const float *lse, int64_t rows, int64_t Tn) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < rows * Tn; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / Tn, j = e - r * Tn;
        float p = j <= r % Tn ? expf(S[e] - lse[r]) : 0.f;
        S[e] = p;
        if (Pdt) Pdt[e] = bt__k_from<T>(p);
    }
}
/* dS = P (dP - delta) scale with delta = sum_d dO O for the row; into dSdt, or over dP (f32) */
template <typename T>
__global__ void bt__k_attn_ds(const float *P, float *dP, T *dSdt, const T *dO, const T *O, int64_t rows, int64_t Tn,
                              int64_t D, float scale) {
    __shared__ float sh[32];
    BT__K_ROW_LOOP(r, rows) {
        float acc = 0.f;
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) acc += bt__k_tof(dO[r * D + d]) * bt__k_tof(O[r * D + d]);
        float delta = bt__k_rsum(acc, sh);
        for (int64_t j = threadIdx.x; j < Tn; j += blockDim.x) {
            int64_t e = r * Tn + j;
            float ds = P[e] * (dP[e] - delta) * scale;
            if (dSdt) dSdt[e] = bt__k_from<T>(ds);
            else dP[e] = ds;
        }
    }
}
BTDEF void bt_k_attention(bt_dtype dt, void *out, float *lse, const void *q, const void *k, const void *v, int64_t B,
                          int64_t H, int64_t Tn, int64_t D, float scale, cudaStream_t s) {
    if (B <= 0 || H <= 0 || Tn <= 0 || D <= 0) return;
    if (Tn > INT32_MAX / 2 || D > INT32_MAX / 2) bt_error("bt_k_attention: T = %lld, D = %lld too large", (long long)Tn, (long long)D);
    bt__k_ctx *c = bt__k_cur();
    BT__K_BLAS(cublasSetStream(c->blas, s), "bt_k_attention");
    BT__K_BLAS(cublasSetWorkspace(c->blas, c->ws, BT__K_WS_BYTES), "bt_k_attention");
    cudaDataType_t cdt = bt__k_cuda_dt(dt);
    BT__K_DISPATCH3(dt, "bt_k_attention", {
        int low = dt != BT_F32;
        size_t per = (size_t)Tn * Tn * (4 + (low ? sizeof(T) : 0));
        int64_t BH = B * H, bc = (int64_t)(BT__K_ATTN_SCRATCH / per);
        if (bc < 1) bc = 1;
        if (bc > BH) bc = BH;
        float *S = (float *)bt__k_scratch(per * bc, s);
        T *Pdt = low ? (T *)(S + bc * Tn * Tn) : NULL;
        dim3 blk; unsigned grid;
        for (int64_t h0 = 0; h0 < BH; h0 += bc) {
            int64_t nb = BH - h0 < bc ? BH - h0 : bc;
            const T *qc = (const T *)q + h0 * Tn * D, *kc = (const T *)k + h0 * Tn * D, *vc = (const T *)v + h0 * Tn * D;
            bt__k_gemm_sb(CUBLAS_OP_T, CUBLAS_OP_N, (int)Tn, (int)Tn, (int)D, scale, kc, cdt, (int)D, Tn * D, qc, cdt, (int)D,
                          Tn * D, S, CUDA_R_32F, (int)Tn, Tn * Tn, (int)nb, "bt_k_attention");
            bt__k_rowcfg(nb * Tn, Tn, &blk, &grid);
            bt__k_attn_softmax<T><<<grid, blk, 0, s>>>(S, Pdt, lse + h0 * Tn, nb * Tn, Tn);
            BT__K_LAUNCHED("bt_k_attention");
            bt__k_gemm_sb(CUBLAS_OP_N, CUBLAS_OP_N, (int)D, (int)Tn, (int)Tn, 1.f, vc, cdt, (int)D, Tn * D,
                          low ? (const void *)Pdt : (const void *)S, cdt, (int)Tn, Tn * Tn, (T *)out + h0 * Tn * D, cdt,
                          (int)D, Tn * D, (int)nb, "bt_k_attention");
        }
        bt_free(S);
    })
}
BTDEF void bt_k_attention_backward(bt_dtype dt, void *gq, void *gk, void *gv, const void *gout, const void *q,
                                   const void *k, const void *v, const void *out, const float *lse, int64_t B, int64_t H,
                                   int64_t Tn, int64_t D, float scale, cudaStream_t s) {
    if (B <= 0 || H <= 0 || Tn <= 0 || D <= 0) return;
    if (Tn > INT32_MAX / 2 || D > INT32_MAX / 2) bt_error("bt_k_attention_backward: T = %lld, D = %lld too large", (long long)Tn, (long long)D);
    bt__k_ctx *c = bt__k_cur();
    BT__K_BLAS(cublasSetStream(c->blas, s), "bt_k_attention_backward");
    BT__K_BLAS(cublasSetWorkspace(c->blas, c->ws, BT__K_WS_BYTES), "bt_k_attention_backward");
    cudaDataType_t cdt = bt__k_cuda_dt(dt);
    const char *opn = "bt_k_attention_backward";
    BT__K_DISPATCH3(dt, "bt_k_attention_backward", {
        int low = dt != BT_F32;
        size_t per = (size_t)Tn * Tn * (8 + (low ? sizeof(T) : 0));
        int64_t BH = B * H, bc = (int64_t)(BT__K_ATTN_SCRATCH / per);
        if (bc < 1) bc = 1;
        if (bc > BH) bc = BH;
        float *S = (float *)bt__k_scratch(per * bc, s), *dP = S + bc * Tn * Tn;
        T *Pdt = low ? (T *)(dP + bc * Tn * Tn) : NULL;
        dim3 blk; unsigned grid;
        for (int64_t h0 = 0; h0 < BH; h0 += bc) {
            int64_t nb = BH - h0 < bc ? BH - h0 : bc, o = h0 * Tn * D;
            const T *qc = (const T *)q + o, *kc = (const T *)k + o, *vc = (const T *)v + o;
            const T *gc = (const T *)gout + o, *oc = (const T *)out + o;
            bt__k_gemm_sb(CUBLAS_OP_T, CUBLAS_OP_N, (int)Tn, (int)Tn, (int)D, scale, kc, cdt, (int)D, Tn * D, qc, cdt, (int)D,
                          Tn * D, S, CUDA_R_32F, (int)Tn, Tn * Tn, (int)nb, opn);
            bt__k_attn_probs<T><<<bt__k_blocks(nb * Tn * Tn, 256), 256, 0, s>>>(S, Pdt, lse + h0 * Tn, nb * Tn, Tn);
            BT__K_LAUNCHED(opn);
            /* dV = P^Tn dO */
            bt__k_gemm_sb(CUBLAS_OP_N, CUBLAS_OP_T, (int)D, (int)Tn, (int)Tn, 1.f, gc, cdt, (int)D, Tn * D,
                          low ? (const void *)Pdt : (const void *)S, cdt, (int)Tn, Tn * Tn, (T *)gv + o, cdt, (int)D, Tn * D,
                          (int)nb, opn);
            /* dP = dO V^Tn (fp32) */
            bt__k_gemm_sb(CUBLAS_OP_T, CUBLAS_OP_N, (int)Tn, (int)Tn, (int)D, 1.f, vc, cdt, (int)D, Tn * D, gc, cdt, (int)D,
                          Tn * D, dP, CUDA_R_32F, (int)Tn, Tn * Tn, (int)nb, opn);
            bt__k_rowcfg(nb * Tn, Tn, &blk, &grid);
            bt__k_attn_ds<T><<<grid, blk, 0, s>>>(S, dP, Pdt, gc, oc, nb * Tn, Tn, D, scale);
            BT__K_LAUNCHED(opn);
            const void *dS = low ? (const void *)Pdt : (const void *)dP;
            /* dQ = dS K, dK = dS^Tn Q */
            bt__k_gemm_sb(CUBLAS_OP_N, CUBLAS_OP_N, (int)D, (int)Tn, (int)Tn, 1.f, kc, cdt, (int)D, Tn * D, dS, cdt, (int)Tn,
                          Tn * Tn, (T *)gq + o, cdt, (int)D, Tn * D, (int)nb, opn);
            bt__k_gemm_sb(CUBLAS_OP_N, CUBLAS_OP_T, (int)D, (int)Tn, (int)Tn, 1.f, qc, cdt, (int)D, Tn * D, dS, cdt, (int)Tn,
                          Tn * Tn, (T *)gk + o, cdt, (int)D, Tn * D, (int)nb, opn);
        }
        bt_free(S);
    })
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
static int bt__k_mm_make(bt__k_ctx *c, bt__k_mm_plan *p, bt_dtype dt, bt_matmul_precision prec, int64_t M, int64_t N,
                         int64_t K, int transA, int transB, int64_t batch, int64_t sA, int64_t sB, int64_t sC,
                         const void *bias, int try_bias, const uint32_t al[4]) {
    const char *op = "bt_k_matmul";
    cudaDataType_t cdt = bt__k_cuda_dt(dt), sct = dt == BT_F64 ? CUDA_R_64F : CUDA_R_32F;
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
    BT__K_BLAS(cublasLtMatrixLayoutCreate(&p->lc, cdt, (uint64_t)N, (uint64_t)M, N), op);
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
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    p->epi_bias = 0;
    if (try_bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), op);
        BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), op);
        if (cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &nres) ==
                CUBLAS_STATUS_SUCCESS && nres > 0)
            p->epi_bias = 1;
        else {
            epi = CUBLASLT_EPILOGUE_DEFAULT;
            BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), op);
            nres = 0;
        }
    }
    if (!p->epi_bias) {
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &nres);
        if (st != CUBLAS_STATUS_SUCCESS) nres = 0;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (nres <= 0) {
        p->used = 1;
        bt__k_mm_plan_drop(p);
        return 0;
    }
    p->algo = res.algo;
    p->used = 1;
    return 1;
}
BTDEF void bt_k_matmul(bt_dtype dt, void *C, const void *A, const void *B, const void *bias, int64_t M, int64_t N,
                       int64_t K, int transA, int transB, int64_t batch, int64_t strideA, int64_t strideB,
                       int64_t strideC, float alpha, float beta, bt_matmul_precision precision, cudaStream_t s) {
    if (batch <= 0 || M <= 0 || N <= 0) return;
    if (dt != BT_F32 && dt != BT_F64 && dt != BT_BF16 && dt != BT_F16)
        bt_error("bt_k_matmul: dtype %s not supported (f32, f64, bf16, f16)", bt__k_dtname(dt));
    if (K <= 0) {   /* empty product: C = beta C (+ bias) */
        for (int64_t b = 0; b < batch; b++)
            bt_k_affine(dt, (char *)C + (size_t)(b * strideC) * bt__k_dtsize(dt), (char *)C + (size_t)(b * strideC) * bt__k_dtsize(dt),
                        beta, 0.0, M * N, s);
        if (bias) bt__k_matmul_bias(dt, C, bias, batch, M, N, strideC, s);
        return;
    }
    bt__k_ctx *c = bt__k_cur();
    if (dt != BT_F32) precision = BT_MATMUL_FP32;
    if (batch == 1) strideA = strideB = strideC = 0;
    int try_bias = bias != NULL && batch == 1;
    uint32_t al[4] = {bt__k_align_of(A), bt__k_align_of(B), bt__k_align_of(C), bias ? bt__k_align_of(bias) : 0};
    int64_t key[18] = {dt, precision, M, N, K, transA != 0, transB != 0, batch, strideA, strideB, strideC, try_bias,
                       al[0], al[1], al[2], al[3], 0, 0};
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
        if (!bt__k_mm_make(c, p, dt, precision, M, N, K, transA, transB, batch, strideA, strideB, strideC, bias, try_bias, al))
            bt_error("bt_k_matmul: cuBLASLt has no algorithm for %s M=%lld N=%lld K=%lld transA=%d transB=%d batch=%lld",
                     bt__k_dtname(dt), (long long)M, (long long)N, (long long)K, transA, transB, (long long)batch);
        memcpy(p->key, key, sizeof key);
    }
    if (p->epi_bias)
        BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "bt_k_matmul");
    double ad = alpha, bd = beta;
    const void *pa = dt == BT_F64 ? (const void *)&ad : (const void *)&alpha;
    const void *pb = dt == BT_F64 ? (const void *)&bd : (const void *)&beta;
    BT__K_BLAS(cublasLtMatmul(c->lt, p->op, pa, B, p->la, A, p->lb, pb, C, p->lc, C, p->lc, &p->algo, c->ws, BT__K_WS_BYTES, s),
               "bt_k_matmul");
    if (bias && !p->epi_bias) bt__k_matmul_bias(dt, C, bias, batch, M, N, batch == 1 ? M * N : strideC, s);
}

/* ---- 11. AdamW ------------------------------------------------------------------------------------
   Per parameter: g' = g scale, m = b1 m + (1 - b1) g', v = b2 v + (1 - b2) g'^2,
   p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p). Reads p, m, v (fp32) and g,
   writes p, m, v and the optional low-precision copy: 24 + 2 sizeof(g) (+ sizeof(lowp)) bytes per
   parameter; p, m, v move as float4 when aligned. */
/* weight decay of element i: the segment holding i, by binary search over at most 48 ends */
__device__ __forceinline__ float bt__k_seg_wd(const bt_k_segments &sg, int64_t i) {
    int lo = 0, hi = sg.n - 1;
    while (lo < hi) { int mid = (lo + hi) >> 1; if (i < sg.end[mid]) hi = mid; else lo = mid + 1; }
    return sg.wd[lo];
}
template <typename G, typename L>
__global__ void bt__k_adamw_kernel(float *p, const G *g, float *m, float *v, L *lowp, int64_t n, float lr, float b1,
                                   float b2, float eps, bt_k_segments sg, float bc1, float bc2, const float *gscale, int vec) {
    float sc = gscale ? *gscale : 1.f;
    int64_t nc = (n + 3) / 4;
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
            float gi = e < cnt ? bt__k_tof(g[i0 + e]) * sc : 0.f;
            mm[e] = b1 * mm[e] + (1.f - b1) * gi;
            vv[e] = b2 * vv[e] + (1.f - b2) * gi * gi;
            float wd = sg.n == 1 ? sg.wd[0] : bt__k_seg_wd(sg, i0 + e);
            pp[e] -= lr * ((mm[e] / bc1) / (sqrtf(vv[e] / bc2) + eps) + wd * pp[e]);
        }
        if (full) {
            *reinterpret_cast<float4 *>(p + i0) = make_float4(pp[0], pp[1], pp[2], pp[3]);
            *reinterpret_cast<float4 *>(m + i0) = make_float4(mm[0], mm[1], mm[2], mm[3]);
            *reinterpret_cast<float4 *>(v + i0) = make_float4(vv[0], vv[1], vv[2], vv[3]);
        } else {
            for (int e = 0; e < cnt; e++) { p[i0 + e] = pp[e]; m[i0 + e] = mm[e]; v[i0 + e] = vv[e]; }
        }
        if (lowp)
            for (int e = 0; e < cnt; e++) lowp[i0 + e] = bt__k_from<L>(pp[e]);
    }
}
BTDEF void bt_k_adamw_segments(float *p, const void *g, bt_dtype gdt, float *m, float *v, void *p_lowp, bt_dtype lowp_dt,
                               const bt_k_segments *segs, float lr, float b1, float b2, float eps, int step,
                               const float *grad_scale, cudaStream_t s) {
    if (segs->n < 1 || segs->n > BT_K_MAX_SEGMENTS) bt_error("bt_k_adamw: %d segments (1 to %d)", segs->n, BT_K_MAX_SEGMENTS);
    int64_t n = segs->end[segs->n - 1];
    if (n <= 0) return;
    if (step < 1) bt_error("bt_k_adamw: step %d (counts from 1)", step);
    float bc1 = (float)(1.0 - pow((double)b1, (double)step)), bc2 = (float)(1.0 - pow((double)b2, (double)step));
    int vec = bt__k_aligned16(p) && bt__k_aligned16(m) && bt__k_aligned16(v);
    unsigned nb = bt__k_blocks((n + 3) / 4, 256);
    bt_k_segments sg = *segs;
    if (!p_lowp) lowp_dt = BT_F32;
    BT__K_DISPATCH3(gdt, "bt_k_adamw (grad)", {
        switch (lowp_dt) {
        case BT_F32: bt__k_adamw_kernel<T, float><<<nb, 256, 0, s>>>(p, (const T *)g, m, v, (float *)p_lowp, n, lr, b1, b2,
                                                                     eps, sg, bc1, bc2, grad_scale, vec); break;
        case BT_BF16: bt__k_adamw_kernel<T, __nv_bfloat16><<<nb, 256, 0, s>>>(p, (const T *)g, m, v, (__nv_bfloat16 *)p_lowp,
                                                                     n, lr, b1, b2, eps, sg, bc1, bc2, grad_scale, vec); break;
        case BT_F16: bt__k_adamw_kernel<T, __half><<<nb, 256, 0, s>>>(p, (const T *)g, m, v, (__half *)p_lowp, n, lr, b1,
                                                                     b2, eps, sg, bc1, bc2, grad_scale, vec); break;
        default: bt_error("bt_k_adamw: low-precision copy dtype %s not supported", bt__k_dtname(lowp_dt));
        }
    })
    BT__K_LAUNCHED("bt_k_adamw");
}
BTDEF void bt_k_adamw(float *p, const void *g, bt_dtype gdt, float *m, float *v, void *p_lowp, bt_dtype lowp_dt, int64_t n,
                      float lr, float b1, float b2, float eps, float wd, int step, const float *grad_scale, cudaStream_t s) {
    if (n <= 0) return;
    bt_k_segments one;
    one.n = 1; one.end[0] = n; one.wd[0] = wd;
    bt_k_adamw_segments(p, g, gdt, m, v, p_lowp, lowp_dt, &one, lr, b1, b2, eps, step, grad_scale, s);
}

/* ---- 12. the tensor core's less common paths ---------------------------------------------------
   copy_general: one read and one write per element, index decoded for both sides (dims merged
   where both step through them as one). scatter_rows: one read of g and one write per kept
   element. inv_count_ne: one pass over n int32 in a single block (n is a batch of targets). */
__global__ void bt__k_copy_general_kernel(int dtd, void *dst, int dts, const void *src, bt__k_geom g, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, so = 0, dof = 0;
        for (int d = g.ndim - 1; d >= 0; d--) {
            int64_t q = rem / g.shape[d], c = rem - q * g.shape[d];
            so += c * g.sa[d]; dof += c * g.sb[d]; rem = q;
        }
        bt__k_std(dtd, dst, dof, bt__k_ldd(dts, src, so));
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
        bt__k_std(dt, gx, (o * r + am[oi]) * inner + i, bt__k_ldd(dt, g, oi));
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
