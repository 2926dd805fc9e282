/* fp8_transpose: qt [cols, rows] = q [rows, cols]^T for FP8 bytes, the K-contiguous copy the other FP8
   product needs (bt_fp8.cuh's bt_k_fp8_transpose: the FP8 head's logit gradient dz^T, made from the
   e5m2 dz that the fused cross-entropy writes, and x^T after the layernorm's e4m3 output). 2 bytes of
   traffic an element. Tiles of 64 x 64 bytes (a thread loads 16 bytes of a row of one, then after a
   barrier stores 16 bytes of a column, bt__k_fp8_tile_col); a block takes RT x NT of them (stacked x
   side by side), every load of a thread issued before its stores to shared memory. The ladder:
     v0  bt_k_fp8_transpose, what ships: 128 x 128 (2 x 2 tiles): q's rows read and qt's rows written
         in 128-byte pieces; tiles taken column tile by column tile (v1-v5 too: the library's kernel)
     v1  one 64 x 64 tile at a time (1 x 1; what shipped first): 16 bytes in flight a thread
     v2  v1 with the next tile's 16 bytes loaded into a register before this tile's transpose
         (the load in flight across the barriers)
     v3  64 x 256 (1 x 4; what shipped second): 256-byte reads, 64-byte writes (half lines of qt)
     v4  256 x 64 (4 x 1): 64-byte reads, 256-byte writes
     v5  128 x 256 (2 x 4, eight loads in flight): 256-byte reads, 128-byte writes
     v6  the copy engine both ways (below): 128 x 128 tiles through a ring of shared stages, a bulk
         tensor store of qt from a staging tile; persistent, 2 blocks an SM
     v7  v0 taking its tiles row band by row band, as it did until 2026-12-04
   Measured (H200, 2026-12-03, v1 shipping then): four tiles side by side 154.7 / 33.7 / 33.1 us against
   one tile's 179.3 / 37.6 / 35.5 at the first three shapes below; the prefetch 181.2 / 35.5 / 33.6.
   Then (H200, 2026-12-04, v3 shipping): v0's 128 x 128 124.4 / 33.6 / 33.1 us against v3's 154.7 /
   33.8 / 33.2, v4 140.0 / 35.8 / 34.7, v5 129.6 / 35.9 / 34.5: full-line writes of qt win at the
   head's shape, the rest is a tie; v0 ships since.
   Then (H200, 2026-12-04), us, v0 (column tiles in turn) / v7 (row bands in turn) / v6: [4096, 50304]
   117.8 / 123.7 / 131.4, [8192, 6400] 33.8 / 33.7 / 33.5, [16384, 3072] 33.6 / 33.4 / 32.6, [5248,
   50304] 152.9 / 159.8 / 168.0, [262144, 768] 119.7 / 124.1 / 121.5, [10496, 50304] (the default run's
   head chunk since) 306.1 / 322.6 / 327.9 (an earlier call: v7's order as v0 325.0 / 324.6, column
   tiles 308.6): the resident blocks covering every row band of a few column tiles write each qt row
   whole at about the same time, up to 5% faster; v0 takes its tiles so since. v6's copy engine is
   no faster. A qt row's distance a power of two or not does not matter ([262208, 768] 123.8-126.0),
   its alignment does: rows 16- but not 128-byte aligned ([10512, 50304], [262160, 768]) 749.4 and
   208.8 (v6 524.5 and 163.4).
   Each version is checked against the host's transpose of fresh random bytes (every byte) and timed
   with CUDA events (the median of 50 calls; q and qt together larger than L2 at every shape) at the FP8
   head's chunk [4096, 50304] (d12 B 16), the hidden layer's [8192, 6400] (d48) and [16384, 3072]
   (d12 B 16), the default run's head chunk [5248, 50304] (its 262,144 rows in 50 chunks of 5,248
   rows under the 1 GiB cap, the last 4,992), [10496, 50304] (25 chunks) and its layernorm output
   [262144, 768]; [262208, 768], [10512, 50304] and [262160, 768] (qt's rows not 2^k or not 128-byte
   aligned apart).
   v6's copy-engine helpers moved into common.cuh after these runs (the same instructions; built, not run
   since).
   Build: make dev (build/dev/fp8_transpose); run: build/dev/fp8_transpose [first shape [last shape]] */
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
/* v6: the copy engine both ways (the cast ladder's v4 applied to bytes). A persistent grid; 128 x 128
   tiles through a ring of NS shared stages that the tensor memory accelerator fills (128-byte swizzle:
   16-byte chunk k of row r at k ^ r % 8), refilled once the block is past them; a thread moves 4 chunks
   of a tile into v0's padded 64 x 64 word tiles, then after the barrier gathers 4 x 16 column bytes into
   a qt staging tile [128][128] (swizzled the same way), which one thread hands to the copy engine (a
   bulk tensor store), its reads waited for when the buffer comes round again (two). */
