/* test_alloc_gpu.cu - the caching allocator on cuda:0: reuse, stats, OOM through a limit and
   through cudaMalloc itself, per-stream pools, private pools, the current device left alone.
   Every test skips itself when no GPU is present. */
#include "bt_alloc.h"
#include "tests/bt_test.h"
#include <stdint.h>
#include <cuda_runtime.h>

#define MiB ((size_t)1 << 20)

static bt_device gpu;

static int have_gpu(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n > 0;
}
#define NEED_GPU() do { if (!have_gpu()) { BT_SKIP("no CUDA device"); return; } } while (0)

static void fresh(void) {
    bt_alloc_set_limit(gpu, 0);
    bt_alloc_empty_cache(gpu);
    bt_alloc_reset_peak(gpu);
}

static void test_gpu_reuse(void) {
    NEED_GPU();
    fresh();
    char *p = (char *)bt_alloc(gpu, 1000, NULL);
    BT_CHECK(p && (uintptr_t)p % 256 == 0, "device block %p not 256-byte aligned", (void *)p);
    BT_CHECK(cudaMemset(p, 7, 1000) == cudaSuccess, "block not usable by the device");
    bt_alloc_stats_t s0 = bt_alloc_stats(gpu);
    bt_free(p);
    char *q = (char *)bt_alloc(gpu, 1000, NULL);
    BT_CHECK(q == p, "cached block not reused");
    BT_CHECK(bt_alloc_stats(gpu).n_system_allocs == s0.n_system_allocs, "reuse called cudaMalloc");
    bt_free(q);
    char *a = (char *)bt_alloc(gpu, 8 * MiB, NULL);
    bt_free(a);
    char *b = (char *)bt_alloc(gpu, 3 * MiB, NULL), *c = (char *)bt_alloc(gpu, 3 * MiB, NULL);
    BT_CHECK(b == a && c == a + 3 * MiB, "split pieces at %p %p, segment %p", (void *)b, (void *)c, (void *)a);
    bt_free(b); bt_free(c);
    char *d = (char *)bt_alloc(gpu, 8 * MiB, NULL);
    BT_CHECK(d == a, "coalesced block not reused");
    /* the data round-trips through a reused block */
    unsigned char host[4096], back[4096];
    for (int i = 0; i < 4096; i++) host[i] = (unsigned char)(i * 31 + 1);
    cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice);
    cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost);
    BT_CHECK(memcmp(host, back, sizeof host) == 0, "device data corrupted");
    bt_free(d);
    fresh();
}

static void test_gpu_stats(void) {
    NEED_GPU();
    fresh();
    bt_alloc_stats_t s0 = bt_alloc_stats(gpu);
    BT_CHECK(s0.allocated == 0 && s0.reserved == 0, "not clean: %zu %zu", s0.allocated, s0.reserved);
    void *a = bt_alloc(gpu, 1000, NULL), *b = bt_alloc(gpu, 3000, NULL);
    bt_alloc_stats_t s1 = bt_alloc_stats(gpu);
    BT_CHECK(s1.allocated == 4096 && s1.requested == 4000, "allocated %zu requested %zu", s1.allocated, s1.requested);
    BT_CHECK(s1.reserved == 2 * MiB && s1.n_system_allocs == s0.n_system_allocs + 1, "reserved %zu", s1.reserved);
    bt_free(a);
    bt_alloc_reset_peak(gpu);
    BT_CHECK(bt_alloc_stats(gpu).peak_allocated == 3072, "reset_peak");
    bt_free(b);
    bt_alloc_empty_cache(gpu);
    bt_alloc_stats_t s2 = bt_alloc_stats(gpu);
    BT_CHECK(s2.allocated == 0 && s2.reserved == 0, "after empty_cache: %zu %zu", s2.allocated, s2.reserved);
    BT_CHECK(s2.n_system_frees == s1.n_system_frees + 1, "cudaFree not counted");
    fresh();
}

