/* bt_attention.cuh - BluTrain-C attention kernels, v0.1: softmax attention, causal or not, forward and
   backward on the GPU (the CUDA side of bt_tensor.h's attention op and of ring attention's blocks).

   A part of bt_kernels.cuh (its section 9), in a file of its own for its size: bt_kernels.cuh includes
   it twice, for the declarations below and, inside its implementation (BT_KERNELS_IMPLEMENTATION), for
   the kernels, which use that file's device helpers (cp.async, mbarriers, bulk and tensor copies, the
   dtype loads) and its scratch memory. Include bt_kernels.cuh or bt_tensor.h; included alone, this file
   brings bt_kernels.cuh.

   The kernels here are the ones that ship, one per architecture, dtype and head size: tiles with an
   online softmax (no T x T scratch) and a deterministic backward. The variants they were measured
   against, the timing-only ablations and the per-item traces are dev/cuda/attention_forward.cu and
   dev/cuda/attention_backward.cu (a ladder each, checked against a CPU reference).

   CONTENTS
     declarations  bt_k_attention*, the Hopper path's switch, its tuning for tests and ladders
     1. the math, the paths, the parameter block
     2. sm_80 tensor cores (mma.sync m16n8k16 bf16 / f16, m16n8k8 tf32): forward, dQ, dK/dV
     3. strict fp32 (FFMA): forward, dK/dV (dS to scratch), dQ (from it); Dvec
     4. sm_90a primitives: wgmma, descriptors and the 128-byte swizzle, turns, loads, work order
     5. sm_90a forward: a TMA producer, three consumer warpgroups at D 64, two at D 128
     6. sm_90a backward: dK/dV and dQ kernels, the fused causal D 64 kernel, its Dvec pre-pass
     7. host: checks, the measured defaults and the tuning, launches, tensor maps, entry points
*/
#ifndef BT_KERNELS_CUH
#include "bt_kernels.cuh"
#else

#ifndef BT_ATTENTION_CUH
#define BT_ATTENTION_CUH

/* ---- declarations: attention, causal or not (tiled, online softmax; no T x T scratch) ----
   out = softmax(q k^T * scale + mask) v, lse = the log-sum-exp of each row (saved for the
   backward). causal = 1 hides key j from query i for j > i (GPT-2); causal = 0 lets every query
   see every key (a ring-attention block off the diagonal). scale > 0.
   q, out, gq, gout are [B, H, T, D], k, v, gk, gv [B, Hkv, T, D], read/written through element
   strides {batch, head, token} (the D stride is 1): a view of a [B, T, H, D] buffer has strides
   {T*H*D, D, H*D}. Hkv divides H: query head h attends with key/value head h / (H / Hkv)
   (grouped-query attention, read in place; Hkv = H: multi-head). The backward then writes dK, dV of
   each query head to scratch (2 B H T D elements) and sums each group's into gk, gv. lse fp32 [B, H, T] contiguous. D from 1 to 128. precision (as for matmul):
   f32 data with BT_MATMUL_FP32 is computed with fp32 FFMA (no TF32), with BT_MATMUL_TF32 on TF32
   tensor cores (fp32 accumulation and softmax); bf16/f16 always on tensor cores with fp32
   accumulation (precision ignored). The backward is deterministic (no atomics) and takes Dvec
   scratch (4 B H T bytes) from bt_alloc on the stream; the strict-fp32 backward also takes its dS
   (64 x 64 fp32 tiles: about 2 T^2 bytes per head causal, 4 T^2 not), over chunks of heads
   that keep it under bt_k_attention_scratch_cap (512 MiB by default). On an H100 (sm_90a build)
   bf16/f16 with D 64 or 128 run on warpgroup-MMA kernels (bt_k_attention_hopper). */
BTDEF void bt_k_attention_strided(bt_dtype dt, void *out, const int64_t *so, float *lse,
    const void *q, const int64_t *sq, const void *k, const int64_t *sk, const void *v, const int64_t *sv,
    int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, float scale, int causal, bt_matmul_precision precision, cudaStream_t s);
BTDEF void bt_k_attention_backward_strided(bt_dtype dt, void *gq, const int64_t *sgq, void *gk, const int64_t *sgk,
    void *gv, const int64_t *sgv, const void *gout, const int64_t *sgo, const void *q, const int64_t *sq,
    const void *k, const int64_t *sk, const void *v, const int64_t *sv, const void *out, const int64_t *so,
    const float *lse, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, float scale, int causal,
    bt_matmul_precision precision, cudaStream_t s);
/* the backward, and the column sums of gq, gk and gv too when the kernel can give them in its own pass
   (the fused Hopper backward: causal, bf16/f16, D 64): colsum (fp32 [3, H, D]) gets, for part q / k /
   v, head h and column d, the sum over b and t of that gradient (before its rounding): the bias
   gradient of a packed qkv projection. Returns 1 when it wrote colsum, 0 when not (untouched). */
BTDEF int bt_k_attention_backward_colsum(bt_dtype dt, void *gq, const int64_t *sgq, void *gk, const int64_t *sgk,
    void *gv, const int64_t *sgv, const void *gout, const int64_t *sgo, const void *q, const int64_t *sq,
    const void *k, const int64_t *sk, const void *v, const int64_t *sv, const void *out, const int64_t *so,
    const float *lse, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, float scale, int causal,
    bt_matmul_precision precision, float *colsum, cudaStream_t s);
/* the Hopper path (wgmma kernels, used on a compute capability 9.0 device by an sm_90a build for
   bf16 / f16 with D 64 or 128 and 16-byte aligned rows): on = 1 allows it (the default), 0 keeps
   every call on the sm_80 kernels, -1 only asks. Returns the setting before (bit 0), plus 2 when
   the current device can run the wgmma kernels (3: they run). */
BTDEF int bt_k_attention_hopper(int on);
/* Tuning of the Hopper path, for tests and dev/cuda ladders (nothing in the library sets it): the
   defaults are the measured ones (section 7 below); other values make small shapes take
   paths that the defaults take only at large ones: many L2 sections of heads, the fixed or the
   counter's order of work items, the two-kernel backward. t = NULL restores the defaults; a test
   that sets it resets it. */
