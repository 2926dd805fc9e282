/* bt_fp8.cuh - BluTrain-C FP8 kernels, v0.1: per-tensor scaled casts to e4m3 / e5m2 (with the tensor's
   amax and its transpose in the same pass), the scaling state's update, and cuBLASLt's FP8 products:
   the CUDA side of bt_tensor.h's bt_linear_fp8, whose comment states the math and the recipes.

   A part of bt_kernels.cuh (its section 13), one kernel family in a file of its own: bt_kernels.cuh
   includes it twice, for the declarations below and, at the end of its implementation
   (BT_KERNELS_IMPLEMENTATION), for the kernels, which use that file's device helpers and share its
   matmul section's cuBLASLt handle, plan cache, workspaces and autotuning. Include bt_kernels.cuh or
   bt_tensor.h; included alone, this file brings bt_kernels.cuh.

   The bytes: a cast computes v = x * (1 / s) in f32 (the reciprocal once per thread, one rounded
   multiply per element) and rounds v with cvt.rn.satfinite (round to nearest even, saturating at
   the format's largest finite value, NaN kept NaN): the operations bt_tensor.h's bt_fp8_quantize
   does on the CPU, so the two give the same bytes (tests/test_fp8_gpu.cu checks it on fresh inputs,
   subnormals and values past the range included).

   CONTENTS
     declarations  bt_k_fp8_supported, bt_k_fp8_amax, bt_k_fp8_cast, bt_k_fp8_amax_act, bt_k_fp8_cast_act,
                   bt_k_fp8_transpose, bt_k_cross_entropy_fused_fp8, bt_k_norm_fp8_fits, bt_k_layernorm_fp8,
                   bt_k_rmsnorm_fp8, bt_k_fp8_update, bt_k_matmul_fp8
     1. the amax reduction and the scaled cast (64 x 64 tiles of 16-byte rows, or 32 x 32 scalar ones:
        the transpose through shared memory), GELU or its derivative folded in (the _act forms); the
        byte transpose; the fused cross-entropy whose logit gradient comes out in FP8
     2. the scaling state's update
     3. the FP8 product through cuBLASLt: plans in bt_kernels.cuh's table, scale pointers per call
     4. layernorm and RMSNorm with their output's cast (bt_kernels.cuh section 6's rows, 16 a block)
*/
#ifndef BT_KERNELS_CUH
#include "bt_kernels.cuh"
#else

#ifndef BT_FP8_CUH
#define BT_FP8_CUH

/* ---- declarations: FP8 (every pointer a device pointer; fp8 data as bytes, uint8_t) ---- */
/* 1 when the current device has FP8 tensor cores (compute capability 8.9 or newer), else 0 */
BTDEF int bt_k_fp8_supported(void);
/* *amax <- the larger of *amax and max_i |x[i]| (x [n] of dtype dt: f32, bf16, f16; *amax >= 0 or
   NaN, as f32): an unsigned max of the values' bits (bt__abs_bits), exact in any order, NaN above
   everything. Traffic: x read once. */
BTDEF void bt_k_fp8_amax(bt_dtype dt, float *amax, const void *x, int64_t n, cudaStream_t s);
/* The scaled cast of x [rows, cols] (dt: f32, bf16, f16) to fmt (BT_F8E4M3 or BT_F8E5M2): q [rows, cols]
   and/or its transpose qt [cols, rows] (either may be NULL) get fp8(x * (1 / s)), where s =
   bt_fp8_scale_of(*amax_in, fmax) when amax_in != NULL (current scaling: the amax measured before,
   by bt_k_fp8_amax) and s = *scale_in otherwise (delayed scaling: the state's scale). *scale_used
   (may be NULL) <- s. amax_acc (may be NULL) <- the larger of it and x's amax: *amax_in when that is
   given, else measured in this same pass (delayed scaling's fused amax). scale_used must not alias
   amax_in or scale_in. Traffic: x read once, q and qt written once each. */
BTDEF void bt_k_fp8_cast(bt_dtype dt, bt_dtype fmt, uint8_t *q, uint8_t *qt, const void *x, int64_t rows, int64_t cols,
                         const float *amax_in, const float *scale_in, float *scale_used, float *amax_acc, cudaStream_t s);
/* The casts with an MLP's activation folded in (bt_mlp_gelu_fp8's and bt_mlp_swiglu_fp8's kernels; act,
   bt_tensor.h's bt_fp8_act): what is quantised, an output [rows, cols], is not x but
     BT_FP8_ACT_GELU  u = gelu(x), rounded to dt: the bytes bt_k_unary(GELU) would write, read by a
                      cast (the forward's input of the second linear)
     BT_FP8_ACT_DGELU d = x gelu'(h), rounded to dt: bt_k_unary_backward(GELU)'s bytes (x the
                      gradient of gelu's output, h its input), read by a cast (the backward's
                      gradient of the first linear); colsum (may be NULL) <- f32 [ceil(rows / 64),
                      cols], the column sums of d over each 64 rows (the bias gradient's parts,
                      in a fixed order: bt_k_sum_rows_acc of them gives the same bits each run)
     BT_FP8_ACT_SWIGLU  y = silu(a) u, x = [a | u] [rows, 2 cols] (gate, then up): bt_k_swiglu's bytes
                      (the forward's input of the second linear)
     BT_FP8_ACT_DSWIGLU [ga | gu], cols = 2 F: the gradients of gate and up from x the gradient of
                      y [rows, F] and h = [a | u] [rows, cols]: bt_k_swiglu_backward's bytes (the
                      backward's gradient of the first linear)
     BT_FP8_ACT_X     x itself: bt_k_fp8_cast's bytes, with colsum (may be NULL) <- the column
                      sums of x per 64 rows as DGELU's (a linear's bias gradient from the cast
                      of its output gradient)
   The amax, scales and arguments as bt_k_fp8_amax / bt_k_fp8_cast's (h of dt, DGELU [rows, cols]
   and DSWIGLU only; colsum X and DGELU only). Needs cols % 8 == 0 (DSWIGLU: % 16), rows % 16 == 0 and
   16-byte aligned x, h, q, qt. Traffic per element: x (and h) read once (DSWIGLU: once for each
   half, the second from L2 where it holds a 64-row band), q and qt written: the activation's own
   write and the cast's read are gone. */
BTDEF void bt_k_fp8_amax_act(bt_dtype dt, bt_fp8_act act, float *amax, const void *x, const void *h, int64_t rows, int64_t cols,
                             cudaStream_t s);
BTDEF void bt_k_fp8_cast_act(bt_dtype dt, bt_dtype fmt, bt_fp8_act act, uint8_t *q, uint8_t *qt, float *colsum, const void *x,
                             const void *h, int64_t rows, int64_t cols, const float *amax_in, const float *scale_in, float *scale_used,
                             float *amax_acc, cudaStream_t s);
/* qt [cols, rows] = q [rows, cols]^T, bytes (an FP8 tensor's K-contiguous copy for the other product).
   Needs rows and cols multiples of 16 and 16-byte aligned q, qt. Traffic: 2 bytes an element. */
BTDEF void bt_k_fp8_transpose(uint8_t *qt, const uint8_t *q, int64_t rows, int64_t cols, cudaStream_t s);
/* bt_k_cross_entropy_fused whose logit gradient, delayed-scaled, comes out in FP8 for the head's FP8
   products: losses and lse as bt_k_cross_entropy_fused; q [N, Vp] (may be NULL) and its transpose
   qt [Vp, N] (may be NULL) <- fmt bytes of g * (1 / *scale_in), g = the gradient rounded to dt (the
   bytes bt_k_cross_entropy_fused then bt_k_fp8_cast with scale_in would give), *scale_used <-
   *scale_in, amax_acc (may be NULL) <- the larger of it and g's amax. The gradient is written in FP8
   by the pass that makes it (1 byte a logit instead of dt's 2, and no cast's read); qt is then made
   from q (bt_k_fp8_transpose). logits may be overwritten (rows wider than a block's shared memory,
   or unaligned, take the two kernels and bt_k_fp8_cast), and qt may lie in the logits' own bytes
   (the FP8 head's dz^T in its chunk's logit buffer: 1 byte a logit less memory): it is then made
   after the logits' last read, from q (for wide rows the cast then writes q alone, and the
   transpose makes qt: 1 byte a logit more traffic). Needs N and Vp multiples of 16 when qt is
   wanted. */
BTDEF void bt_k_cross_entropy_fused_fp8(bt_dtype dt, bt_dtype fmt, float *losses, float *lse, void *logits, uint8_t *q, uint8_t *qt,
                                        const int32_t *targets, const float *gloss, int64_t N, int64_t V, int64_t Vp, int ignore_index,
                                        int *bad, const float *scale_in, float *scale_used, float *amax_acc, cudaStream_t s);
