/* attention_memory_placement.cu - a diagnosis (docs/history/attention-notes.md, "Fast and slow
   processes"): the same binary's attention runs ~1.25x slower in some processes than in others. Within ONE
   process this times the bf16 attention forward and backward at the GPT-2 shape (B 16, H 12, T 1024,
   D 64, causal, q k v views of one [B, T, 3, H, D] buffer) on buffers placed in different ways:
     alloc      the caching allocator (bt_alloc), as bench_kernels and train_gpt2 place them
     padN       one fresh cudaMalloc after N MiB of padding held (other physical pages)
     offN       the same, the buffers N bytes past a 2 MiB boundary
     vmm        cuMemCreate / cuMemMap in 2 MiB granules (large pages whatever the driver's state)
     alloc2     the first buffers again at the end (does a mode change with time?)
   and, on the same buffers, two controls: a bf16 GEMM of the qkv projection's shape (cuBLAS) and a
   device copy of the qkv buffer. If the attention rows split into fast and slow within a process,
   the mode follows memory placement; if every row of a process agrees, it is set per process.
   Prints one line a placement:
     place <name> fwd_us <m> bwd_us <m> gemm_us <m> copy_us <m> base <pointer> at <UTC time the line was printed>
   With a second argument, heat mode instead: for that many seconds the GPU runs a load (bf16 GEMMs
   of 8192^3 and 1 GiB device copies, about 0.5 s a round) and after each round the attention on the
   caching allocator's buffers is timed again, one line a round:
     heat <seconds since start> fwd_us <m> bwd_us <m> gemm8k_us <m> copy1g_us <m>
   (does the attention slow down as the GPU and its memory warm up? nvidia-smi dmon beside it reads
   the temperatures).
   With "0 bench" after reps: bench_kernels' allocations before its T 1024 row replayed, then that
   row's buffers timed (place bench), a fresh region (fresh), and the bench-order buffers again;
   AM_SKIP=ceil|512|ceil512 leaves out the ceilings, the T 512 row, or both.
   Usage: build/dev/attention_memory_placement [reps [heat seconds [bench]]]   (medians of reps CUDA-event
   timings after 3 warm-ups; default 25) */
#define BT_ALLOC_IMPLEMENTATION
#define BT_KERNELS_IMPLEMENTATION
#include "bt_kernels.cuh"
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(2); } } while (0)
#define CU(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) { \
    fprintf(stderr, "%s:%d %s: CUresult %d\n", __FILE__, __LINE__, #call, (int)r_); exit(2); } } while (0)

enum { B = 16, H = 12, T = 1024, D = 64, C = H * D, MAXREPS = 200 };
static const int64_t N_HEAD = (int64_t)B * T * C;              /* elements of q (or o, or g) */
static const size_t MB2 = (size_t)2 << 20;
static cudaStream_t S;
static int g_reps = 25;

/* one placement's buffers carved from one region: qkv, gqkv [B, T, 3, H, D], o, g [B, T, H, D], lse,
   w [3C, C] and y [B T, 3C] for the GEMM control; each start rounded to 2 MiB */
typedef struct { char *qkv, *gqkv, *o, *g, *w, *y; float *lse; } bufs;
static size_t up2(size_t n) { return (n + MB2 - 1) / MB2 * MB2; }
static size_t region_bytes(void) {
    return up2(3 * N_HEAD * 2) * 2 + up2(N_HEAD * 2) * 2 + up2((size_t)B * H * T * 4) + up2((size_t)3 * C * C * 2) +
           up2((size_t)B * T * 3 * C * 2);
}
static bufs fill(bufs b) {
    bt_k_normal(BT_BF16, b.qkv, 3 * N_HEAD, 80, 0, 0.0, 1.0, S);
    bt_k_normal(BT_BF16, b.g, N_HEAD, 83, 0, 0.0, 1.0, S);
    bt_k_normal(BT_BF16, b.w, (int64_t)3 * C * C, 84, 0, 0.0, 0.02, S);
    return b;
}
static bufs carve(char *base) {
    bufs b;
    b.qkv = base; base += up2(3 * N_HEAD * 2);
    b.gqkv = base; base += up2(3 * N_HEAD * 2);
    b.o = base; base += up2(N_HEAD * 2);
    b.g = base; base += up2(N_HEAD * 2);
    b.lse = (float *)base; base += up2((size_t)B * H * T * 4);
    b.w = base; base += up2((size_t)3 * C * C * 2);
    b.y = base;
    return fill(b);
}

static int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }
static cudaEvent_t e0[MAXREPS], e1[MAXREPS];
#define TIME_US(out, STMT) do { \
    for (int w_ = 0; w_ < 3; w_++) { STMT; } \
    for (int r_ = 0; r_ < g_reps; r_++) { CK(cudaEventRecord(e0[r_], S)); STMT; CK(cudaEventRecord(e1[r_], S)); } \
    CK(cudaEventSynchronize(e1[g_reps - 1])); CK(cudaGetLastError()); \
    float ms_[MAXREPS]; \
    for (int r_ = 0; r_ < g_reps; r_++) CK(cudaEventElapsedTime(&ms_[r_], e0[r_], e1[r_])); \
    qsort(ms_, (size_t)g_reps, sizeof ms_[0], cmpf); out = 1000.0 * ms_[g_reps / 2]; } while (0)