typedef struct {
    int l2_mb_fwd;   /* MiB of K and V that the forward's CTAs running at once re-read from L2: heads go in
                        sections of that many (0: one section of all heads) */
    int l2_mb_bwd;   /* the same for the two-kernel backward (dQ: K, V; dK/dV: Q, dO, lse, Dvec) */
    int l2_one_mb;   /* one section of all heads whenever all their re-read bytes fit in this many MiB */
    int order;       /* work items of the persistent kernels (forward, fused backward), where a CTA takes
                        several: 0 the measured rule, 1 a fixed snake order, 2 from a counter as SMs free up */
    int fused_tmax;  /* the causal D 64 backward in one fused kernel up to this T (0: never), else two kernels */
} bt_k_attention_tuning;
BTDEF void bt_k_attention_set_tuning(const bt_k_attention_tuning *t);
BTDEF bt_k_attention_tuning bt_k_attention_get_tuning(void);
/* sets the strict-fp32 backward's dS scratch cap (bytes; 0 only asks) and returns the one before */
BTDEF size_t bt_k_attention_scratch_cap(size_t bytes);
/* the same on contiguous [B, H, T, D] tensors (strides {H*T*D, T*D, D}), precision BT_MATMUL_FP32 */
BTDEF void bt_k_attention(bt_dtype dt, void *out, float *lse, const void *q, const void *k, const void *v,
                          int64_t B, int64_t H, int64_t T, int64_t D, float scale, cudaStream_t s);
BTDEF void bt_k_attention_backward(bt_dtype dt, void *gq, void *gk, void *gv, const void *gout, const void *q,
                                   const void *k, const void *v, const void *out, const float *lse, int64_t B,
                                   int64_t H, int64_t T, int64_t D, float scale, cudaStream_t s);

#endif /* BT_ATTENTION_CUH */

/* ==============================================================================================
   IMPLEMENTATION (inside bt_kernels.cuh's, after its device helpers)
   ============================================================================================== */
#if defined(BT_KERNELS_IMPLEMENTATION_DONE) && !defined(BT_ATTENTION_IMPLEMENTATION_DONE)
#define BT_ATTENTION_IMPLEMENTATION_DONE

/* ---- 1. the math and the paths: tiled, online softmax (flash-style), strided, causal or not -------
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
    float *dvec_out;    /* wgmma dQ kernel: writes Dvec of its rows here (the library always sets it: no pre-pass);
                           NULL reads p.dvec (a pre-pass's; dev/cuda/attention_backward.cu) */
    int turns;          /* wgmma backward kernels: 1, the two warpgroups take turns issuing products (0 in
                           dev/cuda/attention_backward.cu). This and dvec_out stay run-time arguments: as constants
                           they changed ptxas's schedule of every backward kernel (a different machine code) */
    int *ctr;           /* persistent wgmma forward: work items taken from this counter (zeroed per launch),
                           as the SMs free up; NULL: a fixed snake order (bt__k_att_item) */
    float *dqacc;       /* fused wgmma backward: fp32 dQ sums, a 128 x 64 tile per (head - bh0, query tile) */
    int *dqcnt;         /* fused wgmma backward: dQ parts added per (head - bh0, query tile), zeroed per launch */
    unsigned long long *trace;   /* read by no kernel here: dev/cuda/attention_forward.cu's traced forward (clocks
                                    a work item) takes this parameter block as it is */
    float *cs_part;     /* fused wgmma backward, may be NULL: column sums of gq, gk, gv over each warp's 16 rows,
                           fp32 [B][cs_slabs][3][H][D] (bt__k_wg_colsum) */
    int cs_slabs;       /* (T + 15) / 16 */
    int H, T, D, vec, vec_out;
    int G;              /* query heads per key/value head (grouped-query attention): head h reads K, V of head h / G */
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
/* K and V of query head bh: head (bh mod H) / G of their Hkv = H / G (grouped-query attention; G 1: the same head) */
__device__ __forceinline__ int64_t bt__k_att_kvoff(const bt__k_attp &p, const int64_t *s, int64_t bh) {
    int64_t b = bh / p.H;
    return b * s[0] + ((bh - b * p.H) / p.G) * s[1];
}
/* key hidden from query row: above the diagonal when causal, past the end (key >= T) when not
   (causal covers the end for every row < T; rows >= T are computed but never stored) */
__device__ __forceinline__ int bt__k_att_masked(const bt__k_attp &p, int key, int row) {
    return p.causal ? key > row : key >= p.T;
}
/* ---- 2. sm_80 tensor cores: mma.sync fragments, forward, dQ, dK/dV --------------------------- */
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
        const T *q = (const T *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const T *)p.k + bt__k_att_kvoff(p, p.sk, bh),
                *v = (const T *)p.v + bt__k_att_kvoff(p, p.sv, bh);
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
        const T *q = (const T *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const T *)p.k + bt__k_att_kvoff(p, p.sk, bh),
                *v = (const T *)p.v + bt__k_att_kvoff(p, p.sv, bh), *go = (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H);
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
        const T *q = (const T *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const T *)p.k + bt__k_att_kvoff(p, p.sk, bh),
                *v = (const T *)p.v + bt__k_att_kvoff(p, p.sv, bh), *go = (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H);
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

/* ---- 3. strict fp32 (FFMA): forward, dK/dV with dS to scratch, dQ; Dvec ---------------------- */
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
        const float *q = (const float *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const float *)p.k + bt__k_att_kvoff(p, p.sk, bh),
                    *v = (const float *)p.v + bt__k_att_kvoff(p, p.sv, bh);
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
        const float *q = (const float *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const float *)p.k + bt__k_att_kvoff(p, p.sk, bh),
                    *v = (const float *)p.v + bt__k_att_kvoff(p, p.sv, bh),
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
        const float *k = (const float *)p.k + bt__k_att_kvoff(p, p.sk, bh), *ds = p.ds + (bh - p.bh0) * per_bh + bt__k_ds_tile(p, nqt, qt, 0);
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

