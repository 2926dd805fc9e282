/* fp8_transpose: qt [cols, rows] = q [rows, cols]^T for FP8 bytes, the K-contiguous copy the other FP8
   product needs (bt_fp8.cuh's bt_k_fp8_transpose: the FP8 head's logit gradient dz^T, made from the
   e5m2 dz that the fused cross-entropy writes, and x^T after the layernorm's e4m3 output). 2 bytes of
   traffic an element. Tiles of 64 x 64 bytes (a thread loads 16 bytes of a row of one, then after a
   barrier stores 16 bytes of a column, bt__k_fp8_tile_col); a block takes RT x NT of them (stacked x
   side by side), every load of a thread issued before its stores to shared memory. The ladder:
     v0  bt_k_fp8_transpose, what ships: 128 x 128 (2 x 2 tiles): q's rows read and qt's rows written
         in 128-byte pieces
     v1  one 64 x 64 tile at a time (1 x 1; what shipped first): 16 bytes in flight a thread
     v2  v1 with the next tile's 16 bytes loaded into a register before this tile's transpose
         (the load in flight across the barriers)
     v3  64 x 256 (1 x 4; what shipped second): 256-byte reads, 64-byte writes (half lines of qt)
     v4  256 x 64 (4 x 1): 64-byte reads, 256-byte writes
     v5  128 x 256 (2 x 4, eight loads in flight): 256-byte reads, 128-byte writes
   Measured (H200, 2026-12-03, v1 shipping then): four tiles side by side 154.7 / 33.7 / 33.1 us against
   one tile's 179.3 / 37.6 / 35.5 at the first three shapes below; the prefetch 181.2 / 35.5 / 33.6.
   Then (H200, 2026-12-04, v3 shipping): v0's 128 x 128 124.4 / 33.6 / 33.1 us against v3's 154.7 /
   33.8 / 33.2, v4 140.0 / 35.8 / 34.7, v5 129.6 / 35.9 / 34.5: full-line writes of qt win at the
   head's shape, the rest is a tie; v0 ships since.
   Each version is checked against the host's transpose of fresh random bytes (every byte) and timed
   with CUDA events (the median of 50 calls; q and qt together larger than L2 at every shape) at the FP8
   head's chunk [4096, 50304] (d12 B 16), the hidden layer's [8192, 6400] (d48) and [16384, 3072]
   (d12 B 16), the default run's head chunk [5248, 50304] (its 262,144 rows in 50 chunks of 5,248
   rows under the 1 GiB cap, the last 4,992) and its layernorm output [262144, 768].
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
static void launch(int ver, uint8_t *qt, const uint8_t *q, int64_t rows, int64_t cols, cudaStream_t s) {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    if (ver == 0) { bt_k_fp8_transpose(qt, q, rows, cols, s); return; }
    const int rt = ver == 3 || ver == 1 || ver == 2 ? 1 : ver == 4 ? 4 : 2, ntc = ver == 3 ? 4 : ver == 5 ? 4 : 1;
    const int64_t nt = (rows + 64 * rt - 1) / (64 * rt) * ((cols + 64 * ntc - 1) / (64 * ntc));
    const unsigned grid = (unsigned)std::min<int64_t>(nt, (int64_t)sms * 16);
    if (ver == 1) bt__k_fp8_transpose_kernel<1, 1><<<grid, 256, 0, s>>>(qt, q, rows, cols);
    else if (ver == 2) transpose_next<<<grid, 256, 0, s>>>(qt, q, rows, cols);
    else if (ver == 3) bt__k_fp8_transpose_kernel<1, 4><<<grid, 256, 0, s>>>(qt, q, rows, cols);
    else if (ver == 4) bt__k_fp8_transpose_kernel<4, 1><<<grid, 256, 0, s>>>(qt, q, rows, cols);
    else bt__k_fp8_transpose_kernel<2, 4><<<grid, 256, 0, s>>>(qt, q, rows, cols);
    CK(cudaGetLastError());
}

int main(void) {
    bt_k_init(0);
    cudaStream_t s = (cudaStream_t)0;
    const int64_t shapes[5][2] = {{4096, 50304}, {8192, 6400}, {16384, 3072}, {5248, 50304}, {262144, 768}};
    const int NVER = 6;
    for (int k = 0; k < 5; k++) {
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