/* Layernorm (bt_k_layernorm's y = (x - mean) rstd w + b) or RMSNorm (bt_k_rmsnorm's, mean and b NULL)
   of x [rows, C] with its output cast to e4m3 in the same kernel, delayed scaling: q [rows, C] and
   qt [C, rows] (may be NULL) get fp8(y * (1 / *scale_in)) where y is rounded to dt as the norm's
   kernel stores it, mean and rstd (may be NULL) what that kernel writes, *scale_used (may be NULL)
   <- *scale_in, amax_acc (may be NULL) <- the larger of it and y's amax: the bytes and floats of
   bt_k_layernorm (bt_k_rmsnorm) then bt_k_fp8_cast, without y (qt by bt_k_fp8_transpose of q).
   Needs bt_k_norm_fp8_fits (rows a multiple of 16, C of 16 up to 4096, 16-byte aligned pointers,
   a layout bt_k_layernorm's fast paths take). Traffic per element: 5 bytes (x read, q written, q
   read and qt written), where the norm then the cast move 8. */
BTDEF int bt_k_norm_fp8_fits(bt_dtype dt, int64_t rows, int64_t C, const void *x, const void *w, const void *b, const void *q,
                             const void *qt);
BTDEF void bt_k_layernorm_fp8(bt_dtype dt, uint8_t *q, uint8_t *qt, float *mean, float *rstd, const void *x, const void *w,
                              const void *b, int64_t rows, int64_t C, float eps, const float *scale_in, float *scale_used,
                              float *amax_acc, cudaStream_t s);
BTDEF void bt_k_rmsnorm_fp8(bt_dtype dt, uint8_t *q, uint8_t *qt, float *rstd, const void *x, const void *w, int64_t rows, int64_t C,
                            float eps, const float *scale_in, float *scale_used, float *amax_acc, cudaStream_t s);
/* bt_fp8_update on n consecutive FP8 states [n, 3, 2 + hist] (f32; a model's bank, or one state):
   each row rolled as bt__fp8_roll does, one launch for all */
BTDEF void bt_k_fp8_update(float *state, int hist, int64_t n, cudaStream_t s);
/* C [M, N] (dt: bf16, f16 or f32) = (*sa)(*sb) A [M, K] B [N, K]^T (+ R [M, N] of dt, may be NULL, may be C
   itself: C accumulates) (+ bias [N] of dt, may be NULL), summed in f32 and rounded once: A and
   B fp8 bytes of formats fa, fb (e4m3 x e4m3, e5m2 x e4m3 or e4m3 x e5m2; cuBLASLt has no e5m2 x
   e5m2), both stored K-contiguous (cuBLASLt's FP8 "TN" layout, row-major [M, K] and [N, K] here); sa
   and sb f32 on the device (the dequantisation scales, cuBLASLt's scale pointers: no host read, so
   a CUDA graph replays them), each 16-byte aligned (cuBLASLt's FP8 kernels refuse others). M, N, K
   positive multiples of 16; A, B, C and R 16-byte aligned. fp32
   accumulation; fast_accum 1: cuBLASLt's fast accumulation (the tensor cores' partial sums never
   promoted to fp32: faster, less exact). The bias rides the BIAS epilogue for a bf16 / f16 C when
   cuBLASLt offers one (an f32 C would need a bf16 bias there), else a kernel adds it afterwards.
   Needs bt_k_fp8_supported(). Traffic: M K + N K bytes read, M N elements of C written (and of R read:
   cuBLASLt's beta = 1 with R as its C, our C its D). */
BTDEF void bt_k_matmul_fp8(bt_dtype dt, void *C, const void *A, bt_dtype fa, const float *sa, const void *B, bt_dtype fb,
                           const float *sb, const void *bias, const void *R, int64_t M, int64_t N, int64_t K, int fast_accum,
                           cudaStream_t s);

#endif /* BT_FP8_CUH */

/* ==============================================================================================
   IMPLEMENTATION (inside bt_kernels.cuh's, after its matmul section)
   ============================================================================================== */
#if defined(BT_KERNELS_IMPLEMENTATION_DONE) && !defined(BT_FP8_IMPLEMENTATION_DONE)
#define BT_FP8_IMPLEMENTATION_DONE
#include <cuda_fp8.h>

BTDEF int bt_k_fp8_supported(void) {
    static int cap[BT_MAX_GPUS];                      /* 0 unknown, 1 no, 2 yes */
    int d = bt__k_device();
    if (d < 0 || d >= BT_MAX_GPUS) return 0;
    if (!cap[d]) {
        int major = 0, minor = 0;
        BT__K_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d), "bt_k_fp8_supported");
        BT__K_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d), "bt_k_fp8_supported");
        cap[d] = major * 10 + minor >= 89 ? 2 : 1;
    }
    return cap[d] == 2;
}

/* ---- 1. the amax reduction and the scaled cast -------------------------------------------------
   amax: a grid-stride max of |x|'s bits (16-byte loads where x is aligned), a warp then a block
   max, one atomicMax per block on the f32's bits (non-negative floats order as their bits do).
   cast: one 32 x 32 tile of x at a time per block of 32 x 8 threads (each thread 4 rows of a
   column): a warp reads 32 consecutive elements of a row and writes their 32 bytes of q (one
   32-byte sector); the bytes also go to a shared tile, read back by column, so that qt's rows are
   written as 32 consecutive bytes too. Delayed scaling folds the amax into the same pass. */
template <int E5M2> __device__ __forceinline__ uint8_t bt__k_fp8_cvt(float v) {
    return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, E5M2 ? __NV_E5M2 : __NV_E4M3);
}
/* a and b in one conversion (cvt.rn.satfinite.e4m3x2 / e5m2x2, the instruction the scalar form
   issues with a zero partner): the same rounding, a in the low byte */
template <int E5M2> __device__ __forceinline__ uint32_t bt__k_fp8_cvt2(float a, float b) {
    return (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, E5M2 ? __NV_E5M2 : __NV_E4M3);
}
/* f[0 .. 7] to their bytes, each f * r rounded two a conversion (the first in the lowest byte): the
   vector cast's packing; m <- the larger of it and their amax bits */
template <int E5M2> __device__ __forceinline__ uint2 bt__k_fp8_pack8(const float *f, float r, unsigned &m) {
    uint32_t w[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < 8; j += 2) {
        m = max(m, max(bt__abs_bits(f[j]), bt__abs_bits(f[j + 1])));
        w[j / 4] |= bt__k_fp8_cvt2<E5M2>(__fmul_rn(f[j], r), __fmul_rn(f[j + 1], r)) << (8 * (j % 4));
    }
    return make_uint2(w[0], w[1]);
}
/* VE values f (each already rounded to the 16-byte vector's type: 8 of bf16 / f16, 4 of f32) times r to
   e4m3 (E5M2 0) or e5m2 at dst (VE bytes), m <- the larger of it and their amax bits */
template <int VE, int E5M2> __device__ __forceinline__ void bt__k_fp8_store_vec(uint8_t *dst, const float *f, float r, unsigned &m) {
    if (VE == 8) {
        *reinterpret_cast<uint2 *>(dst) = bt__k_fp8_pack8<E5M2>(f, r, m);
        return;
    }
    uint32_t wd = 0;
#pragma unroll
    for (int e = 0; e < VE; e += 2) {
        m = max(m, max(bt__abs_bits(f[e]), bt__abs_bits(f[e + 1])));
        wd |= bt__k_fp8_cvt2<E5M2>(__fmul_rn(f[e], r), __fmul_rn(f[e + 1], r)) << (8 * e);
    }
    *reinterpret_cast<uint32_t *>(dst) = wd;
}
/* the largest v of the block's threads (blockDim.x a multiple of 32, up to 1024 threads), in thread 0;
   every thread of the block calls it */
__device__ __forceinline__ unsigned bt__k_block_umax(unsigned v) {
    __shared__ unsigned sh[32];
    int t = threadIdx.y * blockDim.x + threadIdx.x, nw = (blockDim.x * blockDim.y) >> 5;
    v = __reduce_max_sync(0xffffffffu, v);
    if ((t & 31) == 0) sh[t >> 5] = v;
    __syncthreads();
    if (t < 32) v = __reduce_max_sync(0xffffffffu, t < nw ? sh[t] : 0u);
    return v;
}
/* the transposes' store (the vector cast's and bt_k_fp8_transpose's): tile holds the bytes of rows r0 ..
   r0 + 63, columns c0 .. c0 + 63 of a [rows, cols] matrix, 4 a word (row r, column j at word j / 4,
   byte j % 4); the thread (tcol, tk) writes column c0 + tcol's bytes of rows r0 + 16 tk .. + 15 as one
   16-byte store to qt [cols, rows] */
