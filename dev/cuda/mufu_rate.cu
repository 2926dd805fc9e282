/* mufu_rate: how many 2^x results an SM delivers per clock with each form of the PTX ex2 instruction
   (f32, f16x2, bf16x2), to judge whether the attention forward's softmax could halve its MUFU work
   by packed exponentials. One CTA of 1024 threads per SM, 8 independent chains a thread, each step
   y = 2^(-y) (values stay in (0.5, 1]); thread 0 of each CTA times its loop with clock64.
   Build: make dev (build/dev/mufu_rate); run: build/dev/mufu_rate */
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

enum { CH = 8, ITERS = 4096, THREADS = 1024 };

__device__ __forceinline__ uint32_t ex2_f16x2(uint32_t x) {
    uint32_t y;
    asm volatile("{ .reg .b32 t; neg.f16x2 t, %1; ex2.approx.f16x2 %0, t; }" : "=r"(y) : "r"(x));
    return y;
}
__device__ __forceinline__ uint32_t ex2_bf16x2(uint32_t x) {
    uint32_t y;
    asm volatile("{ .reg .b32 t; neg.bf16x2 t, %1; ex2.approx.ftz.bf16x2 %0, t; }" : "=r"(y) : "r"(x));
    return y;
}
__device__ __forceinline__ float ex2_f32(float x) {
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(-x));
    return y;
}

/* kind 0 f32 (1 result an instruction), 1 f16x2 (2), 2 bf16x2 (2) */
template <int KIND> __global__ void __launch_bounds__(THREADS, 1) rate(unsigned long long *cyc, float *sink) {
    uint32_t u[CH];
    float f[CH];
    for (int c = 0; c < CH; c++) {
        f[c] = 0.5f + 0.01f * (threadIdx.x & 7) + 0.03f * c;
        u[c] = KIND == 1 ? 0x38003800u + c : 0x3f003f00u + c;   /* 0.5 in f16 / bf16, both halves */
    }
    __syncthreads();
    long long t0 = clock64();
    for (int i = 0; i < ITERS; i++) {
#pragma unroll
        for (int c = 0; c < CH; c++) {
            if (KIND == 0) f[c] = ex2_f32(f[c]);
            else if (KIND == 1) u[c] = ex2_f16x2(u[c]);
            else u[c] = ex2_bf16x2(u[c]);
        }
    }
    __syncthreads();
    long long t1 = clock64();
    float acc = 0.f;
    for (int c = 0; c < CH; c++) acc += f[c] + (float)(u[c] & 0xff);
    if (acc == 12345.f) sink[threadIdx.x] = acc;
    if (threadIdx.x == 0) cyc[blockIdx.x] = (unsigned long long)(t1 - t0);
}

template <int KIND> static void run(const char *name, int per_inst, int nsm, unsigned long long *d, float *sink) {
    rate<KIND><<<nsm, THREADS>>>(d, sink);   /* warm-up */
    rate<KIND><<<nsm, THREADS>>>(d, sink);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { printf("%s: %s\n", name, cudaGetErrorString(e)); return; }
    unsigned long long h[1024], mx = 0;
    cudaMemcpy(h, d, sizeof(unsigned long long) * nsm, cudaMemcpyDeviceToHost);
    for (int i = 0; i < nsm; i++) mx = h[i] > mx ? h[i] : mx;
    double inst = (double)THREADS * ITERS * CH;
    printf("%-8s %8.2f instructions / clock / SM  %8.2f results / clock / SM\n", name, inst / mx, inst * per_inst / mx);
}

int main(void) {
    int nsm = 0;
    cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0);
    unsigned long long *d;
    float *sink;
    cudaMalloc(&d, sizeof(unsigned long long) * 1024);
    cudaMalloc(&sink, sizeof(float) * THREADS);
    run<0>("f32", 1, nsm, d, sink);
    run<1>("f16x2", 2, nsm, d, sink);
    run<2>("bf16x2", 2, nsm, d, sink);
    return 0;
}