static void test_gpu_oom(void) {
    NEED_GPU();
    fresh();
    bt_alloc_set_limit(gpu, 4 * MiB);
    void *a = bt_alloc(gpu, 3 * MiB, NULL);
    uint64_t ooms = bt_alloc_stats(gpu).n_ooms;
    BT_EXPECT_ERROR(bt_alloc(gpu, 1000, NULL), "out of memory");
    BT_CHECK(bt_try_alloc(gpu, 1000, NULL) == NULL, "try_alloc past the limit");
    BT_CHECK(bt_alloc_stats(gpu).n_ooms == ooms + 2, "OOMs not counted");
    bt_free(a);
    void *b = bt_alloc(gpu, 1000, NULL);
    BT_CHECK(b != NULL, "allocator dead after OOM");
    bt_free(b);
    bt_alloc_set_limit(gpu, 0);
    /* a real cudaMalloc failure (1 PiB): NULL, and the CUDA error state is left clean */
    BT_CHECK(bt_try_alloc(gpu, (size_t)1 << 50, NULL) == NULL, "1 PiB allocation succeeded?");
    BT_CHECK(cudaGetLastError() == cudaSuccess, "cudaMalloc's failure leaked into cudaGetLastError");
    void *c = bt_alloc(gpu, 1000, NULL);
    BT_CHECK(c != NULL, "allocator dead after a cudaMalloc failure");
    bt_free(c);
    fresh();
}

static void test_gpu_streams(void) {
    NEED_GPU();
    fresh();
    cudaStream_t s1, s2;
    cudaStreamCreate(&s1);
    cudaStreamCreate(&s2);
    char *a = (char *)bt_alloc(gpu, 1000, s1);
    cudaMemsetAsync(a, 1, 1000, s1);
    bt_free(a);   /* no sync: reusable at once on s1, not on s2 */
    bt_alloc_stats_t s0 = bt_alloc_stats(gpu);
    char *b = (char *)bt_alloc(gpu, 1000, s2);
    BT_CHECK(b != a, "another stream's pool handed out s1's block");
    BT_CHECK(bt_alloc_stats(gpu).n_system_allocs == s0.n_system_allocs + 1, "s2 did not get its own segment");
    char *c = (char *)bt_alloc(gpu, 1000, s1);
    BT_CHECK(c == a, "s1's block not reused on s1");
    bt_free(b); bt_free(c);
    cudaStreamSynchronize(s1);
    cudaStreamSynchronize(s2);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    bt_alloc_empty_cache(gpu);
    BT_CHECK(bt_alloc_stats(gpu).reserved == 0, "stream pools kept segments");
    fresh();
}

static void test_gpu_private_pool(void) {
    NEED_GPU();
    fresh();
    bt_alloc_pool_push(gpu, 3);
    char *a = (char *)bt_alloc(gpu, 1000, NULL);
    bt_alloc_pool_pop(gpu);
    bt_free(a);
    char *b = (char *)bt_alloc(gpu, 1000, NULL);
    BT_CHECK(b != a, "default pool reused a private block");
    bt_free(b);
    bt_alloc_empty_cache(gpu);
    BT_CHECK(bt_alloc_stats(gpu).reserved == 2 * MiB, "empty_cache freed the private pool");
    bt_alloc_pool_release(gpu, 3);
    BT_CHECK(bt_alloc_stats(gpu).reserved == 0, "release kept the private segment");
    fresh();
}

static void test_gpu_current_device(void) {
    NEED_GPU();
    int n = 0, before = -1, after = -1;
    cudaGetDeviceCount(&n);
    cudaSetDevice(n - 1);
    cudaGetDevice(&before);
    void *a = bt_alloc(gpu, 1000, NULL);   /* cuda:0 */
    cudaGetDevice(&after);
    BT_CHECK(before == after, "bt_alloc changed the current device %d -> %d", before, after);
    cudaPointerAttributes attr;
    BT_CHECK(cudaPointerGetAttributes(&attr, a) == cudaSuccess && attr.device == 0, "block not on cuda:0");
    bt_free(a);
    bt_alloc_empty_cache(gpu);
    cudaGetDevice(&after);
    BT_CHECK(before == after, "empty_cache changed the current device");
    cudaSetDevice(0);
    fresh();
}

int main(void) {
    gpu = bt_cuda_device(0);
    (void)bt_test_relerr;
    BT_RUN(test_gpu_reuse);
    BT_RUN(test_gpu_stats);
    BT_RUN(test_gpu_oom);
    BT_RUN(test_gpu_streams);
    BT_RUN(test_gpu_private_pool);
    BT_RUN(test_gpu_current_device);
    return bt_test_summary("test_alloc_gpu");
}