__device__ __forceinline__ void bt__k_fp8_tile_col(uint8_t *qt, const uint32_t (*tile)[17], int64_t r0, int64_t c0, int64_t rows,
                                                   int64_t cols, int tcol, int tk) {
    const int64_t c = c0 + tcol, i0 = r0 + 16 * tk;
    if (c >= cols || i0 >= rows) return;
    uint32_t o[4];
    const int sh = 8 * (tcol & 3);
#pragma unroll
    for (int a = 0; a < 4; a++) {
        uint32_t w = 0;
#pragma unroll
        for (int b = 0; b < 4; b++) w |= (tile[16 * tk + 4 * a + b][tcol >> 2] >> sh & 0xffu) << (8 * b);
        o[a] = w;
    }
    *reinterpret_cast<uint4 *>(qt + c * rows + i0) = make_uint4(o[0], o[1], o[2], o[3]);
}
/* the value a cast quantises (bt_fp8_act): x; gelu(x) rounded to T; x gelu'(h) rounded to T. The
   functors of bt_k_unary / bt_k_unary_backward, so the same bits as those kernels' outputs. */
template <typename T, int ACT> __device__ __forceinline__ float bt__k_fp8_val(T x, T h) {
    if (ACT == BT_FP8_ACT_GELU) return bt__k_tof(bt__k_from<T>(bt__k_uop_f<BT_UOP_GELU>()(bt__k_tof(x), bt__k_tof(x))));
    if (ACT == BT_FP8_ACT_DGELU) return bt__k_tof(bt__k_from<T>(bt__k_uop_grad_f<BT_UOP_GELU>()(bt__k_tof(x), bt__k_tof(h))));
    return bt__k_tof(x);
}
/* the 8 values a folded cast quantises at row i, columns c .. c + 7 of its [rows, cols] output
   (c % 8 == 0, 16-byte loads): bt__k_fp8_val's, or SwiGLU's (bt_kernels.cuh's bt__k_swiglu_f /
   _grad_f: the same bits as bt_k_swiglu / bt_k_swiglu_backward write) */
template <typename T, int ACT>
__device__ __forceinline__ void bt__k_fp8_vals8(float *f, const T *x, const T *hp, int64_t i, int64_t c, int64_t cols) {
    const int V = 16 / sizeof(T);
    T v[8], h[8], w[8];
    if (ACT == BT_FP8_ACT_SWIGLU) {                   /* x [rows, 2 cols]: gate, then up */
#pragma unroll
        for (int u = 0; u < 8 / V; u++) {
            bt__k_ld16(v + u * V, x + i * 2 * cols + c + u * V);
            bt__k_ld16(h + u * V, x + i * 2 * cols + cols + c + u * V);
        }
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] = bt__k_tof(bt__k_swiglu_f<T>(v[j], h[j]));
    } else if (ACT == BT_FP8_ACT_DSWIGLU) {           /* x the gradient [rows, F], hp = [gate | up] [rows, cols = 2 F] */
        const int64_t F = cols / 2, k = c < F ? c : c - F;
#pragma unroll
        for (int u = 0; u < 8 / V; u++) {
            bt__k_ld16(v + u * V, x + i * F + k + u * V);
            bt__k_ld16(h + u * V, hp + i * cols + k + u * V);
            bt__k_ld16(w + u * V, hp + i * cols + F + k + u * V);
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            T ga, gu;
            bt__k_swiglu_grad_f<T>(v[j], h[j], w[j], &ga, &gu);
            f[j] = bt__k_tof(c < F ? ga : gu);
        }
    } else {
#pragma unroll
        for (int u = 0; u < 8 / V; u++) bt__k_ld16(v + u * V, x + i * cols + c + u * V);
        if (ACT == BT_FP8_ACT_DGELU)
#pragma unroll
            for (int u = 0; u < 8 / V; u++) bt__k_ld16(h + u * V, hp + i * cols + c + u * V);
#pragma unroll
        for (int j = 0; j < 8; j++) f[j] = bt__k_fp8_val<T, ACT>(v[j], ACT == BT_FP8_ACT_DGELU ? h[j] : v[j]);
    }
}
/* SwiGLU's amax: a grid-stride loop over the output's 8-column groups */
template <typename T, int ACT>
__global__ void bt__k_fp8_amax_glu_kernel(unsigned *amax, const T *x, const T *hp, int64_t rows, int64_t cols) {
    const int64_t gpr = cols / 8, n = rows * gpr, stride = (int64_t)gridDim.x * blockDim.x;
    unsigned m = 0;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += stride) {
        float f[8];
        bt__k_fp8_vals8<T, ACT>(f, x, hp, k / gpr, k % gpr * 8, cols);
#pragma unroll
        for (int j = 0; j < 8; j++) m = max(m, bt__abs_bits(f[j]));
    }
    m = bt__k_block_umax(m);
    if (threadIdx.x == 0 && m) atomicMax(amax, m);
}
template <typename T, int ACT>
__global__ void bt__k_fp8_amax_kernel(unsigned *amax, const T *x, const T *hp, int64_t n, int vec) {
    const int V = 16 / sizeof(T);
    int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x, head = 0;
    unsigned m = 0;
    if (vec) {
        for (int64_t i = tid; i < n / V; i += stride) {
            T v[16 / sizeof(T)], h[16 / sizeof(T)];
            bt__k_ld16(v, x + i * V);
            if (ACT == BT_FP8_ACT_DGELU) bt__k_ld16(h, hp + i * V);
#pragma unroll
            for (int j = 0; j < V; j++) m = max(m, bt__abs_bits(bt__k_fp8_val<T, ACT>(v[j], ACT == BT_FP8_ACT_DGELU ? h[j] : v[j])));
        }
        head = n / V * V;
    }
    for (int64_t i = head + tid; i < n; i += stride) m = max(m, bt__abs_bits(bt__k_fp8_val<T, ACT>(x[i], ACT == BT_FP8_ACT_DGELU ? hp[i] : x[i])));
    m = bt__k_block_umax(m);
    if (threadIdx.x == 0 && m) atomicMax(amax, m);
}
BTDEF void bt_k_fp8_amax_act(bt_dtype dt, bt_fp8_act act, float *amax, const void *x, const void *h, int64_t rows, int64_t cols,
                             cudaStream_t s) {
    const int64_t n = rows * cols;
    if (rows <= 0 || cols <= 0) return;
    if ((act == BT_FP8_ACT_DGELU || act == BT_FP8_ACT_DSWIGLU) && !h) bt_error("bt_k_fp8_amax_act: %s needs h", act == BT_FP8_ACT_DGELU ? "DGELU" : "DSWIGLU");
    if (act == BT_FP8_ACT_SWIGLU || act == BT_FP8_ACT_DSWIGLU) {
        if (cols % (act == BT_FP8_ACT_DSWIGLU ? 16 : 8) || !bt__k_aligned16(x) || (h && !bt__k_aligned16(h)))
            bt_error("bt_k_fp8_amax_act: SwiGLU's [%lld, %lld]: needs cols %% %d == 0 and 16-byte aligned x, h", (long long)rows, (long long)cols,
                     act == BT_FP8_ACT_DSWIGLU ? 16 : 8);
        BT__K_DISPATCH3(dt, "bt_k_fp8_amax_act", {
            unsigned grid = bt__k_blocks(n / 8, 256);
            if (act == BT_FP8_ACT_SWIGLU)
                bt__k_fp8_amax_glu_kernel<T, BT_FP8_ACT_SWIGLU><<<grid, 256, 0, s>>>((unsigned *)amax, (const T *)x, NULL, rows, cols);
            else bt__k_fp8_amax_glu_kernel<T, BT_FP8_ACT_DSWIGLU><<<grid, 256, 0, s>>>((unsigned *)amax, (const T *)x, (const T *)h, rows, cols);
        })
        BT__K_LAUNCHED("bt_k_fp8_amax_act");
        return;
    }
    int vec = bt__k_aligned16(x) && (act != BT_FP8_ACT_DGELU || bt__k_aligned16(h));
    BT__K_DISPATCH3(dt, "bt_k_fp8_amax", {
        unsigned grid = bt__k_blocks(vec ? n / (16 / (int64_t)sizeof(T)) + 1 : n, 256);
        if (act == BT_FP8_ACT_GELU) bt__k_fp8_amax_kernel<T, BT_FP8_ACT_GELU><<<grid, 256, 0, s>>>((unsigned *)amax, (const T *)x, NULL, n, vec);
        else if (act == BT_FP8_ACT_DGELU)
            bt__k_fp8_amax_kernel<T, BT_FP8_ACT_DGELU><<<grid, 256, 0, s>>>((unsigned *)amax, (const T *)x, (const T *)h, n, vec);
        else bt__k_fp8_amax_kernel<T, BT_FP8_ACT_X><<<grid, 256, 0, s>>>((unsigned *)amax, (const T *)x, NULL, n, vec);
    })
    BT__K_LAUNCHED("bt_k_fp8_amax");
}
BTDEF void bt_k_fp8_amax(bt_dtype dt, float *amax, const void *x, int64_t n, cudaStream_t s) {
    bt_k_fp8_amax_act(dt, BT_FP8_ACT_X, amax, x, NULL, 1, n, s);
}
template <typename T, int E5M2>
__global__ void __launch_bounds__(256) bt__k_fp8_cast_kernel(uint8_t *q, uint8_t *qt, const T *x, int64_t rows, int64_t cols,
                                                              const float *amax_in, const float *scale_in, float *scale_used,
                                                              unsigned *amax_acc) {
    __shared__ uint8_t tile[32][33];                  /* +1: a column read touches 32 different words */
    const float s = amax_in ? bt_fp8_scale_of(*amax_in, E5M2 ? BT_F8E5M2_MAX : BT_F8E4M3_MAX) : *scale_in, r = 1.f / s;
    const int lx = threadIdx.x, ly = threadIdx.y;
    const int64_t tc = (cols + 31) / 32, ntiles = (rows + 31) / 32 * tc;
    unsigned m = 0;
    for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const int64_t r0 = t / tc * 32, c0 = t % tc * 32;
        for (int j = ly; j < 32; j += 8) {
            const int64_t i = r0 + j, c = c0 + lx;
            uint8_t b = 0;
            if (i < rows && c < cols) {
                float v = bt__k_tof(x[i * cols + c]);
                m = max(m, bt__abs_bits(v));
                b = bt__k_fp8_cvt<E5M2>(__fmul_rn(v, r));
                if (q) q[i * cols + c] = b;
            }
            tile[j][lx] = b;
        }
        if (qt) {                                     /* uniform over the block */
            __syncthreads();
            for (int j = ly; j < 32; j += 8) {
                const int64_t c = c0 + j, i = r0 + lx;
                if (c < cols && i < rows) qt[c * rows + i] = tile[lx][j];
            }
            __syncthreads();                          /* the next tile overwrites it */
        }
    }
    if (blockIdx.x == 0 && lx == 0 && ly == 0) {
        if (scale_used) *scale_used = s;
        if (amax_in && amax_acc) atomicMax(amax_acc, bt__abs_bits(*amax_in));
    }
    if (!amax_in && amax_acc) {                       /* uniform: the fused amax */
        m = bt__k_block_umax(m);
        if (lx == 0 && ly == 0 && m) atomicMax(amax_acc, m);
    }
}
/* The vector cast: one 64 RT x 64 tile (RT 64 x 64 tiles stacked) at a time per block of 256 threads.
   Loads: a thread reads 8 consecutive elements of a row (16 bytes of bf16 / f16, two 16-byte loads of
   f32), 8 threads a row's 64 columns, 32 rows a pass, 2 RT passes; it writes their 8 fp8 bytes to q
   (one 8-byte store) and as two words to a shared tile of 64 RT rows x 16 words (+1 pad word: rows 4
   apart fall in different banks). Transpose: thread (c, k) gathers column c's bytes of rows 16 k ..
   16 k + 15 of each 64-row part (16 word reads, a byte of each) and writes them as one 16-byte store
   to qt's row c, the parts in turn, so 4 threads write 64 RT consecutive bytes of a qt row. Column
   sums are per 64 rows (colsum [ceil(rows / 64), cols]). RT: 2 for GELU (a qt row's full 128-byte
   line from one block: 10% faster at the default run's [262144, 3072]), 1 for the rest, where the
   taller tile measured 2-7% slower (dev/cuda/fp8_cast_pipeline.cu). Needs cols % 8 == 0, rows % 16
   == 0 when qt is written, and x, q, qt 16-byte aligned (the launcher checks; otherwise
   bt__k_fp8_cast_kernel). Per element: 2 or 4 bytes read, 1 or 2 written, the same multiply and
   rounding as the scalar kernel (converted two at a time), so the same bytes. */