static void time_place(const char *name, bufs b) {
    const int64_t sqkv[3] = {T * 3 * C, D, 3 * C}, so[3] = {T * C, D, C};
    const char *q = b.qkv, *k = b.qkv + C * 2, *v = b.qkv + 2 * C * 2;
    char *gq = b.gqkv, *gk = b.gqkv + C * 2, *gv = b.gqkv + 2 * C * 2;
    double f, bw, gm, cp;
    TIME_US(f, bt_k_attention_strided(BT_BF16, b.o, so, b.lse, q, sqkv, k, sqkv, v, sqkv, B, H, H, T, D, 0.125f, 1,
                                      BT_MATMUL_FP32, S));
    TIME_US(bw, bt_k_attention_backward_strided(BT_BF16, gq, sqkv, gk, sqkv, gv, sqkv, b.g, so, q, sqkv, k, sqkv, v, sqkv,
                                                b.o, so, b.lse, B, H, H, T, D, 0.125f, 1, BT_MATMUL_FP32, S));
    /* y [B T, 3C] = x [B T, C] w^T, x = the o buffer read as [B T, C] */
    TIME_US(gm, bt_k_matmul(BT_BF16, b.y, b.o, b.w, NULL, (int64_t)B * T, 3 * C, C, 0, 1, 1, 0, 0, 0, 1.f, 0.f,
                            BT_MATMUL_FP32, S));
    TIME_US(cp, CK(cudaMemcpyAsync(b.gqkv, b.qkv, (size_t)3 * N_HEAD * 2, cudaMemcpyDeviceToDevice, S)));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    printf("place %-8s fwd_us %7.1f bwd_us %7.1f gemm_us %6.1f copy_us %6.1f base %p at %02d:%02d:%02d.%03ld\n", name, f, bw, gm, cp,
           (void *)b.qkv, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    fflush(stdout);
}

/* the driver's VMM calls, looked up through the runtime (no -lcuda at link time) */
static void *driver_fn(const char *name) {
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q));
    if (!fn || q != cudaDriverEntryPointSuccess) { fprintf(stderr, "attention_memory_placement: driver call %s not found\n", name); exit(2); }
    return fn;
}
/* a region of `bytes` (a multiple of 2 MiB) mapped from cuMemCreate allocations of 2 MiB granules */
static char *vmm_region(size_t bytes) {
    CUresult (*cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags) =
        (CUresult(*)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags))driver_fn("cuMemGetAllocationGranularity");
    CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) =
        (CUresult(*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))driver_fn("cuMemAddressReserve");
    CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) =
        (CUresult(*)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long))driver_fn("cuMemCreate");
    CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) =
        (CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))driver_fn("cuMemMap");
    CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t) =
        (CUresult(*)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))driver_fn("cuMemSetAccess");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    if (gran < MB2) gran = MB2;
    bytes = (bytes + gran - 1) / gran * gran;
    CUdeviceptr va;
    CU(cuMemAddressReserve(&va, bytes, gran, 0, 0));
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, bytes, &prop, 0));
    CU(cuMemMap(va, bytes, 0, h, 0));
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(cuMemSetAccess(va, bytes, &acc, 1));
    printf("vmm granularity %zu bytes\n", gran);
    return (char *)va;
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
/* heat mode (above): rounds of load, the attention timed after each */
static void heat(double seconds) {
    const int64_t n = 8192;
    const size_t gb = (size_t)1 << 30;
    char *a, *c, *src, *dst;
    CK(cudaMalloc((void **)&a, (size_t)n * n * 2));
    CK(cudaMalloc((void **)&c, (size_t)n * n * 2));
    CK(cudaMalloc((void **)&src, gb));
    CK(cudaMalloc((void **)&dst, gb));
    bt_k_normal(BT_BF16, a, n * n, 90, 0, 0.0, 1.0, S);
    CK(cudaMemsetAsync(src, 1, gb, S));
    char *r = (char *)bt_alloc(bt_cuda_device(0), region_bytes(), (void *)S);
    bufs b = carve(r);
    const int64_t sqkv[3] = {T * 3 * C, D, 3 * C}, so[3] = {T * C, D, C};
    const char *q = b.qkv, *k = b.qkv + C * 2, *v = b.qkv + 2 * C * 2;
    char *gq = b.gqkv, *gk = b.gqkv + C * 2, *gv = b.gqkv + 2 * C * 2;
    const int reps = g_reps;
    g_reps = 11;
    double t0 = wall_seconds(), t = 0;
    while ((t = wall_seconds() - t0) < seconds) {
        double f, bw, gm, cp;
        TIME_US(gm, bt_k_matmul(BT_BF16, c, a, a, NULL, n, n, n, 0, 1, 1, 0, 0, 0, 1.f, 0.f, BT_MATMUL_FP32, S));
        for (int i = 0; i < 150; i++) bt_k_matmul(BT_BF16, c, a, a, NULL, n, n, n, 0, 1, 1, 0, 0, 0, 1.f, 0.f, BT_MATMUL_FP32, S);
        TIME_US(cp, CK(cudaMemcpyAsync(dst, src, gb, cudaMemcpyDeviceToDevice, S)));
        for (int i = 0; i < 100; i++) CK(cudaMemcpyAsync(dst, src, gb, cudaMemcpyDeviceToDevice, S));
        g_reps = reps;
        TIME_US(f, bt_k_attention_strided(BT_BF16, b.o, so, b.lse, q, sqkv, k, sqkv, v, sqkv, B, H, H, T, D, 0.125f, 1,
                                          BT_MATMUL_FP32, S));
        TIME_US(bw, bt_k_attention_backward_strided(BT_BF16, gq, sqkv, gk, sqkv, gv, sqkv, b.g, so, q, sqkv, k, sqkv, v, sqkv,
                                                    b.o, so, b.lse, B, H, H, T, D, 0.125f, 1, BT_MATMUL_FP32, S));
        g_reps = 11;
        printf("heat %6.1f fwd_us %7.1f bwd_us %7.1f gemm8k_us %8.1f copy1g_us %7.1f\n", t, f, bw, gm, cp);
        fflush(stdout);
    }
    g_reps = reps;
}

