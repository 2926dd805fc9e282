/* test_ops_gpu.cu - every op of bt_tensor.h on every GPU through the public API, and the device,
   stream, event and hook API on the GPU.

   (0) The device queries; bt_get, bt_item, bt_from_blob over device memory, on every GPU.
   (1) The op table of tests/op_cases.h (a case per op, forward and backward) on cuda:0 in f32,
       bf16, f16, f64 and f32 with TF32 matmuls, each case against the same case run on the CPU in
       f64 from the same rounded inputs (tolerances and their reasons in op_cases.h). The f64 run
       skips, and names, the cases whose kernels have no f64 (softmax, layernorm, rmsnorm, embedding,
       cross-entropy, attention: OC_NO_GPU_F64), after checking that each refuses f64 with an
       error that says so.
   (2) With two GPUs or more: the table on every other GPU while the current CUDA device stays 0,
       and on cuda:0 while cuda:1 is current (each op must run on its tensors' device: the device
       guard); the current device is checked after every case. The device-move and copy_ cases
       then move between two GPUs.
   (3) Streams and events: the stream stack; the table on two pushed streams; two streams that
       consume one producer's output and a third that waits for both (events, no device sync);
       bt_to_host_async into pinned memory on a side stream with an event.
   (4) Hooks: a gradient hook records an event on the compute stream, a side stream waits for it
       and copies the gradient (the copy equals the final gradient); bt_set_grad_hooks_enabled(0)
       holds the hooks back over a micro-batch while gradients accumulate; a removed hook is gone.
   (5) With two GPUs: bt_copy_ between strided views on different GPUs, autograd across them.
   Without a GPU every test skips; without a second GPU those of (2) and (5) skip ("needs 2 GPUs").
   BT_TEST_QUICK=1 runs the table in f32 and bf16 only; BT_TEST_VERBOSE=1 prints every comparison.
   Every run prints an "info:" line with its worst error relative to its tolerance. */
#include "bt_autograd.h"
#include "tests/bt_test.h"
#include "tests/op_cases.h"
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
/* BT_EXPECT_ERROR's and oc_run_guarded's setjmp: nothing they read after a longjmp is written
   after the setjmp, so gcc's -Wclobbered warning is a false positive */
#pragma GCC diagnostic ignored "-Wclobbered"

#define CPU bt_cpu()
static int g_ndev = -1;
static int ndev(void) {
    if (g_ndev < 0) g_ndev = bt_cuda_device_count();
    return g_ndev;
}
#define NEED_GPUS(n) do { if (ndev() < (n)) { \
    if ((n) == 1) BT_SKIP("no CUDA device"); else BT_SKIP("needs %d GPUs, %d present", (n), ndev()); return; } } while (0)
static int cur_device(void) {
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess) { (void)cudaGetLastError(); return -1; }
    return d;
}
static void set_device(int d) { BT_CHECK(cudaSetDevice(d) == cudaSuccess, "cudaSetDevice(%d)", d); }
/* a tensor drawn on the CPU in f32 (so every device and dtype sees the same values), as dt on dev */
static bt_tensor *drawn(bt_shape s, bt_dtype dt, bt_device dev, uint64_t seed) {
    return bt_to(bt_cast(bt_randn(s, BT_F32, CPU, seed), dt), dev);
}

/* =============================================================================================
   (1), (2) the op table
   ============================================================================================= */
/* the CPU f64 references, once per case and input dtype */
static oc_result g_ref[4][OC_MAX_CASES];
static unsigned char g_ref_state[4][OC_MAX_CASES];     /* 0 not made, 1 made, 2 failed */
static int qslot(bt_dtype q) { return q == BT_F32 ? 0 : q == BT_BF16 ? 1 : q == BT_F16 ? 2 : 3; }
static const oc_result *ref_of(int idx, bt_dtype qdt) {
    int s = qslot(qdt);
    if (!g_ref_state[s][idx]) {
        g_ref_state[s][idx] = oc_run_guarded(idx, CPU, CPU, BT_F64, qdt, &g_ref[s][idx]) ? 2 : 1;
        if (g_ref_state[s][idx] == 2) {
            BT_CHECK(0, "the reference of %s (%s inputs): error: %s", oc_cases[idx].name, bt_dtype_name(qdt), oc_error_msg);
            return NULL;
        }
    }
    BT_CHECK(g_ref_state[s][idx] == 1, "the reference of %s (%s inputs) failed earlier", oc_cases[idx].name, bt_dtype_name(qdt));
    return g_ref_state[s][idx] == 1 ? &g_ref[s][idx] : NULL;
}
static void free_refs(void) {
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < OC_MAX_CASES; i++) if (g_ref_state[s][i] == 1) { oc_result_free(&g_ref[s][i]); g_ref_state[s][i] = 0; }
}

/* The table on cuda:d in dt (tf32: f32 data, BT_MATMUL_TF32, the cases that multiply matrices),
   with cuda:`home` the current device throughout; dev2 (the second device of the device-move
   cases) is the next GPU, or the CPU on a one-GPU machine. */
