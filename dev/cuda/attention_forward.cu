/* attention_forward.cu - the ladder of the attention forward (bf16, D 64 or 128, causal or not): the
   versions the shipped kernels were measured against, from the sm_80 kernel to the sm_90a one that
   ships at D 64, plus timing-only ablations and per-item clock traces. Each version runs on fresh
   random inputs (q, k, v views of one [B, T, 3, H, D] buffer, as in GPT-2), is checked against a CPU
   reference in double on a few heads (output and lse; ablations, wrong on purpose, are not), and is
   timed with CUDA events (the median of --reps calls after 3 warm-ups).

   Build: make dev, or
     nvcc -O3 -std=c++17 -x cu -gencode=arch=compute_90a,code=sm_90a -I. -o build/dev/attention_forward \
          dev/cuda/attention_forward.cu -lcublas -lcublasLt -lm
   Run (an H100 / H200):
     build/dev/attention_forward                  versions 1-12 at B 16, H 12, T 1024, D 64, causal
     build/dev/attention_forward 8 9 --T 4096     those versions at T 4096
     build/dev/attention_forward 7 --turns 7      turns only in items of 7 key tiles or more
     build/dev/attention_forward 8 --trace        per-item clocks of one call (by tile count), --steps: and
                                                  CTA 0's per-step phases
   Options: --B --H --T --D (64 or 128) --causal 0|1 --reps N --seed S; the host's choices, defaults as
   shipped: --order 0|1|2 (the measured rule, fixed snake, counter), --persist 0|1, --qend 0|1 (causal
   192-row tiles end-aligned at T), --l2 MiB (forward sections of heads; 0: one), --one MiB (one section
   when all heads fit), --carveout P (the shared-memory share of L1 in percent; default: the driver's).

   The versions (the sm_90a ones are one template, fv_wg<T, D, M>, over the bits of M below; the shipped
   kernels are bt_attention.cuh's bt__k_att_fwd_wg<T, D>, whose machine code equals versions 2 (D 128)
   and 8 (D 64) less their trace marks):
      1  sm_80: mma.sync m16n8k16, 64-query CTAs of 4 warps, K / V double-buffered by cp.async (the path
         on GPUs other than the H100; bt_k_attention_hopper(0))
      2  sm_90a: a TMA producer warpgroup and two consumer warpgroups on 128-query tiles taking turns at
         the tensor cores (ping-pong), both products of a step waited for before its softmax (M 0; the
         shipped kernel at D 128)
      3  2 + the softmax under the warpgroup's own P V (OVL)
      4  2 + lean steps (LEAN: descriptors as offsets of per-item bases, one compare a masked score)
      5  OVL + LEAN
      6  three consumer warpgroups on 192-query tiles (WG3, lean), turns in items of --turns key tiles
         or more (default 1: every item)
      7  6 + OVL
      8  7 without turns (the shipped kernel at D 64)
      9  the library's call (bt_k_attention_strided: the shipped kernels)
     10  5 + SKIP: the O rescale skipped while no row max rises by more than 2^8
     11  7 + SKIP
     12  8 + SKIP
     21-26 timing-only ablations of version 2 (results wrong): 21 no softmax (S taken as P), 22 exp2 as a
         multiply, 23 every K / V / Q stage loaded only the first time, 24 no turns, 25 no output store,
         26 no products (S made up from registers)
   What they measured (B 16, H 12, causal, on an H100; bench/RESULTS.md has the rounds): OVL T 4096
   1281-1293 us against 1318-1364 without; LEAN + OVL T 1024 103 against 116-146 for OVL alone; WG3
   without turns T 4096 1063-1073 against 1187-1231 for two warpgroups (LEAN + OVL); without turns
   800-802 against 814-815 with turns in items of 7 or more, T 512 36.5-36.6 against 36.9-37.1; SKIP no
   faster (T 4096 894-902 against 903). */
#define BT_ALLOC_IMPLEMENTATION
#define BT_KERNELS_IMPLEMENTATION
#include "bt_kernels.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the sm_90a forward's variants: the bits of M ---------------------------------------------- */
/* M: variants (correct results) FV_OVL, the softmax of tile j under the warpgroup's own
   O += P(j-1) V(j-1) (issued together, waited for apart); FV_LEAN, fewer instructions a step
   (descriptors as offsets of per-item bases, the diagonal tile's mask as one compare a score);
   FV_WG3 (D 64), three consumer warpgroups and 192-query tiles (512 threads; fv_nw); FV_SKIP, a row
   keeps its running max unless a tile raises it by more than FV_SKIP_LOG2 (log2 units), and a warp
   whose rows all kept theirs skips the O rescale (fv_p); FV_NOTURN (with WG3), no turns at the
   tensor cores (with turns: in items of at least p.turns key tiles); FV_STEPS, CTA 0's per-step
   clocks (fv_tmark). Ablations FV_ABL = 1..6 (timing only, results wrong on purpose, on the variant
   without OVL): 1 no softmax (S converted to P as is), 2 exp2 replaced by a multiply, 3 every K / V /
   Q stage loaded only the first time, 4 no turns at the tensor cores, 5 no output store, 6 no
   products (S made up from registers) */
