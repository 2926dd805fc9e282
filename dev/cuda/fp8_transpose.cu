/* fp8_transpose: qt [cols, rows] = q [rows, cols]^T for FP8 bytes, the K-contiguous copy the other FP8
   product needs (bt_fp8.cuh's bt_k_fp8_transpose: the FP8 head's logit gradient dz^T, made from the
   e5m2 dz that the fused cross-entropy writes). 2 bytes of traffic an element. The ladder:
     v0  bt_k_fp8_transpose, what ships: 64 x 256 tiles, a thread issues the loads of four 64 x 64
         tiles side by side (64 bytes in flight) before it stores any to shared memory, then writes
         the four columns' 16 bytes (bt__k_fp8_tile_col)
     v1  one 64 x 64 tile at a time (v0 with NT = 1; what shipped before): 16 bytes in flight a thread
     v2  v1 with the next tile's 16 bytes loaded into a register before this tile's transpose
         (the load in flight across the barriers)
     v3  128 x 128 tiles (2 x 2 tiles of 64 x 64, their four loads in flight a thread): each q row
         read and each qt row written in 128-byte pieces (v0: 256-byte reads, 64-byte writes)
     v4  256 x 64 tiles (4 tiles stacked): 64-byte reads, 256-byte writes
     v5  128 x 256 tiles (2 x 4 tiles, eight loads in flight): 256-byte reads, 128-byte writes
   Measured (H200, 2026-12-03, this ladder, v1 shipping then): the four-tile version 154.7 / 33.7 /
   33.1 us against one tile's 179.3 / 37.6 / 35.5 at the shapes below (2.7 / 3.1 / 3.0 TB/s against
   2.3 / 2.8 / 2.8); the prefetch 181.2 / 35.5 / 33.6. The four-tile version ships since.
   Each version is checked against the host's transpose of fresh random bytes (every byte) and timed
   with CUDA events (the median of 50 calls) at the FP8 head's chunk [4096, 50304] and at the hidden
   layer's [8192, 6400] (d48) and [16384, 3072] (d12 B 16); and at [5360, 50304], about a head chunk
   of the default run's micro-batch (49 chunks of 262,144 rows: the transposes took 10.2 ms of its
   304.6, 2.65 TB/s, Nsight Compute, H200, 2026-12-04). v3-v5 built, not yet run.
   Build: make dev (build/dev/fp8_transpose); run: build/dev/fp8_transpose */
#include "common.cuh"

/* v2: v1 with the next tile's load issued before this tile's barriers */
__global__ void __launch_bounds__(256) transpose_next(uint8_t *qt, const uint8_t *q, int64_t rows, int64_t cols) {
    __shared__ uint32_t tile[64][17];
    const int t = threadIdx.x, lr = t >> 2, lc = t & 3, tcol = t >> 2, tk = t & 3;
    const int64_t tc = (cols + 63) / 64, ntiles = (rows + 63) / 64 * tc;
    auto load = [&](int64_t tt) {
        const int64_t i = tt / tc * 64 + lr, c = tt % tc * 64 + 16 * lc;
        return tt < ntiles && i < rows && c < cols ? *reinterpret_cast<const uint4 *>(q + i * cols + c) : make_uint4(0, 0, 0, 0);
    };
    uint4 v = load(blockIdx.x);
    for (int64_t tt = blockIdx.x; tt < ntiles; tt += gridDim.x) {
        const int64_t r0 = tt / tc * 64, c0 = tt % tc * 64;
        tile[lr][4 * lc] = v.x; tile[lr][4 * lc + 1] = v.y; tile[lr][4 * lc + 2] = v.z; tile[lr][4 * lc + 3] = v.w;
        v = load(tt + gridDim.x);
        __syncthreads();
        bt__k_fp8_tile_col(qt, tile, r0, c0, rows, cols, tcol, tk);
        __syncthreads();
    }
}
/* v3-v5: RT x NT tiles of 64 x 64 (rows x cols), every load of a thread issued before its stores to
   shared memory; then each tile's columns to qt (bt__k_fp8_tile_col), the RT stacked tiles of a
   column in turn, so 64 RT consecutive bytes of a qt row leave from 4 neighbouring threads */