static void run_table(int d, bt_dtype dt, int tf32, int home, const char *note) {
    oc_build_table();
    bt_device dev = bt_cuda_device(d), dev2 = ndev() > 1 ? bt_cuda_device((d + 1) % ndev()) : CPU;
    char where[64], skipped[256] = "";
    snprintf(where, sizeof where, "cuda:%d %s%s", d, tf32 ? "tf32" : bt_dtype_name(dt), note);
    oc_stats st;
    memset(&st, 0, sizeof st);
    set_device(home);
    for (int i = 0; i < oc_ncases; i++) {
        const oc_case *k = &oc_cases[i];
        if (tf32 && !(k->flags & OC_TF32)) continue;
        if (dt == BT_F64 && (k->flags & OC_NO_GPU_F64)) {
            /* skipped, named below, and the reason checked: the op refuses f64 with an error
               naming it (not a crash, not a wrong result). The error leaves the case's
               temporaries behind (device memory, not reclaimed) and maybe dev current. */
            oc_result r;
            int refused = oc_run_guarded(i, dev, dev2, dt, dt, &r);
            if (!refused) oc_result_free(&r);
            BT_CHECK(refused && strstr(oc_error_msg, "f64"),
                     "%s %s: expected an error naming f64 (if its kernels take f64 now, drop its OC_NO_GPU_F64), got %s", where,
                     k->name, refused ? oc_error_msg : "no error");
            set_device(home);
            char fam[32];
            snprintf(fam, sizeof fam, "%.*s", (int)strcspn(k->name, " :"), k->name);
            if (!strstr(skipped, fam) && strlen(skipped) + strlen(fam) + 3 < sizeof skipped)
                snprintf(skipped + strlen(skipped), sizeof skipped - strlen(skipped), "%s%s", skipped[0] ? ", " : "", fam);
            st.skipped++;
            continue;
        }
        const oc_result *ref = ref_of(i, dt);
        if (!ref) { st.failed++; continue; }
        if (tf32) bt_set_matmul_precision(BT_MATMUL_TF32);
        oc_check(where, i, dev, dev2, dt, tf32, ref, &st);
        bt_set_matmul_precision(BT_MATMUL_FP32);
        int cur = cur_device();
        if (cur != home) {
            BT_CHECK(0, "%s %s: the current device is %d afterwards, not %d (device guard)", where, k->name, cur, home);
            set_device(home);
        }
    }
    oc_report(where, &st);
    if (st.skipped) printf("info: %-34s %d cases skipped: no f64 kernel for %s\n", where, st.skipped, skipped);
}
static void table_on(int d, int home, const char *note) {
    const bt_dtype dts[4] = {BT_F32, BT_BF16, BT_F16, BT_F64};
    for (int j = 0; j < (bt_test_quick() ? 2 : 4); j++) run_table(d, dts[j], 0, home, note);
    if (!bt_test_quick()) run_table(d, BT_F32, 1, home, note);
}
static void test_table_cuda0(void) {
    NEED_GPUS(1);
    table_on(0, 0, "");
}
/* every other GPU while cuda:0 stays current */
static void test_table_other_gpus(void) {
    NEED_GPUS(2);
    for (int d = 1; d < ndev(); d++) table_on(d, 0, " (cuda:0 current)");
    BT_CHECK(cur_device() == 0, "the current device is %d, not 0", cur_device());
}
/* and cuda:0 while cuda:1 is current */
static void test_table_cuda0_from_cuda1(void) {
    NEED_GPUS(2);
    run_table(0, BT_F32, 0, 1, " (cuda:1 current)");
    run_table(0, BT_BF16, 0, 1, " (cuda:1 current)");
    BT_CHECK(cur_device() == 1, "the current device is %d, not 1", cur_device());
    set_device(0);
}

/* the device queries; errors for a device that does not exist */
static void test_devices(void) {
    NEED_GPUS(1);
    int n = 0;
    BT_CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n == ndev(), "bt_cuda_device_count %d, CUDA %d", ndev(), n);
    set_device(0);
    for (int d = 0; d < ndev(); d++) {
        bt_device dev = bt_cuda_device(d);
        size_t fr = 0, tot = 0;
        const char *name = bt_device_name(dev);
        bt_device_memory(dev, &fr, &tot);
        BT_CHECK(name && name[0] && strcmp(name, "?") && strcmp(name, "cpu"), "cuda:%d is named \"%s\"", d, name ? name : "(null)");
        BT_CHECK(tot > 0 && fr <= tot, "cuda:%d memory: %zu free of %zu", d, fr, tot);
        BT_CHECK(bt_stream_current(dev) != NULL, "cuda:%d has no current stream", d);
        printf("info: cuda:%d %s, %.1f GiB\n", d, name, (double)tot / (1 << 30));
    }
    BT_CHECK(!strcmp(bt_device_name(CPU), "cpu") && bt_stream_current(CPU) == NULL, "the CPU's name or stream");
    BT_CHECK(cur_device() == 0, "the device queries left cuda:%d current", cur_device());
    BT_EXPECT_ERROR(bt_stream_create(bt_cuda_device(ndev())), "does not exist");
    BT_EXPECT_ERROR(bt_stream_pop(bt_cuda_device(0)), "no stream pushed");
}