/* ---- 4. sm_90a (Hopper) primitives: wgmma, descriptors, swizzle, turns, loads, work order ---- */
/* -- Hopper (sm_90a) path: bf16 / f16, D = 64 or 128, 16-byte aligned rows --
   The same math on warpgroup MMAs (wgmma.mma_async: a 64 x N x 16 product issued by 4 warps, B
   and optionally A read by the tensor cores straight from shared memory, fp32 accumulators in
   registers). A CTA has two consumer warpgroups (warps 0-3 and 4-7; three in the forward at D 64)
   that compute and a producer warpgroup (the last four warps, registers handed to the consumers by
   setmaxnreg) that loads (and in the fused backward adds dQ parts). The producer streams tiles with
   cp.async into a two-stage ring per operand and completes an mbarrier per stage ("full":
   cp.async.mbarrier.arrive fires when its copies land; the forward's producer instead has one thread
   ask the tensor memory accelerator for each tile, a 4-d tensor-map box in the same swizzle whose
   bytes complete the barrier: 1.3% faster at T 1024); the consumers wait on it, multiply, and give
   the stage back on its "empty" mbarrier (one arrival per consumer warp, after its wgmma.wait_group
   says the tensor cores are done reading). The stage counts give a phase parity per use: the n-th
   use of a stage waits for the n-th completion, parity n & 1.
   Shared tiles hold R rows of D elements as D / 64 column blocks of [R][64] (128 bytes a row), the
   16-byte chunk c of row r stored at chunk c ^ (r & 7) of its row: the 128-byte swizzle the MMA
   descriptors name, so a tile is read conflict-free both as a K-major operand (rows = M or N, D =
   the product's k: Q K^T, dO V^T, K Q^T, V dO^T) and as an MN-major one (rows = the product's k:
   P V, dS K, P^T dO, dS^T Q). P and dS go from the accumulators to the A operand in registers
   (the accumulator's pairs are the A fragment's pairs), rounded to the dtype.
   Forward (section 5): a CTA owns 64 queries a consumer warpgroup and walks 128-key tiles; K and V
   have their own rings (3 stages at D 64, 2 at D 128) and Q two buffers (items alternate), so the
   next tiles load while a tile's softmax runs. At D 128 the two warpgroups take turns at the tensor
   cores (named barriers 1 and 2, "ping-pong"): a warpgroup issues S = Q K(j)^T and O += P(j-1)
   V(j-1), lets the other issue its pair, and runs its softmax while the other's products run; the
   exp2 of the softmax (MUFU, 16 a clock an SM) is then hidden under the MMAs. At D 64 three
   consumer warpgroups on 192-query tiles (512 threads) issue without turns: three warps a scheduler
   hide each other's softmax chains, each warpgroup's under its own P V; a warpgroup past its last
   key tile (causal) or wholly past T only lets the stages go.
   Backward (section 6): causal D 64 in one fused kernel (5 products, dQ summed in a fixed order);
   else two kernels (deterministic, no atomics): dK/dV over 128-key CTAs (64 keys a warpgroup,
   S^T = K Q^T and dP^T = V dO^T from shared memory, dV += P^T dO and dK += dS^T Q with A from
   registers), dQ over 128-query CTAs (S, dP, dQ += dS K). Registers bound the tiles: D = 64 walks
   128-row tiles, D = 128 64-row ones. */
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
   at blockIdx.x). pt: that thread (the producer's first: 256, or 384 in the forward at D 64). Else
   the fixed order bt__k_att_item(n). */
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
/* ---- 5. sm_90a forward ----------------------------------------------------------------------- */
/* The forward at each head size (dev/cuda/attention_forward.cu holds the variants measured against it;
   B 16, H 12, causal, bf16 on an H100):
     D 64: three consumer warpgroups on 192-query tiles (per SM sub-partition three consumer warps
       whose softmax chains hide each other's latency; registers 3 x 160 + 32 = 512 after setmaxnreg),
       T 4096 1063-1073 us against 1187-1231 with two; no turns at the tensor cores, T 4096 800-802
       against 814-815 with turns in items of 7 key tiles or more; the softmax of tile j under the
       warpgroup's own O += P(j-1) V(j-1), issued together and waited for apart (OVL), T 4096 1281-1293
       against 1318-1364 without; lean steps (LEAN: descriptors as offsets of per-item bases, the
       diagonal tile's mask as one compare a score), with OVL T 1024 103 us against 116-146 for OVL
       alone.
     D 128: two warpgroups on 128-query tiles (shared memory: 225 of the 227 KiB a block may have),
       taking turns at the tensor cores, both products of a step waited for before its softmax. */
__host__ __device__ constexpr int bt__k_att_fwd_nw(int D) { return D == 64 ? 3 : 2; }
template <int D> struct bt__k_att_fwd_cfg {
    enum { NW = bt__k_att_fwd_nw(D), LEAN = NW == 3, OVL = NW == 3, TURNS = NW == 2 };
};
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
/* the mask of an edge tile (keys k0 .., rows r0 and r0 + 8 of this thread), lean: score i's key minus
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
   2-3% more cycles a tile). LEAN: the edge tile's mask as bt__k_att_fwd_mask_lean */
template <int LEAN, int NS>
__device__ __forceinline__ void bt__k_att_fwd_p(const bt__k_attp &p, float (&sc)[NS], float (&m)[2], float (&l)[2], float (&al)[2],
                                                int edge, int k0, int r0, int tg) {
    if (edge && LEAN)
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
        al[r] = bt__k_ex2((m[r] - mx[r]) * p.c2);   /* key 0 is in every row's first tile: mx finite */
        m[r] = mx[r];
        mc[r] = -mx[r] * p.c2;
        l[r] *= al[r];
    }
#pragma unroll
    for (int i = 0; i < NS; i++) {
        float pv = bt__k_ex2(fmaf(sc[i], p.c2, mc[(i >> 1) & 1]));
        sc[i] = pv;
        l[(i >> 1) & 1] += pv;
    }
}
/* O *= al (per row), P (sc) rounded into the A fragments pf */
template <typename T, int NS, int NO>
__device__ __forceinline__ void bt__k_att_fwd_rescale(float (&o)[NO], const float (&al)[2], const float (&sc)[NS],
                                                      uint32_t (&pf)[NS / 8][4]) {
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
   between a product's issue and its wait, and leaves a bar.sync alone */
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
   standing between items (the output had taken 8 of 84 us at T 1024): T 1024 81.2-82.1 us against
   82.3-83.0, T 2048 -1.3%, T 4096 -0.7% */
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
/* stages of the forward's K and V rings: 3 at D 64 (the next item's first tiles load under the last
   item's end; 4, whose stage and phase are a mask and a shift, measured the same: 91.0-91.6 us
   against 90.9-91.7 at T 1024, 896-901 against 903-912 at T 4096), 2 at D 128 (shared
   memory) */
__host__ __device__ constexpr int bt__k_att_fwd_st(int D) { return D == 64 ? 3 : 2; }
/* key tiles of BN that queries below row `end` (exclusive) see: causal, those up to min(end, T) - 1;
   else all */
__device__ __forceinline__ int bt__k_att_fwd_nt(const bt__k_attp &p, int end, int BN) {
    return ((p.causal && end < p.T ? end : p.T) + BN - 1) / BN;
}
/* what a consumer's forward step needs of its item: the shared tiles and barriers, the item (its
   first ring use u, nt key tiles), the warpgroup (w; ntw <= nt key tiles it multiplies, the rest
   idle; ke its first key tile with masked scores when causal), the thread (lane, rows r0 and r0 + 8,
   tg = lane % 4) */
struct bt__k_att_fwd_ctx {
    const bt__k_attp &p;
    uint32_t sQ, sK, sV, kfull, kempty, vfull, vempty;
    uint64_t dq, dk, dv;   /* LEAN: descriptors of this warpgroup's Q rows, the K ring's and V ring's starts */
    int u, nt, ntw, ke, w, lane, r0, tg;
};
/* S = Q K(stage s)^T for the step's warpgroup */
template <typename T, int D>
__device__ __forceinline__ void bt__k_att_fwd_qk(float (&sc)[64], const bt__k_att_fwd_ctx &c, int s) {
    enum { TILE = 128 * D * 2 };
    if (bt__k_att_fwd_cfg<D>::LEAN) bt__k_att_fwd_s_lean<T, D>(sc, c.dq, bt__k_wg_desc_at(c.dk, (uint32_t)(s * TILE)));
    else bt__k_att_fwd_s<T, D>(sc, c.sQ, c.sK + s * TILE, c.w);
}
/* the turn at the tensor cores goes from warpgroup w to w + 1 (mod NW) after step j: named barrier
   1 + w is warpgroup w's, the one before it arrives on it; warpgroup NW - 1 opens each item's first
   turn (bt__k_att_fwd_turn_open) and hands none over after its last, so every barrier sees as many
   arrivals as waits (nt a warpgroup and item). Turns are taken at D 128 only (NW = 2; three
   warpgroups with turns: dev/cuda/attention_forward.cu's versions 6 and 7) */
template <int NW> __device__ __forceinline__ void bt__k_att_fwd_turn_give(int on, const bt__k_att_fwd_ctx &c, int j) {
    if (on && (c.w != NW - 1 || j + 1 < c.nt)) bt__k_bar_arrive(1 + (c.w + 1) % NW);
}
template <int NW> __device__ __forceinline__ void bt__k_att_fwd_turn_open(int on, int w) {
    if (on && w == NW - 1) bt__k_bar_arrive(1);
}
/* D 64: a warpgroup's key tile j past its last row (causal) or an item's warpgroup with no query
   below T: its K and V stages wait to be full and go back (the other warpgroups multiply this tile) */
__device__ __forceinline__ void bt__k_att_fwd_idle(const bt__k_att_fwd_ctx &c, int j, int ST) {
    const int uj = c.u + j, s = uj % ST;
    bt__k_mbar_wait(c.kfull + 8 * s, (uj / ST) & 1);
    bt__k_mbar_wait(c.vfull + 8 * s, (uj / ST) & 1);
    if (c.lane == 0) {
        bt__k_mbar_arrive(c.kempty + 8 * s);
        bt__k_mbar_arrive(c.vempty + 8 * s);
    }
}
/* a consumer warpgroup's step j of its item: S(j) = Q K(j)^T, then O += P(j-1) V(j-1) (O in the
   units of m(j-1)), two groups issued together (at D 128 in this warpgroup's turn at the tensor
   cores); the softmax of S(j) into the A fragments pf (P(j)) and O rescaled. D 128: both products
   waited for before the softmax. D 64 (OVL): the softmax after S(j) alone (wait_group 1) while
   P(j-1) V(j-1) runs, O rescaled and P(j) written into pf only after it (wait_group 0): no register
   of the product in flight is touched. KIND: 0 any step (j > 0 known at run time), 1 the first, 2
   a later one (the OVL loop: ptxas needs the in-flight products known in the code's shape, else
   C7514 / C7515). first(): run in the first step while its S is in flight */
template <typename T, int D, int KIND, typename F>
__device__ __forceinline__ void bt__k_att_fwd_step(const bt__k_att_fwd_ctx &c, int j, float (&o)[D / 2], float (&m)[2], float (&l)[2],
                                                   uint32_t (&pf)[8][4], F &&first) {
    typedef bt__k_att_fwd_cfg<D> C;
    enum { BN = 128, ST = bt__k_att_fwd_st(D), TILE = BN * D * 2, NS = BN / 2, NO = D / 2 };
    const bt__k_attp &p = c.p;
    const int later = KIND == 2 || (KIND == 0 && j > 0), ovl = C::OVL && KIND == 2;
    const int uj = c.u + j, s = uj % ST, sp = (uj + ST - 1) % ST;
    float sc[NS], al[2];   /* this tile's scores (the first product overwrites them): nothing carried between tiles */
    bt__k_mbar_wait(c.kfull + 8 * s, (uj / ST) & 1);
    if (later) bt__k_mbar_wait(c.vfull + 8 * sp, ((uj - 1) / ST) & 1);
    /* no proxy fence: K and V land by TMA and are read by wgmma, both the async proxy, and no thread
       writes those stages (its removal alone: T 4096 843-846 us against 846-847, within the noise) */
    if (C::TURNS) bt__k_bar_sync(1 + c.w);   /* this warpgroup's turn at the tensor cores */
    /* each branch fences right before its products (no register of theirs touched between) */
    if (later) {
        bt__k_wg_pin(o);
        bt__k_wg_arrive();
        bt__k_att_fwd_qk<T, D>(sc, c, s);
        bt__k_wg_commit();
        if (ovl) bt__k_wg_arrive();   /* a pipeline stage of its own for ptxas (else C7514) */
        bt__k_att_fwd_pv<T, D, C::LEAN>(o, pf, c.sV + sp * TILE, c.dv, (uint32_t)(sp * TILE));
        bt__k_wg_commit();
    } else {
        bt__k_wg_arrive();
        bt__k_att_fwd_qk<T, D>(sc, c, s);
        bt__k_wg_commit();
        first();   /* the first step's work under its S (the last item's output) */
    }
    bt__k_att_fwd_turn_give<C::NW>(C::TURNS, c, j);
    if (ovl) {
        bt__k_wg_wait1();   /* S(j) landed, P(j-1) V(j-1) may run on */
        bt__k_wg_pin(sc);
    } else {
        bt__k_wg_wait0();
        bt__k_wg_pin(sc); bt__k_wg_pin(o); bt__k_wg_pin_u(pf);   /* P(j-1)'s registers free from here */
    }
    if (c.lane == 0) {
        bt__k_mbar_arrive(c.kempty + 8 * s);
        if (later && !ovl) bt__k_mbar_arrive(c.vempty + 8 * sp);
    }
    const int edge = (p.causal && j >= c.ke) || (j + 1) * BN > p.T;
    bt__k_att_fwd_p<C::LEAN, NS>(p, sc, m, l, al, edge, j * BN, c.r0, c.tg);
    if (ovl) {
        /* ptxas hoists the wait for P V above the softmax's row max unless a branch stands between
           (it moves no wgmma wait across one): P V then ran alone. With this never-taken one the wait
           lands among the exponentials, which interleave with P's packing: T 4096 814-816 us against
           850-853, T 1024 84.6 against 85.4-85.9. Waiting after every exponential (a branch on the
           row sums) was slower, 870 */
        bt__k_sched_split(p.T < 0);
        bt__k_wg_wait0();
        bt__k_wg_pin(o); bt__k_wg_pin_u(pf);
        if (c.lane == 0) bt__k_mbar_arrive(c.vempty + 8 * sp);
    }
    if (KIND == 1) bt__k_wg_afrag<T, NS / 8>(pf, sc);   /* the first step: O is still 0 */
    else bt__k_att_fwd_rescale<T, NS, NO>(o, al, sc, pf);
}
/* one K or V tile (rows r0 .. of head h, batch b; map's dimension order hr) into ring stage s at its use
   u: once the consumers let the stage go (use u - ST, parity ph), its bytes expected on `full` */
template <int D, int ST>
__device__ __forceinline__ void bt__k_att_fwd_tma_tile(const CUtensorMap *map, int hr, int r0, int h, int b, uint32_t dst, uint32_t full,
                                                       uint32_t empty, int u, int ph) {
    if (u >= ST) bt__k_mbar_wait(empty, ph);
    bt__k_mbar_expect(full, 128 * D * 2);
#pragma unroll
    for (int cb = 0; cb < D / 64; cb++) bt__k_tma_load4(dst + cb * 128 * 128, map, cb * 64, hr ? h : r0, hr ? r0 : h, b, full);
}
/* one thread loads item n's Q (rows q0 .., buffer sQ) and its nt K and V tiles (ring uses u ..) by the
   tensor memory accelerator: a box of 64 columns a column block, each tile's bytes expected on its full
   barrier; stages are refilled once the consumers let them go */
template <int D, int BM, int ST>
__device__ __forceinline__ void bt__k_att_fwd_tma_item(const bt__k_attp &p, const bt__k_att_maps &tm, int64_t bh, int q0, int nt,
                                                       int64_t n, int u, uint32_t sQ, uint32_t sK, uint32_t sV, uint32_t qfull,
                                                       uint32_t qempty, uint32_t kfull, uint32_t kempty, uint32_t vfull,
                                                       uint32_t vempty) {
    enum { TILE = 128 * D * 2 };
    const int b = (int)(bh / p.H), h = (int)(bh - (int64_t)b * p.H), hq = tm.hrow & 1, hk = tm.hrow >> 1 & 1, hv = tm.hrow >> 2 & 1;
    if (n >= 2) bt__k_mbar_wait(qempty, (int)(((n >> 1) - 1) & 1));
    bt__k_mbar_expect(qfull, BM * D * 2);
#pragma unroll
    for (int cb = 0; cb < D / 64; cb++) bt__k_tma_load4(sQ + cb * BM * 128, &tm.m[0], cb * 64, hq ? h : q0, hq ? q0 : h, b, qfull);
    for (int j = 0; j < nt; j++, u++) {
        const int s = u % ST, ph = (u / ST - 1) & 1;
        bt__k_att_fwd_tma_tile<D, ST>(&tm.m[1], hk, j * 128, h / p.G, b, sK + s * TILE, kfull + 8 * s, kempty + 8 * s, u, ph);
        bt__k_att_fwd_tma_tile<D, ST>(&tm.m[2], hv, j * 128, h / p.G, b, sV + s * TILE, vfull + 8 * s, vempty + 8 * s, u, ph);
    }
}
/* -- forward: work items (head, query tile of BM = 64 NW, longest first; bt__k_att_work), one per CTA or,
   with a persistent grid (one CTA per SM), several a CTA: the producer then loads the next item's
   Q (its own buffer: items alternate between two), K(0), V(0) while the consumers finish the last
   one. smem Q 2 x BM x D, K and V ST x 128 x D, O BM x D (bt__k_att_fwd_out). NW consumer
   warpgroups (bt__k_att_fwd_cfg), then the producer warpgroup -- */
template <typename T, int D>
__global__ void __launch_bounds__(128 * (bt__k_att_fwd_nw(D) + 1), 1) bt__k_att_fwd_wg(bt__k_attp p, const __grid_constant__ bt__k_att_maps tm) {
#ifdef BT__K_WG
    typedef bt__k_att_fwd_cfg<D> C;
    enum { NW = C::NW, BM = 64 * NW, BN = 128, ST = bt__k_att_fwd_st(D), TILE = BN * D * 2, NS = BN / 2, NO = D / 2 };
    enum { QT = BM * D * 2, PT = 128 * NW };   /* PT: the producer's first thread */
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
            int rank;
            const int64_t bh = bt__k_att_work(p, L, nqt, rank);
            const int qt = nqt - 1 - rank, q0 = qt * BM - p.qoff, nt = bt__k_att_fwd_nt(p, q0 + BM, BN);
            if (t == 0)   /* one thread loads the item: Q into buffer n % 2, then its K(j), V(j) */
                bt__k_att_fwd_tma_item<D, BM, ST>(p, tm, bh, q0, nt, n, u, sQ0 + (n & 1) * QT, sK, sV, qfull + 8 * (n & 1),
                                                  qempty + 8 * (n & 1), kfull, kempty, vfull, vempty);
            u += nt;
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
            bt__k_att_fwd_turn_open<NW>(C::TURNS, w);   /* warpgroup 0 issues first */
            const bt__k_att_fwd_ctx c = {p, sQ, sK, sV, kfull, kempty, vfull, vempty, bt__k_wg_kmaj(sQ, BM, 64 * w, 0),
                                         bt__k_wg_kmaj(sK, 128, 0, 0), bt__k_wg_mnmaj(sV, 128, 0), u, nt, ntw, ke, w, lane, r0, tg};
            auto flush = [&]() { bt__k_att_fwd_out_flush<T, D, BM>(p, pout, prow, sO, srow0, lane); };
            auto none = []() {};
            if (C::OVL) {   /* the first step apart: ptxas then knows which products are in flight where (else C7514) */
                bt__k_att_fwd_step<T, D, 1>(c, 0, o, m, l, pf, flush);
                for (int j = 1; j < ntw; j++) bt__k_att_fwd_step<T, D, 2>(c, j, o, m, l, pf, none);
            } else {
                bt__k_att_fwd_step<T, D, 0>(c, 0, o, m, l, pf, flush);
                for (int j = 1; j < ntw; j++) bt__k_att_fwd_step<T, D, 0>(c, j, o, m, l, pf, none);
            }
            {   /* the last O += P V, then V's stage goes back */
                const int ul = u + ntw - 1, sp = ul % ST;
                bt__k_mbar_wait(vfull + 8 * sp, (ul / ST) & 1);
                bt__k_fence_async();
                bt__k_wg_pin(o);
                bt__k_wg_arrive();
                bt__k_att_fwd_pv<T, D, C::LEAN>(o, pf, sV + sp * TILE, c.dv, (uint32_t)(sp * TILE));
                bt__k_wg_commit();
                bt__k_wg_wait0();
                bt__k_wg_pin(o);
                if (lane == 0) bt__k_mbar_arrive(vempty + 8 * sp);
            }
            if (NW != 2)
                for (int j = ntw; j < nt; j++) bt__k_att_fwd_idle(c, j, ST);
            u += nt;
            bt__k_att_fwd_out<T, D, BM>(p, bh, r0, tg, o, l, m, sO, srow0, lane);
            pout = (T *)p.out + bt__k_att_off(p.so, bh, p.H);
            prow = p.out16 ? rw + 16 * (warp & 3) : INT_MIN / 2;
            if (lane == 0) bt__k_mbar_arrive(qempty + 8 * qb);   /* the Q tile read for the last time (by the tensor cores only) */
        }
    }