enum { FV_ABL = 7, FV_OVL = 8, FV_LEAN = 16, FV_WG3 = 32, FV_SKIP = 64, FV_NOTURN = 128, FV_STEPS = 256 };
/* SKIP: P = 2^(S c2 - m c2) stays below 2^8 with a stale max m (within bf16 / f16 range, and l, O
   are in the same stale units, so O / l and lse stay exact) */
#define FV_SKIP_LOG2 8.f
/* consumer warpgroups of the forward's variant M: 2 (64 query rows each, 384 threads) or, WG3, 3
   (512 threads: per SM sub-partition three consumer warps whose softmax chains hide each other's
   latency, registers 3 x 160 + 32 = 512 after setmaxnreg) */
__host__ __device__ constexpr int fv_nw(int M) { return (M & FV_WG3) ? 3 : 2; }
/* --trace (p.trace set): thread th writes the SM clock into slot k of work item L's 8 */
__device__ __forceinline__ void fv_mark(const bt__k_attp &p, int64_t L, int k, int th) {
    if (p.trace && threadIdx.x == th) p.trace[L * 8 + k] = clock64();
}
/* FV_STEPS (--steps), the steps of CTA 0 (its first FV_TSTEPS): warpgroup w's thread 0 writes the clock at phase k
   (0 step start, 1 K / V landed, 2 turn taken, 3 products waited for, 4 step end, 5 S issued, 6 P V issued) into slot
   (u + j) * 24 + 8 w + k behind the items' marks. Without the bit, no code */
#define FV_TSTEPS 512
template <int M> __device__ __forceinline__ void fv_tmark(const bt__k_attp &p, int64_t nitems, int step, int w, int k) {
    if ((M & FV_STEPS) && p.trace && blockIdx.x == 0 && (threadIdx.x & 127) == 0 && step < FV_TSTEPS)
        p.trace[nitems * 8 + (int64_t)step * 24 + 8 * w + k] = clock64();
}
/* the exp2 of the softmax under variant M */
template <int M> __device__ __forceinline__ float fv_ex2(float x) {
    if ((M & FV_ABL) == 2) return x * 0.5f;
    return bt__k_ex2(x);
}
/* the forward's online softmax of this thread's part of a 64 x 128 score tile (keys k0 .., rows r0 and
   r0 + 8; masked first when edge), in raw score units (scale > 0 commutes with max): m the row max,
   l the row sum (in units of m), al = 2^((m_old - m) c2) the factor O is to be rescaled by, sc
   becomes P = 2^(S c2 - m c2) (fp32). One chain a row for the max and the sum (4 chains measured
   2-3% more cycles a tile) */
template <int M, int NS>
__device__ __forceinline__ void fv_p(const bt__k_attp &p, float (&sc)[NS], float (&m)[2], float (&l)[2], float (&al)[2],
                                                int edge, int k0, int r0, int tg) {
    if (edge && (M & FV_LEAN))
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
        if ((M & FV_SKIP) && (mx[r] - m[r]) * p.c2 <= FV_SKIP_LOG2) mx[r] = m[r];   /* m[r] = -inf: never */
        al[r] = fv_ex2<M>((m[r] - mx[r]) * p.c2);   /* key 0 is in every row's first tile: mx finite */
        m[r] = mx[r];
        mc[r] = -mx[r] * p.c2;
        l[r] *= al[r];
    }
#pragma unroll
    for (int i = 0; i < NS; i++) {
        float pv = fv_ex2<M>(fmaf(sc[i], p.c2, mc[(i >> 1) & 1]));
        sc[i] = pv;
        l[(i >> 1) & 1] += pv;
    }
}
/* O *= al (per row), P (sc) rounded into the A fragments pf. SKIP: not when every row of the warp
   kept its max (al exactly 1; a warp-uniform vote) */
template <typename T, int NS, int NO, int SKIP>
__device__ __forceinline__ void fv_rescale(float (&o)[NO], const float (&al)[2], const float (&sc)[NS],
                                                      uint32_t (&pf)[NS / 8][4]) {
    if (!SKIP || __any_sync(0xffffffffu, al[0] != 1.f || al[1] != 1.f))
#pragma unroll
        for (int i = 0; i < NO; i++) o[i] *= al[(i >> 1) & 1];
    bt__k_wg_afrag<T, NS / 8>(pf, sc);
}
/* ablation 5 (no output store): the results stay live through one store that never happens */
template <int NO>
__device__ __forceinline__ void fv_out_none(const bt__k_attp &p, const float (&o)[NO], const float (&l)[2]) {
    float a = l[0] + l[1];
#pragma unroll
    for (int i = 0; i < NO; i++) a += o[i];
    if (a == 1.2345e-30f && p.lse_out) p.lse_out[0] = a;
}
/* ablation 6 (no products): scores made up from the tile index, the same cost as none */
template <int NS> __device__ __forceinline__ void fv_fake_s(float (&sc)[NS], int j) {
#pragma unroll
    for (int i = 0; i < NS; i++) sc[i] = (float)(i & 7) * 0.125f + (float)j;
}
/* what a consumer's forward step needs of its item: the shared tiles and barriers, the item (L, its
   first ring use u, nt key tiles), the warpgroup (w; ntw <= nt key tiles it multiplies,
   the rest idle turns; ke its first key tile with masked scores when causal), the thread (lane, rows
   r0 and r0 + 8, tg = lane % 4) */
