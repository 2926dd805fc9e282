/* test_alloc.c - the caching allocator on the host: reuse, split/coalesce, stats, OOM through a
   limit, private pools, errors, a randomized stress test and a threaded one. */
#include "bt_alloc.h"
#include "tests/bt_test.h"
#include <stdlib.h>
#include <stdint.h>

#define MiB ((size_t)1 << 20)

static bt_device cpu;

/* every test starts and ends with nothing live, nothing cached and no limit */
static void fresh(void) {
    bt_alloc_set_limit(cpu, 0);
    bt_alloc_empty_cache(cpu);
    bt_alloc_reset_peak(cpu);
}

static void test_reuse(void) {
    fresh();
    char *p = (char *)bt_alloc(cpu, 1000, NULL);
    BT_CHECK(p != NULL, "alloc returned NULL");
    BT_CHECK((uintptr_t)p % 64 == 0, "host block %p not 64-byte aligned", (void *)p);
    bt_alloc_stats_t s0 = bt_alloc_stats(cpu);
    bt_free(p);
    char *q = (char *)bt_alloc(cpu, 900, NULL);   /* same size class: 1024 B */
    bt_alloc_stats_t s1 = bt_alloc_stats(cpu);
    BT_CHECK(q == p, "cached block not reused: %p vs %p", (void *)q, (void *)p);
    BT_CHECK(s1.n_system_allocs == s0.n_system_allocs, "system allocs %llu -> %llu",
             (unsigned long long)s0.n_system_allocs, (unsigned long long)s1.n_system_allocs);
    bt_free(q);
    /* large blocks too */
    char *a = (char *)bt_alloc(cpu, 5 * MiB, NULL);
    s0 = bt_alloc_stats(cpu);
    bt_free(a);
    char *b = (char *)bt_alloc(cpu, 5 * MiB - 100, NULL);
    s1 = bt_alloc_stats(cpu);
    BT_CHECK(b == a, "large block not reused");
    BT_CHECK(s1.n_system_allocs == s0.n_system_allocs, "large reuse called the system");
    bt_free(b);
    /* best fit: of two cached blocks that fit, the smaller one is taken, uncut */
    char *big = (char *)bt_alloc(cpu, 8 * MiB, NULL), *mid = (char *)bt_alloc(cpu, 4 * MiB, NULL);
    bt_free(big); bt_free(mid);
    char *f = (char *)bt_alloc(cpu, 4 * MiB, NULL), *g = (char *)bt_alloc(cpu, 8 * MiB, NULL);
    BT_CHECK(f == mid && g == big, "best fit: got %p %p, expected %p %p", (void *)f, (void *)g, (void *)mid, (void *)big);
    bt_free(f); bt_free(g);
    /* the host ignores the stream argument: one pool */
    char *c = (char *)bt_alloc(cpu, 1000, (void *)0x1234);
    bt_free(c);
    char *e = (char *)bt_alloc(cpu, 1000, NULL);
    BT_CHECK(e == c, "host stream argument split the pool");
    bt_free(e);
    fresh();
}

static void test_zero_and_size(void) {
    fresh();
    void *a = bt_alloc(cpu, 0, NULL), *b = bt_alloc(cpu, 0, NULL);
    BT_CHECK(a && b && a != b, "zero-size allocations must be unique: %p %p", a, b);
    BT_CHECK(bt_alloc_size(a) == 512, "zero-size block is %zu B", bt_alloc_size(a));
    void *c = bt_alloc(cpu, 513, NULL);
    BT_CHECK(bt_alloc_size(c) == 1024, "513 B rounds to %zu B, expected 1024", bt_alloc_size(c));
    void *d = bt_alloc(cpu, 3 * MiB + 1, NULL);
    BT_CHECK(bt_alloc_size(d) >= 3 * MiB + 1 && bt_alloc_size(d) % 512 == 0, "large size %zu", bt_alloc_size(d));
    bt_free(a); bt_free(b); bt_free(c); bt_free(d);
    bt_free(NULL);   /* no-op */
    fresh();
}

