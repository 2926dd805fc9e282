/* tensor_mufu_overlap.cu: can an SM run its tensor cores and its MUFU (2^x) at full rate at the same time? The
   attention forward's step needs both equally at D 64 (S = Q K^T and O += P V: 1,536 tensor cycles for
   three warpgroups' steps; 64 x 64 x 3 2^x at 16 a clock: 1,536 MUFU cycles) and measures ~2,800.
   One CTA of three warpgroups per SM; each warpgroup either loops over the forward step's products
   (4 HGMMA 64x128x16 from shared memory, then 8 HGMMA 64x64x16 with A from registers, waited for)
   or over 2^x (8 independent chains a thread), or over the forward's softmax of a tile, or idles. Cycles by clock64 per warpgroup.
   "tensor busy" is against the datasheet rate, 4,096 bf16 flops a clock an SM (989 TFLOP/s dense at
   1.83 GHz on 132 SMs): 512 cycles for one warpgroup's step (2.1 MFLOP). An H100 run printed 382 cycles for one warpgroup (134%), which no tensor core can do: that role's timing is
   suspect (not resolved), and its cycle figures are not to be read as tensor time.
   The softmax role runs bt_attention.cuh's own functions (bt__k_att_fwd_p, bt__k_att_fwd_rescale).
   Build: make dev (build/dev/tensor_mufu_overlap) */
#define BT_ALLOC_IMPLEMENTATION
#define BT_KERNELS_IMPLEMENTATION
#include "bt_kernels.cuh"
#include <stdio.h>

enum { TITER = 256, MITER = 512, CH = 8, STITER = 256 };

/* role of warpgroup w: bits 2w..2w+1 of roles: 0 idle, 1 products, 2 2^x, 3 softmax tiles */
__global__ void __launch_bounds__(384, 1) overlap(unsigned roles, unsigned long long *cyc, float *sink) {
#ifdef BT__K_WG
    extern __shared__ __align__(16) unsigned char sm[];
    const uint32_t base = bt__k_wg_base(sm), sQ = base, sK = base + 64 * 64 * 2, sV = sK + 128 * 64 * 2;
    /* fill the tiles with small values (not zeros: data-dependent power) */
    for (int i = threadIdx.x; i < (64 * 64 + 2 * 128 * 64) / 2; i += blockDim.x) {
        const float a = (float)((i * 37) % 17) * 0.01f - 0.08f, b = (float)((i * 11) % 13) * 0.01f - 0.06f;
        const uint32_t v = bt__k_pack2(a, b, (__nv_bfloat16 *)0);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(base + 4 * i), "r"(v));
    }
    bt__k_fence_async();
    __syncthreads();
    const int w = threadIdx.x >> 7, role = (roles >> (2 * w)) & 3, lane = threadIdx.x & 31;
    long long t0 = clock64();
    float acc = 0.f;
    if (role == 1) {
        float sc[64], o[32];
        uint32_t pf[8][4];
#pragma unroll
        for (int i = 0; i < 32; i++) o[i] = 0.f;
#pragma unroll
        for (int k = 0; k < 8; k++)
#pragma unroll
            for (int e = 0; e < 4; e++) pf[k][e] = bt__k_pack2(0.01f * (lane + e), 0.02f * k, (__nv_bfloat16 *)0);
        const uint64_t dq = bt__k_wg_kmaj(sQ, 64, 0, 0), dk = bt__k_wg_kmaj(sK, 128, 0, 0), dv = bt__k_wg_mnmaj(sV, 128, 0);
        for (int it = 0; it < TITER; it++) {
            bt__k_wg_pin(o);
            bt__k_wg_arrive();
            bt__k_att_fwd_s_lean<__nv_bfloat16, 64>(sc, dq, dk);
            bt__k_wg_commit();
            bt__k_wg_arrive();
            bt__k_att_fwd_pv<__nv_bfloat16, 64, 1>(o, pf, sV, dv, 0);
            bt__k_wg_commit();
            bt__k_wg_wait0();
            bt__k_wg_pin(sc); bt__k_wg_pin(o);
        }
        for (int i = 0; i < 64; i++) acc += sc[i];
        for (int i = 0; i < 32; i++) acc += o[i];
    } else if (role == 3) {   /* the forward's softmax of a tile (bt__k_att_fwd_p + rescale + A fragments), fresh scores each time */
        bt__k_attp p;
        memset(&p, 0, sizeof p);
        p.c2 = 0.18033688f; p.T = 1 << 20;
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, o[32], al[2];
        uint32_t pf[8][4];
#pragma unroll
        for (int i = 0; i < 32; i++) o[i] = 1.f;
        const float lanef = (float)((lane * 11) % 13) * 0.7f - 6.f;
        for (int it = 0; it < STITER; it++) {
            float sc[64];
#pragma unroll
            for (int i = 0; i < 64; i++) sc[i] = fmaf((float)((i * 37) % 64), 0.13f, lanef + (float)(it & 7) * 0.37f);
            bt__k_wg_pin(sc);
            bt__k_att_fwd_p<1, 64>(p, sc, m, l, al, 0, 0, 0, 0);
            bt__k_att_fwd_rescale<__nv_bfloat16, 64, 32>(o, al, sc, pf);
            bt__k_wg_pin_u(pf); bt__k_wg_pin(o);
#pragma unroll
            for (int i = 0; i < 32; i++) o[i] = fminf(o[i], 4.f);
        }
        acc += l[0] + l[1] + (float)(pf[3][1] & 1);
    } else if (role == 2) {
        float f[CH];
#pragma unroll
        for (int c = 0; c < CH; c++) f[c] = 0.5f + 0.01f * lane + 0.03f * c;
        for (int it = 0; it < MITER; it++)
#pragma unroll
            for (int k = 0; k < 64 / CH; k++)
#pragma unroll
                for (int c = 0; c < CH; c++) f[c] = bt__k_ex2(-f[c]);
        for (int c = 0; c < CH; c++) acc += f[c];
    }
    long long t1 = clock64();
    if (acc == 1234.5f) sink[threadIdx.x] = acc;
    if ((threadIdx.x & 127) == 0) cyc[blockIdx.x * 4 + w] = (unsigned long long)(t1 - t0);
