/* fp8_gemm: C [M, N] bf16 = (sa sb) A [M, K] B [N, K]^T with A and B FP8 bytes, both K-contiguous (the
   layout of every FP8 product of bt_linear_fp8), written here on the warpgroup MMAs, against
   cuBLASLt's best candidate (bt_k_matmul_fp8, the autotuned plan the model runs).
   Why: what is left of the FP8 step's extra time are the casts that read a product's bf16 output
   again (GELU's of fc's output, the GELU derivative's of the MLP projection's dx: 8.2 of the 16.6 ms
   of casts at d48, bench/RESULTS.md#fp8). cuBLASLt cannot write e4m3 with a transpose and a GELU
   folded in; a product of our own could, in its epilogue, if its main loop keeps up with cuBLASLt's.
   This ladder measures that main loop first: with no epilogue fusion yet, a plain bf16 C.
     v1  a CTA computes a 128 x 128 tile of C: two consumer warpgroups (64 rows each, wgmma
         m64n128k32 with A and B from shared memory) and a producer warp that loads 128 x 128-byte
         boxes of A and B by the tensor memory accelerator (128-byte swizzle, zeros past the edges)
         into a ring of 6 stages (full / empty mbarriers). Split accumulation (as cuBLASLt's default
         here, --fp8-accum split): each 128-wide k tile's 4 products go into a fresh set of
         accumulators that the CUDA cores add to the running sums (the tensor cores' own FP8 sums
         are kept in less than fp32's precision); fast: the products accumulate in place. The
         epilogue scales by sa sb, rounds to bf16 and stores from the accumulators' registers.
     v2  v1 persistent: one CTA per SM walks the tiles (every 132nd, n fastest) and the producer's
         ring runs on across them, so the next tile's first k tiles load during this one's last
         products and its epilogue (v1 pays the ring's fill and the epilogue once a tile, with one
         CTA an SM: 193 KB of shared memory each).
     v3  v2 with the two warpgroups taking turns to issue (named barriers 1 and 2: a warpgroup issues
         its stage's products, hands the turn over, then waits for them and promotes), so one's
         products are queued while the other waits, adds and releases its stage.
     v4  v2 in clusters of two CTAs along m that share B's k tiles through TMA multicast (each loads
         half and the copy engine writes it into both): 3/4 of v2's L2 bytes a flop.
     v5  the same in clusters of 2 x 2 that share A along n as well: 1/2 of v2's bytes.
     v6  v2 with 128 x 256 tiles (wgmma m64n256k32), fast accumulation only (split's second set of
         sums would not fit in a thread's registers): 3/4 of v2's bytes.
     v7  v2 with fc's epilogue folded in (bias, h in bf16, gelu(h)'s e4m3 bytes and their transpose,
         the amax), against cuBLASLt's product then the shipped GELU cast: the decisive comparison
         (the product may lose to cuBLASLt's and the pair still lose to the fold).
   Measured (H200, 2026-12-03, this ladder; time against cuBLASLt's in the same run, split / fast
   accumulation; cuBLASLt's times, v2 and v4-v7 from the last call, `build/dev/fp8_gemm 24567`, v1 and
   v3 from the two before it, whose v2 ratios were within 3% of these):
     d48 fc forward [8192, 6400, 1600]    cuBLASLt 141.2 / 121.7 us (1,189 / 1,378 TFLOP/s); v1 1.47x / 1.67x; v2 1.49x / 1.75x; v3 1.48x / 1.70x;
                                          v4 2.80x / 3.14x; v5 3.62x / 4.11x; v6 - / 1.58x
     d48 projection's dx, e5m2 x e4m3     cuBLASLt 140.0 / 121.2 us; v1 1.48x / 1.68x; v2 1.52x / 1.76x; v3 1.49x / 1.71x; v4 2.83x / 3.15x;
                                          v5 3.66x / 4.13x; v6 - / 1.58x
     d48 qkv forward [8192, 4800, 1600]   cuBLASLt 107.5 / 93.4 us;  v1 1.47x / 1.64x; v2 1.53x / 1.77x; v3 1.52x / 1.68x; v4 2.83x / 3.15x;
                                          v5 3.71x / 4.19x; v6 - / 1.62x
     d48 projection [8192, 1600, 6400]    cuBLASLt 123.0 / 119.3 us; v1 1.30x / 1.29x; v2 1.29x / 1.28x; v3 1.30x / 1.23x; v4 3.14x / 3.12x;
                                          v5 4.20x / 4.31x; v6 - / 1.35x
     d12 B 16 fc [16384, 3072, 768]       cuBLASLt 75.1 / 72.1 us;   v1 1.91x / 1.92x; v2 1.57x / 1.61x; v3 1.56x / 1.66x; v4 2.75x / 2.78x;
                                          v5 3.52x / 3.57x; v6 - / 1.67x
     fc with GELU's e4m3 cast (v7)        d48: cuBLASLt + the shipped cast 222.0 us, v7 369.7 (1.67x); d12 B 16: 151.6 against 309.4 (2.04x)
   Every version gives cuBLASLt's bytes exactly (split and fast: the same products in the same
   order, split promoting every 128 of k as cuBLASLt does; v7's h, q, q^T and amax the pair's, every
   byte). Persistence (v2) hides the ring's fill where k is short (d12), nothing at d48; the turns
   (v3) change nothing; fast runs no faster than split: neither the promotion's adds nor the issue
   order is what bounds these versions at ~800 TFLOP/s. Fewer L2 bytes a flop is not it either: the
   wide tile (v6, 3/4 of the bytes) gains 10%, and the clusters lose by half or more (their CTAs
   wait for each other's half of every stage: each stage's empty barrier is the cluster's, not yet
   measured further). The fold (v7) costs more than the cast it removes. Closed for now: the model
   keeps cuBLASLt's products and the casts as kernels of their own (docs/fp8.md).
   Checked: against a float64 product of the decoded bytes on 8 sampled rows (the largest error
   over the largest |C|), and against cuBLASLt's C (the largest difference, same measure). Timed with
   CUDA events (median of 50), TFLOP/s = 2 M N K / time, at the shapes of d48's and d12's products.
   Build: make dev (build/dev/fp8_gemm); run: build/dev/fp8_gemm [versions, e.g. 24] [how many shapes] */