static void *balloc(size_t n) { return bt_alloc(bt_cuda_device(0), n, (void *)S); }
/* the buffers one at a time from the caching allocator, in bench_kernels' order (qkv, gqkv, g, o, lse) */
static bufs bench_order(void) {
    bufs b;
    b.qkv = (char *)balloc(3 * N_HEAD * 2);
    b.gqkv = (char *)balloc(3 * N_HEAD * 2);
    b.g = (char *)balloc(N_HEAD * 2);
    b.o = (char *)balloc(N_HEAD * 2);
    b.lse = (float *)balloc((size_t)B * H * T * 4);
    b.w = (char *)balloc((size_t)3 * C * C * 2);
    b.y = (char *)balloc((size_t)B * T * 3 * C * 2);
    return fill(b);
}
static void bench_free(bufs b) { bt_free(b.qkv); bt_free(b.gqkv); bt_free(b.g); bt_free(b.o); bt_free(b.lse); bt_free(b.w); bt_free(b.y); }
static void print_ptrs(const char *name, bufs b) {
    printf("ptrs %-8s qkv %p gqkv %p g %p o %p lse %p\n", name, (void *)b.qkv, (void *)b.gqkv, (void *)b.g, (void *)b.o, (void *)b.lse);
}
/* bench mode: what bench_kernels does before its T 1024 row (the ceilings: two 1 GiB buffers
   copied, three 128 MiB ones multiplied; then a T 512 row on its own buffers), all through the
   caching allocator and freed back to it, then the T 1024 buffers in its order; then the same
   shape on a fresh region and on the bench-order buffers again */