template <typename T, int E5M2, int ACT, int RT>
__global__ void __launch_bounds__(256) bt__k_fp8_cast64_kernel(uint8_t *q, uint8_t *qt, float *colsum, const T *x, const T *hp,
                                                                int64_t rows, int64_t cols, const float *amax_in,
                                                                const float *scale_in, float *scale_used, unsigned *amax_acc) {
    constexpr bool SUMS = ACT == BT_FP8_ACT_DGELU || ACT == BT_FP8_ACT_X;
    __shared__ uint32_t tile[64 * RT][17];
    __shared__ float part[SUMS ? 32 : 1][65];         /* column sums: 32 row lanes x 64 columns */
    const float s = amax_in ? bt_fp8_scale_of(*amax_in, E5M2 ? BT_F8E5M2_MAX : BT_F8E4M3_MAX) : *scale_in, r = 1.f / s;
    const int t = threadIdx.x, cx = t & 7, ry = t >> 3, tcol = t >> 2, tk = t & 3;
    const int64_t tc = (cols + 63) / 64, ntiles = (rows + 64 * RT - 1) / (64 * RT) * tc;
    unsigned m = 0;
    for (int64_t tt = blockIdx.x; tt < ntiles; tt += gridDim.x) {
        const int64_t r0 = tt / tc * 64 * RT, c0 = tt % tc * 64;
        float cs[RT][8];
#pragma unroll
        for (int a = 0; a < RT; a++)
#pragma unroll
            for (int j = 0; j < 8; j++) cs[a][j] = 0.f;
#pragma unroll
        for (int a = 0; a < RT; a++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int lr = 64 * a + ry + 32 * h;
                const int64_t i = r0 + lr, c = c0 + cx * 8;
                uint2 w = make_uint2(0u, 0u);
                if (i < rows && c < cols) {
                    float fv[8];
                    bt__k_fp8_vals8<T, ACT>(fv, x, hp, i, c, cols);
#pragma unroll
                    for (int j = 0; j < 8; j++) cs[a][j] += fv[j];
                    w = bt__k_fp8_pack8<E5M2>(fv, r, m);
                    if (q) *reinterpret_cast<uint2 *>(q + i * cols + c) = w;
                }
                tile[lr][2 * cx] = w.x; tile[lr][2 * cx + 1] = w.y;
            }
        if (SUMS && colsum) {                         /* uniform: each 64 rows' column sums, rows in a fixed order */
#pragma unroll
            for (int a = 0; a < RT; a++) {
                if (a) __syncthreads();               /* the previous half's sums read */
#pragma unroll
                for (int j = 0; j < 8; j++) part[ry][cx * 8 + j] = cs[a][j];
                __syncthreads();
                if (t < 64 && c0 + t < cols && r0 + 64 * a < rows) {
                    float v = 0.f;
                    for (int k = 0; k < 32; k++) v += part[k][t];
                    colsum[((r0 + 64 * a) / 64) * cols + c0 + t] = v;
                }
            }
            if (!qt) __syncthreads();                 /* qt's barrier below does it otherwise */
        }
        if (qt) {                                     /* uniform over the block */
            __syncthreads();
#pragma unroll
            for (int a = 0; a < RT; a++) bt__k_fp8_tile_col(qt, tile + 64 * a, r0 + 64 * a, c0, rows, cols, tcol, tk);
            __syncthreads();                          /* the next tile overwrites it */
        }
    }
    if (blockIdx.x == 0 && t == 0) {
        if (scale_used) *scale_used = s;
        if (amax_in && amax_acc) atomicMax(amax_acc, bt__abs_bits(*amax_in));
    }
    if (!amax_in && amax_acc) {                       /* uniform: the fused amax */
        m = bt__k_block_umax(m);
        if (t == 0 && m) atomicMax(amax_acc, m);
    }
}
template <typename T, int ACT, int RT = ACT == BT_FP8_ACT_GELU ? 2 : 1>
static void bt__k_fp8_cast64_run(bt_dtype fmt, uint8_t *q, uint8_t *qt, float *colsum, const T *x, const T *h, int64_t rows, int64_t cols,
                                 const float *amax_in, const float *scale_in, float *scale_used, float *amax_acc, cudaStream_t s) {
    int64_t ntiles = ((rows + 64 * RT - 1) / (64 * RT)) * ((cols + 63) / 64);
    unsigned grid = bt__k_blocks(ntiles > 0 ? ntiles * 256 : 256, 256);
    if (fmt == BT_F8E5M2)
        bt__k_fp8_cast64_kernel<T, 1, ACT, RT><<<grid, 256, 0, s>>>(q, qt, colsum, x, h, rows, cols, amax_in, scale_in, scale_used,
                                                                   (unsigned *)amax_acc);
    else
        bt__k_fp8_cast64_kernel<T, 0, ACT, RT><<<grid, 256, 0, s>>>(q, qt, colsum, x, h, rows, cols, amax_in, scale_in, scale_used,
                                                                   (unsigned *)amax_acc);
}
static void bt__k_fp8_cast_check(const char *who, bt_dtype fmt, const float *amax_in, const float *scale_in, int64_t rows, int64_t cols) {
    if (fmt != BT_F8E4M3 && fmt != BT_F8E5M2) bt_error("%s: format %s is not f8e4m3 or f8e5m2", who, bt_dtype_name(fmt));
    if (!amax_in == !scale_in) bt_error("%s: give exactly one of amax_in (current scaling) and scale_in (delayed)", who);
    if (rows < 0 || cols < 0) bt_error("%s: x [%lld, %lld]", who, (long long)rows, (long long)cols);
}
BTDEF void bt_k_fp8_cast_act(bt_dtype dt, bt_dtype fmt, bt_fp8_act act, uint8_t *q, uint8_t *qt, float *colsum, const void *x,
                             const void *h, int64_t rows, int64_t cols, const float *amax_in, const float *scale_in, float *scale_used,
                             float *amax_acc, cudaStream_t s) {
    bt__k_fp8_cast_check("bt_k_fp8_cast_act", fmt, amax_in, scale_in, rows, cols);
    if (act != BT_FP8_ACT_X && act != BT_FP8_ACT_GELU && act != BT_FP8_ACT_DGELU && act != BT_FP8_ACT_SWIGLU && act != BT_FP8_ACT_DSWIGLU)
        bt_error("bt_k_fp8_cast_act: act %d is not X, GELU, DGELU, SWIGLU or DSWIGLU", (int)act);
    if ((act == BT_FP8_ACT_DGELU || act == BT_FP8_ACT_DSWIGLU) && !h) bt_error("bt_k_fp8_cast_act: %s needs h", act == BT_FP8_ACT_DGELU ? "DGELU" : "DSWIGLU");
    if (colsum && act != BT_FP8_ACT_DGELU && act != BT_FP8_ACT_X) bt_error("bt_k_fp8_cast_act: column sums with X or DGELU only");
    const int cm = act == BT_FP8_ACT_DSWIGLU ? 16 : 8;
    if (cols % cm || rows % 16 || !bt__k_aligned16(x) || (h && !bt__k_aligned16(h)) || (q && !bt__k_aligned16(q)) || (qt && !bt__k_aligned16(qt)))
        bt_error("bt_k_fp8_cast_act: output [%lld, %lld]: needs cols %% %d == 0, rows %% 16 == 0 and 16-byte aligned x, h, q, qt",
                 (long long)rows, (long long)cols, cm);
    BT__K_DISPATCH3(dt, "bt_k_fp8_cast_act", {
        const T *xp = (const T *)x, *hp = (const T *)h;
        if (act == BT_FP8_ACT_X)
            bt__k_fp8_cast64_run<T, BT_FP8_ACT_X>(fmt, q, qt, colsum, xp, NULL, rows, cols, amax_in, scale_in, scale_used, amax_acc, s);
        else if (act == BT_FP8_ACT_GELU)
            bt__k_fp8_cast64_run<T, BT_FP8_ACT_GELU>(fmt, q, qt, NULL, xp, NULL, rows, cols, amax_in, scale_in, scale_used, amax_acc, s);
        else if (act == BT_FP8_ACT_DGELU)
            bt__k_fp8_cast64_run<T, BT_FP8_ACT_DGELU>(fmt, q, qt, colsum, xp, hp, rows, cols, amax_in, scale_in, scale_used, amax_acc, s);
        else if (act == BT_FP8_ACT_SWIGLU)
            bt__k_fp8_cast64_run<T, BT_FP8_ACT_SWIGLU>(fmt, q, qt, NULL, xp, NULL, rows, cols, amax_in, scale_in, scale_used, amax_acc, s);
        else
            bt__k_fp8_cast64_run<T, BT_FP8_ACT_DSWIGLU>(fmt, q, qt, NULL, xp, hp, rows, cols, amax_in, scale_in, scale_used, amax_acc, s);
    })
    BT__K_LAUNCHED("bt_k_fp8_cast_act");
}
BTDEF void bt_k_fp8_cast(bt_dtype dt, bt_dtype fmt, uint8_t *q, uint8_t *qt, const void *x, int64_t rows, int64_t cols,
                         const float *amax_in, const float *scale_in, float *scale_used, float *amax_acc, cudaStream_t s) {
    bt__k_fp8_cast_check("bt_k_fp8_cast", fmt, amax_in, scale_in, rows, cols);
    int vec = cols % 8 == 0 && (!qt || rows % 16 == 0) && bt__k_aligned16(x) && (!q || bt__k_aligned16(q)) && (!qt || bt__k_aligned16(qt));
    if (vec) {
        BT__K_DISPATCH3(dt, "bt_k_fp8_cast", {
            bt__k_fp8_cast64_run<T, BT_FP8_ACT_X>(fmt, q, qt, NULL, (const T *)x, NULL, rows, cols, amax_in, scale_in, scale_used, amax_acc, s);
        })
        BT__K_LAUNCHED("bt_k_fp8_cast");
        return;
    }
    int64_t ntiles = ((rows + 31) / 32) * ((cols + 31) / 32);
    unsigned grid = bt__k_blocks(ntiles > 0 ? ntiles * 256 : 256, 256);
    dim3 block(32, 8);
    BT__K_DISPATCH3(dt, "bt_k_fp8_cast", {
        if (fmt == BT_F8E5M2)
            bt__k_fp8_cast_kernel<T, 1><<<grid, block, 0, s>>>(q, qt, (const T *)x, rows, cols, amax_in, scale_in, scale_used,
                                                                (unsigned *)amax_acc);
        else
            bt__k_fp8_cast_kernel<T, 0><<<grid, block, 0, s>>>(q, qt, (const T *)x, rows, cols, amax_in, scale_in, scale_used,
                                                                (unsigned *)amax_acc);
    })
    BT__K_LAUNCHED("bt_k_fp8_cast");
}