#else
    __trap();
#endif
}

static void run(const char *name, unsigned roles, int nsm, unsigned long long *d, float *sink) {
    const size_t smem = 64 * 64 * 2 + 2 * 128 * 64 * 2 + 1024;
    overlap<<<nsm, 384, smem>>>(roles, d, sink);
    overlap<<<nsm, 384, smem>>>(roles, d, sink);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { printf("%s: %s\n", name, cudaGetErrorString(e)); return; }
    static unsigned long long h[1024 * 4];
    cudaMemcpy(h, d, sizeof(unsigned long long) * nsm * 4, cudaMemcpyDeviceToHost);
    double tsum = 0, msum = 0, ssum = 0;
    int tn = 0, mn = 0, sn = 0;
    for (int b = 0; b < nsm; b++)
        for (int w = 0; w < 4; w++) {
            int role = (roles >> (2 * w)) & 3;
            if (role == 1) { tsum += (double)h[b * 4 + w]; tn++; }
            if (role == 2) { msum += (double)h[b * 4 + w]; mn++; }
            if (role == 3) { ssum += (double)h[b * 4 + w]; sn++; }
        }
    const int ntw = tn / nsm, nmw = mn / nsm;
    printf("%-40s", name);
    if (tn) printf(" | products: %6.0f cycles a step a warpgroup, tensor busy %5.1f%%", tsum / tn / TITER, 100. * 512 * TITER * ntw / (tsum / tn));
    if (mn) printf(" | 2^x: %5.2f a clock an SM (16 peak)", (double)nmw * 128 * MITER * 64 / (msum / mn));
    if (sn) printf(" | softmax: %5.0f cycles a tile a warpgroup", ssum / sn / STITER);
    printf("\n");
}

int main(void) {
    int nsm = 0;
    cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0);
    unsigned long long *d;
    float *sink;
    cudaMalloc(&d, sizeof(unsigned long long) * 1024 * 4);
    cudaMalloc(&sink, sizeof(float) * 512);
    cudaFuncSetAttribute(overlap, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
    run("1 products warpgroup", 0x1, nsm, d, sink);
    run("2 products warpgroups", 0x5, nsm, d, sink);
    run("3 products warpgroups", 0x15, nsm, d, sink);
    run("1 2^x warpgroup", 0x2, nsm, d, sink);
    run("2 2^x warpgroups", 0xa, nsm, d, sink);
    run("3 2^x warpgroups", 0x2a, nsm, d, sink);
    run("1 products + 1 2^x", 0x9, nsm, d, sink);
    run("1 products + 2 2^x", 0x29, nsm, d, sink);
    run("2 products + 1 2^x", 0x25, nsm, d, sink);
    run("1 softmax", 0x3, nsm, d, sink);
    run("2 softmax", 0xf, nsm, d, sink);
    run("3 softmax", 0x3f, nsm, d, sink);
    run("1 softmax + 1 products", 0x7, nsm, d, sink);
    run("1 softmax + 2 products", 0x17, nsm, d, sink);
    run("2 softmax + 1 products", 0x1f, nsm, d, sink);
    return 0;
}
