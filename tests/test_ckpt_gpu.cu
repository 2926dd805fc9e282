/* test_ckpt_gpu.cu - bt_ckpt.h on a GPU: the asynchronous snapshot of GPU tensors (copies on
   their own stream behind the compute stream's work, the device-side fence, the host stall
   measured and printed), bit-exact reloads into GPU tensors (the pinned double-buffered path,
   padded rows, a transposed destination), and the synchronous writer on GPU tensors and views.
   Skips without a GPU. */
#define _POSIX_C_SOURCE 200809L
#include "bt_ckpt.h"
#include "tests/bt_test.h"
#include "tests/bt_test_files.h"

#include <stdlib.h>
#include <unistd.h>

static int have_gpu(void) { return bt_k_device_count() > 0; }

/* t's bytes on the host (malloc'd) */
static void *host_bytes(bt_tensor *t) {
    size_t n = (size_t)bt_numel(t) * bt_dtype_size(t->dtype);
    void *h = malloc(n ? n : 1);
    bt_to_host(t, h, t->dtype);
    return h;
}

static void test_gpu_async_snapshot(void) {
    const int64_t n = 48 << 20;                     /* 192 MB of f32 + 96 MB of bf16 */
    bt_device g = bt_cuda_device(0);
    bt_tensor *t[2];
    const char *names[2] = {"params", "m"};
    void *want[2];
    char dir[300], path[400];
    bt_ckpt_saver *s;
    bt_ckpt_saver_stats st;
    double stall[3];
    int k, r;
    if (!have_gpu()) { BT_SKIP("no GPU"); return; }
    snprintf(dir, sizeof dir, "%s/async", bt_test_dir);
    t[0] = bt_randn(bt_shape1(n), BT_F32, g, 1);
    t[1] = bt_randn(bt_shape2(n / 1024, 1024), BT_BF16, g, 2);
    s = bt_ckpt_saver_new(dir, 2);
    BT_CHECK(s != NULL, "saver: %s", bt_ckpt_error());
    if (!s) return;
    for (r = 0; r < 3; r++) {
        double t0;
        bt_normal_(t[0], 0, 1, 10 + r, 0);           /* queued on the compute stream, not yet run */
        bt_normal_(t[1], 0, 1, 20 + r, 0);
        for (k = 0; k < 2; k++) want[k] = NULL;
        BT_CHECK(!bt_ckpt_saver_wait(s), "previous save: %s", bt_ckpt_error());   /* the stall below is the copy's enqueue */
        t0 = bt_test_now_ms();
        BT_CHECK(!bt_ckpt_saver_snapshot(s, 100 + r, t, names, 2, NULL), "snapshot: %s", bt_ckpt_error());
        stall[r] = bt_test_now_ms() - t0;
        BT_CHECK(bt_ckpt_saver_event(s) != NULL, "a copy-done event");
        bt_ckpt_saver_fence(s, NULL);               /* the "optimizer step" below waits for the copies */
        for (k = 0; k < 2; k++) bt_fill_(t[k], 5.0);
        /* what the file must hold: the values before the fill */
        {
            bt_tensor *c0 = bt_randn(bt_shape1(n), BT_F32, g, 1), *c1 = bt_randn(bt_shape2(n / 1024, 1024), BT_BF16, g, 2);
            bt_normal_(c0, 0, 1, 10 + r, 0); bt_normal_(c1, 0, 1, 20 + r, 0);
            want[0] = host_bytes(c0); want[1] = host_bytes(c1);
            bt_release(c0); bt_release(c1);
        }
        BT_CHECK(!bt_ckpt_saver_wait(s), "save %d: %s", r, bt_ckpt_error());
        bt_ckpt_path(dir, 100 + r, path, sizeof path);
        {
            bt_ckpt_file *f = bt_ckpt_open(path, BT_CKPT_VERIFY | BT_CKPT_REQUIRE_CHECKSUMS);
            void *got = malloc((size_t)n * 4);
            BT_CHECK(f != NULL, "%s", bt_ckpt_error());
            BT_CHECK(f && !bt_ckpt_read(f, "params", got, (size_t)n * 4) && !memcmp(got, want[0], (size_t)n * 4),
                     "round %d: the file holds the values from before the fenced overwrite", r);
            BT_CHECK(f && !bt_ckpt_read(f, "m", got, (size_t)n * 2) && !memcmp(got, want[1], (size_t)n * 2), "round %d: bf16", r);
            if (f && r == 2) {                       /* reload into GPU tensors: pinned windows, bit-exact */
                bt_tensor *back = bt_zeros(bt_shape1(n), BT_F32, g), *back1 = bt_zeros(bt_shape2(n / 1024, 1024), BT_BF16, g);
                void *h0, *h1;
                double t1 = bt_test_now_ms();
                BT_CHECK(!bt_ckpt_load(f, "params", back, 0) && !bt_ckpt_load(f, "m", back1, 0), "load to GPU: %s", bt_ckpt_error());
                bt_synchronize(g);
                fprintf(stderr, "info: loaded %.0f MB into the GPU in %.1f ms (page cache warm)\n", n * 6 / 1e6, bt_test_now_ms() - t1);
                h0 = host_bytes(back); h1 = host_bytes(back1);
                BT_CHECK(!memcmp(h0, want[0], (size_t)n * 4) && !memcmp(h1, want[1], (size_t)n * 2), "GPU reload bit-exact");
                free(h0); free(h1);
                bt_release(back); bt_release(back1);
            }
            free(got);
            bt_ckpt_close(f);
        }
        for (k = 0; k < 2; k++) free(want[k]);
    }
    bt_ckpt_saver_get_stats(s, &st);
    fprintf(stderr, "info: GPU snapshot of %.0f MB: host stall %.2f / %.2f / %.2f ms (the first allocates the pinned staging), "
            "save %.0f ms (checksums %.0f, write %.0f), %.0f MB/s\n", st.last_bytes / 1e6, stall[0], stall[1], stall[2],
            st.last_save_ms, st.last_checksum_ms, st.last_write_ms, st.last_mb_per_s);
    BT_CHECK(stall[2] < 50, "host stall of a warm snapshot %.2f ms (target < 50)", stall[2]);
    BT_CHECK(st.saves == 3 && st.removed == 1, "3 saves, rotation kept 2 (%lld removed)", (long long)st.removed);
    BT_CHECK(!bt_ckpt_saver_free(s), "free");
    bt_release(t[0]); bt_release(t[1]);
}