#else
    __trap();
#endif
}

/* ---- 6. sm_90a backward: dK/dV, dQ, the fused causal D 64 kernel ----------------------------- */
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
        const T *q = (const T *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const T *)p.k + bt__k_att_kvoff(p, p.sk, bh),
                *v = (const T *)p.v + bt__k_att_kvoff(p, p.sv, bh), *go = (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H);
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
        const T *q = (const T *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const T *)p.k + bt__k_att_kvoff(p, p.sk, bh),
                *v = (const T *)p.v + bt__k_att_kvoff(p, p.sv, bh), *go = (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H);
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
                const T *q = (const T *)p.q + bt__k_att_off(p.sq, bh, p.H), *k = (const T *)p.k + bt__k_att_kvoff(p, p.sk, bh),
                        *v = (const T *)p.v + bt__k_att_kvoff(p, p.sv, bh), *go = (const T *)p.go + bt__k_att_off(p.sgo, bh, p.H);
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

/* ---- 7. host: checks, the measured defaults and the tuning, launches, tensor maps, entry points ---- */
static int bt__k_att_dp(int64_t D) { return D <= 32 ? 32 : D <= 64 ? 64 : 128; }
/* every row start 16-byte aligned: the base 16-byte aligned, every stride a multiple of 16 bytes */
static int bt__k_att_al(const void *ptr, const int64_t *st, size_t es, size_t al) {
    if ((uintptr_t)ptr % al) return 0;
    for (int i = 0; i < 3; i++) if (((size_t)st[i] * es) % al) return 0;
    return 1;
}
static void bt__k_att_check(const char *op, bt_dtype dt, int64_t B, int64_t H, int64_t Hkv, int64_t Tn, int64_t D) {
    if (Hkv <= 0 || H % Hkv)
        bt_error("%s: %lld key/value heads must divide the %lld query heads", op, (long long)Hkv, (long long)H);
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
static void bt__k_att_params(bt__k_attp *p, bt_dtype dt, int64_t B, int64_t H, int64_t Hkv, int64_t Tn, int64_t D, float scale) {
    memset(p, 0, sizeof *p);
    p->BH = p->bh1 = B * H; p->H = (int)H; p->G = (int)(H / Hkv); p->T = (int)Tn; p->D = (int)D;
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
            if (cudaFuncGetAttributes(&a, (const void *)bt__k_att_fwd_wg<__nv_bfloat16, 64>) == cudaSuccess) ok = a.sharedSizeBytes > 0;
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
/* The Hopper path's measured defaults (bt_k_attention_tuning; B 16, H 12, causal, bf16 on an H100).
   The forward's L2 sections of 24 MiB of K and V: T 1024 88.1-88.4 us against 89.6-89.7 with 16, T 4096
   894-896 against 903. */
#define BT__K_ATT_L2_MB_FWD 24
/* the two-kernel backward's sections of 16 MiB: the size the forward measured best before its own
   re-timing (T 1024: 8 MiB 97.5-98.6 us, 16 93.5-95.0, 32 100.0-100.9); not re-timed for the backward */
#define BT__K_ATT_L2_MB_BWD 16
/* one section of all heads only up to 16 MiB of them, not the L2's 50: lines that every SM reads are
   held in both halves of the L2. T 1024 (48 MiB of K and V) in one section read 190 MB from DRAM a
   forward (K, V re-read ~3x) against 77 MB in sections of 16 MiB, and took 100 us against 94 */
#define BT__K_ATT_L2_ONE_MB 16
/* the item order: fixed (a snake) for causal forwards whose items have at most 4 key tiles (T <= 512:
   near-equal items, nothing for a counter to even out; T 512 33.5-34.1 us against 36.4-36.7), else
   from a counter as SMs free up (T 1024 83.3-83.5 against 84.9-85.4 fixed); the fused backward always
   from the counter (fixed was slower from T 384) */
#define BT__K_ATT_FIXED_ORDER_KT 4
/* end-aligned causal query tiles of 192 rows where the last tile would hold one live warpgroup of three
   (at least 128 rows past T): T 1024 92.0-92.4 us against 94.2-94.5 (a head's items walk 27 key tiles
   instead of 32), T 4096 894-896 against 918; with two live warpgroups it did not pay (T 512: 41.3-41.5
   against 40.5-40.6) */
#define BT__K_ATT_QEND_ROWS 128
/* the causal D 64 backward in one fused kernel up to T 4096: faster than the two kernels from T 512
   (T 4096: 3288 us against 3867); longer T not measured */
#define BT__K_ATT_FUSED_TMAX 4096
static const bt_k_attention_tuning bt__k_att_tuning_default = {BT__K_ATT_L2_MB_FWD, BT__K_ATT_L2_MB_BWD, BT__K_ATT_L2_ONE_MB, 0,
                                                               BT__K_ATT_FUSED_TMAX};
static bt_k_attention_tuning bt__k_att_tun = bt__k_att_tuning_default;
BTDEF void bt_k_attention_set_tuning(const bt_k_attention_tuning *t) {
    if (!t) { bt__k_att_tun = bt__k_att_tuning_default; return; }
    if (t->l2_mb_fwd < 0 || t->l2_mb_bwd < 0 || t->l2_one_mb < 0 || t->fused_tmax < 0 || t->order < 0 || t->order > 2)
        bt_error("bt_k_attention_set_tuning: l2_mb_fwd %d, l2_mb_bwd %d, l2_one_mb %d, fused_tmax %d must be >= 0 and "
                 "order %d one of 0 (the measured rule), 1 (fixed), 2 (counter)", t->l2_mb_fwd, t->l2_mb_bwd, t->l2_one_mb,
                 t->fused_tmax, t->order);
    bt__k_att_tun = *t;
}
BTDEF bt_k_attention_tuning bt_k_attention_get_tuning(void) { return bt__k_att_tun; }
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
   each) fit in l2_mb MiB (0: one section; head_bytes 0: one head a section, the items of a head one
   after the other); a grid of one CTA per item, or (persistent) one per SM, whose CTAs then take
   their items from a counter (dyn) or in a fixed order */
template <typename K>
static void bt__k_att_wg_launch(K kern, bt__k_attp p, int64_t ntiles, size_t head_bytes, int l2_mb, int persistent, int dyn, size_t smem,
                                cudaStream_t s, const char *op, unsigned threads = BT__K_WG_THREADS, const bt__k_att_maps *tm = NULL) {
    int64_t nbh = p.bh1 - p.bh0, items = nbh * ntiles, sms = bt__k_cur()->sm_count;
    const int one_mb = bt__k_att_tun.l2_one_mb;
    int64_t sec = 1;
    if (head_bytes) {
        sec = l2_mb > 0 ? (int64_t)(((size_t)l2_mb << 20) / head_bytes) : nbh;
        if ((double)nbh * (double)head_bytes <= (double)one_mb * 1048576.0) sec = nbh;   /* all heads fit: one section */
    }
    p.sec = sec < 1 ? 1 : sec > nbh ? nbh : sec;
    int64_t grid = persistent && items > sms ? sms : items;
    p.ctr = NULL;
    if (grid < items && dyn) {   /* items handed out as the SMs free up */
        p.ctr = (int *)bt__k_scratch(sizeof(int), s);
        BT__K_CUDA(cudaMemsetAsync(p.ctr, 0, sizeof(int), s), op);
    }
    BT__K_CUDA(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), op);
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
        !bt__k_att_tmap<T>(&tm->m[1], &hk, p->k, p->sk, B, p->H / p->G, p->T, p->D, 128) ||
        !bt__k_att_tmap<T>(&tm->m[2], &hv, p->v, p->sv, B, p->H / p->G, p->T, p->D, 128))
        return 0;
    tm->hrow = hq | hk << 1 | hv << 2;
    return 1;
}
/* the wgmma forward (bt__k_att_fwd_cfg), persistent; 0: not run (no tensor maps) */
template <typename T> static int bt__k_att_fwd_wg_run(const bt__k_attp *p, cudaStream_t s, const char *op) {
    const int nw = bt__k_att_fwd_nw((int)p->D), BM = 64 * nw;
    const int64_t tiles = (p->T + BM - 1) / BM;
    const int kt_max = (p->T + 127) / 128;   /* an item's key tiles: at most this many */
    const bt_k_attention_tuning *tu = &bt__k_att_tun;
    bt__k_attp pq = *p;
    const int qoff = (int)(tiles * BM - p->T);   /* rows of the last tile past T */
    pq.qoff = p->causal && BM == 192 && qoff >= BT__K_ATT_QEND_ROWS ? qoff : 0;
    bt__k_att_maps tm;
    if (!bt__k_att_fwd_maps<T>(&tm, &pq, BM)) return 0;
    const int dyn = tu->order ? tu->order == 2 : !(p->causal && kt_max <= BT__K_ATT_FIXED_ORDER_KT);
    bt__k_att_wg_launch(p->D == 64 ? bt__k_att_fwd_wg<T, 64> : bt__k_att_fwd_wg<T, 128>, pq, tiles, bt__k_att_wg_kv_bytes(p),
                        tu->l2_mb_fwd, 1, dyn, bt__k_att_wg_smem_fwd((int)p->D, BM), s, op, 128 * (nw + 1), &tm);
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
        bt__k_att_wg_launch(bt__k_att_bwd_wg<T>, *p, nqt, 0, 0, 1, bt__k_att_tun.order != 1, bt__k_att_bwd_smem_bytes(), s, op);
    }
    bt_free(p->dqacc); bt_free(p->dqcnt);
    p->dqacc = NULL; p->dqcnt = NULL; p->bh0 = 0; p->bh1 = p->BH;
}
/* D 64: 128-row query / key tiles in both kernels; D 128: 64 (the accumulators' registers). A CTA an
   item (their work is near-even: no counter) */