static void test_split_coalesce(void) {
    fresh();
    char *a = (char *)bt_alloc(cpu, 8 * MiB, NULL);
    bt_free(a);
    bt_alloc_stats_t s0 = bt_alloc_stats(cpu);
    BT_CHECK(s0.reserved == 8 * MiB, "reserved %zu after an 8 MiB alloc", s0.reserved);
    /* three pieces cut from the one free 8 MiB block */
    char *b = (char *)bt_alloc(cpu, 3 * MiB, NULL);
    char *c = (char *)bt_alloc(cpu, 3 * MiB, NULL);
    char *d = (char *)bt_alloc(cpu, 2 * MiB, NULL);
    bt_alloc_stats_t s1 = bt_alloc_stats(cpu);
    BT_CHECK(b == a, "first piece at %p, expected %p", (void *)b, (void *)a);
    BT_CHECK(c == a + 3 * MiB, "remainder not reused: %p vs %p", (void *)c, (void *)(a + 3 * MiB));
    BT_CHECK(d == a + 6 * MiB, "second remainder not reused");
    BT_CHECK(s1.n_system_allocs == s0.n_system_allocs, "splitting called the system");
    /* all three in one segment: one base, each block at base + its offset */
    size_t ob = 0, oc = 0, od = 0, ox = 7;
    char *gb = (char *)bt_alloc_segment(b, &ob), *gc = (char *)bt_alloc_segment(c, &oc), *gd = (char *)bt_alloc_segment(d, &od);
    BT_CHECK(gb && gb == gc && gc == gd, "segments %p %p %p, expected one", (void *)gb, (void *)gc, (void *)gd);
    BT_CHECK(gb + ob == b && gc + oc == c && gd + od == d, "offsets %zu %zu %zu do not lead back to the blocks", ob, oc, od);
    BT_CHECK(oc - ob == 3 * MiB && od - oc == 3 * MiB, "offsets %zu %zu %zu", ob, oc, od);
    BT_CHECK(bt_alloc_segment(c + 1, &ox) == NULL && ox == 7, "an address inside a block is not a block");
    /* free the ends first, then the middle: it must merge with both sides */
    bt_free(b); bt_free(d); bt_free(c);
    char *e = (char *)bt_alloc(cpu, 8 * MiB, NULL);
    bt_alloc_stats_t s2 = bt_alloc_stats(cpu);
    BT_CHECK(e == a, "coalesced block not reused");
    BT_CHECK(s2.n_system_allocs == s0.n_system_allocs, "coalesced alloc called the system");
    bt_free(e);
    /* small blocks are carved side by side from one 2 MiB segment */
    char *s = (char *)bt_alloc(cpu, 512, NULL), *t = (char *)bt_alloc(cpu, 512, NULL);
    bt_alloc_stats_t s3 = bt_alloc_stats(cpu);
    BT_CHECK(t == s + 512, "small split: %p then %p", (void *)s, (void *)t);
    BT_CHECK(s3.n_system_allocs == s2.n_system_allocs + 1, "two small allocs: %llu system allocs",
             (unsigned long long)(s3.n_system_allocs - s2.n_system_allocs));
    bt_free(t); bt_free(s);
    char *u = (char *)bt_alloc(cpu, 1 * MiB, NULL);   /* needs the two 512 B blocks merged back */
    BT_CHECK(u == s, "small coalesce: %p vs %p", (void *)u, (void *)s);
    BT_CHECK(bt_alloc_stats(cpu).n_system_allocs == s3.n_system_allocs, "small coalesce called the system");
    bt_free(u);
    fresh();
}