namespace tma {
constexpr int NS = 3, TB = 128 * 128;
struct maps { CUtensorMap q, qt; };
__global__ void __launch_bounds__(256) transpose(const __grid_constant__ maps mp, int64_t rows, int64_t cols) {
    extern __shared__ uint8_t dsm[];
    uint8_t *base = (uint8_t *)(((uintptr_t)dsm + 1023) & ~(uintptr_t)1023), *qts = base + NS * TB;
    __shared__ uint32_t tile[2][128][17];
    __shared__ __align__(8) uint64_t full[NS];
    const int t = threadIdx.x, tcol = t >> 2, tk = t & 3;
    const int64_t tc = (cols + 127) / 128, ntiles = (rows + 127) / 128 * tc;
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(base), sfull = (uint32_t)__cvta_generic_to_shared(full);
    auto issue = [&](int st, int64_t tt) {
        bt__k_mbar_expect(sfull + 8 * st, TB);
        tma_load2d(sbase + st * TB, &mp.q, (int)(tt % tc * 128), (int)(tt / tc * 128), sfull + 8 * st);
    };
    ring_prime(sfull, NS, ntiles, issue);
    int k = 0;
    for (int64_t tt = blockIdx.x; tt < ntiles; tt += gridDim.x, k++) {
        const int st = k % NS;
        const int64_t r0 = tt / tc * 128, c0 = tt % tc * 128;
        uint8_t *qtb = qts + (k & 1) * TB;
        bt__k_mbar_wait(sfull + 8 * st, (k / NS) & 1);
        const uint8_t *in = base + st * TB;
#pragma unroll
        for (int p = 0; p < 4; p++) {                 /* row (t >> 3) + 32 p, chunk t & 7 */
            const int row = (t >> 3) + 32 * p, ch = t & 7;
            const uint4 v = *reinterpret_cast<const uint4 *>(in + row * 128 + ((ch ^ (row & 7)) << 4));
            uint32_t *w = tile[ch >> 2][row] + 4 * (ch & 3);
            w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
        }
        bt__k_fence_async();                          /* the stage's reads before the copy engine refills it */
        __syncthreads();
        if (t == 0 && tt + (int64_t)NS * gridDim.x < ntiles) issue(st, tt + (int64_t)NS * gridDim.x);
        const int sh = 8 * (tcol & 3);
#pragma unroll
        for (int u = 0; u < 2; u++)
#pragma unroll
            for (int a = 0; a < 2; a++) {             /* column 64 u + tcol's bytes of rows 64 a + 16 tk .. + 15 */
                uint32_t o[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    uint32_t w = 0;
#pragma unroll
                    for (int f = 0; f < 4; f++) w |= (tile[u][64 * a + 16 * tk + 4 * e + f][tcol >> 2] >> sh & 0xffu) << (8 * f);
                    o[e] = w;
                }
                const int c = 64 * u + tcol;
                *reinterpret_cast<uint4 *>(qtb + c * 128 + (((4 * a + tk) ^ (c & 7)) << 4)) = make_uint4(o[0], o[1], o[2], o[3]);
            }
        bt__k_fence_async();
        if (t == 0) bt__k_bulk_wait_read();
        __syncthreads();
        if (t == 0) {
            tma_store2d(&mp.qt, (int)r0, (int)c0, (uint32_t)__cvta_generic_to_shared(qtb));
            bt__k_bulk_commit();
        }
    }
    if (t == 0) bt__k_bulk_wait();
}
static void launch(uint8_t *qt, const uint8_t *q, int64_t rows, int64_t cols, cudaStream_t s) {
    static int per_sm = 0, sms = 0;
    const int bytes = 1024 + (NS + 2) * TB;
    if (!per_sm) {
        CK(cudaFuncSetAttribute(transpose, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, transpose, 256, bytes));
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        printf("    (v6: %d blocks an SM)\n", per_sm);
    }
    maps mp;
    map2d(&mp.q, q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, rows, cols, 128, 128, CU_TENSOR_MAP_SWIZZLE_128B, "fp8_transpose");
    map2d(&mp.qt, qt, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, cols, rows, 128, 128, CU_TENSOR_MAP_SWIZZLE_128B, "fp8_transpose");
    const int64_t nt = (rows + 127) / 128 * ((cols + 127) / 128);
    transpose<<<(unsigned)std::min<int64_t>(nt, (int64_t)sms * per_sm), 256, bytes, s>>>(mp, rows, cols);
}
}   // namespace tma
/* v7: v0 (128 x 128) with its tiles taken row band by row band (tile tt: row band tt / column tiles,
   column tile tt % column tiles), as v0 took them until it went column tile by column tile: the
   blocks resident at once then write 128-byte pieces of every qt row of a few row bands */