/* bt_get, bt_item and bt_from_blob (over device memory) on every GPU, cuda:0 current */
static void test_get_item_blob(void) {
    NEED_GPUS(1);
    set_device(0);
    for (int d = 0; d < ndev(); d++) {
        bt_device dev = bt_cuda_device(d);
        bt_scope_begin();
        bt_tensor *x = drawn(bt_shape2(5, 7), BT_BF16, dev, 2050 + d), *xt = bt_transpose(x, 0, 1);
        double *h = bt_test_host(x), want = 0, mag = 0;
        int ok = 1;
        for (int64_t i = 0; i < 5; i++)
            for (int64_t j = 0; j < 7; j++) {
                int64_t ix[2] = {i, j}, it[2] = {j, i};
                ok &= bt_get(x, ix) == h[i * 7 + j] && bt_get(xt, it) == h[i * 7 + j];
                want += h[i * 7 + j]; mag += fabs(h[i * 7 + j]);
            }
        BT_CHECK(ok, "cuda:%d: bt_get differs from bt_to_host", d);
        double got = bt_item(bt_sum(bt_cast(x, BT_F64), NULL, 0, 0));      /* 35 terms in f64 */
        BT_CHECK(fabs(got - want) <= BT_TOL_F64 * mag, "cuda:%d: bt_item of a sum %.17g, want %.17g", d, got, want);
        bt_tensor *blob = bt_from_blob(bt_data_ptr(bt_narrow(x, 0, 2, 3)), bt_shape2(3, 7), BT_BF16, dev);
        double *hb = bt_test_host(blob);
        BT_CHECK(!memcmp(hb, h + 2 * 7, sizeof(double) * 21), "cuda:%d: bt_from_blob over device memory reads other values", d);
        free(h); free(hb);
        bt_scope_end();
        BT_CHECK(cur_device() == 0, "cuda:%d's get/item left cuda:%d current", d, cur_device());
    }
}

/* =============================================================================================
   (3) streams and events
   ============================================================================================= */
/* the stack of current streams; the table in f32, its cases on two pushed streams in turn */
static void test_streams_table(void) {
    NEED_GPUS(1);
    oc_build_table();
    set_device(0);
    bt_device dev = bt_cuda_device(0), dev2 = ndev() > 1 ? bt_cuda_device(1) : CPU;
    void *s0 = bt_stream_current(dev), *s[2] = {bt_stream_create(dev), bt_stream_create(dev)};
    BT_CHECK(s0 && s[0] && s[1] && s[0] != s0 && s[1] != s[0], "streams %p %p %p", s0, s[0], s[1]);
    bt_stream_push(dev, s[0]);
    BT_CHECK(bt_stream_current(dev) == s[0], "push: not current");
    bt_stream_push(dev, s[1]);
    BT_CHECK(bt_stream_current(dev) == s[1], "nested push: not current");
    bt_stream_pop(dev);
    BT_CHECK(bt_stream_current(dev) == s[0], "pop: the outer stream is not current again");
    bt_stream_pop(dev);
    BT_CHECK(bt_stream_current(dev) == s0, "pop: the device's own stream is not current again");
    oc_stats st;
    memset(&st, 0, sizeof st);
    for (int i = 0; i < oc_ncases; i++) {
        const oc_result *ref = ref_of(i, BT_F32);
        if (!ref) { st.failed++; continue; }
        bt_stream_push(dev, s[i & 1]);
        oc_check("cuda:0 f32 on 2 streams", i, dev, dev2, BT_F32, 0, ref, &st);
        BT_CHECK(bt_stream_current(dev) == s[i & 1], "%s changed the current stream", oc_cases[i].name);
        bt_stream_pop(dev);
    }
    oc_report("cuda:0 f32 on 2 streams", &st);
    BT_CHECK(bt_stream_current(dev) == s0, "the stream stack is not back to the device's own stream");
    bt_stream_destroy(dev, s[0]);
    bt_stream_destroy(dev, s[1]);
}

/* One producer, two consumers, one combiner, ordered by events only: x, w are made on the
   device's stream s0; s1 computes tanh(x w), s2 softmax of a slice of x, each after waiting for
   x and w; s0 waits for both and adds them. Checked against the CPU in f64. */
static void test_streams_events(void) {
    NEED_GPUS(1);
    set_device(0);
    bt_device dev = bt_cuda_device(0);
    void *s0 = bt_stream_current(dev), *s1 = bt_stream_create(dev), *s2 = bt_stream_create(dev);
    void *e0 = bt_event_create(dev), *e1 = bt_event_create(dev), *e2 = bt_event_create(dev);
    bt_scope_begin();
    bt_tensor *x = drawn(bt_shape2(512, 384), BT_F32, dev, 2101), *w = drawn(bt_shape2(384, 256), BT_F32, dev, 2102);
    bt_event_record(e0, s0);
    bt_stream_wait_event(s1, e0);
    bt_stream_push(dev, s1);
    bt_tensor *y1 = bt_tanh(bt_matmul(x, w));
    bt_event_record(e1, s1);
    bt_stream_pop(dev);
    bt_stream_wait_event(s2, e0);
    bt_stream_push(dev, s2);
    bt_tensor *y2 = bt_softmax(bt_narrow(x, 1, 64, 256));
    bt_event_record(e2, s2);
    bt_stream_pop(dev);
    bt_stream_wait_event(s0, e1);
    bt_stream_wait_event(s0, e2);
    bt_tensor *z = bt_add(y1, y2);
    double *zh = bt_test_host(z);                     /* syncs s0 only, which waited for e1 and e2 */
    BT_CHECK(bt_event_done(e1) && bt_event_done(e2), "s0's result arrived before the events it waited for completed");
    bt_tensor *xc = bt_cast(bt_to(x, CPU), BT_F64), *wc = bt_cast(bt_to(w, CPU), BT_F64);
    double *zr = bt_test_host(bt_add(bt_tanh(bt_matmul(xc, wc)), bt_softmax(bt_narrow(xc, 1, 64, 256))));
    double e = bt_test_relerr(zh, zr, 512 * 256);
    BT_CHECK(e < BT_TOL_F32, "three streams ordered by events: rel err %.3g", e);
    free(zh); free(zr);
    bt_synchronize(dev);
    bt_scope_end();
    bt_event_destroy(e0); bt_event_destroy(e1); bt_event_destroy(e2);
    bt_stream_destroy(dev, s1);
    bt_stream_destroy(dev, s2);
}