#include "common.cuh"
#include <math.h>

enum { BM = 128, BN = 128, BK = 128, ST = 6, ABYTES = BM * BK, BBYTES = BN * BK, STAGE = ABYTES + BBYTES };
static const size_t SMEM = (size_t)ST * STAGE + 1024;   /* + the slack to align the ring to 1024 bytes (the swizzle's atom) */

/* d (64 x 128 fp32, the m16n8 accumulator layout per warp and n-tile of 8) = A B^T (+ d when acc), one k
   step of 32, A and B K-major FP8 in shared memory (descriptors) */
#define F8_MMA(TA, TB)                                                                                         \
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"                                                    \
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB " {" BT__K_WG_R64 "}, %64, %65, p, 1, 1; }\n" \
                 : BT__K_WG_F64(d) : "l"(a), "l"(b), "r"(acc))
/* the product's operand formats (EA, EB: 1 e5m2, 0 e4m3) as the instruction names them */
#ifdef BT__K_WG
#define F8_FORMATS(MMA)                                  \
    if constexpr (EA == 0 && EB == 0) MMA("e4m3", "e4m3"); \
    else if constexpr (EA == 1 && EB == 0) MMA("e5m2", "e4m3"); \
    else MMA("e4m3", "e5m2");
#else
#define F8_FORMATS(MMA) (void)d; (void)a; (void)b; (void)acc;
#endif
template <int EA, int EB> __device__ __forceinline__ void wg_f8(float (&d)[64], uint64_t a, uint64_t b, int acc) { F8_FORMATS(F8_MMA) }
/* the same for a 64 x 256 product (128 accumulators a thread: v6) */
#define F8_R128 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define F8_F128(d) BT__K_WG_F64(d), BT__K_WG_F32(d, 64), BT__K_WG_F32(d, 96)
#define F8_MMA256(TA, TB)                                                                                      \
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %130, 0;\n"                                                  \
                 "wgmma.mma_async.sync.aligned.m64n256k32.f32." TA "." TB " {" F8_R128 "}, %128, %129, p, 1, 1; }\n" \
                 : F8_F128(d) : "l"(a), "l"(b), "r"(acc))