static void test_gpu_sync_and_views(void) {
    bt_device g = bt_cuda_device(0);
    bt_tensor *w, *wt, *emb;
    bt_ckpt_writer *wr;
    bt_ckpt_file *f;
    char path[400];
    void *hw, *hemb;
    if (!have_gpu()) { BT_SKIP("no GPU"); return; }
    snprintf(path, sizeof path, "%s/sync.safetensors", bt_test_dir);
    w = bt_randn(bt_shape2(96, 32), BT_F32, g, 3);          /* ours: [out, in] */
    wt = bt_transpose(w, 0, 1);
    emb = bt_randn(bt_shape2(136, 32), BT_F32, g, 4);       /* padded vocabulary: 130 real rows */
    wr = bt_ckpt_writer_new();
    BT_CHECK(!bt_ckpt_writer_add_tensor(wr, "w", w, 0, 0), "add a GPU tensor");
    BT_CHECK(!bt_ckpt_writer_add_tensor(wr, "conv1d", w, BT_CKPT_TRANSPOSE, 0), "add its transpose (HF Conv1D)");
    BT_CHECK(!bt_ckpt_writer_add_tensor(wr, "view", wt, 0, 0), "add a strided GPU view");
    BT_CHECK(!bt_ckpt_writer_add_tensor(wr, "wte", emb, 0, 130), "add the real rows");
    BT_CHECK(!bt_ckpt_writer_save(wr, path), "save: %s", bt_ckpt_error());
    bt_ckpt_writer_free(wr);
    hw = host_bytes(w); hemb = host_bytes(emb);
    f = bt_ckpt_open(path, BT_CKPT_VERIFY);
    BT_CHECK(f != NULL, "%s", bt_ckpt_error());
    if (f) {
        bt_tensor *a = bt_zeros(bt_shape2(96, 32), BT_F32, g), *b = bt_zeros(bt_shape2(96, 32), BT_F32, g);
        bt_tensor *e = bt_full(bt_shape2(136, 32), 3.0, BT_F32, g), *dbl = bt_zeros(bt_shape2(96, 32), BT_F64, g);
        void *ha, *hb, *he;
        int i;
        BT_CHECK(!bt_ckpt_load(f, "w", a, 0), "load: %s", bt_ckpt_error());
        BT_CHECK(!bt_ckpt_load(f, "conv1d", b, BT_CKPT_TRANSPOSE), "load transposed: %s", bt_ckpt_error());
        BT_CHECK(!bt_ckpt_load(f, "wte", e, BT_CKPT_PAD_ROWS), "load padded: %s", bt_ckpt_error());
        BT_CHECK(!bt_ckpt_load(f, "w", dbl, BT_CKPT_CONVERT), "load converted: %s", bt_ckpt_error());
        ha = host_bytes(a); hb = host_bytes(b); he = host_bytes(e);
        BT_CHECK(!memcmp(ha, hw, 96 * 32 * 4) && !memcmp(hb, hw, 96 * 32 * 4), "GPU round trips bit-exact");
        BT_CHECK(!memcmp(he, hemb, 130 * 32 * 4), "real rows");
        for (i = 130 * 32; i < 136 * 32; i++) BT_CHECK(((float *)he)[i] == 0, "padding row element %d is zero", i);
        {
            bt_tensor *v = bt_zeros(bt_shape2(32, 96), BT_F32, g);
            void *hv;
            BT_CHECK(!bt_ckpt_load(f, "view", v, 0), "the strided view's file");
            hv = host_bytes(v);
            BT_CHECK(((float *)hv)[5 * 96 + 7] == ((float *)hw)[7 * 32 + 5], "view element transposed");
            free(hv); bt_release(v);
        }
        free(ha); free(hb); free(he);
        bt_release(a); bt_release(b); bt_release(e); bt_release(dbl);
    }
    bt_ckpt_close(f);
    free(hw); free(hemb);
    bt_release(wt); bt_release(w); bt_release(emb);
}

int main(void) {
    if (bt_test_dir_make("test_ckpt_gpu")) return 1;
    BT_RUN(test_gpu_async_snapshot);
    BT_RUN(test_gpu_sync_and_views);
    bt_test_dir_remove();
    return bt_test_summary("test_ckpt_gpu");
}