static void test_stats(void) {
    fresh();
    bt_alloc_stats_t s0 = bt_alloc_stats(cpu);
    BT_CHECK(s0.allocated == 0 && s0.requested == 0 && s0.reserved == 0, "not clean at start");
    void *a = bt_alloc(cpu, 1000, NULL);
    bt_alloc_stats_t s1 = bt_alloc_stats(cpu);
    BT_CHECK(s1.allocated == 1024, "allocated %zu", s1.allocated);
    BT_CHECK(s1.requested == 1000, "requested %zu", s1.requested);
    BT_CHECK(s1.reserved == 2 * MiB, "reserved %zu", s1.reserved);
    BT_CHECK(s1.peak_allocated == 1024, "peak %zu", s1.peak_allocated);
    BT_CHECK(s1.n_allocs == s0.n_allocs + 1, "n_allocs");
    BT_CHECK(s1.n_system_allocs == s0.n_system_allocs + 1, "n_system_allocs");
    void *b = bt_alloc(cpu, 3000, NULL);
    bt_free(a);
    bt_alloc_stats_t s2 = bt_alloc_stats(cpu);
    BT_CHECK(s2.allocated == 3072 && s2.requested == 3000, "after free: %zu %zu", s2.allocated, s2.requested);
    BT_CHECK(s2.peak_allocated == 4096, "peak %zu, expected 4096", s2.peak_allocated);
    bt_alloc_reset_peak(cpu);
    BT_CHECK(bt_alloc_stats(cpu).peak_allocated == 3072, "reset_peak");
    bt_free(b);
    bt_alloc_stats_t s3 = bt_alloc_stats(cpu);
    BT_CHECK(s3.allocated == 0 && s3.requested == 0, "nothing live: %zu %zu", s3.allocated, s3.requested);
    BT_CHECK(s3.reserved == 2 * MiB, "cache kept: reserved %zu", s3.reserved);
    bt_alloc_empty_cache(cpu);
    bt_alloc_stats_t s4 = bt_alloc_stats(cpu);
    BT_CHECK(s4.reserved == 0, "empty_cache left %zu reserved", s4.reserved);
    BT_CHECK(s4.n_system_frees == s3.n_system_frees + 1, "n_system_frees");
    BT_CHECK(s4.peak_reserved == 2 * MiB, "peak_reserved %zu", s4.peak_reserved);
    bt_alloc_print_stats(cpu);
    fresh();
}

static void test_oom(void) {
    fresh();
    bt_alloc_set_limit(cpu, 4 * MiB);
    /* a cached segment is given back to make room: no OOM */
    void *s = bt_alloc(cpu, 1000, NULL);
    bt_free(s);
    bt_alloc_stats_t s0 = bt_alloc_stats(cpu);
    void *a = bt_alloc(cpu, 3 * MiB, NULL);   /* a 4 MiB segment: 2 + 4 > 4 */
    bt_alloc_stats_t s1 = bt_alloc_stats(cpu);
    BT_CHECK(a != NULL, "empty-and-retry failed");
    BT_CHECK(s1.n_system_frees == s0.n_system_frees + 1, "the cached segment was not freed");
    BT_CHECK(s1.n_ooms == s0.n_ooms && s1.reserved == 4 * MiB, "ooms %llu reserved %zu",
             (unsigned long long)s1.n_ooms, s1.reserved);
    /* nothing left to give back: OOM */
    BT_EXPECT_ERROR(bt_alloc(cpu, 1000, NULL), "out of memory");
    BT_CHECK(bt_alloc_stats(cpu).n_ooms == s1.n_ooms + 1, "OOM not counted");
    void *n = bt_try_alloc(cpu, 1000, NULL);
    BT_CHECK(n == NULL, "try_alloc past the limit returned %p", n);
    BT_CHECK(bt_alloc_stats(cpu).n_ooms == s1.n_ooms + 2, "try_alloc OOM not counted");
    BT_EXPECT_ERROR(bt_alloc(cpu, SIZE_MAX, NULL), "out of memory");
    /* still works: the lock was released before the error */
    bt_free(a);
    void *b = bt_try_alloc(cpu, 1000, NULL);
    BT_CHECK(b != NULL, "allocator dead after OOM");
    BT_CHECK(bt_alloc_stats(cpu).reserved <= 4 * MiB, "limit exceeded");
    bt_free(b);
    bt_alloc_set_limit(cpu, 0);
    void *c = bt_alloc(cpu, 16 * MiB, NULL);
    BT_CHECK(c != NULL, "limit 0 must lift the cap");
    bt_free(c);
    fresh();
}