/* The byte transpose: a block of 256 threads takes 128 rows x 128 columns at a time, as 2 x 2 tiles of
   64 x 64: a thread issues the 16-byte loads of its rows' chunks of all four (64 bytes in flight, 4
   threads a row's 64 bytes of a tile) before it puts any into shared memory (each tile 64 rows x 16
   words +1 pad), then after the barrier gathers column c's bytes of 16 rows of each tile into one
   16-byte store to qt's row c, as the vector cast's transpose does; the two stacked tiles of a column
   go in turn, so each qt row is written in 128-byte pieces (a full line) and each q row read in
   128-byte pieces. At the head's [4096, 50304] 124 us against 155 for 64 x 256 tiles (64-byte pieces
   of qt's rows: half lines, whose other halves another block writes later) and 179 for one 64 x 64
   tile at a time; the same as those at the hidden layers' shapes (dev/cuda/fp8_transpose.cu). The
   tiles go column tile by column tile (tile t: row band t % bands): the blocks resident at once then
   cover every row band of a few column tiles, so each qt row they touch is written whole at about
   the same time, where taking the row bands in turn has them write 128-byte pieces of every qt row
   of a few bands: 5% faster at the default run's head chunk [10496, 50304], 3.6% at its layernorm
   output [262144, 768] (H200, 2026-12-04). The vector cast keeps the row bands in turn: taken by
   column tiles it measured 7-15% slower (its q rows then go out in 64-byte pieces far apart). */