template <int EA, int EB> __device__ __forceinline__ void wg_f8_256(float (&d)[128], uint64_t a, uint64_t b, int acc) { F8_FORMATS(F8_MMA256) }
__device__ __forceinline__ void tma_load2(uint32_t sdst, const void *map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(sdst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
struct Maps { CUtensorMap a, b, a64, b64, b256; };   /* a64, b64: boxes of 64 rows (the clusters' halves); b256: 256 (v6) */

/* named barrier `id` of n threads: wait (this thread's arrival counts), or arrive without waiting */
__device__ __forceinline__ void bar_wait(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_give(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

/* the producer's loop (one thread): tiles t0, t0 + dt, .. of a C walked n fastest in tiles of BM x TN,
   each tile's k tiles into the NS-stage ring (stages of SB bytes: A's 128 rows, then B's TN rows from
   map b), a stage refilled once the empty barrier says both warpgroups are done with it */
template <int NS, int SB, int TN>
__device__ __forceinline__ void produce(const Maps &m, const CUtensorMap *b, uint32_t base, uint32_t full, uint32_t empty, int t0, int dt,
                                        int ntiles, int tn, int nk) {
    int u = 0;   /* k tiles loaded so far */
    for (int t = t0; t < ntiles; t += dt) {
        const int m0 = t / tn * BM, n0 = t % tn * TN;
        for (int k = 0; k < nk; k++, u++) {
            const int s = u % NS;
            if (u >= NS) bt__k_mbar_wait(empty + 8 * s, (u / NS - 1) & 1);
            bt__k_mbar_expect(full + 8 * s, SB);
            tma_load2(base + s * SB, &m.a, k * BK, m0, full + 8 * s);
            tma_load2(base + s * SB + BM * BK, b, k * BK, n0, full + 8 * s);
        }
    }
}
/* a warpgroup's part of one k tile (the 4 steps of 32): its 64 rows of A at a_tile times B's 128 rows
   at b_tile, into a fresh tmp (split: promoted by promote) or onto acc (fast; acc overwritten when
   first); issued, not waited for (wait_stage) */
template <int EA, int EB, int SPLIT>
__device__ __forceinline__ void issue_stage(float (&acc)[64], float (&tmp)[64], uint32_t a_tile, uint32_t b_tile, int first) {
    const uint64_t da = bt__k_wg_desc(a_tile, 16), db = bt__k_wg_desc(b_tile, 16);
    bt__k_wg_arrive();
#pragma unroll
    for (int kd = 0; kd < BK / 32; kd++) {
        if (SPLIT) wg_f8<EA, EB>(tmp, bt__k_wg_desc_at(da, 32 * kd), bt__k_wg_desc_at(db, 32 * kd), kd > 0);
        else wg_f8<EA, EB>(acc, bt__k_wg_desc_at(da, 32 * kd), bt__k_wg_desc_at(db, 32 * kd), !first || kd > 0);
    }
    bt__k_wg_commit();
}
/* the stage's products done (its shared memory free to refill once the empty barrier hears of it) */
template <int SPLIT> __device__ __forceinline__ void wait_stage(float (&acc)[64], float (&tmp)[64]) {
    bt__k_wg_wait0();
    bt__k_wg_pin(acc);
    if (SPLIT) bt__k_wg_pin(tmp);
}
/* split accumulation's promotion: the k tile's sums into the running fp32 ones */
template <int SPLIT> __device__ __forceinline__ void promote(float (&acc)[64], const float (&tmp)[64]) {
    if (SPLIT) {
#pragma unroll
        for (int i = 0; i < 64; i++) acc[i] += tmp[i];
    }
}
/* a warpgroup's 64 x (8 NJ) tile of C from its accumulators (4 NJ a thread, the m16n8 layout), scaled
   by sc and rounded to bf16; rows r0 and r0 + 8 (r0 = the thread's first row), columns from n0 */
template <int NJ>
__device__ __forceinline__ void store_bf16(__nv_bfloat16 *C, const float (&acc)[4 * NJ], float sc, int r0, int n0, int M, int N, int tg) {
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int c = n0 + 8 * j + 2 * tg;
        if (c >= N) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = r0 + 8 * h;
            if (r < M)
                *reinterpret_cast<__nv_bfloat162 *>(C + (int64_t)r * N + c) = __floats2bfloat162_rn(acc[4 * j + 2 * h] * sc, acc[4 * j + 2 * h + 1] * sc);
        }
    }
}
/* v7's epilogue (fc's): h = (sa sb) acc + bias rounded to bf16 into C (what cuBLASLt's BIAS epilogue
   writes, kept for the backward), and the e4m3 bytes of gelu(h) with the delayed scale, as
   bt_k_fp8_cast_act's GELU path makes them from h (the same element functions: gelu rounded to bf16,
   times 1 / scale, converted two at a time; mx <- the amax of gelu(h)'s bits): q [M, N] from the
   registers, q^T [N, M] through the warpgroup's 64 x 128-byte shared tile eq (a thread gathers a
   column's 64 bytes, four 16-byte stores). Needs N % 128 == 0 and M % 64 == 0. */
struct Epi { const __nv_bfloat16 *bias; uint8_t *q, *qt; const float *scale_in; unsigned *amax; };
__device__ __forceinline__ void store_gelu(const Epi &e, __nv_bfloat16 *C, const float (&acc)[64], float sc, float r, uint8_t (*eq)[144],
                                           int lr0, int r0, int m0w, int n0, int M, int N, int tg, int tw, int wg, unsigned &mx) {
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int lc = 8 * j + 2 * tg, c = n0 + lc;
        const float b0 = __bfloat162float(e.bias[c]), b1 = __bfloat162float(e.bias[c + 1]);
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int row = r0 + 8 * hh;
            const __nv_bfloat162 hv = __floats2bfloat162_rn(acc[4 * j + 2 * hh] * sc + b0, acc[4 * j + 2 * hh + 1] * sc + b1);
            *reinterpret_cast<__nv_bfloat162 *>(C + (int64_t)row * N + c) = hv;
            const float g0 = bt__k_fp8_val<__nv_bfloat16, BT_FP8_ACT_GELU>(hv.x, hv.x), g1 = bt__k_fp8_val<__nv_bfloat16, BT_FP8_ACT_GELU>(hv.y, hv.y);
            mx = max(mx, max(bt__abs_bits(g0), bt__abs_bits(g1)));
            const uint16_t qq = (uint16_t)bt__k_fp8_cvt2<0>(__fmul_rn(g0, r), __fmul_rn(g1, r));
            *reinterpret_cast<uint16_t *>(e.q + (int64_t)row * N + c) = qq;
            *reinterpret_cast<uint16_t *>(&eq[lr0 + 8 * hh][lc]) = qq;
        }
    }
    bt__k_bar_sync_n(3 + wg, 128);   /* the warpgroup's q tile is in shared memory */
    uint32_t w[16];                   /* q^T: thread tw writes column n0 + tw's 64 bytes (rows m0w ..) */
#pragma unroll
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)eq[4 * i][tw] | (uint32_t)eq[4 * i + 1][tw] << 8 | (uint32_t)eq[4 * i + 2][tw] << 16 | (uint32_t)eq[4 * i + 3][tw] << 24;
    uint4 *dst = reinterpret_cast<uint4 *>(e.qt + (int64_t)(n0 + tw) * M + m0w);
#pragma unroll
    for (int i = 0; i < 4; i++) dst[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
    bt__k_bar_sync_n(3 + wg, 128);   /* read before the next tile writes it */
}