struct fv_ctx {
    const bt__k_attp &p;
    uint32_t sQ, sK, sV, kfull, kempty, vfull, vempty;
    uint64_t dq, dk, dv;   /* LEAN: descriptors of this warpgroup's Q rows, the K ring's and V ring's starts */
    int64_t L, nitems;
    int u, nt, ntw, ke, w, lane, r0, tg;
    int tn;   /* the item's warpgroups take turns at the tensor cores (variants with turns: nt >= p.turns) */
};
/* S = Q K(stage s)^T for the step's warpgroup under variant M */
template <typename T, int D, int M>
__device__ __forceinline__ void fv_qk(float (&sc)[64], const fv_ctx &c, int s) {
    enum { TILE = 128 * D * 2 };
    if (M & FV_LEAN) bt__k_att_fwd_s_lean<T, D>(sc, c.dq, bt__k_wg_desc_at(c.dk, (uint32_t)(s * TILE)));
    else bt__k_att_fwd_s<T, D>(sc, c.sQ, c.sK + s * TILE, c.w);
}
/* the turn at the tensor cores goes from warpgroup w to w + 1 (mod NW) after step j: named barrier
   1 + w is warpgroup w's, the one before it arrives on it; warpgroup NW - 1 opens each item's first
   turn (fv_turn_open) and hands none over after its last, so every barrier sees as many
   arrivals as waits (nt a warpgroup and item) */
template <int NW> __device__ __forceinline__ void fv_turn_give(int on, const fv_ctx &c, int j) {
    if (on && (c.w != NW - 1 || j + 1 < c.nt)) bt__k_bar_arrive(1 + (c.w + 1) % NW);
}
template <int NW> __device__ __forceinline__ void fv_turn_open(int on, int w) {
    if (on && w == NW - 1) bt__k_bar_arrive(1);
}
/* WG3: a warpgroup's key tile j past its last row (causal) or an item's warpgroup with no query
   below T: its K and V stages wait to be full and go back, its turn is taken and handed on (the
   other warpgroups multiply this tile) */