static void bench_mode(void) {
    const size_t gb = (size_t)1 << 30, mb128 = (size_t)8192 * 8192 * 2;
    const char *skip = getenv("AM_SKIP");   /* "ceil", "512" or "ceil512": leave those steps out */
    const int no_ceil = skip && strstr(skip, "ceil"), no_512 = skip && strstr(skip, "512");
    if (!no_ceil) {
    char *a = (char *)balloc(gb), *c = (char *)balloc(gb);
    CK(cudaMemsetAsync(a, 1, gb, S));
    for (int i = 0; i < 28; i++) CK(cudaMemcpyAsync(c, a, gb, cudaMemcpyDeviceToDevice, S));
    char *x = (char *)balloc(mb128), *y = (char *)balloc(mb128), *z = (char *)balloc(mb128);
    bt_k_normal(BT_BF16, x, 8192 * 8192, 1, 0, 0.0, 1.0, S);
    bt_k_normal(BT_BF16, y, 8192 * 8192, 2, 0, 0.0, 1.0, S);
    for (int i = 0; i < 28; i++) bt_k_matmul(BT_BF16, z, x, y, NULL, 8192, 8192, 8192, 0, 0, 1, 0, 0, 0, 1.f, 0.f, BT_MATMUL_FP32, S);
    bt_free(a); bt_free(c); bt_free(x); bt_free(y); bt_free(z);
    }
    if (!no_512) {   /* the T 512 row */
        const int64_t t5 = 512, n = (int64_t)B * H * t5 * D, sq[3] = {t5 * 3 * C, D, 3 * C}, so[3] = {t5 * C, D, C};
        char *qkv = (char *)balloc(3 * n * 2), *gqkv = (char *)balloc(3 * n * 2), *g = (char *)balloc(n * 2), *o = (char *)balloc(n * 2);
        float *lse = (float *)balloc((size_t)B * H * t5 * 4);
        bt_k_normal(BT_BF16, qkv, 3 * n, 200, 0, 0.0, 1.0, S);
        bt_k_normal(BT_BF16, g, n, 300, 0, 0.0, 1.0, S);
        for (int i = 0; i < 28; i++) {
            bt_k_attention_strided(BT_BF16, o, so, lse, qkv, sq, qkv + C * 2, sq, qkv + 2 * C * 2, sq, B, H, H, t5, D, 0.125f, 1, BT_MATMUL_FP32, S);
            bt_k_attention_backward_strided(BT_BF16, gqkv, sq, gqkv + C * 2, sq, gqkv + 2 * C * 2, sq, g, so, qkv, sq, qkv + C * 2, sq,
                                            qkv + 2 * C * 2, sq, o, so, lse, B, H, H, t5, D, 0.125f, 1, BT_MATMUL_FP32, S);
        }
        bt_free(qkv); bt_free(gqkv); bt_free(g); bt_free(o); bt_free(lse);
    }
    bufs b = bench_order();
    print_ptrs("bench", b);
    time_place("bench", b);
    char *r;
    CK(cudaMalloc((void **)&r, region_bytes()));
    bufs f = carve(r);
    print_ptrs("fresh", f);
    time_place("fresh", f);
    time_place("bench2", b);
    bench_free(b);
    bufs b3 = bench_order();
    print_ptrs("bench3", b3);
    time_place("bench3", b3);
    CK(cudaFree(r));
}

int main(int argc, char **argv) {
    if (argc > 1) g_reps = atoi(argv[1]);
    if (g_reps < 3 || g_reps > MAXREPS) { fprintf(stderr, "attention_memory_placement: reps must be 3..%d\n", MAXREPS); return 2; }
    CK(cudaSetDevice(0));
    CK(cudaStreamCreate(&S));
    for (int r = 0; r < MAXREPS; r++) { CK(cudaEventCreate(&e0[r])); CK(cudaEventCreate(&e1[r])); }
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    printf("device %s, %d SMs, hopper path %d\n", pr.name, pr.multiProcessorCount, bt_k_attention_hopper(-1));
    if (argc > 3 && strcmp(argv[3], "bench") == 0) {
        bench_mode();
        return 0;
    }
    if (argc > 2 && atof(argv[2]) > 0) {
        heat(atof(argv[2]));
        return 0;
    }
    const size_t rb = region_bytes();
    /* alloc: the caching allocator, one region as the model's activations would be */
    char *first = (char *)bt_alloc(bt_cuda_device(0), rb, (void *)S);
    bufs b0 = carve(first);
    time_place("alloc", b0);
    /* padN: pads held while a fresh region is timed (each new region lands on other physical pages) */
    const int pads_mb[] = {2, 6, 30, 130, 514, 2050};
    void *pads[8];
    int npad = 0;
    for (size_t i = 0; i < sizeof pads_mb / sizeof pads_mb[0]; i++) {
        CK(cudaMalloc(&pads[npad++], (size_t)pads_mb[i] << 20));
        char *r;
        CK(cudaMalloc((void **)&r, rb));
        char name[16];
        snprintf(name, sizeof name, "pad%d", pads_mb[i]);
        time_place(name, carve(r));
        CK(cudaFree(r));
    }
    /* offN: the buffers N bytes past the region's 2 MiB-aligned start */
    const size_t offs[] = {4096, 65536, (size_t)1 << 20};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        char *r;
        CK(cudaMalloc((void **)&r, rb + MB2));
        char name[16];
        snprintf(name, sizeof name, "off%zu", offs[i]);
        time_place(name, carve(r + offs[i]));
        CK(cudaFree(r));
    }
    time_place("vmm", carve(vmm_region(rb)));
    time_place("alloc2", b0);
    for (int i = 0; i < npad; i++) CK(cudaFree(pads[i]));
    return 0;
}