template <int RT, int NT>
__global__ void __launch_bounds__(256) transpose_tiles(uint8_t *qt, const uint8_t *q, int64_t rows, int64_t cols) {
    __shared__ uint32_t tile[NT][64 * RT][17];
    const int t = threadIdx.x, lr = t >> 2, lc = t & 3, tcol = t >> 2, tk = t & 3;
    const int64_t tc = (cols + 64 * NT - 1) / (64 * NT), ntiles = (rows + 64 * RT - 1) / (64 * RT) * tc;
    for (int64_t tt = blockIdx.x; tt < ntiles; tt += gridDim.x) {
        const int64_t r0 = tt / tc * 64 * RT, c0 = tt % tc * 64 * NT;
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
static void launch(int ver, uint8_t *qt, const uint8_t *q, int64_t rows, int64_t cols, cudaStream_t s) {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    if (ver == 0) { bt_k_fp8_transpose(qt, q, rows, cols, s); return; }
    const int64_t nt = (rows + 63) / 64 * ((cols + 63) / 64);
    const unsigned grid = (unsigned)std::min<int64_t>(nt, (int64_t)sms * 16);
    if (ver == 1) bt__k_fp8_transpose_kernel<1><<<grid, 256, 0, s>>>(qt, q, rows, cols);   /* v1: the shipped kernel, one tile at a time */
    else if (ver == 2) transpose_next<<<grid, 256, 0, s>>>(qt, q, rows, cols);
    else {
        const int rt = ver == 4 ? 4 : 2, ntc = ver == 3 ? 2 : ver == 4 ? 1 : 4;
        const int64_t big = (rows + 64 * rt - 1) / (64 * rt) * ((cols + 64 * ntc - 1) / (64 * ntc));
        const unsigned g = (unsigned)std::min<int64_t>(big, (int64_t)sms * 16);
        if (ver == 3) transpose_tiles<2, 2><<<g, 256, 0, s>>>(qt, q, rows, cols);
        else if (ver == 4) transpose_tiles<4, 1><<<g, 256, 0, s>>>(qt, q, rows, cols);
        else transpose_tiles<2, 4><<<g, 256, 0, s>>>(qt, q, rows, cols);
    }
    CK(cudaGetLastError());
}

int main(void) {
    bt_k_init(0);
    cudaStream_t s = (cudaStream_t)0;
    const int64_t shapes[4][2] = {{4096, 50304}, {8192, 6400}, {16384, 3072}, {5360, 50304}};
    const int NVER = 6;
    for (int k = 0; k < 4; k++) {
        const int64_t rows = shapes[k][0], cols = shapes[k][1], n = rows * cols;
        uint8_t *hq = (uint8_t *)malloc((size_t)n), *ht = (uint8_t *)malloc((size_t)n), *q, *qt;
        uint64_t r = 0x9e3779b97f4a7c15ull + (uint64_t)k;
        for (int64_t j = 0; j < n; j++) { r ^= r << 13; r ^= r >> 7; r ^= r << 17; hq[j] = (uint8_t)(r >> 24); }
        CK(cudaMalloc(&q, (size_t)n)); CK(cudaMalloc(&qt, (size_t)n));
        CK(cudaMemcpy(q, hq, (size_t)n, cudaMemcpyHostToDevice));
        printf("[%lld, %lld] bytes\n", (long long)rows, (long long)cols);
        for (int ver = 0; ver < NVER; ver++) {
            CK(cudaMemset(qt, 0xa5, (size_t)n));
            launch(ver, qt, q, rows, cols, s);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(ht, qt, (size_t)n, cudaMemcpyDeviceToHost));
            long bad = 0;
            for (int64_t i = 0; i < rows; i++)
                for (int64_t c = 0; c < cols; c++) bad += ht[c * rows + i] != hq[i * cols + c];
            const double us = median_us([&] { launch(ver, qt, q, rows, cols, s); }, s);
            printf("  v%d  %7.1f us  %6.0f GB/s (q read, qt written)  %s\n", ver, us, 2.0 * (double)n / (us * 1e-6) / 1e9,
                   bad ? "WRONG bytes" : "every byte the host's transpose");
        }
        CK(cudaFree(q)); CK(cudaFree(qt)); free(hq); free(ht);
    }
    return 0;
}