__global__ void __launch_bounds__(256) transpose_rowbands(uint8_t *qt, const uint8_t *q, int64_t rows, int64_t cols) {
    __shared__ uint32_t tile[2][128][17];
    const int t = threadIdx.x, lr = t >> 2, lc = t & 3, tcol = t >> 2, tk = t & 3;
    const int64_t tc = (cols + 127) / 128, ntiles = (rows + 127) / 128 * tc;
    for (int64_t tt = blockIdx.x; tt < ntiles; tt += gridDim.x) {
        const int64_t r0 = tt / tc * 128, c0 = tt % tc * 128;
        uint4 v[2][2];
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int64_t i = r0 + 64 * a + lr, c = c0 + 64 * u + 16 * lc;
                v[a][u] = i < rows && c < cols ? *reinterpret_cast<const uint4 *>(q + i * cols + c) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                uint32_t *w = tile[u][64 * a + lr] + 4 * lc;
                w[0] = v[a][u].x; w[1] = v[a][u].y; w[2] = v[a][u].z; w[3] = v[a][u].w;
            }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < 2; u++)
#pragma unroll
            for (int a = 0; a < 2; a++) bt__k_fp8_tile_col(qt, tile[u] + 64 * a, r0 + 64 * a, c0 + 64 * u, rows, cols, tcol, tk);
        __syncthreads();
    }
}
static void launch(int ver, uint8_t *qt, const uint8_t *q, int64_t rows, int64_t cols, cudaStream_t s) {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    if (ver == 0) { bt_k_fp8_transpose(qt, q, rows, cols, s); return; }
    if (ver == 6) { tma::launch(qt, q, rows, cols, s); CK(cudaGetLastError()); return; }
    if (ver == 7) {
        const int64_t nt7 = (rows + 127) / 128 * ((cols + 127) / 128);
        transpose_rowbands<<<(unsigned)std::min<int64_t>(nt7, (int64_t)sms * 16), 256, 0, s>>>(qt, q, rows, cols);
        CK(cudaGetLastError());
        return;
    }
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

int main(int argc, char **argv) {
    bt_k_init(0);
    const int first = argc > 1 ? atoi(argv[1]) : 0, last = argc > 2 ? atoi(argv[2]) : 8;   /* the shapes first .. last */
    cudaStream_t s = (cudaStream_t)0;
    const int64_t shapes[9][2] = {{4096, 50304}, {8192, 6400}, {16384, 3072}, {5248, 50304}, {262144, 768}, {262208, 768}, {10496, 50304}, {10512, 50304}, {262160, 768}};
    const int NVER = 8;
    for (int k = first; k < 9 && k <= last; k++) {
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