/* PERSIST: v2's tile walk; TURNS: v3's issue order; GELU: v7's epilogue (e) instead of the plain store */
template <int EA, int EB, int SPLIT, int PERSIST, int TURNS, int GELU = 0>
__global__ void __launch_bounds__(384, 1) gemm_f8(const __grid_constant__ Maps m, __nv_bfloat16 *C, const float *sa, const float *sb,
                                                  int M, int N, int K, Epi e) {
#ifdef BT__K_WG
    __shared__ __align__(8) uint64_t bars[2 * ST];
    __shared__ __align__(16) uint8_t eq[GELU ? 2 : 1][GELU ? 64 : 1][144];   /* v7: each warpgroup's q tile (+16: rows 4 banks apart) */
    extern __shared__ __align__(16) unsigned char sm[];
    const uint32_t base = (bt__k_smem(sm) + 1023u) & ~1023u, full = bt__k_smem(bars), empty = full + 8 * ST;
    const int warp = __shfl_sync(0xffffffffu, (int)threadIdx.x / 32, 0), lane = threadIdx.x & 31;
    const int nk = (K + BK - 1) / BK, tn = (N + BN - 1) / BN, ntiles = tn * ((M + BM - 1) / BM);
    /* the tiles of this CTA: v1 its own (blockIdx.x), v2 every gridDim.x-th from blockIdx.x, n fastest */
    const int t0 = PERSIST ? (int)blockIdx.x : (int)(blockIdx.y * gridDim.x + blockIdx.x), dt = PERSIST ? (int)gridDim.x : ntiles;
    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; s++) { bt__k_mbar_init(full + 8 * s, 1); bt__k_mbar_init(empty + 8 * s, 2); }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (warp >= 8) {   /* producer warpgroup: one thread issues the loads, the ring running on across tiles */
        bt__k_wg_regs_dec<40>();
        if (threadIdx.x == 256) produce<ST, STAGE, BN>(m, &m.b, base, full, empty, t0, dt, ntiles, tn, nk);
        return;
    }
    bt__k_wg_regs_inc<232>();
    const int wg = warp >> 2, g = lane >> 2, tg = lane & 3;
    const float sc = *sa * *sb, r = GELU ? 1.f / *e.scale_in : 0.f;   /* r as the cast's reciprocal */
    unsigned mx = 0;
    int u = 0;   /* k tiles consumed so far */
    const int total = ((ntiles - t0 + dt - 1) / dt) * nk;   /* this CTA's stages: each warpgroup issues as many */
    if (TURNS && wg == 1 && total > 0) bar_give(1, 256);    /* warpgroup 0 has the first turn */
    for (int t = t0; t < ntiles; t += dt) {
        const int m0 = t / tn * BM, n0 = t % tn * BN;
        float acc[64], tmp[64];
#pragma unroll
        for (int i = 0; i < 64; i++) acc[i] = tmp[i] = 0.f;
        for (int k = 0; k < nk; k++, u++) {
            const int s = u % ST;
            bt__k_mbar_wait(full + 8 * s, (u / ST) & 1);
            if (TURNS) bar_wait(1 + wg, 256);                      /* this warpgroup's turn to issue */
            issue_stage<EA, EB, SPLIT>(acc, tmp, base + s * STAGE + wg * 64 * 128, base + s * STAGE + ABYTES, k == 0);
            if (TURNS && (wg == 0 || u + 1 < total)) bar_give(2 - wg, 256);   /* the other's turn (none left over at the end) */
            wait_stage<SPLIT>(acc, tmp);
            if ((threadIdx.x & 127) == 0) bt__k_mbar_arrive(empty + 8 * s);   /* this warpgroup is done reading the stage */
            promote<SPLIT>(acc, tmp);
        }
        const int lr0 = 16 * (warp & 3) + g, r0 = m0 + wg * 64 + lr0;
        if (GELU) store_gelu(e, C, acc, sc, r, eq[wg], lr0, r0, m0 + wg * 64, n0, M, N, tg, threadIdx.x & 127, wg, mx);
        else store_bf16<16>(C, acc, sc, r0, n0, M, N, tg);
    }
    if (GELU) {
        mx = __reduce_max_sync(0xffffffffu, mx);
        if (lane == 0 && mx) atomicMax(e.amax, mx);
    }
#else
    (void)m; (void)C; (void)sa; (void)sb; (void)M; (void)N; (void)K; (void)e;
    __trap();
#endif
}

/* v4's cluster primitives: this CTA's rank in its cluster; a shared address of this CTA as the same
   offset in CTA `rank`'s shared memory; an arrival on a (possibly remote) mbarrier, released at
   cluster scope; a wait that acquires at cluster scope; the box of a 2-d map multicast to the CTAs
   of `mask`, each one's mbarrier at the same offset completing with the bytes it receives; the
   cluster-wide barrier of every thread */
__device__ __forceinline__ uint32_t cl_rank(void) { uint32_t r; asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r)); return r; }
__device__ __forceinline__ uint32_t cl_map(uint32_t a, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}
__device__ __forceinline__ void cl_arrive(uint32_t cluster_bar) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_bar) : "memory");
}
__device__ __forceinline__ void cl_wait(uint32_t bar, int parity) {
    uint32_t done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}
