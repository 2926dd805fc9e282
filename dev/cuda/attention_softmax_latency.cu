/* attention_softmax_latency.cu: cycles of the attention forward's per-tile online softmax (one warp's part of a 64 x 128
   score tile: 64 scores, rows r and r + 8; the row max, the rescale factor, 2^x of each score, the row
   sums, O rescaled and P packed into bf16 A fragments) with no tensor-core work around it, timed by
   clock64 around each tile, with 1, 2 or 3 such warps on each SM sub-partition (the forward runs 3
   consumer warpgroups). Variants of the code, to find which of its dependency chains cost:
     0  as in bt_attention.cuh: one max chain and one sum chain a row
     1  max and sum in 4 chains a row (a tree)
     2  max in 4 chains, sum in 1
     3  as 0 with 2^x replaced by a multiply (no MUFU)
     4  as 1 with 2^x of the 64 scores issued before any sum (sums after)
   Variant 0 restates bt__k_att_fwd_p, bt__k_att_fwd_rescale and the A-fragment packing in one function
   (this file stands alone, and the other variants are edits of it); tensor_mufu_overlap.cu's softmax
   role times the header's own functions (806 cycles a tile alone against 782 here, on an H100).
   Build: make dev (build/dev/attention_softmax_latency) */
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

enum { NS = 64, NO = 32, ITERS = 256 };

__device__ __forceinline__ float ex2f(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %2, %1;\n" : "=r"(r) : "f"(a), "f"(b));
    return r;
}
template <int V> __device__ __forceinline__ float ex2v(float x) { return V == 3 ? x * 0.5f : ex2f(x); }

/* the softmax of one tile: sc (raw scores) -> P packed into pf; m, l, o updated */
template <int V>
__device__ __forceinline__ void softmax_tile(float (&sc)[NS], float (&m)[2], float (&l)[2], float (&o)[NO], uint32_t (&pf)[8][4], float c2) {
    enum { CH = (V == 1 || V == 2 || V == 4) ? 4 : 1 };
    float mx[2][CH];
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int c = 0; c < CH; c++) mx[r][c] = m[r];
#pragma unroll
    for (int i = 0; i < NS; i++) {
        const int r = (i >> 1) & 1, c = (i >> 2) % CH;
        mx[r][c] = fmaxf(mx[r][c], sc[i]);
    }
    float al[2], mc[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
#pragma unroll
        for (int c = 1; c < CH; c++) mx[r][0] = fmaxf(mx[r][0], mx[r][c]);
        mx[r][0] = fmaxf(mx[r][0], __shfl_xor_sync(0xffffffffu, mx[r][0], 1));
        mx[r][0] = fmaxf(mx[r][0], __shfl_xor_sync(0xffffffffu, mx[r][0], 2));
        al[r] = ex2v<V>((m[r] - mx[r][0]) * c2);
        m[r] = mx[r][0];
        mc[r] = -mx[r][0] * c2;
        l[r] *= al[r];
    }
    enum { SC = (V == 1) ? 4 : 1 };
    float ls[2][4] = {{l[0], 0.f, 0.f, 0.f}, {l[1], 0.f, 0.f, 0.f}};
    if (V == 4) {
#pragma unroll
        for (int i = 0; i < NS; i++) sc[i] = ex2v<V>(fmaf(sc[i], c2, mc[(i >> 1) & 1]));
#pragma unroll
        for (int i = 0; i < NS; i++) ls[(i >> 1) & 1][(i >> 2) & 3] += sc[i];
    } else {
#pragma unroll
        for (int i = 0; i < NS; i++) {
            float pv = ex2v<V>(fmaf(sc[i], c2, mc[(i >> 1) & 1]));
            sc[i] = pv;
            ls[(i >> 1) & 1][(i >> 2) % SC] += pv;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) l[r] = (ls[r][0] + ls[r][1]) + (ls[r][2] + ls[r][3]);
#pragma unroll
    for (int i = 0; i < NO; i++) o[i] *= al[(i >> 1) & 1];
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        pf[kk][0] = pack_bf16(sc[8 * kk], sc[8 * kk + 1]);
        pf[kk][1] = pack_bf16(sc[8 * kk + 2], sc[8 * kk + 3]);
        pf[kk][2] = pack_bf16(sc[8 * kk + 4], sc[8 * kk + 5]);
        pf[kk][3] = pack_bf16(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
}

/* each warp: ITERS tiles; per tile fresh scores (a cheap function of the tile and lane), then the
   softmax between two clock reads that the scores and the results are pinned against */
template <int V> __global__ void __launch_bounds__(384, 1) lat(unsigned long long *out, float *sink, int nwarps_used) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp >= nwarps_used) return;
    const float lanef = (float)((lane * 11) % 13) * 0.7f - 6.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, o[NO];