/* bt_to_host_async: into pinned memory on a side stream with an event (f32 as is, and a strided
   bf16 view converted to f64 on the side stream), on the current stream (stream NULL), and from
   a CPU tensor (copied at once). The results equal bt_to_host's bit for bit, and the CPU's. */
static void test_to_host_async(void) {
    NEED_GPUS(1);
    set_device(0);
    bt_device dev = bt_cuda_device(0);
    const int64_t R = 333, C = 129, n = R * C;
    void *side = bt_stream_create(dev), *ev[3] = {bt_event_create(dev), bt_event_create(dev), bt_event_create(dev)};
    float *pin = (float *)bt_alloc(bt_pinned_host(), sizeof(float) * n, NULL);
    float *pin_cur = (float *)bt_alloc(bt_pinned_host(), sizeof(float) * n, NULL);
    double *pin64 = (double *)bt_alloc(bt_pinned_host(), sizeof(double) * n, NULL);
    float *sync = (float *)malloc(sizeof(float) * n), *fromcpu = (float *)malloc(sizeof(float) * n);
    double *sync64 = (double *)malloc(sizeof(double) * n);
    bt_scope_begin();
    bt_tensor *x = drawn(bt_shape2(R, 65), BT_F32, dev, 2201), *w = drawn(bt_shape2(65, C), BT_F32, dev, 2202);
    bt_tensor *y = bt_tanh(bt_matmul(x, w));                    /* queued on the compute stream */
    bt_tensor *yb = bt_transpose(bt_cast(y, BT_BF16), 0, 1);    /* [C, R], strided */
    bt_to_host_async(y, pin, BT_F32, side, ev[0]);
    bt_to_host_async(yb, pin64, BT_F64, side, ev[1]);
    bt_to_host_async(y, pin_cur, BT_F32, NULL, ev[2]);
    for (int j = 0; j < 3; j++) bt_event_synchronize(ev[j]);
    BT_CHECK(bt_event_done(ev[0]) && bt_event_done(ev[1]) && bt_event_done(ev[2]), "an event is not done after its synchronize");
    bt_to_host(y, sync, BT_F32);
    bt_to_host(yb, sync64, BT_F64);
    BT_CHECK(!memcmp(pin, sync, sizeof(float) * n), "async copy on a side stream differs from bt_to_host");
    BT_CHECK(!memcmp(pin_cur, sync, sizeof(float) * n), "async copy on the current stream differs from bt_to_host");
    BT_CHECK(!memcmp(pin64, sync64, sizeof(double) * n), "async converted copy of a strided bf16 view differs from bt_to_host");
    bt_tensor *xc = bt_cast(bt_to(x, CPU), BT_F64), *wc = bt_cast(bt_to(w, CPU), BT_F64);
    double *want = bt_test_host(bt_tanh(bt_matmul(xc, wc))), *got = (double *)malloc(sizeof(double) * n);
    for (int64_t i = 0; i < n; i++) got[i] = pin[i];
    double e = bt_test_relerr(got, want, n);
    BT_CHECK(e < BT_TOL_F32, "tanh(x w) copied asynchronously: rel err %.3g against the CPU", e);
    bt_to_host_async(bt_to(y, CPU), fromcpu, BT_F32, side, NULL);
    BT_CHECK(!memcmp(fromcpu, sync, sizeof(float) * n), "async copy of a CPU tensor");
    free(want); free(got);
    bt_scope_end();
    bt_free(pin); bt_free(pin_cur); bt_free(pin64);
    free(sync); free(sync64); free(fromcpu);
    for (int j = 0; j < 3; j++) bt_event_destroy(ev[j]);
    bt_stream_destroy(dev, side);
}

/* =============================================================================================
   (4) hooks
   ============================================================================================= */
/* A hook that hands the final gradient to a side stream: an event on the compute stream, the
   side stream waits for it and copies the gradient into buf. */
typedef struct { bt_device dev; void *side, *ready; bt_tensor *leaf, *buf; int calls, wrong_leaf; } grad_copy;
static void copy_grad_hook(bt_tensor *leaf, void *user) {
    grad_copy *h = (grad_copy *)user;
    h->calls++;
    h->wrong_leaf += leaf != h->leaf;
    bt_event_record(h->ready, bt_stream_current(h->dev));
    bt_stream_wait_event(h->side, h->ready);
    bt_stream_push(h->dev, h->side);
    bt_copy_(h->buf, leaf->grad);
    bt_stream_pop(h->dev);
}
enum { HB = 96, HC = 160 };
/* one micro-batch: y = tanh(x w0 + b) w + tanh(x w0 + b) w^T, backward seeded with a random g.
   w is used twice by the last layer, so its hook fires while the first layer's backward (w0, b)
   is still to run; w0 and b are final last. */