static void test_private_pool(void) {
    fresh();
    bt_alloc_pool_push(cpu, 7);
    char *a = (char *)bt_alloc(cpu, 1000, NULL);
    bt_alloc_pool_pop(cpu);
    bt_free(a);
    bt_alloc_stats_t s0 = bt_alloc_stats(cpu);
    char *b = (char *)bt_alloc(cpu, 1000, NULL);   /* the default pool must not see a's block */
    bt_alloc_stats_t s1 = bt_alloc_stats(cpu);
    BT_CHECK(b != a, "default pool reused a private block");
    BT_CHECK(s1.n_system_allocs == s0.n_system_allocs + 1, "default pool did not get its own segment");
    bt_free(b);
    bt_alloc_empty_cache(cpu);   /* leaves private pools alone */
    BT_CHECK(bt_alloc_stats(cpu).reserved == 2 * MiB, "empty_cache freed a private pool: %zu",
             bt_alloc_stats(cpu).reserved);
    bt_alloc_pool_push(cpu, 7);
    char *c = (char *)bt_alloc(cpu, 1000, NULL);
    bt_alloc_pool_pop(cpu);
    BT_CHECK(c == a, "private pool did not reuse its own block");
    bt_free(c);
    bt_alloc_pool_release(cpu, 7);
    BT_CHECK(bt_alloc_stats(cpu).reserved == 0, "release left %zu reserved", bt_alloc_stats(cpu).reserved);
    /* releasing with a block live: its segment goes back when the block is freed */
    bt_alloc_pool_push(cpu, 8);
    void *x = bt_alloc(cpu, 3 * MiB, NULL);
    bt_alloc_pool_pop(cpu);
    bt_alloc_pool_release(cpu, 8);
    bt_alloc_stats_t s2 = bt_alloc_stats(cpu);
    BT_CHECK(s2.reserved == 4 * MiB, "a live segment was freed: %zu", s2.reserved);
    bt_free(x);
    bt_alloc_stats_t s3 = bt_alloc_stats(cpu);
    BT_CHECK(s3.reserved == 0 && s3.n_system_frees == s2.n_system_frees + 1, "released segment kept");
    BT_EXPECT_ERROR(bt_alloc_pool_pop(cpu), "no pool pushed");
    BT_EXPECT_ERROR(bt_alloc_pool_push(cpu, 0), "id");
    fresh();
}

static void test_errors(void) {
    fresh();
    int local;
    BT_EXPECT_ERROR(bt_free(&local), "not allocated");
    void *a = bt_alloc(cpu, 100, NULL);
    bt_free(a);
    BT_EXPECT_ERROR(bt_free(a), "already freed");
    BT_EXPECT_ERROR(bt_alloc(bt_cuda_device(0), 100, NULL), "CUDA");
    BT_EXPECT_ERROR(bt_alloc(bt_cuda_device(BT_MAX_GPUS), 100, NULL), "invalid device");
    bt_error_fn fn; void *user;
    bt_get_error_handler(&fn, &user);
    BT_CHECK(fn == NULL, "default handler should be NULL");
    fresh();
}