template <int RT, int NT>   /* tiles stacked, side by side: 2, 2 (the ladder runs the others) */
__global__ void __launch_bounds__(256) bt__k_fp8_transpose_kernel(uint8_t *qt, const uint8_t *q, int64_t rows, int64_t cols) {
    __shared__ uint32_t tile[NT][64 * RT][17];
    const int t = threadIdx.x, lr = t >> 2, lc = t & 3, tcol = t >> 2, tk = t & 3;
    const int64_t tr = (rows + 64 * RT - 1) / (64 * RT), ntiles = tr * ((cols + 64 * NT - 1) / (64 * NT));
    for (int64_t tt = blockIdx.x; tt < ntiles; tt += gridDim.x) {   /* column tile by column tile */
        const int64_t r0 = tt % tr * 64 * RT, c0 = tt / tr * 64 * NT;
        uint4 v[RT][NT];
#pragma unroll
        for (int a = 0; a < RT; a++)
#pragma unroll
            for (int u = 0; u < NT; u++) {
                const int64_t i = r0 + 64 * a + lr, c = c0 + 64 * u + 16 * lc;
                v[a][u] = i < rows && c < cols ? *reinterpret_cast<const uint4 *>(q + i * cols + c) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
        for (int a = 0; a < RT; a++)
#pragma unroll
            for (int u = 0; u < NT; u++) {
                uint32_t *w = tile[u][64 * a + lr] + 4 * lc;
                w[0] = v[a][u].x; w[1] = v[a][u].y; w[2] = v[a][u].z; w[3] = v[a][u].w;
            }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < NT; u++)
#pragma unroll
            for (int a = 0; a < RT; a++) bt__k_fp8_tile_col(qt, tile[u] + 64 * a, r0 + 64 * a, c0 + 64 * u, rows, cols, tcol, tk);
        __syncthreads();                              /* the next tiles overwrite them */
    }
}
BTDEF void bt_k_fp8_transpose(uint8_t *qt, const uint8_t *q, int64_t rows, int64_t cols, cudaStream_t s) {
    if (rows <= 0 || cols <= 0) return;
    if (rows % 16 || cols % 16 || !bt__k_aligned16(q) || !bt__k_aligned16(qt))
        bt_error("bt_k_fp8_transpose: [%lld, %lld]: needs rows and cols multiples of 16 and 16-byte aligned q, qt", (long long)rows,
                 (long long)cols);
    const int64_t ntiles = ((rows + 127) / 128) * ((cols + 127) / 128);
    bt__k_fp8_transpose_kernel<2, 2><<<bt__k_blocks(ntiles * 256, 256), 256, 0, s>>>(qt, q, rows, cols);
    BT__K_LAUNCHED("bt_k_fp8_transpose");
}
/* the two 16-bit values of word u (the first in the low half) as f32: bf16 by placing its bits */
template <typename T> __device__ __forceinline__ float2 bt__k_pair_f32(uint32_t u);
template <> __device__ __forceinline__ float2 bt__k_pair_f32<__nv_bfloat16>(uint32_t u) {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
template <> __device__ __forceinline__ float2 bt__k_pair_f32<__half>(uint32_t u) {
    __half2 h;
    memcpy(&h, &u, 4);
    return __half22float2(h);
}
/* bt_kernels.cuh's fused cross-entropy writer for FP8 (T bf16 or f16: a vector is 8 values): the row's
   vector c of gradient values (already rounded to T) to 8 bytes of q at [row, 8 c], each x * r
   converted as the vector cast converts. The amax is kept on the 16-bit values' |bits| (sign masked)
   two lanes to an unsigned max (__vmaxu2): |bits| order as magnitudes, NaN above inf, as f32's do, so
   widening the largest at the end gives the amax bits of the widened values. 7.5% off the kernel against
   widening each value first for the amax (dev/cuda/xent_fp8_writer.cu, a default-run head chunk; most
   of it from reading bf16 pairs as bits, not through the conversion intrinsics). Merged once per
   block (done). */
template <typename T, int E5M2> struct bt__k_xf_fp8 {
    uint8_t *q; int64_t Vp; float r; const float *scale_in; float *scale_used; unsigned *amax, m;   /* m: two lanes of |T bits| */
    void shift(int64_t r0) { q += r0 * Vp; }
    __device__ __forceinline__ void start() { r = 1.f / *scale_in; }   /* as the cast's reciprocal */
    __device__ __forceinline__ void put(T *, int64_t row, int64_t c, const T *a) {
        uint32_t u[4], w[2] = {0u, 0u};
        memcpy(u, a, 16);
#pragma unroll
        for (int j = 0; j < 4; j++) {                 /* values 2 j, 2 j + 1 */
            m = __vmaxu2(m, u[j] & 0x7fff7fffu);
            const float2 f = bt__k_pair_f32<T>(u[j]);
            w[j >> 1] |= bt__k_fp8_cvt2<E5M2>(__fmul_rn(f.x, r), __fmul_rn(f.y, r)) << (16 * (j & 1));
        }
        *reinterpret_cast<uint2 *>(q + row * Vp + c * 8) = make_uint2(w[0], w[1]);
    }
    __device__ __forceinline__ void done() {
        const unsigned short h = (unsigned short)max(m & 0xffffu, m >> 16);
        T v;
        memcpy(&v, &h, 2);
        const unsigned bm = bt__k_block_umax(bt__abs_bits(bt__k_tof(v)));
        if (threadIdx.x == 0) {
            if (amax && bm) atomicMax(amax, bm);
            if (blockIdx.x == 0 && scale_used) *scale_used = *scale_in;
        }
    }
};
template <typename T>
static int bt__k_xf_fp8_run(int e5, float *losses, float *lse, void *logits, uint8_t *q, const int32_t *targets, const float *gloss,
                            int64_t N, int64_t V, int64_t Vp, int ignore_index, int *bad, const float *scale_in, float *scale_used,
                            float *amax_acc, cudaStream_t s) {
    if (e5) {
        bt__k_xf_fp8<T, 1> w = {q, Vp, 0.f, scale_in, scale_used, (unsigned *)amax_acc, 0u};
        return bt__k_xf_launch<T>(losses, lse, (T *)logits, targets, gloss, N, V, Vp, ignore_index, bad, w, s);
    }
    bt__k_xf_fp8<T, 0> w = {q, Vp, 0.f, scale_in, scale_used, (unsigned *)amax_acc, 0u};
    return bt__k_xf_launch<T>(losses, lse, (T *)logits, targets, gloss, N, V, Vp, ignore_index, bad, w, s);
}
BTDEF void bt_k_cross_entropy_fused_fp8(bt_dtype dt, bt_dtype fmt, float *losses, float *lse, void *logits, uint8_t *q, uint8_t *qt,
                                        const int32_t *targets, const float *gloss, int64_t N, int64_t V, int64_t Vp, int ignore_index,
                                        int *bad, const float *scale_in, float *scale_used, float *amax_acc, cudaStream_t s) {
    bt__k_fp8_cast_check("bt_k_cross_entropy_fused_fp8", fmt, NULL, scale_in, N, Vp);
    if (N <= 0) return;
    if (V <= 0 || V > Vp) bt_error("bt_k_cross_entropy_fused_fp8: V = %lld, Vp = %lld (need 0 < V <= Vp)", (long long)V, (long long)Vp);
    if (qt && (N % 16 || Vp % 16 || !bt__k_aligned16(qt)))
        bt_error("bt_k_cross_entropy_fused_fp8: [%lld, %lld] with a transpose: needs N and Vp multiples of 16 and 16-byte aligned qt",
                 (long long)N, (long long)Vp);
    int done = 0, e5 = fmt == BT_F8E5M2;
    /* qt inside the logits' bytes: it is written only after the last read of them (the transpose of q) */
    const uint8_t *lb = (const uint8_t *)logits;
    const int qt_in = qt && qt + N * Vp > lb && qt < lb + (size_t)(N * Vp) * bt_dtype_size(dt);
    if (qt_in && q && !bt__k_aligned16(q))
        bt_error("bt_k_cross_entropy_fused_fp8: qt lies in the logits' bytes, so q (the transpose's source) must be 16-byte aligned");
    uint8_t *qq = q;
    if (!qq && qt && (dt == BT_BF16 || dt == BT_F16 || qt_in)) qq = (uint8_t *)bt__k_scratch((size_t)(N * Vp), s);   /* the transpose's source */
    if (qq && bt__k_aligned16(qq) && dt == BT_BF16)
        done = bt__k_xf_fp8_run<__nv_bfloat16>(e5, losses, lse, logits, qq, targets, gloss, N, V, Vp, ignore_index, bad, scale_in, scale_used,
                                               amax_acc, s);
    else if (qq && bt__k_aligned16(qq) && dt == BT_F16)
        done = bt__k_xf_fp8_run<__half>(e5, losses, lse, logits, qq, targets, gloss, N, V, Vp, ignore_index, bad, scale_in, scale_used, amax_acc, s);
    if (done) {
        BT__K_LAUNCHED("bt_k_cross_entropy_fused_fp8");
        if (qt) bt_k_fp8_transpose(qt, qq, N, Vp, s);
    } else {                                          /* the gradient in dt over the logits, then its cast */
        bt_k_cross_entropy_fused(dt, losses, lse, logits, targets, gloss, N, V, Vp, ignore_index, bad, s);
        if (qt_in) {                                  /* q first, then qt over the logits read */
            bt_k_fp8_cast(dt, fmt, qq, NULL, logits, N, Vp, NULL, scale_in, scale_used, amax_acc, s);
            bt_k_fp8_transpose(qt, qq, N, Vp, s);
        } else bt_k_fp8_cast(dt, fmt, q, qt, logits, N, Vp, NULL, scale_in, scale_used, amax_acc, s);
    }
    if (qq != q) bt_free(qq);
}

/* ---- 2. the scaling states' update: one thread per row (x, w, gy of each state) ---------------------- */
__global__ void bt__k_fp8_update_kernel(float *state, int hist, int64_t rows) {
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) bt__fp8_roll(state + r * (2 + hist), hist, bt_fp8_max(bt_fp8_format((int)(r % BT_FP8_ROLES))));
}
BTDEF void bt_k_fp8_update(float *state, int hist, int64_t n, cudaStream_t s) {
    if (hist < 1) bt_error("bt_k_fp8_update: history of length %d", hist);
    if (n < 1) bt_error("bt_k_fp8_update: %lld states", (long long)n);
    int64_t rows = n * BT_FP8_ROLES;
    bt__k_fp8_update_kernel<<<(unsigned)((rows + 127) / 128), 128, 0, s>>>(state, hist, rows);
    BT__K_LAUNCHED("bt_k_fp8_update");
}