static void micro_batch(bt_tensor **p, bt_device dev, bt_dtype dt, uint64_t seed) {
    bt_scope_begin();
    bt_tensor *x = drawn(bt_shape2(HB, HC), dt, dev, seed);
    bt_tensor *h = bt_tanh(bt_add(bt_matmul(x, p[0]), p[1]));
    bt_tensor *y = bt_add(bt_matmul(h, p[2]), bt_matmul_t(h, p[2], 0, 1));
    bt_backward_with(y, drawn(bt_shape2(HB, HC), dt, dev, seed + 1));
    bt_scope_end();
}
/* the leaves w0 [HC, HC], b [HC], w [HC, HC] as dt on dev, owned by the caller */
static void make_leaves(bt_tensor **p, bt_device dev, bt_dtype dt) {
    const double sd[3] = {0.08, 1.0, 0.08};
    for (int j = 0; j < 3; j++) {
        bt_scope_begin();
        bt_shape s = j == 1 ? bt_shape1(HC) : bt_shape2(HC, HC);
        p[j] = bt_keep(bt_to(bt_cast(bt_scale(bt_randn(s, BT_F32, CPU, 2300 + j), sd[j]), dt), dev));
        bt_scope_end();
        bt_set_requires_grad(p[j], 1);
    }
}
static void test_hook_event(void) {
    NEED_GPUS(1);
    set_device(0);
    bt_device dev = bt_cuda_device(0);
    void *side = bt_stream_create(dev), *done = bt_event_create(dev);
    bt_tensor *p[3], *r[3];
    make_leaves(p, dev, BT_F32);
    make_leaves(r, CPU, BT_F64);                          /* the reference, the same values */
    grad_copy hk[3];
    bt_hook *handle[3];
    for (int j = 0; j < 3; j++) {
        bt_scope_begin();
        bt_tensor *buf = bt_keep(bt_zeros(bt_shape_of(p[j]), BT_F32, dev));
        bt_scope_end();
        grad_copy g = {dev, side, bt_event_create(dev), p[j], buf, 0, 0};
        hk[j] = g;
    }
    for (int j = 0; j < 3; j++) handle[j] = bt_register_grad_hook(p[j], copy_grad_hook, &hk[j]);
    /* micro-batch 1, no sync: the hooks are held back, the gradients accumulate */
    int was = bt_set_grad_hooks_enabled(0);
    BT_CHECK(was == 1, "hooks were not enabled to begin with");
    micro_batch(p, dev, BT_F32, 2310);
    micro_batch(r, CPU, BT_F64, 2310);
    BT_CHECK(hk[0].calls + hk[1].calls + hk[2].calls == 0, "hooks fired while held back: %d %d %d", hk[0].calls, hk[1].calls, hk[2].calls);
    BT_CHECK(p[0]->grad && p[1]->grad && p[2]->grad, "gradients did not accumulate while the hooks were held back");
    /* micro-batch 2: each hook fires once, when its leaf's gradient is final */
    BT_CHECK(bt_set_grad_hooks_enabled(1) == 0, "bt_set_grad_hooks_enabled does not return the previous setting");
    micro_batch(p, dev, BT_F32, 2320);
    micro_batch(r, CPU, BT_F64, 2320);
    for (int j = 0; j < 3; j++)
        BT_CHECK(hk[j].calls == 1 && !hk[j].wrong_leaf, "leaf %d: hook fired %d times (%d with another leaf)", j, hk[j].calls, hk[j].wrong_leaf);
    bt_event_record(done, side);
    bt_event_synchronize(done);
    for (int j = 0; j < 3; j++) {
        int64_t n = bt_numel(p[j]);
        double *copy = bt_test_host(hk[j].buf), *fin = bt_test_host(p[j]->grad), *want = bt_test_host(r[j]->grad);
        BT_CHECK(!memcmp(copy, fin, sizeof(double) * (size_t)n), "leaf %d: the side stream's copy differs from the final gradient", j);
        double e = bt_test_relerr(fin, want, n);
        BT_CHECK(e < BT_TOL_F32, "leaf %d: gradient of two micro-batches, rel err %.3g against the CPU", j, e);
        free(copy); free(fin); free(want);
    }
    /* a removed hook is gone; the others still fire */
    bt_remove_grad_hook(handle[2]);
    micro_batch(p, dev, BT_F32, 2330);
    BT_CHECK(hk[2].calls == 1 && hk[0].calls == 2 && hk[1].calls == 2, "after removing w's hook: calls %d %d %d", hk[0].calls,
             hk[1].calls, hk[2].calls);
    bt_event_record(done, side);
    bt_event_synchronize(done);
    for (int j = 0; j < 3; j++) {
        bt_release(p[j]); bt_release(r[j]); bt_release(hk[j].buf);    /* p[j]'s release frees its hooks */
        bt_event_destroy(hk[j].ready);
    }
    bt_event_destroy(done);
    bt_stream_destroy(dev, side);
}

/* =============================================================================================
   (5) two GPUs
   ============================================================================================= */