template <int NW, int TURNS>
__device__ __forceinline__ void fv_idle(const fv_ctx &c, int j, int ST) {
    const int uj = c.u + j, s = uj % ST;
    bt__k_mbar_wait(c.kfull + 8 * s, (uj / ST) & 1);
    bt__k_mbar_wait(c.vfull + 8 * s, (uj / ST) & 1);
    if (TURNS && c.tn) bt__k_bar_sync(1 + c.w);
    fv_turn_give<NW>(TURNS && c.tn, c, j);
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
__device__ __forceinline__ void fv_step(const fv_ctx &c, int j, float (&o)[D / 2], float (&m)[2], float (&l)[2],
                                                   uint32_t (&pf)[8][4], F &&first) {
    enum { BN = 128, ST = bt__k_att_fwd_st(D), TILE = BN * D * 2, NS = BN / 2, NO = D / 2 };
    enum { ABL = M & FV_ABL, TURNS = ABL != 4 && !(M & FV_NOTURN), LEAN = (M & FV_LEAN) != 0 };
    enum { NW = fv_nw(M) };
    const bt__k_attp &p = c.p;
    const int later = KIND == 2 || (KIND == 0 && j > 0), ovl = (M & FV_OVL) && KIND == 2;
    const int uj = c.u + j, s = uj % ST, sp = (uj + ST - 1) % ST;
    float sc[NS], al[2];   /* this tile's scores (the first product overwrites them): nothing carried between tiles */
    fv_tmark<M>(p, c.nitems, uj, c.w, 0);
    bt__k_mbar_wait(c.kfull + 8 * s, (uj / ST) & 1);
    if (later) bt__k_mbar_wait(c.vfull + 8 * sp, ((uj - 1) / ST) & 1);
    /* no proxy fence: K and V land by TMA and are read by wgmma, both the async proxy, and no thread
       writes those stages (its removal alone: T 4096 843-846 us against 846-847, within the noise) */
    fv_tmark<M>(p, c.nitems, uj, c.w, 1);
    if (TURNS && c.tn) bt__k_bar_sync(1 + c.w);   /* this warpgroup's turn at the tensor cores */
    fv_tmark<M>(p, c.nitems, uj, c.w, 2);
    /* each branch fences right before its products (no register of theirs touched between) */
    if (ABL == 6) {
        fv_fake_s(sc, j);
        if (!later) first();
    } else if (later) {
        bt__k_wg_pin(o);
        bt__k_wg_arrive();
        fv_qk<T, D, M>(sc, c, s);
        bt__k_wg_commit();
        fv_tmark<M>(p, c.nitems, uj, c.w, 5);
        if (ovl) bt__k_wg_arrive();   /* a pipeline stage of its own for ptxas (else C7514) */
        bt__k_att_fwd_pv<T, D, LEAN>(o, pf, c.sV + sp * TILE, c.dv, (uint32_t)(sp * TILE));
        bt__k_wg_commit();
        fv_tmark<M>(p, c.nitems, uj, c.w, 6);
    } else {
        bt__k_wg_arrive();
        fv_qk<T, D, M>(sc, c, s);
        bt__k_wg_commit();
        first();   /* the first step's work under its S (the last item's output) */
    }
    fv_turn_give<NW>(TURNS && c.tn, c, j);
    if (ovl) {
        bt__k_wg_wait1();   /* S(j) landed, P(j-1) V(j-1) may run on */
        bt__k_wg_pin(sc);
    } else {
        bt__k_wg_wait0();
        bt__k_wg_pin(sc); bt__k_wg_pin(o); bt__k_wg_pin_u(pf);   /* P(j-1)'s registers free from here */
    }
    fv_tmark<M>(p, c.nitems, uj, c.w, 3);
    if (j == 0) fv_mark(p, c.L, 2, 0);
    if (c.lane == 0) {
        bt__k_mbar_arrive(c.kempty + 8 * s);
        if (later && !ovl) bt__k_mbar_arrive(c.vempty + 8 * sp);
    }
    const int edge = (p.causal && j >= c.ke) || (j + 1) * BN > p.T;
    if (ABL != 1) fv_p<M, NS>(p, sc, m, l, al, edge, j * BN, c.r0, c.tg);
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
    if (ABL == 1 || KIND == 1) bt__k_wg_afrag<T, NS / 8>(pf, sc);   /* the first step: O is still 0 */
    else fv_rescale<T, NS, NO, (M & FV_SKIP) != 0>(o, al, sc, pf);
    if (ABL == 6) bt__k_wg_pin_u(pf);
    fv_tmark<M>(p, c.nitems, uj, c.w, 4);
}
/* one K or V tile (rows r0 .. of head h, batch b; map's dimension order hr) into ring stage s at its use
   u: once the consumers let the stage go (use u - ST, parity ph), its bytes expected on `full`.
   Ablation 3: only the first fills load */
template <int D, int ST, int ABL>
__device__ __forceinline__ void fv_tma_tile(const CUtensorMap *map, int hr, int r0, int h, int b, uint32_t dst, uint32_t full,
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
__device__ __forceinline__ void fv_tma_item(const bt__k_attp &p, const bt__k_att_maps &tm, int64_t bh, int q0, int nt,
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
        fv_tma_tile<D, ST, ABL>(&tm.m[1], hk, j * 128, h, b, sK + s * TILE, kfull + 8 * s, kempty + 8 * s, u, ph);
        fv_tma_tile<D, ST, ABL>(&tm.m[2], hv, j * 128, h, b, sV + s * TILE, vfull + 8 * s, vempty + 8 * s, u, ph);
    }
}
/* -- forward: work items (head, query tile of BM = 64 NW, longest first; bt__k_att_work), one per CTA or,
   with a persistent grid (one CTA per SM), several a CTA: the producer then loads the next item's
   Q (its own buffer: items alternate between two), K(0), V(0) while the consumers finish the last
   one. smem Q 2 x BM x D, K and V ST x 128 x D, O BM x D (bt__k_att_fwd_out). M: the variant or
   ablation (FV_*); NW consumer warpgroups (fv_nw), then the producer warpgroup -- */
template <typename T, int D, int M>
__global__ void __launch_bounds__(128 * (fv_nw(M) + 1), 1) fv_wg(bt__k_attp p, const __grid_constant__ bt__k_att_maps tm) {
#ifdef BT__K_WG
    enum { NW = fv_nw(M), BM = 64 * NW, BN = 128, ST = bt__k_att_fwd_st(D), TILE = BN * D * 2, NS = BN / 2, NO = D / 2 };
    enum { QT = BM * D * 2, PT = 128 * NW };   /* PT: the producer's first thread */
    enum { ABL = M & FV_ABL, OVL = (M & FV_OVL) != 0, TURNS = ABL != 4 && !(M & FV_NOTURN) };
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
    if (warp >= 4 * NW) {   /* producer: its first thread loads each item's Q, K(j), V(j) (fv_tma_item) */
        if (NW == 3) bt__k_wg_regs_dec<32>();
        else bt__k_wg_regs_dec<BT__K_WG_PRODUCER_REGS>();
        int u = 0;   /* K, V tiles loaded so far: use u of the rings is stage u % ST, its (u / ST)-th */
        for (int64_t n = 0;; n++) {
            const int64_t L = bt__k_att_next(p, n, nitems, &item_slot, ifull, iempty, next, 1, PT);
            if (L >= nitems) break;
            fv_mark(p, L, 6, PT);
            int rank;
            const int64_t bh = bt__k_att_work(p, L, nqt, rank);
            const int qt = nqt - 1 - rank, q0 = qt * BM - p.qoff, nt = bt__k_att_fwd_nt(p, q0 + BM, BN);
            if (t == 0)   /* one thread loads the item: Q into buffer n % 2, then its K(j), V(j) */
                fv_tma_item<D, BM, ST, ABL>(p, tm, bh, q0, nt, n, u, sQ0 + (n & 1) * QT, sK, sV, qfull + 8 * (n & 1),
                                                       qempty + 8 * (n & 1), kfull, kempty, vfull, vempty);
            u += nt;
            fv_mark(p, L, 7, PT);   /* the loading thread, after the item's last load */
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
            fv_mark(p, L, 0, 0);
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
            fv_mark(p, L, 1, 0);
            const int tn = NW == 2 || nt >= p.turns;
            fv_turn_open<NW>(TURNS && tn, w);   /* warpgroup 0 issues first */
            const fv_ctx c = {p, sQ, sK, sV, kfull, kempty, vfull, vempty, bt__k_wg_kmaj(sQ, BM, 64 * w, 0),
                                         bt__k_wg_kmaj(sK, 128, 0, 0), bt__k_wg_mnmaj(sV, 128, 0), L, nitems, u, nt, ntw, ke, w,
                                         lane, r0, tg, tn};
            auto flush = [&]() { bt__k_att_fwd_out_flush<T, D, BM>(p, pout, prow, sO, srow0, lane); };
            auto none = []() {};
            if (OVL) {   /* the first step apart: ptxas then knows which products are in flight where (else C7514) */
                fv_step<T, D, M, 1>(c, 0, o, m, l, pf, flush);
                for (int j = 1; j < ntw; j++) fv_step<T, D, M, 2>(c, j, o, m, l, pf, none);
            } else {
                fv_step<T, D, M, 0>(c, 0, o, m, l, pf, flush);
                for (int j = 1; j < ntw; j++) fv_step<T, D, M, 0>(c, j, o, m, l, pf, none);
            }
            fv_mark(p, L, 3, 0);
            {   /* the last O += P V, then V's stage goes back */
                const int ul = u + ntw - 1, sp = ul % ST;
                bt__k_mbar_wait(vfull + 8 * sp, (ul / ST) & 1);
                bt__k_fence_async();
                if (ABL != 6) {
                    bt__k_wg_pin(o);
                    bt__k_wg_arrive();
                    bt__k_att_fwd_pv<T, D, (M & FV_LEAN) != 0>(o, pf, sV + sp * TILE, c.dv, (uint32_t)(sp * TILE));
                    bt__k_wg_commit();
                    bt__k_wg_wait0();
                    bt__k_wg_pin(o);
                }
                if (lane == 0) bt__k_mbar_arrive(vempty + 8 * sp);
            }
            if (NW != 2)
                for (int j = ntw; j < nt; j++) fv_idle<NW, TURNS>(c, j, ST);
            u += nt;
            if (ABL == 5) fv_out_none<NO>(p, o, l);
            else bt__k_att_fwd_out<T, D, BM>(p, bh, r0, tg, o, l, m, sO, srow0, lane);
            pout = (T *)p.out + bt__k_att_off(p.so, bh, p.H);
            prow = p.out16 && ABL != 5 ? rw + 16 * (warp & 3) : INT_MIN / 2;
            if (lane == 0) bt__k_mbar_arrive(qempty + 8 * qb);   /* the Q tile read for the last time (by the tensor cores only) */
            fv_mark(p, L, 4, 0);
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
/* --trace: one call (after the timed ones: warm caches and clocks) records SM clocks per
   work item (consumer thread 0: 0 item start, 1 Q landed, 2 first S done, 3 last softmax done, 4 O
   stored; 5 SM and tile count; producer thread: 6 item taken, 7 last load issued) and prints, per
   tile count, the mean cycles of each phase, and the mean gap between an SM's items, to stderr */
static void fv_trace_print(const unsigned long long *tr, int64_t items, int T) {
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
    fprintf(stderr, "att_fwd trace T %d: tiles items | Q wait | first S | per later tile | last PV + store | item | "
                    "producer took it before | its last load issued after start (cycles)\n", T);
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
/* --steps: CTA 0's steps (fv_tmark), per warpgroup the mean cycles of each phase over
   the recorded steps and the mean period (a step's start to the next one's) */
static void fv_tsteps_print(const unsigned long long *st, int T) {
    for (int w = 0; w < 3; w++) {
        double sum[5] = {0}, per = 0., iss[2] = {0, 0};
        int n = 0, np = 0, ni = 0;
        for (int k = 0; k < FV_TSTEPS; k++) {
            const unsigned long long *x = st + k * 24 + 8 * w;
            if (!x[0] || !x[4]) continue;
            sum[0] += (double)(x[1] - x[0]); sum[1] += (double)(x[2] - x[1]); sum[2] += (double)(x[3] - x[2]);
            sum[3] += (double)(x[4] - x[3]); sum[4] += (double)(x[4] - x[0]);
            n++;
            if (x[5] && x[6]) { iss[0] += (double)(x[5] - x[2]); iss[1] += (double)(x[6] - x[5]); ni++; }
            if (k + 1 < FV_TSTEPS && x[24] && x[24 + 4]) { per += (double)x[24] - (double)x[0]; np++; }
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

/* ---- the host: versions, launch, reference, timing ---------------------------------------------- */
typedef __nv_bfloat16 bf16;
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(2); } } while (0)

typedef struct {
    int64_t B, H, T, D;
    int causal, reps, order, persist, qend, l2, one, carveout, turns, trace, steps;
    unsigned long long seed;
} fv_opts;

enum { FV_SM80 = -1, FV_LIB = -2 };
static const struct { int v, M; const char *name; } fv_versions[] = {
    {1, FV_SM80, "sm_80 mma.sync"},
    {2, 0, "wgmma, 2 warpgroups, turns"},
    {3, FV_OVL, "2 + softmax under P V (OVL)"},
    {4, FV_LEAN, "2 + lean steps (LEAN)"},
    {5, FV_OVL | FV_LEAN, "OVL + LEAN"},
    {6, FV_WG3 | FV_LEAN, "3 warpgroups (WG3), turns"},
    {7, FV_WG3 | FV_LEAN | FV_OVL, "WG3 + OVL, turns"},
    {8, FV_WG3 | FV_LEAN | FV_OVL | FV_NOTURN, "WG3 + OVL, no turns (shipped at D 64)"},
    {9, FV_LIB, "the library's call (shipped)"},
    {10, FV_OVL | FV_LEAN | FV_SKIP, "5 + SKIP"},
    {11, FV_WG3 | FV_LEAN | FV_OVL | FV_SKIP, "7 + SKIP"},
    {12, FV_WG3 | FV_LEAN | FV_OVL | FV_NOTURN | FV_SKIP, "8 + SKIP"},
    {21, 1, "ablation: no softmax"},
    {22, 2, "ablation: exp2 as a multiply"},
    {23, 3, "ablation: stages loaded once"},
    {24, 4, "ablation: no turns"},
    {25, 5, "ablation: no output store"},
    {26, 6, "ablation: no products"},
};
enum { FV_NV = sizeof fv_versions / sizeof fv_versions[0] };

/* the kernel of variant M at head size D (D 128: M 0 only); NULL if none */
static bt__k_att_fwd_kern fv_kernel(int64_t D, int M) {
    if (D == 128) return M == 0 ? fv_wg<bf16, 128, 0> : NULL;
    if (D != 64) return NULL;
    enum { W = FV_WG3 | FV_LEAN, OL = FV_OVL | FV_LEAN, NT = FV_NOTURN };
    switch (M) {
#define FV_CASE(m) case m: return fv_wg<bf16, 64, m>;
    FV_CASE(0) FV_CASE(FV_OVL) FV_CASE(FV_LEAN) FV_CASE(OL) FV_CASE(W) FV_CASE(W | OL) FV_CASE(W | OL | NT)
    FV_CASE(W | OL | NT | FV_STEPS) FV_CASE(OL | FV_SKIP) FV_CASE(W | OL | FV_SKIP) FV_CASE(W | OL | NT | FV_SKIP)
    FV_CASE(1) FV_CASE(2) FV_CASE(3) FV_CASE(4) FV_CASE(5) FV_CASE(6)
#undef FV_CASE
    default: return NULL;
    }
}

/* q, k, v views of one [B, T, 3, H, D] buffer, out [B, T, H, D], lse [B, H, T] */
static bt__k_attp fv_params(const fv_opts *o, const bf16 *qkv, bf16 *out, float *lse) {
    bt__k_attp p;
    bt__k_att_params(&p, BT_BF16, o->B, o->H, o->H, o->T, o->D, 1.f / sqrtf((float)o->D));
    const int64_t H = o->H, D = o->D, sqkv[3] = {o->T * 3 * H * D, D, 3 * H * D}, so[3] = {o->T * H * D, D, H * D};
    p.causal = o->causal;
    p.q = qkv; p.k = qkv + H * D; p.v = qkv + 2 * H * D; p.out = out; p.lse_out = lse;
    memcpy(p.sq, sqkv, sizeof p.sq); memcpy(p.sk, sqkv, sizeof p.sk); memcpy(p.sv, sqkv, sizeof p.sv); memcpy(p.so, so, sizeof p.so);
    p.vec = p.vec_out = p.out16 = 1;   /* every row 16-byte aligned (D a multiple of 8) */
    return p;
}

/* one call of an sm_90a version, with the host's choices of bt_attention.cuh's bt__k_att_fwd_wg_run made by opts */
static void fv_launch(bt__k_att_fwd_kern kern, int M, bt__k_attp p, const fv_opts *o, cudaStream_t s) {
    const int nw = fv_nw(M), BM = 64 * nw;
    const int64_t tiles = (p.T + BM - 1) / BM;
    const int kt_max = (p.T + 127) / 128, qoff = (int)(tiles * BM - p.T);
    p.qoff = o->qend && p.causal && BM == 192 && qoff >= BT__K_ATT_QEND_ROWS ? qoff : 0;
    p.turns = o->turns;
    bt__k_att_maps tm;
    if (!bt__k_att_fwd_maps<bf16>(&tm, &p, BM)) { fprintf(stderr, "attention_forward: the driver made no tensor map\n"); exit(1); }
    const int dyn = o->order ? o->order == 2 : !(p.causal && kt_max <= BT__K_ATT_FIXED_ORDER_KT);
    if (o->carveout >= 0) CK(cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, o->carveout));
    bt__k_att_wg_launch(kern, p, tiles, bt__k_att_wg_kv_bytes(&p), o->l2, o->persist, dyn, bt__k_att_wg_smem_fwd((int)p.D, BM), s,
                        "attention_forward", 128 * (nw + 1), &tm);
}
static void fv_call(int idx, const fv_opts *o, const bf16 *qkv, bf16 *out, float *lse, cudaStream_t s) {
    const int M = fv_versions[idx].M;
    if (M == FV_SM80 || M == FV_LIB) {
        const int prev = bt_k_attention_hopper(M == FV_LIB);
        const bt__k_attp p = fv_params(o, qkv, out, lse);
        bt_k_attention_strided(BT_BF16, out, p.so, lse, qkv, p.sq, p.k, p.sk, p.v, p.sv, o->B, o->H, o->H, o->T, o->D, p.scale, o->causal,
                               BT_MATMUL_FP32, s);
        bt_k_attention_hopper(prev & 1);
        return;
    }
    fv_launch(fv_kernel(o->D, M), M, fv_params(o, qkv, out, lse), o, s);
}
/* one traced call: clocks per work item (and with --steps CTA 0's per-step phases), printed to stderr */
static void fv_traced(int idx, const fv_opts *o, const bf16 *qkv, bf16 *out, float *lse, cudaStream_t s) {
    const int M = fv_versions[idx].M | (o->steps ? FV_STEPS : 0);
    bt__k_att_fwd_kern kern = fv_kernel(o->D, M);
    if (M < 0 || !kern) { fprintf(stderr, "  (no trace: version %d%s)\n", fv_versions[idx].v, o->steps ? " with --steps: 8 only" : ""); return; }
    const int64_t items = o->B * o->H * ((o->T + 64 * fv_nw(M) - 1) / (64 * fv_nw(M)));
    const size_t bytes = (size_t)items * 64 + (size_t)FV_TSTEPS * 24 * 8;
    bt__k_attp p = fv_params(o, qkv, out, lse);
    CK(cudaMalloc(&p.trace, bytes));
    CK(cudaMemsetAsync(p.trace, 0, bytes, s));
    fv_launch(kern, M, p, o, s);
    unsigned long long *h = (unsigned long long *)malloc(bytes);
    CK(cudaMemcpyAsync(h, p.trace, bytes, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    fv_trace_print(h, items, (int)o->T);
    if (o->steps) fv_tsteps_print(h + items * 8, (int)o->T);
    free(h);
    CK(cudaFree(p.trace));
}

static float fv_bf(bf16 x) { return __bfloat162float(x); }
/* the reference on heads 0, BH / 2 and BH - 1 (double): relative errors of out and lse */
static void fv_check(const fv_opts *o, const bf16 *hq, const bf16 *ho, const float *hl, double *eo, double *el) {
    const int64_t B = o->B, H = o->H, T = o->T, D = o->D, BH = B * H, heads[3] = {0, BH / 2, BH - 1};
    const double scale = 1.0 / sqrt((double)D);
    double no = 0, do_ = 0, nl = 0, dl = 0, *sc = (double *)malloc(sizeof(double) * T), *acc = (double *)malloc(sizeof(double) * D);
    for (int hi = 0; hi < 3; hi++) {
        if (hi > 0 && heads[hi] == heads[hi - 1]) continue;
        const int64_t b = heads[hi] / H, h = heads[hi] % H;
        for (int64_t t = 0; t < T; t++) {
            const bf16 *q = hq + ((b * T + t) * 3 + 0) * H * D + h * D;
            const int64_t last = o->causal ? t : T - 1;
            double m = -INFINITY, l = 0;
            for (int64_t j = 0; j <= last; j++) {
                const bf16 *k = hq + ((b * T + j) * 3 + 1) * H * D + h * D;
                double a = 0;
                for (int64_t d = 0; d < D; d++) a += (double)fv_bf(q[d]) * fv_bf(k[d]);
                sc[j] = a * scale; m = fmax(m, sc[j]);
            }
            for (int64_t d = 0; d < D; d++) acc[d] = 0;
            for (int64_t j = 0; j <= last; j++) {
                const bf16 *v = hq + ((b * T + j) * 3 + 2) * H * D + h * D;
                const double e = exp(sc[j] - m);
                l += e;
                for (int64_t d = 0; d < D; d++) acc[d] += e * fv_bf(v[d]);
            }
            for (int64_t d = 0; d < D; d++) {
                const double r = acc[d] / l, g = fv_bf(ho[(b * T + t) * H * D + h * D + d]);
                no += (g - r) * (g - r); do_ += r * r;
            }
            const double rl = m + log(l), gl = hl[(b * H + h) * T + t];
            nl += (gl - rl) * (gl - rl); dl += rl * rl;
        }
    }
    *eo = no == no ? sqrt(no / (do_ > 0 ? do_ : 1)) : INFINITY;
    *el = nl == nl ? sqrt(nl / (dl > 0 ? dl : 1)) : INFINITY;
    free(sc); free(acc);
}
static int fv_cmp(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }

static void fv_usage(void) {
    fprintf(stderr, "usage: attention_forward [version ...] [--B n] [--H n] [--T n] [--D 64|128] [--causal 0|1] [--reps n] [--seed s]\n"
                    "       [--order 0|1|2] [--persist 0|1] [--qend 0|1] [--l2 MiB] [--one MiB] [--carveout P] [--turns K]\n"
                    "       [--trace] [--steps]   (versions: see the first comment of dev/cuda/attention_forward.cu)\n");
    exit(1);
}
int main(int argc, char **argv) {
    fv_opts o = {16, 12, 1024, 64, 1, 25, 0, 1, 1, BT__K_ATT_L2_MB_FWD, BT__K_ATT_L2_ONE_MB, -1, 1, 0, 0, (unsigned long long)time(NULL)};
    int want[FV_NV] = {0}, any = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--trace")) { o.trace = 1; continue; }
        if (!strcmp(a, "--steps")) { o.trace = o.steps = 1; continue; }
        if (a[0] == '-' && a[1] == '-') {
            if (i + 1 >= argc) fv_usage();
            const long long x = atoll(argv[++i]);
            if (!strcmp(a, "--B")) o.B = x; else if (!strcmp(a, "--H")) o.H = x; else if (!strcmp(a, "--T")) o.T = x;
            else if (!strcmp(a, "--D")) o.D = x; else if (!strcmp(a, "--causal")) o.causal = (int)x;
            else if (!strcmp(a, "--reps")) o.reps = (int)x; else if (!strcmp(a, "--seed")) o.seed = (unsigned long long)x;
            else if (!strcmp(a, "--order")) o.order = (int)x; else if (!strcmp(a, "--persist")) o.persist = (int)x;
            else if (!strcmp(a, "--qend")) o.qend = (int)x; else if (!strcmp(a, "--l2")) o.l2 = (int)x;
            else if (!strcmp(a, "--one")) o.one = (int)x; else if (!strcmp(a, "--carveout")) o.carveout = (int)x;
            else if (!strcmp(a, "--turns")) o.turns = (int)x;
            else fv_usage();
            continue;
        }
        const int v = atoi(a);
        int found = 0;
        for (int k = 0; k < FV_NV; k++) if (fv_versions[k].v == v) { want[k] = 1; found = any = 1; }
        if (!found) fv_usage();
    }
    if (!any) for (int k = 0; k < FV_NV && fv_versions[k].v <= 12; k++) want[k] = 1;
    if (o.B < 1 || o.H < 1 || o.T < 1 || (o.D != 64 && o.D != 128) || o.reps < 1 || o.order < 0 || o.order > 2 || o.turns < 1) fv_usage();
    if (bt_k_device_count() < 1) { fprintf(stderr, "attention_forward: no GPU\n"); return 1; }
    bt_k_init(0);
    bt_k_attention_tuning tu = bt_k_attention_get_tuning();
    tu.l2_one_mb = o.one;
    bt_k_attention_set_tuning(&tu);
    const int wg = (bt_k_attention_hopper(-1) & 2) != 0;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int64_t nqkv = o.B * o.T * 3 * o.H * o.D, nout = o.B * o.T * o.H * o.D, nl = o.B * o.H * o.T;
    bf16 *qkv, *out, *hq = (bf16 *)malloc(nqkv * 2), *ho = (bf16 *)malloc(nout * 2);
    float *lse, *hl = (float *)malloc(nl * 4), ms[1000];
    CK(cudaMalloc(&qkv, nqkv * 2)); CK(cudaMalloc(&out, nout * 2)); CK(cudaMalloc(&lse, nl * 4));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const double flops = 4.0 * o.B * o.H * o.T * o.T * o.D / (o.causal ? 2 : 1);
    const int reps = o.reps < 1000 ? o.reps : 1000;
    printf("attention forward, bf16, B %lld H %lld T %lld D %lld, %s, seed %llu; median of %d calls\n", (long long)o.B,
           (long long)o.H, (long long)o.T, (long long)o.D, o.causal ? "causal" : "not causal", o.seed, reps);
    int fails = 0;
    for (int k = 0; k < FV_NV; k++) {
        if (!want[k]) continue;
        const int M = fv_versions[k].M, v = fv_versions[k].v, abl = M >= 0 && (M & FV_ABL);
        if (M != FV_SM80 && M != FV_LIB && (!wg || !fv_kernel(o.D, M))) {
            printf("%3d  %-40s  (%s)\n", v, fv_versions[k].name, wg ? "D 64 only" : "needs an sm_90a build on an H100 / H200");
            continue;
        }
        bt_k_normal(BT_BF16, qkv, nqkv, o.seed + v, 0, 0.0, 1.0, s);   /* fresh inputs for each version */
        CK(cudaMemsetAsync(out, 0xff, nout * 2, s)); CK(cudaMemsetAsync(lse, 0xff, nl * 4, s));   /* NaN where not written */
        fv_call(k, &o, qkv, out, lse, s);
        CK(cudaMemcpyAsync(hq, qkv, nqkv * 2, cudaMemcpyDeviceToHost, s));
        CK(cudaMemcpyAsync(ho, out, nout * 2, cudaMemcpyDeviceToHost, s));
        CK(cudaMemcpyAsync(hl, lse, nl * 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        double eo = 0, el = 0;
        if (!abl) fv_check(&o, hq, ho, hl, &eo, &el);
        const int ok = abl || (eo <= 2e-2 && el <= 1e-4);
        fails += !ok;
        for (int r = 0; r < 3; r++) fv_call(k, &o, qkv, out, lse, s);
        for (int r = 0; r < reps; r++) {
            CK(cudaEventRecord(e0, s));
            fv_call(k, &o, qkv, out, lse, s);
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms[r], e0, e1));
        }
        qsort(ms, reps, sizeof ms[0], fv_cmp);
        const double us = 1e3 * ms[reps / 2];
        if (abl) printf("%3d  %-40s %9.1f us %6.1f TFLOP/s  (timing only)\n", v, fv_versions[k].name, us, flops / us * 1e-6);
        else printf("%3d  %-40s %9.1f us %6.1f TFLOP/s  out %.1e lse %.1e  %s\n", v, fv_versions[k].name, us, flops / us * 1e-6, eo, el,
                    ok ? "ok" : "FAIL");
        fflush(stdout);
        if (o.trace) fv_traced(k, &o, qkv, out, lse, s);
    }
    CK(cudaFree(qkv)); CK(cudaFree(out)); CK(cudaFree(lse));
    free(hq); free(ho); free(hl);
    return fails ? 1 : 0;
}