/* ---- 3. the FP8 product (cuBLASLt) -----------------------------------------------------------------
   As bt_kernels.cuh's section 10 maps row-major products: C [M, N] = A B^T is column-major C^T = B A^T,
   so cuBLASLt's A is our B ([N, K] row-major = column-major K x N, ld K, op T) and its B is our A
   ([M, K] = K x M, ld K, op N): "TN", the only layout its FP8 kernels take, with m = N, n = M. Its A
   scale pointer gets our B's scale, its B scale pointer our A's. Compute CUBLAS_COMPUTE_32F, scale
   type f32, alpha 1 on the host, beta 1 with R (cuBLASLt's C; ours is its D), else 0. Plans live in bt_kernels.cuh's table under keys that no
   other product has (key[0], key[1] the fp8 formats); a plan's descriptor keeps the scale and bias
   pointers of its last call, set again before each. */
static int bt__k_fp8_mm_make(bt__k_ctx *c, bt__k_mm_plan *p, bt_dtype dt, bt_dtype fa, bt_dtype fb, int64_t M, int64_t N, int64_t K,
                             int fast_accum, const void *bias, const float *sa, const float *sb, const uint32_t al[4]) {
    const char *op = "bt_k_matmul_fp8";
    BT__K_BLAS(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), op);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    int8_t fast = fast_accum != 0;
    BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), op);
    BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), op);
    BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast), op);
    BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb), op);
    BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa), op);
    BT__K_BLAS(cublasLtMatrixLayoutCreate(&p->la, bt__k_cuda_dt(fb), (uint64_t)K, (uint64_t)N, K), op);
    BT__K_BLAS(cublasLtMatrixLayoutCreate(&p->lb, bt__k_cuda_dt(fa), (uint64_t)K, (uint64_t)M, K), op);
    BT__K_BLAS(cublasLtMatrixLayoutCreate(&p->lc, bt__k_cuda_dt(dt), (uint64_t)N, (uint64_t)M, N), op);
    cublasLtMatmulPreference_t pref = bt__k_mm_pref(al, op);
    cublasLtMatmulHeuristicResult_t res[BT__K_MM_CANDIDATES];
    int nres = 0;
    p->epi_bias = 0; p->no_algo = 0;
    if (bias) {                                       /* the bias in C's dtype: bf16 or f16 C only (see above) */
        cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
        BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), op);
        BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), op);
        if (cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, BT__K_MM_CANDIDATES, res, &nres) ==
                CUBLAS_STATUS_SUCCESS && nres > 0)
            p->epi_bias = 1;
        else {                                        /* none with the epilogue: plain, the bias added after */
            e = CUBLASLT_EPILOGUE_DEFAULT;
            BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), op);
            nres = 0;
        }
    }
    if (!p->epi_bias &&
        cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, BT__K_MM_CANDIDATES, res, &nres) != CUBLAS_STATUS_SUCCESS)
        nres = 0;
    cublasLtMatmulPreferenceDestroy(pref);
    return bt__k_mm_keep(p, res, nres);
}
BTDEF void bt_k_matmul_fp8(bt_dtype dt, void *C, const void *A, bt_dtype fa, const float *sa, const void *B, bt_dtype fb,
                           const float *sb, const void *bias, const void *R, int64_t M, int64_t N, int64_t K, int fast_accum,
                           cudaStream_t s) {
    const char *op = "bt_k_matmul_fp8";
    if (dt != BT_BF16 && dt != BT_F16 && dt != BT_F32) bt_error("%s: C of dtype %s (bf16, f16 or f32)", op, bt_dtype_name(dt));
    if ((fa != BT_F8E4M3 && fa != BT_F8E5M2) || (fb != BT_F8E4M3 && fb != BT_F8E5M2) || (fa == BT_F8E5M2 && fb == BT_F8E5M2))
        bt_error("%s: operands %s x %s (e4m3 x e4m3, or one e5m2 with one e4m3)", op, bt_dtype_name(fa), bt_dtype_name(fb));
    if (M <= 0 || N <= 0 || K <= 0 || M % 16 || N % 16 || K % 16)
        bt_error("%s: M=%lld N=%lld K=%lld: positive multiples of 16 expected (cuBLASLt's FP8 layout)", op, (long long)M, (long long)N,
                 (long long)K);
    if (!sa || !sb) bt_error("%s: no %s scale", op, !sa ? "A's" : "B's");
    if (!bt__k_aligned16(sa) || !bt__k_aligned16(sb))   /* cuBLASLt's FP8 scale pointers: else "not supported" by every algorithm */
        bt_error("%s: the scales sa and sb must be 16-byte aligned", op);
    if (!bt__k_aligned16(A) || !bt__k_aligned16(B) || !bt__k_aligned16(C) || (R && !bt__k_aligned16(R)))
        bt_error("%s: A, B, C and R must be 16-byte aligned", op);
    if (!bt_k_fp8_supported()) bt_error("%s: cuda:%d has no FP8 tensor cores (compute capability 8.9 or newer)", op, bt__k_device());
    bt__k_ctx *c = bt__k_cur();
    int try_bias = bias && dt != BT_F32;
    uint32_t ac = bt__k_align_of(C), ar = R ? bt__k_align_of(R) : ac;
    uint32_t al[4] = {bt__k_align_of(A), bt__k_align_of(B), ac < ar ? ac : ar, try_bias ? bt__k_align_of(bias) : 0};
    int rmode = !R ? 0 : R == C ? 2 : 1;              /* none, a residual, C accumulating */
    int64_t key[18] = {fa, fb, M, N, K, fast_accum != 0, 0, 1, 0, 0, 0, try_bias, al[0], al[1], al[2], al[3], dt, rmode};
    int fresh = 0;
    bt__k_mm_plan *p = bt__k_mm_slot(c, key, &fresh);
    if (fresh) {
        if (!bt__k_fp8_mm_make(c, p, dt, fa, fb, M, N, K, fast_accum, try_bias ? bias : NULL, sa, sb, al))
            bt_error("%s: cuBLASLt has no algorithm for %s x %s -> %s M=%lld N=%lld K=%lld", op, bt_dtype_name(fa), bt_dtype_name(fb),
                     bt_dtype_name(dt), (long long)M, (long long)N, (long long)K);
        memcpy(p->key, key, sizeof key);
        const cublasLtMatmulAlgo_t *loaded = bt__k_loaded_algo(bt__k_device(), key);
        if (loaded) { p->algo = *loaded; p->n_cand = 0; }
    }
    BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb), op);
    BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa), op);
    if (p->epi_bias) BT__K_BLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), op);
    const float alpha = 1.f, beta = R ? 1.f : 0.f;
    if (p->n_cand) {                                  /* timed into C (rewritten below), or a scratch when C accumulates */
        void *scratch = rmode == 2 ? bt__k_scratch((size_t)(M * N) * bt_dtype_size(dt), s) : NULL;
        if (scratch) BT__K_CUDA(cudaMemsetAsync(scratch, 0, (size_t)(M * N) * bt_dtype_size(dt), s), op);
        bt__k_mm_autotune(c, p, &alpha, A, B, &beta, rmode == 1 ? R : NULL, scratch ? scratch : C, s);
        bt_free(scratch);
    }
    BT__K_BLAS(cublasLtMatmul(c->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, R ? R : C, p->lc, C, p->lc, &p->algo,
                              bt__k_workspace(c, s), BT__K_WS_BYTES, s), op);
    if (bias && !p->epi_bias) bt__k_matmul_bias(dt, C, bias, 1, M, N, M * N, s);
}