/* bt_copy_ from a strided f32 view on cuda:0 into a strided bf16 window on cuda:1 and back, against
   the same copies on the CPU (bit for bit); autograd through bt_to across the two GPUs */
static void test_cross_gpu(void) {
    NEED_GPUS(2);
    set_device(0);
    bt_device g0 = bt_cuda_device(0), g1 = bt_cuda_device(1);
    bt_scope_begin();
    bt_tensor *a = drawn(bt_shape2(33, 65), BT_F32, g0, 2401), *b = drawn(bt_shape2(70, 40), BT_BF16, g1, 2402);
    bt_tensor *ac = bt_to(a, CPU), *bc = bt_to(b, CPU);
    bt_copy_(bt_narrow(bt_narrow(b, 0, 2, 65), 1, 5, 30), bt_narrow(bt_transpose(a, 0, 1), 1, 3, 30));
    bt_copy_(bt_narrow(bt_narrow(bc, 0, 2, 65), 1, 5, 30), bt_narrow(bt_transpose(ac, 0, 1), 1, 3, 30));
    bt_copy_(bt_narrow(bt_transpose(a, 0, 1), 0, 10, 40), bt_narrow(bt_transpose(b, 0, 1), 1, 0, 33));
    bt_copy_(bt_narrow(bt_transpose(ac, 0, 1), 0, 10, 40), bt_narrow(bt_transpose(bc, 0, 1), 1, 0, 33));
    double *h[4] = {bt_test_host(a), bt_test_host(ac), bt_test_host(b), bt_test_host(bc)};
    BT_CHECK(!memcmp(h[0], h[1], sizeof(double) * 33 * 65), "strided copy_ cuda:1 bf16 -> cuda:0 f32 differs from the CPU's");
    BT_CHECK(!memcmp(h[2], h[3], sizeof(double) * 70 * 40), "strided copy_ cuda:0 f32 -> cuda:1 bf16 differs from the CPU's");
    for (int j = 0; j < 4; j++) free(h[j]);
    BT_CHECK(cur_device() == 0, "copies between GPUs left cuda:%d current", cur_device());
    /* x on cuda:0 -> tanh on cuda:1, times w there -> back to cuda:0; the same on the CPU in f64 */
    bt_tensor *leaves[2][2];
    const bt_device devs[2][2] = {{g0, g1}, {CPU, CPU}};
    const bt_dtype dts[2] = {BT_F32, BT_F64};
    for (int r = 0; r < 2; r++) {
        leaves[r][0] = drawn(bt_shape2(31, 17), dts[r], devs[r][0], 2403);
        leaves[r][1] = drawn(bt_shape2(31, 17), dts[r], devs[r][1], 2404);
        for (int j = 0; j < 2; j++) bt_set_requires_grad(leaves[r][j], 1);
        bt_tensor *y = bt_to(bt_mul(bt_tanh(bt_to(leaves[r][0], devs[r][1])), leaves[r][1]), devs[r][0]);
        bt_backward_with(y, drawn(bt_shape2(31, 17), dts[r], devs[r][0], 2405));
    }
    for (int j = 0; j < 2; j++) {
        bt_tensor *g = leaves[0][j]->grad;
        BT_CHECK(g && bt_device_eq(bt_device_of(g), devs[0][j]), "input %d: no gradient on its own device", j);
        if (!g) continue;
        double *got = bt_test_host(g), *want = bt_test_host(leaves[1][j]->grad), e = bt_test_relerr(got, want, 31 * 17);
        BT_CHECK(e < BT_TOL_F32, "input %d: gradient across two GPUs, rel err %.3g", j, e);
        free(got); free(want);
    }
    BT_CHECK(cur_device() == 0, "autograd across GPUs left cuda:%d current", cur_device());
    bt_scope_end();
}

/* =============================================================================================
   (6) the training paths that the op table's small cases do not reach
   ============================================================================================= */
/* A bias gradient added into an existing fp32 .grad (the training step's gradient sink; the
   column-sum kernel's fast path: rows >= 64, 16-byte rows) and the weight gradient beside it,
   bf16 compute through casts of fp32 leaves: a first micro-batch makes the .grad (in bf16, then
   cast: not the path under test), zeroed; two more add into it, b.grad = 2 colsum(g), w.grad =
   2 g^T x in fp32, against f64 loops over the same rounded inputs. */