template <typename T> static void bt__k_att_bwd_wg_run(const bt__k_attp *p, cudaStream_t s, const char *op) {
    int64_t tiles = (p->T + 127) / 128;
    size_t kv = bt__k_att_wg_kv_bytes(p), qg = kv + (size_t)p->T * 8;
    const int mb = bt__k_att_tun.l2_mb_bwd;
    if (p->D == 64) {
        bt__k_att_wg_launch(bt__k_att_dq_wg<T, 64, 128>, *p, tiles, kv, mb, 0, 0, bt__k_att_wg_smem_dq(64, 128), s, op);
        bt__k_att_wg_launch(bt__k_att_dkv_wg<T, 64, 128>, *p, tiles, qg, mb, 0, 0, bt__k_att_wg_smem_dkv(64, 128), s, op);
    } else {
        bt__k_att_wg_launch(bt__k_att_dq_wg<T, 128, 64>, *p, tiles, kv, mb, 0, 0, bt__k_att_wg_smem_dq(128, 64), s, op);
        bt__k_att_wg_launch(bt__k_att_dkv_wg<T, 128, 64>, *p, tiles, qg, mb, 0, 0, bt__k_att_wg_smem_dkv(128, 64), s, op);
    }
}

BTDEF void bt_k_attention_strided(bt_dtype dt, void *out, const int64_t *so, float *lse, const void *q, const int64_t *sq,
                                  const void *k, const int64_t *sk, const void *v, const int64_t *sv, int64_t B, int64_t H, int64_t Hkv,
                                  int64_t Tn, int64_t D, float scale, int causal, bt_matmul_precision precision, cudaStream_t s) {
    const char *op = "bt_k_attention";
    if (B <= 0 || H <= 0 || Tn <= 0 || D <= 0) return;
    bt__k_att_check(op, dt, B, H, Hkv, Tn, D);
    bt__k_attp p;
    bt__k_att_params(&p, dt, B, H, Hkv, Tn, D, scale);
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

/* grouped-query attention's dK (or dV) of key/value head j: the sum of those of its query heads j G .. j G + G - 1,
   which the kernels wrote to x (contiguous [B, Hkv G, T, D]); fp32 sums, one rounding; g strided (batch, head, row) */
template <typename T> __global__ void bt__k_att_group_sum(T *g, int64_t s0, int64_t s1, int64_t s2, const T *x, int64_t B, int Hkv,
                                                          int G, int Tn, int D) {
    const int64_t n = B * Hkv * (int64_t)Tn * D;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / D, d = i - r * D, t = r % Tn, bj = r / Tn, b = bj / Hkv, j = bj - b * Hkv;
        const T *xi = x + ((b * Hkv + j) * G * (int64_t)Tn + t) * D + d;
        float acc = 0.f;
        for (int k = 0; k < G; k++) acc += bt__k_tof(xi[(int64_t)k * Tn * D]);
        g[b * s0 + j * s1 + t * s2 + d] = bt__k_from<T>(acc);
    }
}
/* the backward's kernels on a filled parameter block (bt_k_attention_backward_colsum) */
static int bt__k_att_bwd_run(bt__k_attp &p, bt_dtype dt, int64_t B, int64_t H, int64_t Tn, int64_t D, bt_matmul_precision precision,
                             float *colsum, cudaStream_t s, const char *op) {
    float *dvec = (float *)bt__k_scratch((size_t)(B * H * Tn) * sizeof(float), s);
    p.dvec = dvec;
    unsigned tiles = (unsigned)((Tn + 63) / 64), nb = bt__k_blocks(B * H * Tn * 32, 256);
    int dp = bt__k_att_dp(D), wg = bt__k_att_wg_use(dt, &p);
    p.turns = wg;   /* the wgmma kernels' warpgroups take turns at the tensor cores */
    if (wg && D == 64 && p.causal && Tn <= bt__k_att_tun.fused_tmax) {   /* one kernel, 5 products */
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
    if (wg) {
        p.dvec_out = dvec;   /* the dQ kernel computes it, before the dK/dV kernel reads it */
        if (dt == BT_BF16) bt__k_att_bwd_wg_run<__nv_bfloat16>(&p, s, op);
        else bt__k_att_bwd_wg_run<__half>(&p, s, op);
        bt_free(dvec);
        return 0;
    }
    BT__K_DISPATCH3(dt, op, { bt__k_att_dvec<T><<<nb, 256, 0, s>>>(dvec, p); })
    BT__K_LAUNCHED(op);
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
BTDEF int bt_k_attention_backward_colsum(bt_dtype dt, void *gq, const int64_t *sgq, void *gk, const int64_t *sgk, void *gv,
                                          const int64_t *sgv, const void *gout, const int64_t *sgo, const void *q,
                                          const int64_t *sq, const void *k, const int64_t *sk, const void *v, const int64_t *sv,
                                          const void *out, const int64_t *so, const float *lse, int64_t B, int64_t H, int64_t Hkv, int64_t Tn,
                                          int64_t D, float scale, int causal, bt_matmul_precision precision, float *colsum,
                                          cudaStream_t s) {
    const char *op = "bt_k_attention_backward";
    if (B <= 0 || H <= 0 || Tn <= 0 || D <= 0) return 0;
    bt__k_att_check(op, dt, B, H, Hkv, Tn, D);
    if (!gq || !gk || !gv) bt_error("%s: gq, gk and gv must all be given", op);
    bt__k_attp p;
    bt__k_att_params(&p, dt, B, H, Hkv, Tn, D, scale);
    p.causal = causal != 0;
    p.q = q; p.k = k; p.v = v; p.o = out; p.go = gout; p.gq = gq; p.gk = gk; p.gv = gv; p.lse = lse;
    memcpy(p.sq, sq, sizeof p.sq); memcpy(p.sk, sk, sizeof p.sk); memcpy(p.sv, sv, sizeof p.sv); memcpy(p.so, so, sizeof p.so);
    memcpy(p.sgo, sgo, sizeof p.sgo); memcpy(p.sgq, sgq, sizeof p.sgq); memcpy(p.sgk, sgk, sizeof p.sgk);
    memcpy(p.sgv, sgv, sizeof p.sgv);
    size_t es = bt_dtype_size(dt);
    p.vec = bt__k_att_al(q, sq, es, 16) && bt__k_att_al(k, sk, es, 16) && bt__k_att_al(v, sv, es, 16) &&
            bt__k_att_al(gout, sgo, es, 16) && bt__k_att_al(out, so, es, 16);
    void *gx = NULL;   /* grouped-query attention: dK, dV of each query head first ([B, H, T, D]), then summed per group */
    if (p.G > 1) {
        const int64_t st[3] = {H * Tn * D, Tn * D, D}, n = B * H * Tn * D;
        gx = bt__k_scratch((size_t)(2 * n) * es, s);
        p.gk = gx; p.gv = (char *)gx + (size_t)n * es;
        memcpy(p.sgk, st, sizeof st); memcpy(p.sgv, st, sizeof st);
        colsum = NULL;   /* the column sums of per-query-head dK, dV are no projection's bias gradient */
    }
    p.vec_out = bt__k_att_al(gq, sgq, es, 4) && bt__k_att_al(p.gk, p.sgk, es, 4) && bt__k_att_al(p.gv, p.sgv, es, 4);
    int given = bt__k_att_bwd_run(p, dt, B, H, Tn, D, precision, colsum, s, op);
    if (gx) {
        const int64_t n = B * Hkv * Tn * D;
        const unsigned nb = bt__k_blocks(n, 256);
        BT__K_DISPATCH3(dt, op, {
            bt__k_att_group_sum<T><<<nb, 256, 0, s>>>((T *)gk, sgk[0], sgk[1], sgk[2], (const T *)p.gk, B, (int)Hkv, p.G, (int)Tn, (int)D);
            bt__k_att_group_sum<T><<<nb, 256, 0, s>>>((T *)gv, sgv[0], sgv[1], sgv[2], (const T *)p.gv, B, (int)Hkv, p.G, (int)Tn, (int)D);
        })
        BT__K_LAUNCHED(op);
        bt_free(gx);
    }
    return given;
}
BTDEF void bt_k_attention_backward_strided(bt_dtype dt, void *gq, const int64_t *sgq, void *gk, const int64_t *sgk, void *gv,
                                           const int64_t *sgv, const void *gout, const int64_t *sgo, const void *q,
                                           const int64_t *sq, const void *k, const int64_t *sk, const void *v, const int64_t *sv,
                                           const void *out, const int64_t *so, const float *lse, int64_t B, int64_t H, int64_t Hkv, int64_t Tn,
                                           int64_t D, float scale, int causal, bt_matmul_precision precision, cudaStream_t s) {
    bt_k_attention_backward_colsum(dt, gq, sgq, gk, sgk, gv, sgv, gout, sgo, q, sq, k, sk, v, sv, out, so, lse, B, H, Hkv, Tn, D, scale,
                                   causal, precision, NULL, s);
}

/* the same on contiguous [B, H, T, D] tensors */
BTDEF void bt_k_attention(bt_dtype dt, void *out, float *lse, const void *q, const void *k, const void *v, int64_t B,
                          int64_t H, int64_t Tn, int64_t D, float scale, cudaStream_t s) {
    int64_t st[3] = {H * Tn * D, Tn * D, D};
    bt_k_attention_strided(dt, out, st, lse, q, st, k, st, v, st, B, H, H, Tn, D, scale, 1, BT_MATMUL_FP32, s);
}
BTDEF void bt_k_attention_backward(bt_dtype dt, void *gq, void *gk, void *gv, const void *gout, const void *q,
                                   const void *k, const void *v, const void *out, const float *lse, int64_t B, int64_t H,
                                   int64_t Tn, int64_t D, float scale, cudaStream_t s) {
    int64_t st[3] = {H * Tn * D, Tn * D, D};
    bt_k_attention_backward_strided(dt, gq, st, gk, st, gv, st, gout, st, q, st, k, st, v, st, out, st, lse, B, H, H, Tn, D,
                                    scale, 1, BT_MATMUL_FP32, s);
}

#endif /* BT_ATTENTION_IMPLEMENTATION_DONE */
#endif /* BT_KERNELS_CUH */