/* random sizes: mostly small, some large; xorshift so the sequence is the same everywhere */
static uint64_t rng_next(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static size_t rand_size(uint64_t *s) {
    uint64_t r = rng_next(s);
    if (r % 16 == 0) return (size_t)(MiB + rng_next(s) % (3 * MiB));
    return (size_t)(rng_next(s) % (r % 4 == 0 ? 64 * 1024 : 2048));
}
/* all n bytes of p equal tag (memcmp of the block against itself shifted by one) */
static int pattern_ok(const unsigned char *p, size_t n, unsigned char tag) {
    return n == 0 || (p[0] == tag && memcmp(p, p + 1, n - 1) == 0);
}

typedef struct { unsigned char *p; size_t n; unsigned char tag; } live_t;
#define NLIVE 256

static int stress(uint64_t seed, int iters, int check_overlap, size_t *max_live) {
    live_t live[NLIVE];
    memset(live, 0, sizeof live);
    int bad = 0;
    *max_live = 0;
    for (int it = 0; it < iters; it++) {
        int i = (int)(rng_next(&seed) % NLIVE);
        if (live[i].p) {
            if (!pattern_ok(live[i].p, live[i].n, live[i].tag)) bad++;
            bt_free(live[i].p);
            live[i].p = NULL;
            continue;
        }
        size_t n = rand_size(&seed);
        unsigned char *p = (unsigned char *)bt_alloc(cpu, n, NULL);
        size_t sz = bt_alloc_size(p);
        if (sz < n || (uintptr_t)p % 64) bad++;
        if (check_overlap)
            for (int j = 0; j < NLIVE; j++)
                if (live[j].p && p < live[j].p + bt_alloc_size(live[j].p) && live[j].p < p + sz) bad++;
        live[i].p = p; live[i].n = n; live[i].tag = (unsigned char)(1 + it % 251);
        memset(p, live[i].tag, n);
        size_t total = 0;
        if (check_overlap) {
            for (int j = 0; j < NLIVE; j++) if (live[j].p) total += bt_alloc_size(live[j].p);
            if (total > *max_live) *max_live = total;
        }
    }
    for (int i = 0; i < NLIVE; i++) {
        if (!live[i].p) continue;
        if (!pattern_ok(live[i].p, live[i].n, live[i].tag)) bad++;
        bt_free(live[i].p);
    }
    return bad;
}

static int quick(void) { return getenv("BT_TEST_QUICK") != NULL; }

static void test_stress(void) {
    fresh();
    size_t max_live;
    int bad = stress(0x9E3779B97F4A7C15ull, quick() ? 3000 : 20000, 1, &max_live);
    bt_alloc_stats_t s = bt_alloc_stats(cpu);
    BT_CHECK(bad == 0, "%d corrupted, misaligned or overlapping blocks", bad);
    BT_CHECK(s.allocated == 0 && s.requested == 0, "leaked: allocated %zu requested %zu", s.allocated, s.requested);
    BT_CHECK(s.peak_allocated == max_live, "peak %zu, max live %zu", s.peak_allocated, max_live);
    BT_CHECK(s.n_system_allocs < s.n_allocs / 10, "caching barely worked: %llu system allocs for %llu allocs",
             (unsigned long long)s.n_system_allocs, (unsigned long long)s.n_allocs);
    bt_alloc_empty_cache(cpu);
    BT_CHECK(bt_alloc_stats(cpu).reserved == 0, "segments left after empty_cache: the pieces did not coalesce");
    fresh();
}

static void test_threads(void) {
    fresh();
    int bad = 0;
    #pragma omp parallel for reduction(+:bad)
    for (int t = 0; t < 4; t++) {
        size_t max_live;
        bad += stress(1234567 + 7919 * (uint64_t)t, quick() ? 1000 : 5000, 0, &max_live);
    }
    bt_alloc_stats_t s = bt_alloc_stats(cpu);
    BT_CHECK(bad == 0, "%d corrupted blocks across threads", bad);
    BT_CHECK(s.allocated == 0, "leaked %zu across threads", s.allocated);
    fresh();
    BT_CHECK(bt_alloc_stats(cpu).reserved == 0, "segments left after threads");
}

int main(void) {
    cpu = bt_cpu();
    (void)bt_test_relerr;   /* the harness helper, unused here */
    BT_RUN(test_reuse);
    BT_RUN(test_zero_and_size);
    BT_RUN(test_split_coalesce);
    BT_RUN(test_stats);
    BT_RUN(test_oom);
    BT_RUN(test_private_pool);
    BT_RUN(test_errors);
    BT_RUN(test_stress);
    BT_RUN(test_threads);
    return bt_test_summary("test_alloc");
}