static void test_bias_grad_sink(void) {
    NEED_GPUS(1);
    set_device(0);
    bt_device g0 = bt_cuda_device(0);
    const int64_t R = 130, I = 24, O = 40;
    bt_scope_begin();
    bt_tensor *w = bt_keep(drawn(bt_shape2(O, I), BT_F32, g0, 2501)), *b = bt_keep(drawn(bt_shape1(O), BT_F32, g0, 2502));
    bt_set_requires_grad(w, 1); bt_set_requires_grad(b, 1);
    bt_tensor *x = drawn(bt_shape2(R, I), BT_BF16, g0, 2503), *g = drawn(bt_shape2(R, O), BT_BF16, g0, 2504);
    for (int it = 0; it < 3; it++) {
        bt_scope_begin();
        bt_backward_with(bt_linear(x, bt_cast(w, BT_BF16), bt_cast(b, BT_BF16)), g);
        bt_scope_end();
        if (it == 0) { bt_tensor *ps[2] = {w, b}; bt_zero_grad(ps, 2); }
    }
    double *hx = bt_test_host(x), *hg = bt_test_host(g), *rw = (double *)calloc((size_t)(O * I), sizeof(double)), *rb = (double *)calloc((size_t)O, sizeof(double));
    for (int64_t r = 0; r < R; r++)
        for (int64_t o = 0; o < O; o++) {
            rb[o] += 2 * hg[r * O + o];
            for (int64_t i = 0; i < I; i++) rw[o * I + i] += 2 * hg[r * O + o] * hx[r * I + i];
        }
    BT_CHECK(w->grad && b->grad && w->grad->dtype == BT_F32 && b->grad->dtype == BT_F32, "no fp32 .grad on the leaves");
    if (w->grad && b->grad) {
        double *gw = bt_test_host(w->grad), *gb = bt_test_host(b->grad);
        double ew = bt_test_relerr(gw, rw, O * I), eb = bt_test_relerr(gb, rb, O);
        BT_CHECK(ew < BT_TOL_F32 && eb < BT_TOL_F32, "bias grad sink: w.grad rel err %.3g, b.grad rel err %.3g", ew, eb);
        if (bt_test_verbose()) printf("info: bias grad sink: w %.3g b %.3g\n", ew, eb);
        free(gw); free(gb);
    }
    free(hx); free(hg); free(rw); free(rb);
    bt_release(w); bt_release(b);
    bt_scope_end();
}
/* The classifier, bt_linear_cross_entropy, on cuda:0 in f32 and bf16 with chunks of 11 rows (77
   rows: 7 chunks) and ignored targets, the fused loss + gradient kernel and (BT_FUSE_XENT off) the
   two kernels, against the same op on the CPU in f64 from the same rounded inputs: the loss and
   the gradients of x and w. */
static void test_linear_xent(void) {
    NEED_GPUS(1);
    set_device(0);
    const int64_t N = 77, C = 32, V = 1000, Vp = 1008;
    const bt_dtype dts[2] = {BT_F32, BT_BF16};
    size_t old = bt_linear_cross_entropy_chunk((size_t)(11 * Vp) * 4);
    const int fusions = bt_set_fusions(BT_FUSE_ALL);
    for (int k = 0; k < 2; k++)
        for (int fused = 0; fused < 2; fused++) {
            bt_set_fusions(fused ? BT_FUSE_ALL : BT_FUSE_ALL & ~BT_FUSE_XENT);
            bt_linear_cross_entropy_chunk((size_t)(11 * Vp) * bt_dtype_size(dts[k]));
            bt_scope_begin();
            int32_t tg[N];
            for (int64_t i = 0; i < N; i++) tg[i] = (int32_t)((i * 7919 + 13) % V);
            tg[5] = -100; tg[40] = -100;
            bt_tensor *res[2][3];
            const bt_device devs[2] = {bt_cuda_device(0), CPU};
            for (int r = 0; r < 2; r++) {
                bt_dtype dt = r ? BT_F64 : dts[k];
                bt_tensor *x = bt_to(bt_cast(bt_cast(bt_randn(bt_shape2(N, C), BT_F32, CPU, 2601), dts[k]), dt), devs[r]);
                bt_tensor *w = bt_to(bt_cast(bt_cast(bt_scale(bt_randn(bt_shape2(Vp, C), BT_F32, CPU, 2602), 0.5), dts[k]), dt), devs[r]);
                bt_set_requires_grad(x, 1); bt_set_requires_grad(w, 1);
                bt_tensor *t = bt_to(bt_from_data(tg, bt_shape1(N), BT_I32, CPU), devs[r]);
                bt_tensor *loss = bt_linear_cross_entropy(x, w, t, V, -100);
                bt_backward(loss);
                res[r][0] = loss; res[r][1] = x->grad; res[r][2] = w->grad;
            }
            const char *nm[3] = {"loss", "dx", "dw"};
            const int64_t cnt[3] = {1, N * C, Vp * C};
            double tol = dts[k] == BT_F32 ? BT_TOL_F32_LOOSE : BT_TOL_BF16;
            for (int j = 0; j < 3; j++) {
                BT_CHECK(res[0][j] && res[1][j], "linear_cross_entropy %s: no %s", bt_dtype_name(dts[k]), nm[j]);
                if (!res[0][j] || !res[1][j]) continue;
                double *got = bt_test_host(res[0][j]), *want = bt_test_host(res[1][j]), e = bt_test_relerr(got, want, cnt[j]);
                BT_CHECK(e < tol, "linear_cross_entropy %s fused %d %s: rel err %.3g > %.3g", bt_dtype_name(dts[k]), fused, nm[j], e, tol);
                if (bt_test_verbose()) printf("info: linear_cross_entropy %s fused %d %s rel err %.3g\n", bt_dtype_name(dts[k]), fused, nm[j], e);
                free(got); free(want);
            }
            bt_scope_end();
        }
    bt_set_fusions(fusions);
    bt_linear_cross_entropy_chunk(old);
}

/* Two pre-norm residual blocks on cuda:0, y = h + L2(ln2(h)), h = x + L1(ln1(x)), loss = sum(y g),
   in bf16 with fp32 master weights (their .grad sinks), against the same graph on the CPU in f64
   from the same rounded values. L1's bias gradient is the column sums of h's gradient, which ln2's
   backward writes (adding into the skip path's, in place): with BT_FUSE_COLSUM (the default) it
   takes the sums that backward leaves, and bt_grad_colsum_reuses must count it; without, it sums
   the gradient again. Both must match the CPU. */