#pragma unroll
    for (int i = 0; i < NO; i++) o[i] = 1.f;
    uint32_t pf[8][4];
    unsigned long long tot = 0;
    for (int it = 0; it < ITERS; it++) {
        float sc[NS];
        const float add = (float)(it & 7) * 0.37f;
#pragma unroll
        for (int i = 0; i < NS; i++) sc[i] = fmaf((float)((i * 37) % 64), 0.13f, lanef + add);
        long long t0;
#pragma unroll
        for (int i = 0; i < NS; i++) asm volatile("" : "+f"(sc[i])::"memory");
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0)::"memory");
#pragma unroll
        for (int i = 0; i < NS; i++) asm volatile("" : "+f"(sc[i]) : "l"(t0) : "memory");
        softmax_tile<V>(sc, m, l, o, pf, 0.18033688f);
#pragma unroll
        for (int kk = 0; kk < 8; kk++) asm volatile("" : "+r"(pf[kk][0]), "+r"(pf[kk][1]), "+r"(pf[kk][2]), "+r"(pf[kk][3])::"memory");
#pragma unroll
        for (int i = 0; i < NO; i++) asm volatile("" : "+f"(o[i])::"memory");
        asm volatile("" : "+f"(l[0]), "+f"(l[1])::"memory");
        long long t1;
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1)::"memory");
        if (it >= 16) tot += (unsigned long long)(t1 - t0);
#pragma unroll
        for (int i = 0; i < NO; i++) o[i] = fminf(o[i], 4.f);   /* bounded */
    }
    float acc = l[0] + l[1];
#pragma unroll
    for (int i = 0; i < NO; i++) acc += o[i];
#pragma unroll
    for (int kk = 0; kk < 8; kk++) acc += (float)(pf[kk][0] & 1);
    if (acc == 1234.5f) sink[threadIdx.x] = acc;
    if (lane == 0) out[blockIdx.x * 12 + warp] = tot / (ITERS - 16);
}

template <int V> static void run(const char *name, int nsm, unsigned long long *d, float *sink) {
    printf("%-34s", name);
    for (int k = 1; k <= 3; k++) {
        lat<V><<<nsm, 384, 200 * 1024>>>(d, sink, 4 * k);
        lat<V><<<nsm, 384, 200 * 1024>>>(d, sink, 4 * k);
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) { printf(" %s\n", cudaGetErrorString(e)); return; }
        static unsigned long long h[132 * 12 * 8];
        cudaMemcpy(h, d, sizeof(unsigned long long) * nsm * 12, cudaMemcpyDeviceToHost);
        double s = 0;
        for (int b = 0; b < nsm; b++)
            for (int w = 0; w < 4 * k; w++) s += (double)h[b * 12 + w];
        printf(" | %d warp%s a scheduler %6.0f", k, k > 1 ? "s" : " ", s / (nsm * 4 * k));
    }
    printf("  (cycles a tile)\n");
}

int main(void) {
    int nsm = 0;
    cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0);
    if (nsm > 132 * 8) nsm = 132 * 8;
    unsigned long long *d;
    float *sink;
    cudaMalloc(&d, sizeof(unsigned long long) * nsm * 12);
    cudaMalloc(&sink, sizeof(float) * 384);
    cudaFuncSetAttribute(lat<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    cudaFuncSetAttribute(lat<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    cudaFuncSetAttribute(lat<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    cudaFuncSetAttribute(lat<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    cudaFuncSetAttribute(lat<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    run<0>("0 as in the kernel", nsm, d, sink);
    run<1>("1 max and sum in 4 chains", nsm, d, sink);
    run<2>("2 max in 4 chains, sum in 1", nsm, d, sink);
    run<3>("3 as 0, 2^x by a multiply", nsm, d, sink);
    run<4>("4 as 1, all 2^x before the sums", nsm, d, sink);
    return 0;
}