__device__ __forceinline__ void tma_load2_mc(uint32_t sdst, const void *map, int c0, int c1, uint32_t bar, uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(sdst), "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}
__device__ __forceinline__ void cl_sync(void) {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

/* v4 / v5: v2 in clusters of CM x CN CTAs (v4 2 x 1, v5 2 x 2) that share the operands' k tiles:
   the cluster computes a (CM 128) x (CN 128) block of C, CTA r (rx = r % CM along m, ry = r / CM
   along n) its 128 x 128 tile. The CN CTAs of one rx need the same A rows, the CM CTAs of one ry
   the same B rows: of each stage a CTA loads 128 / CN rows of its A and 128 / CM rows of its B, and
   the tensor memory accelerator writes each slice into the stages of every CTA that needs it
   (multicast), so a CTA pulls 16 / CN + 16 / CM KB of a stage from L2 instead of 32 (v4 3/4, v5
   1/2). A stage of a CTA is written by the CTAs of its row and column of the cluster (CN + CM - 1
   of them, itself included), so it is refilled only when all their consumers are done with it:
   each consumer warpgroup arrives on the empty barriers of those CTAs (2 (CN + CM - 1) arrivals a
   phase). Every thread meets the cluster barrier after the barriers' initialisation (a peer's must
   exist before anything lands there) and before exiting (nothing may land in a CTA that has left). */
template <int EA, int EB, int SPLIT, int CM, int CN>
__global__ void __launch_bounds__(384, 1) gemm_f8_mc(const __grid_constant__ Maps m, __nv_bfloat16 *C, const float *sa, const float *sb,
                                                     int M, int N, int K) {
#ifdef BT__K_WG
    enum { CS = CM * CN, AR = BM / CN, BR = BN / CM };   /* CTAs a cluster; the A and B rows a CTA loads a stage */
    __shared__ __align__(8) uint64_t bars[2 * ST];
    extern __shared__ __align__(16) unsigned char sm[];
    const uint32_t base = (bt__k_smem(sm) + 1023u) & ~1023u, full = bt__k_smem(bars), empty = full + 8 * ST;
    const int warp = __shfl_sync(0xffffffffu, (int)threadIdx.x / 32, 0), lane = threadIdx.x & 31;
    const int rank = (int)cl_rank(), rx = rank % CM, ry = rank / CM;
    const int nk = (K + BK - 1) / BK, tn = (N + CN * BN - 1) / (CN * BN), nsuper = tn * ((M + CM * BM - 1) / (CM * BM));
    const int c0 = (int)blockIdx.x / CS, dc = (int)gridDim.x / CS;   /* this cluster's first block of C, the clusters */
    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; s++) { bt__k_mbar_init(full + 8 * s, 1); bt__k_mbar_init(empty + 8 * s, 2 * (CN + CM - 1)); }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    cl_sync();
    if (warp >= 8) {   /* producer warpgroup: one thread issues the loads */
        bt__k_wg_regs_dec<40>();
        if (threadIdx.x == 256) {
            uint16_t ma = 0, mb = 0;   /* the CTAs of this one's rx (they share A), of its ry (B) */
            for (int j = 0; j < CN; j++) ma |= (uint16_t)(1u << (rx + CM * j));
            for (int i = 0; i < CM; i++) mb |= (uint16_t)(1u << (i + CM * ry));
            int u = 0;
            for (int t = c0; t < nsuper; t += dc) {
                const int m0 = t / tn * CM * BM + rx * BM, n0 = t % tn * CN * BN + ry * BN;
                for (int k = 0; k < nk; k++, u++) {
                    const int s = u % ST;
                    if (u >= ST) cl_wait(empty + 8 * s, (u / ST - 1) & 1);   /* every writer's consumers done with stage s */
                    bt__k_mbar_expect(full + 8 * s, STAGE);                   /* all of A and B, from whichever CTA */
                    const uint32_t sa0 = base + s * STAGE + ry * AR * BK, sb0 = base + s * STAGE + ABYTES + rx * BR * BK;
                    if (CN == 1) tma_load2(sa0, &m.a, k * BK, m0, full + 8 * s);
                    else tma_load2_mc(sa0, &m.a64, k * BK, m0 + ry * AR, full + 8 * s, ma);
                    if (CM == 1) tma_load2(sb0, &m.b, k * BK, n0, full + 8 * s);
                    else tma_load2_mc(sb0, &m.b64, k * BK, n0 + rx * BR, full + 8 * s, mb);
                }
            }
        }
        __syncwarp();
    } else {
        bt__k_wg_regs_inc<232>();
        const int wg = warp >> 2, g = lane >> 2, tg = lane & 3;
        const float sc = *sa * *sb;
        int u = 0;
        for (int t = c0; t < nsuper; t += dc) {
            const int m0 = t / tn * CM * BM + rx * BM, n0 = t % tn * CN * BN + ry * BN;
            float acc[64], tmp[64];
#pragma unroll
            for (int i = 0; i < 64; i++) acc[i] = tmp[i] = 0.f;
            for (int k = 0; k < nk; k++, u++) {
                const int s = u % ST;
                bt__k_mbar_wait(full + 8 * s, (u / ST) & 1);
                issue_stage<EA, EB, SPLIT>(acc, tmp, base + s * STAGE + wg * 64 * 128, base + s * STAGE + ABYTES, k == 0);
                wait_stage<SPLIT>(acc, tmp);
                if ((threadIdx.x & 127) == 0) {   /* this warpgroup is done reading stage s: tell every CTA that writes it */
                    for (int j = 0; j < CN; j++) cl_arrive(cl_map(empty + 8 * s, (uint32_t)(rx + CM * j)));
                    for (int i = 0; i < CM; i++)
                        if (i != rx) cl_arrive(cl_map(empty + 8 * s, (uint32_t)(i + CM * ry)));
                }
                promote<SPLIT>(acc, tmp);
            }
            store_bf16<16>(C, acc, sc, m0 + wg * 64 + 16 * (warp & 3) + g, n0, M, N, tg);
        }
    }
    cl_sync();
#else
    (void)m; (void)C; (void)sa; (void)sb; (void)M; (void)N; (void)K;
    __trap();
#endif
}
template <int EA, int EB, int SPLIT, int CM, int CN>
static void run_mc(const Maps &mp, __nv_bfloat16 *C, const float *sa, const float *sb, int M, int N, int K, cudaStream_t s) {
    static int set = 0, clusters = 0;   /* clusters resident at once (a GPC's SMs need not divide by the cluster) */
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeClusterDimension; at.val.clusterDim.x = CM * CN; at.val.clusterDim.y = 1; at.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.blockDim = dim3(384); cfg.dynamicSmemBytes = SMEM; cfg.stream = s; cfg.attrs = &at; cfg.numAttrs = 1;
    if (!set) {
        CK(cudaFuncSetAttribute(gemm_f8_mc<EA, EB, SPLIT, CM, CN>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
        cfg.gridDim = dim3(CM * CN);
        CK(cudaOccupancyMaxActiveClusters(&clusters, gemm_f8_mc<EA, EB, SPLIT, CM, CN>, &cfg));
        if (clusters < 1) { fprintf(stderr, "fp8_gemm: no cluster of %d fits\n", CM * CN); exit(1); }
        set = 1;
    }
    const int blocks = ((N + CN * BN - 1) / (CN * BN)) * ((M + CM * BM - 1) / (CM * BM));
    cfg.gridDim = dim3((unsigned)(CM * CN * std::min(blocks, clusters)));
    CK(cudaLaunchKernelEx(&cfg, gemm_f8_mc<EA, EB, SPLIT, CM, CN>, mp, C, sa, sb, M, N, K));
}

/* v6: v2 with 128 x 256 tiles, fast accumulation only (each warpgroup's 64 x 256 sums are 128
   registers a thread; split's second set would not fit): a byte per 170 flops from L2 instead of
   128, B's 256 rows read by both warpgroups from a 4-stage ring of 48 KB stages. */
enum { BN6 = 256, ST6 = 4, STAGE6 = BM * BK + BN6 * BK };
static const size_t SMEM6 = (size_t)ST6 * STAGE6 + 1024;
template <int EA, int EB>
__global__ void __launch_bounds__(384, 1) gemm_f8_wide(const __grid_constant__ Maps m, __nv_bfloat16 *C, const float *sa, const float *sb,
                                                       int M, int N, int K) {
#ifdef BT__K_WG
    __shared__ __align__(8) uint64_t bars[2 * ST6];
    extern __shared__ __align__(16) unsigned char sm[];
    const uint32_t base = (bt__k_smem(sm) + 1023u) & ~1023u, full = bt__k_smem(bars), empty = full + 8 * ST6;
    const int warp = __shfl_sync(0xffffffffu, (int)threadIdx.x / 32, 0), lane = threadIdx.x & 31;
    const int nk = (K + BK - 1) / BK, tn = (N + BN6 - 1) / BN6, ntiles = tn * ((M + BM - 1) / BM);
    if (threadIdx.x == 0) {
        for (int s = 0; s < ST6; s++) { bt__k_mbar_init(full + 8 * s, 1); bt__k_mbar_init(empty + 8 * s, 2); }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (warp >= 8) {
        bt__k_wg_regs_dec<40>();
        if (threadIdx.x == 256) produce<ST6, STAGE6, BN6>(m, &m.b256, base, full, empty, blockIdx.x, gridDim.x, ntiles, tn, nk);
        return;
    }
    bt__k_wg_regs_inc<232>();
    const int wg = warp >> 2, g = lane >> 2, tg = lane & 3;
    const float sc = *sa * *sb;
    int u = 0;
    for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const int m0 = t / tn * BM, n0 = t % tn * BN6;
        float acc[128];
#pragma unroll
        for (int i = 0; i < 128; i++) acc[i] = 0.f;
        for (int k = 0; k < nk; k++, u++) {
            const int s = u % ST6;
            bt__k_mbar_wait(full + 8 * s, (u / ST6) & 1);
            const uint64_t da = bt__k_wg_desc(base + s * STAGE6 + wg * 64 * 128, 16), db = bt__k_wg_desc(base + s * STAGE6 + BM * BK, 16);
            bt__k_wg_arrive();
#pragma unroll
            for (int kd = 0; kd < BK / 32; kd++)
                wg_f8_256<EA, EB>(acc, bt__k_wg_desc_at(da, 32 * kd), bt__k_wg_desc_at(db, 32 * kd), k > 0 || kd > 0);
            bt__k_wg_commit();
            bt__k_wg_wait0();
            bt__k_wg_pin(acc);
            if ((threadIdx.x & 127) == 0) bt__k_mbar_arrive(empty + 8 * s);
        }
        store_bf16<32>(C, acc, sc, m0 + wg * 64 + 16 * (warp & 3) + g, n0, M, N, tg);
    }
#else
    (void)m; (void)C; (void)sa; (void)sb; (void)M; (void)N; (void)K;
    __trap();
#endif
}
template <int EA, int EB>
static void run_wide(const Maps &mp, __nv_bfloat16 *C, const float *sa, const float *sb, int M, int N, int K, cudaStream_t s) {
    static int set = 0, sms = 0;
    if (!set) {
        CK(cudaFuncSetAttribute(gemm_f8_wide<EA, EB>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM6));
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        set = 1;
    }
    const int tiles = ((N + BN6 - 1) / BN6) * ((M + BM - 1) / BM);
    gemm_f8_wide<EA, EB><<<(unsigned)std::min(tiles, sms), 384, SMEM6, s>>>(mp, C, sa, sb, M, N, K);
    CK(cudaGetLastError());
}

/* a [rows, K] byte matrix's map: boxes of box_rows rows x 128 bytes, 128-byte swizzle */
static void make_map(CUtensorMap *map, const void *x, int rows, int K, int box_rows = 128) {
    bt__k_tmap_encode_fn enc = bt__k_tmap_encoder();
    if (!enc) { fprintf(stderr, "fp8_gemm: no cuTensorMapEncodeTiled in this driver\n"); exit(1); }
    const cuuint64_t dim[2] = {(cuuint64_t)K, (cuuint64_t)rows}, str[1] = {(cuuint64_t)K};
    const cuuint32_t box[2] = {BK, (cuuint32_t)box_rows}, one[2] = {1, 1};
    if (enc(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)x, dim, str, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
        fprintf(stderr, "fp8_gemm: cuTensorMapEncodeTiled refused [%d, %d]\n", rows, K);
        exit(1);
    }
}
template <int EA, int EB, int SPLIT, int PERSIST, int TURNS>
static void run_own(const Maps &mp, __nv_bfloat16 *C, const float *sa, const float *sb, int M, int N, int K, cudaStream_t s) {
    static int set = 0, sms = 0;
    if (!set) {
        CK(cudaFuncSetAttribute(gemm_f8<EA, EB, SPLIT, PERSIST, TURNS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        set = 1;
    }
    const int tiles = ((N + BN - 1) / BN) * ((M + BM - 1) / BM);
    dim3 grid = PERSIST ? dim3((unsigned)std::min(tiles, sms)) : dim3((N + BN - 1) / BN, (M + BM - 1) / BM);
    gemm_f8<EA, EB, SPLIT, PERSIST, TURNS><<<grid, 384, SMEM, s>>>(mp, C, sa, sb, M, N, K, Epi{});
    CK(cudaGetLastError());
}
template <int EA, int EB>
static void launch_own(int ver, int split, const Maps &mp, __nv_bfloat16 *C, const float *sa, const float *sb, int M, int N, int K,
                       cudaStream_t s) {
    if (ver == 1) { if (split) run_own<EA, EB, 1, 0, 0>(mp, C, sa, sb, M, N, K, s); else run_own<EA, EB, 0, 0, 0>(mp, C, sa, sb, M, N, K, s); }
    else if (ver == 2) { if (split) run_own<EA, EB, 1, 1, 0>(mp, C, sa, sb, M, N, K, s); else run_own<EA, EB, 0, 1, 0>(mp, C, sa, sb, M, N, K, s); }
    else if (ver == 3) { if (split) run_own<EA, EB, 1, 1, 1>(mp, C, sa, sb, M, N, K, s); else run_own<EA, EB, 0, 1, 1>(mp, C, sa, sb, M, N, K, s); }
    else if (ver == 4) { if (split) run_mc<EA, EB, 1, 2, 1>(mp, C, sa, sb, M, N, K, s); else run_mc<EA, EB, 0, 2, 1>(mp, C, sa, sb, M, N, K, s); }
    else if (ver == 5) { if (split) run_mc<EA, EB, 1, 2, 2>(mp, C, sa, sb, M, N, K, s); else run_mc<EA, EB, 0, 2, 2>(mp, C, sa, sb, M, N, K, s); }
    else run_wide<EA, EB>(mp, C, sa, sb, M, N, K, s);   /* fast only */
}

/* n bytes of format fmt: values ~ N(0, 1) * spread, quantised with scale 1 (no NaN or infinity) */
static void fill_fp8(uint8_t *h, int64_t n, bt_dtype fmt, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        const double u1 = ((s >> 11) + 1) * (1.0 / 9007199254740993.0);
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        const double u2 = (s >> 11) * (1.0 / 9007199254740992.0);
        const float v = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)) * 4.f;
        h[i] = bt_fp8_quantize(v, 1.f, fmt);
    }
}
/* the largest |C - ref| over the sampled rows, over the largest |ref| there (float64 of the decoded bytes) */
static double check_rows(const __nv_bfloat16 *hc, const uint8_t *ha, bt_dtype fa, const uint8_t *hb, bt_dtype fb, float scale, int M, int N,
                         int K, int nrows) {
    double worst = 0, big = 0, ta[256], tb[256];
    for (int c = 0; c < 256; c++) { ta[c] = bt_fp8_decode((uint8_t)c, fa); tb[c] = bt_fp8_decode((uint8_t)c, fb); }
    double *brow = (double *)malloc(sizeof(double) * (size_t)K);
    for (int t = 0; t < nrows; t++) {
        const int i = (int)((int64_t)t * (M - 1) / (nrows > 1 ? nrows - 1 : 1));
        for (int k = 0; k < K; k++) brow[k] = ta[ha[(int64_t)i * K + k]];
        for (int j = 0; j < N; j++) {
            double r = 0;
            const uint8_t *bj = hb + (int64_t)j * K;
            for (int k = 0; k < K; k++) r += brow[k] * tb[bj[k]];
            r *= scale;
            big = fmax(big, fabs(r));
            const double e = fabs((double)__bfloat162float(hc[(int64_t)i * N + j]) - r);
            if (!(e <= worst)) worst = isfinite(e) ? e : INFINITY;
        }
    }
    free(brow);
    return worst / (big > 0 ? big : 1);
}
static double max_rel_diff(const __nv_bfloat16 *x, const __nv_bfloat16 *y, int64_t n) {
    double worst = 0, big = 0;
    for (int64_t i = 0; i < n; i++) {
        const double a = __bfloat162float(x[i]), b = __bfloat162float(y[i]);
        if (!(fabs(a - b) <= worst)) worst = isfinite(a - b) ? fabs(a - b) : INFINITY;   /* NaN or infinity: counted, not skipped */
        big = fmax(big, fabs(b));
    }
    return worst / (big > 0 ? big : 1);
}

struct Shape { const char *what; int M, N, K; bt_dtype fa; };
/* v7 against the pair it would replace, at one shape: h, q, q^T and amax compared byte for byte */
static void gelu_fold(const struct Shape &sh, const Maps &mp, const uint8_t *a, const uint8_t *b, const float *scales, __nv_bfloat16 *h0,
                      __nv_bfloat16 *h1, cudaStream_t s) {
    const int M = sh.M, N = sh.N, K = sh.K;
    const size_t nq = (size_t)M * N;
    uint8_t *q[4];
    __nv_bfloat16 *bias;
    float *st;   /* [0] the delayed scale, [4] the pair's amax, [8] v7's amax, [12] the scale the cast reports */
    for (int i = 0; i < 4; i++) CK(cudaMalloc(&q[i], nq));
    CK(cudaMalloc(&bias, sizeof(__nv_bfloat16) * (size_t)N));
    CK(cudaMalloc(&st, 16 * sizeof(float)));
    fill_bf16(bias, N, 0x5eedull + (uint64_t)N, -8.f, 8.f);
    const float hs[16] = {0.25f};
    CK(cudaMemcpy(st, hs, sizeof hs, cudaMemcpyHostToDevice));
    static int set = 0, sms = 0;
    if (!set) {
        CK(cudaFuncSetAttribute(gemm_f8<0, 0, 1, 1, 0, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        set = 1;
    }
    const int tiles = (N / BN) * ((M + BM - 1) / BM);
    auto pair = [&] {
        bt_k_matmul_fp8(BT_BF16, h0, a, BT_F8E4M3, scales, b, BT_F8E4M3, scales + 4, bias, NULL, M, N, K, 0, s);
        bt_k_fp8_cast_act(BT_BF16, BT_F8E4M3, BT_FP8_ACT_GELU, q[0], q[1], NULL, h0, NULL, M, N, NULL, st, st + 12, st + 4, s);
    };
    auto fold = [&] {
        Epi e = {bias, q[2], q[3], st, (unsigned *)(st + 8)};
        gemm_f8<0, 0, 1, 1, 0, 1><<<(unsigned)std::min(tiles, sms), 384, SMEM, s>>>(mp, h1, scales, scales + 4, M, N, K, e);
        CK(cudaGetLastError());
    };
    CK(cudaMemset(q[2], 0xff, nq)); CK(cudaMemset(q[3], 0xff, nq)); CK(cudaMemset(h1, 0xff, nq * 2));
    pair(); fold();
    CK(cudaDeviceSynchronize());
    float am[16];
    CK(cudaMemcpy(am, st, sizeof am, cudaMemcpyDeviceToHost));
    const long dh = differ(h0, h1, nq * 2), dq = differ(q[0], q[2], nq), dqt = differ(q[1], q[3], nq);
    const double tp = median_us(pair, s), tf = median_us(fold, s);
    printf("  fc with GELU's e4m3 cast (bias, delayed scale): cuBLASLt + cast %8.1f us; v7 %8.1f us (%.3f); bytes differing: h %ld, q %ld, "
           "q^T %ld; amax %s\n", tp, tf, tf / tp, dh, dq, dqt, memcmp(&am[4], &am[8], 4) ? "DIFFERS" : "the same");
    for (int i = 0; i < 4; i++) CK(cudaFree(q[i]));
    CK(cudaFree(bias)); CK(cudaFree(st));
}

/* fp8_gemm [VERSIONS [SHAPES]]: the versions to run as digits (default 1234567), the first SHAPES shapes (default all) */
int main(int argc, char **argv) {
    const char *vers = argc > 1 ? argv[1] : "1234567";
    const int nshapes = argc > 2 ? atoi(argv[2]) : 1 << 30;
    bt_k_init(0);
    cudaStream_t s = (cudaStream_t)0;
    const Shape shapes[] = {
        {"d48 fc forward (x e4m3, w e4m3)", 8192, 6400, 1600, BT_F8E4M3},
        {"d48 MLP projection's dx (gy e5m2, w^T e4m3)", 8192, 6400, 1600, BT_F8E5M2},
        {"d48 qkv forward", 8192, 4800, 1600, BT_F8E4M3},
        {"d48 MLP projection forward", 8192, 1600, 6400, BT_F8E4M3},
        {"d12 B 16 fc forward", 16384, 3072, 768, BT_F8E4M3},
        {"d12 B 16 MLP projection's dx", 16384, 3072, 768, BT_F8E5M2},
    };
    int shown = 0;
    for (const Shape &sh : shapes) {
        if (shown++ >= nshapes) break;
        const int M = sh.M, N = sh.N, K = sh.K;
        const int64_t na = (int64_t)M * K, nb = (int64_t)N * K, nc = (int64_t)M * N;
        uint8_t *ha = (uint8_t *)malloc((size_t)na), *hb = (uint8_t *)malloc((size_t)nb), *a, *b;
        fill_fp8(ha, na, sh.fa, 0x1234567ull + (uint64_t)M * 7 + (uint64_t)N);
        fill_fp8(hb, nb, BT_F8E4M3, 0x7654321ull + (uint64_t)K);
        __nv_bfloat16 *c0, *c1, *hc0 = (__nv_bfloat16 *)malloc(sizeof(__nv_bfloat16) * (size_t)nc),
                            *hc1 = (__nv_bfloat16 *)malloc(sizeof(__nv_bfloat16) * (size_t)nc);
        float *scales, hs[8] = {0.5f, 0, 0, 0, 0.25f, 0, 0, 0};   /* sa, sb 16 bytes apart (cuBLASLt wants aligned scale pointers) */
        CK(cudaMalloc(&a, (size_t)na)); CK(cudaMalloc(&b, (size_t)nb));
        CK(cudaMalloc(&c0, sizeof(__nv_bfloat16) * (size_t)nc)); CK(cudaMalloc(&c1, sizeof(__nv_bfloat16) * (size_t)nc));
        CK(cudaMalloc(&scales, sizeof hs));
        CK(cudaMemcpy(a, ha, (size_t)na, cudaMemcpyHostToDevice)); CK(cudaMemcpy(b, hb, (size_t)nb, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(scales, hs, sizeof hs, cudaMemcpyHostToDevice));
        Maps mp;
        make_map(&mp.a, a, M, K); make_map(&mp.b, b, N, K); make_map(&mp.a64, a, M, K, 64); make_map(&mp.b64, b, N, K, 64); make_map(&mp.b256, b, N, K, 256);
        printf("%s: M %d N %d K %d\n", sh.what, M, N, K);
        const double flop = 2.0 * M * N * K;
        for (int split = 1; split >= 0; split--) {
            auto cub = [&] { bt_k_matmul_fp8(BT_BF16, c0, a, sh.fa, scales, b, BT_F8E4M3, scales + 4, NULL, NULL, M, N, K, !split, s); };
            cub();
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(hc0, c0, sizeof(__nv_bfloat16) * (size_t)nc, cudaMemcpyDeviceToHost));
            const double e0 = check_rows(hc0, ha, sh.fa, hb, BT_F8E4M3, hs[0] * hs[4], M, N, K, 8), tc = median_us(cub, s);
            printf("  %s  cuBLASLt %8.1f us %6.0f TFLOP/s (err %.1e)\n", split ? "split" : "fast ", tc, flop / (tc * 1e-6) / 1e12, e0);
            for (int ver = 1; ver <= 6; ver++) {
                if (!strchr(vers, '0' + ver) || (ver == 6 && split)) continue;
                auto own = [&] {
                    if (sh.fa == BT_F8E5M2) launch_own<1, 0>(ver, split, mp, c1, scales, scales + 4, M, N, K, s);
                    else launch_own<0, 0>(ver, split, mp, c1, scales, scales + 4, M, N, K, s);
                };
                CK(cudaMemset(c1, 0xff, sizeof(__nv_bfloat16) * (size_t)nc));   /* NaN: a tile not written shows */
                own();
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(hc1, c1, sizeof(__nv_bfloat16) * (size_t)nc, cudaMemcpyDeviceToHost));
                const double e1 = check_rows(hc1, ha, sh.fa, hb, BT_F8E4M3, hs[0] * hs[4], M, N, K, 8), d = max_rel_diff(hc1, hc0, nc);
                const double to = median_us(own, s);
                printf("         v%d       %8.1f us %6.0f TFLOP/s (err %.1e)  time / cuBLASLt's %.3f, largest difference from it %.1e\n", ver,
                       to, flop / (to * 1e-6) / 1e12, e1, to / tc, d);
            }
        }
        if (strchr(vers, '7') && sh.fa == BT_F8E4M3 && N % BN == 0 && M % 64 == 0) gelu_fold(sh, mp, a, b, scales, c0, c1, s);
        CK(cudaFree(a)); CK(cudaFree(b)); CK(cudaFree(c0)); CK(cudaFree(c1)); CK(cudaFree(scales));
        free(ha); free(hb); free(hc0); free(hc1);
    }
    return 0;
}