static void test_residual_colsum(void) {
    NEED_GPUS(1);
    set_device(0);
    const int64_t R = 300, C = 64;
    const char *nm[4] = {"b1", "b2", "w1", "lnb1"};
    const int fusions = bt_set_fusions(BT_FUSE_ALL);
    for (int mode = 0; mode < 2; mode++) {
        bt_set_fusions(mode ? BT_FUSE_ALL : BT_FUSE_ALL & ~BT_FUSE_COLSUM);
        bt_scope_begin();
        bt_tensor *got[4] = {0}, *want[4] = {0}, *pp[2][8];
        int64_t before = 0, after = 0;
        for (int r = 0; r < 2; r++) {   /* r 0: cuda:0, bf16 compute; r 1: CPU, f64 */
            bt_device dev = r ? CPU : bt_cuda_device(0);
            bt_dtype leaf = r ? BT_F64 : BT_F32, cd = r ? BT_F64 : BT_BF16;
            bt_tensor **p = pp[r];   /* ln1 w, b, L1 w, b, ln2 w, b, L2 w, b: values rounded to bf16 */
            for (int i = 0; i < 8; i++) {
                bt_shape sh = i % 4 == 2 ? bt_shape2(C, C) : bt_shape1(C);
                bt_tensor *v = bt_randn(sh, BT_F32, CPU, 2700 + (uint64_t)i);
                if (i % 4 == 0) v = bt_add_scalar(bt_scale(v, 0.2), 1.0);
                if (i % 4 == 2) v = bt_scale(v, 0.3);
                p[i] = bt_keep(bt_to(bt_cast(bt_cast(v, BT_BF16), leaf), dev));
                bt_set_requires_grad(p[i], 1);
            }
            bt_tensor *x = bt_to(bt_cast(bt_cast(bt_randn(bt_shape2(R, C), BT_F32, CPU, 2710), BT_BF16), cd), dev);
            bt_tensor *g = bt_to(bt_cast(bt_cast(bt_randn(bt_shape2(R, C), BT_F32, CPU, 2711), BT_BF16), cd), dev);
            for (int it = 0; it < 2; it++) {   /* the second pass adds into the .grad the first made (the sinks) */
                bt_scope_begin();
                bt_tensor *q[8];
                for (int i = 0; i < 8; i++) q[i] = bt_cast(p[i], cd);
                bt_tensor *h = bt_add(x, bt_linear(bt_layernorm(x, q[0], q[1], 1e-5), q[2], q[3]));
                bt_tensor *y = bt_add(h, bt_linear(bt_layernorm(h, q[4], q[5], 1e-5), q[6], q[7]));
                if (r == 0 && it == 1) before = bt_grad_colsum_reuses();
                bt_backward(bt_sum(bt_mul(y, g), NULL, 0, 0));   /* y's gradient g, a tensor of the graph's own */
                if (r == 0 && it == 1) after = bt_grad_colsum_reuses();
                bt_scope_end();
                if (it == 0) bt_zero_grad(p, 8);
            }
            bt_tensor **dst = r ? want : got;
            dst[0] = p[3]->grad; dst[1] = p[7]->grad; dst[2] = p[2]->grad; dst[3] = p[1]->grad;
        }
        if (mode) BT_CHECK(after > before, "BT_FUSE_COLSUM: no bias gradient took the layernorm's column sums (%lld -> %lld)",
                           (long long)before, (long long)after);
        else BT_CHECK(after == before, "BT_FUSE_COLSUM off: %lld bias gradients took column sums", (long long)(after - before));
        const int64_t cnt[4] = {C, C, C * C, C};
        for (int i = 0; i < 4; i++) {
            BT_CHECK(got[i] && want[i], "residual colsum: no %s gradient", nm[i]);
            if (!got[i] || !want[i]) continue;
            double *a = bt_test_host(got[i]), *b = bt_test_host(want[i]), e = bt_test_relerr(a, b, cnt[i]);
            BT_CHECK(e < BT_TOL_BF16, "colsum %d: %s.grad rel err %.3g vs the CPU in f64", mode, nm[i], e);
            if (bt_test_verbose()) printf("info: residual colsum %d %s rel err %.3g\n", mode, nm[i], e);
            free(a); free(b);
        }
        for (int r = 0; r < 2; r++) for (int i = 0; i < 8; i++) bt_release(pp[r][i]);
        bt_scope_end();
    }
    bt_set_fusions(fusions);
}

int main(void) {
    BT_RUN(test_devices);
    BT_RUN(test_get_item_blob);
    BT_RUN(test_table_cuda0);
    BT_RUN(test_table_other_gpus);
    BT_RUN(test_table_cuda0_from_cuda1);
    BT_RUN(test_streams_table);
    BT_RUN(test_streams_events);
    BT_RUN(test_to_host_async);
    BT_RUN(test_hook_event);
    BT_RUN(test_cross_gpu);
    BT_RUN(test_bias_grad_sink);
    BT_RUN(test_linear_xent);
    BT_RUN(test_residual_colsum);
    free_refs();
    return bt_test_summary("test_ops_gpu");
}