/* ---- 4. layernorm and RMSNorm with the cast of their output -----------------------------------------
   The rows of bt_kernels.cuh's section 6, with its per-row math (bt__k_ln_row) in the same order,
   so mean, rstd and each output's bits are that kernel's: a warp a row where bt_k_layernorm takes
   its warp path (C <= 1024), S = bt__k_brow_threads threads a row where it takes its block-row path
   (the block sum over a group of S threads, bt__k_group_sum, adds what bt__k_bsum adds, in its
   order). A block holds 16 rows (8 warps, or G groups of S threads, G a power of two <= 8,
   G S <= 512), each warp or group taking its rows in turn. Each output rounded to T as that kernel
   stores it, then scaled and rounded to e4m3 as bt_k_fp8_cast does, 8 bytes a thread to q; the
   amax is the rounded outputs', as the cast measures it. qt then comes from q by bt_k_fp8_transpose.
   Traffic per element: x read (2 bytes), q written (1), then q read and qt written (2): 5 bytes
   where the norm then the cast move 8. dev/cuda/layernorm_fp8_cast.cu's ladder measured this form
   (its v5) against qt written by the norm's kernel from a shared tile (16-, 32- and 64-row tiles):
   as fast at 16K rows, 1.2-1.8x faster at 262K (a d12 default-run micro-batch), where the tile's
   16- or 32-byte pieces of qt's far-apart rows no longer meet in L2. */
#define BT__K_NF8_ROWS 16
struct bt__k_group_sum {   /* bt__k_bsum over the nw warps of group grp: the same sums in the same order */
    float *sh; int nw, grp;
    __device__ float operator()(float v) const {
        v = bt__k_wsum(v);
        int w = (threadIdx.x >> 5) - grp * nw, l = threadIdx.x & 31;
        __syncthreads();
        if (l == 0) sh[w] = v;
        __syncthreads();
        v = l < nw ? sh[l] : 0.f;
        return bt__k_wsum(v);
    }
};
template <typename T, int NV, int RMS, int WARP>
__global__ void __launch_bounds__(512) bt__k_norm_fp8_kernel(uint8_t *q, float *mean, float *rstd, const T *x, const T *w, const T *b,
                                                              int64_t rows, int C, float eps, int S, const float *scale_in,
                                                              float *scale_used, unsigned *amax_acc) {
    __shared__ float gsh[16 * 32];                    /* 32 floats a group (block rows) */
    const int TR = BT__K_NF8_ROWS, VE = 16 / sizeof(T), nvec = C / VE, G = blockDim.x / S, grp = threadIdx.x / S, t = threadIdx.x - grp * S;
    const float r = 1.f / *scale_in;
    unsigned m = 0;
    for (int64_t r0 = (int64_t)blockIdx.x * TR; r0 < rows; r0 += (int64_t)gridDim.x * TR) {
        const int per = (rows - r0 < TR ? (int)(rows - r0) : TR) / G;   /* 16 rows (rows % 16 == 0); G divides 16 */
        for (int k = 0; k < per; k++) {               /* the same count for every group: the group sums' barriers */
            const int64_t row = r0 + grp + G * k;
            float v[NV][VE], mu, rs;
            bt__k_vecs_ld<T, NV>(v, x + row * C, nvec, t, S);
            if (WARP) bt__k_ln_row<T, NV, RMS>(v, w, b, nvec, t, 32, C, eps, bt__k_warp_sum(), mu, rs);
            else bt__k_ln_row<T, NV, RMS>(v, w, b, nvec, t, S, C, eps, bt__k_group_sum{gsh + 32 * grp, S >> 5, grp}, mu, rs);
#pragma unroll
            for (int i = 0; i < NV; i++) {
                const int c = t + S * i;
                if (c >= nvec) continue;
                float f[VE];
#pragma unroll
                for (int e = 0; e < VE; e++) f[e] = bt__k_tof(bt__k_from<T>(v[i][e]));
                bt__k_fp8_store_vec<VE, 0>(q + row * C + c * VE, f, r, m);
            }
            if (t == 0) {
                if (mean) mean[row] = mu;
                if (rstd) rstd[row] = rs;
            }
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0 && scale_used) *scale_used = *scale_in;
    if (amax_acc) {                                   /* uniform */
        m = bt__k_block_umax(m);
        if (threadIdx.x == 0 && m) atomicMax(amax_acc, m);
    }
}
/* 1: the warp path (C <= 1024), 2: the block-row path of bt_k_layernorm for these pointers (its
   output, a fresh allocation, aligned), 0: neither */
static int bt__k_norm_fp8_path(bt_dtype dt, int64_t C, const void *x, const void *w, const void *b) {
    size_t es = dt == BT_F32 ? 4 : 2;
    if (bt__k_rowfast(C, es, x, x, w ? w : x, b ? b : x)) return 1;
    if (bt__k_browfast(C, es, x, x, w ? w : x, b ? b : x)) return 2;
    return 0;
}
BTDEF int bt_k_norm_fp8_fits(bt_dtype dt, int64_t rows, int64_t C, const void *x, const void *w, const void *b, const void *q,
                             const void *qt) {
    if (dt != BT_F32 && dt != BT_BF16 && dt != BT_F16) return 0;
    if (rows <= 0 || rows % 16 || C <= 0 || C > 4096 || C % 16 || (q && !bt__k_aligned16(q)) || (qt && !bt__k_aligned16(qt))) return 0;
    return bt__k_norm_fp8_path(dt, C, x, w, b) != 0;
}
template <int RMS>
static void bt__k_norm_fp8(bt_dtype dt, uint8_t *q, uint8_t *qt, float *mean, float *rstd, const void *x, const void *w, const void *b,
                           int64_t rows, int64_t C, float eps, const float *scale_in, float *scale_used, float *amax_acc, cudaStream_t s) {
    const char *op = RMS ? "bt_k_rmsnorm_fp8" : "bt_k_layernorm_fp8";
    if (!scale_in) bt_error("%s: no scale_in (the delayed recipe's scale; the current recipe casts after bt_k_layernorm)", op);
    if (!q || !bt_k_norm_fp8_fits(dt, rows, C, x, w, b, q, qt))
        bt_error("%s: x [%lld, %lld] of %s: needs rows %% 16 == 0, C <= 4096 a multiple of 16, 16-byte aligned x, w, b, q, qt "
                 "(bt_k_norm_fp8_fits)", op, (long long)rows, (long long)C, bt_dtype_name(dt));
    const int path = bt__k_norm_fp8_path(dt, C, x, w, b);
    const int64_t tiles = (rows + BT__K_NF8_ROWS - 1) / BT__K_NF8_ROWS, cap = (int64_t)bt__k_cur()->sm_count * 16;
    const unsigned grid = (unsigned)(tiles < cap ? tiles : cap);
    BT__K_DISPATCH3(dt, op, {
        const int64_t nvec = C / (int64_t)(16 / sizeof(T));
        if (path == 1) {
            int nv = bt__k_pick_nv(nvec);
            BT__K_NV_DISPATCH(nv, {
                bt__k_norm_fp8_kernel<T, NV, RMS, 1><<<grid, 256, 0, s>>>(q, mean, rstd, (const T *)x, (const T *)w, (const T *)b, rows, (int)C,
                                                                          eps, 32, scale_in, scale_used, (unsigned *)amax_acc);
            })
        } else {
            const int S = (int)bt__k_brow_threads(nvec);
            int G = 1;                                /* groups: a power of two <= 8, so each does 16 / G rows */
            while (2 * G * S <= 512 && G < 8) G *= 2;
            bt__k_norm_fp8_kernel<T, BT__K_BROW_NV, RMS, 0><<<grid, (unsigned)(G * S), 0, s>>>(
                q, mean, rstd, (const T *)x, (const T *)w, (const T *)b, rows, (int)C, eps, S, scale_in, scale_used, (unsigned *)amax_acc);
        }
    })
    BT__K_LAUNCHED(op);
    if (qt) bt_k_fp8_transpose(qt, q, rows, C, s);
}
BTDEF void bt_k_layernorm_fp8(bt_dtype dt, uint8_t *q, uint8_t *qt, float *mean, float *rstd, const void *x, const void *w,
                              const void *b, int64_t rows, int64_t C, float eps, const float *scale_in, float *scale_used,
                              float *amax_acc, cudaStream_t s) {
    bt__k_norm_fp8<0>(dt, q, qt, mean, rstd, x, w, b, rows, C, eps, scale_in, scale_used, amax_acc, s);
}
BTDEF void bt_k_rmsnorm_fp8(bt_dtype dt, uint8_t *q, uint8_t *qt, float *rstd, const void *x, const void *w, int64_t rows, int64_t C,
                            float eps, const float *scale_in, float *scale_used, float *amax_acc, cudaStream_t s) {
    bt__k_norm_fp8<1>(dt, q, qt, NULL, rstd, x, w, NULL, rows, C, eps, scale_in, scale_used, amax_acc, s);
}

#endif /* BT_FP8_IMPLEMENTATION_DONE */
#endif /* BT_KERNELS_CUH */
