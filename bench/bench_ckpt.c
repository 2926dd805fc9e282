/* bench_ckpt.c - bt_ckpt.h on a GPT-2 124M training state: fp32 parameters, AdamW m and v
   (3 x 124,475,904 floats = 1.49 GB), on the GPU when there is one (a CUDA build), else on the CPU.

     make bench-ckpt                          (runs this, then bench/bench_ckpt_torch.py)
     build/bench_ckpt_cuda --dir DIR [--params N] [--reps 3] [--cpu]

   Measured, median of --reps runs:
     crc32c        GB/s of one thread (SSE4.2 and the portable table) and of all threads, 1 GiB
     raw write     the same bytes written and fsynced with plain write(2): the disk's speed here
     sync save     bt_ckpt_writer: device-to-host copies, checksums, atomic write (fsync, rename)
     load          bt_ckpt_open + bt_ckpt_load of the three tensors, every checksum verified
                   (the page cache holds the file: it was just written)
     async         bt_ckpt_saver_snapshot's host stall, how long the compute stream then waits
                   for the copies when fenced at once (an upper bound: a training step fences
                   only before its optimizer step), and the whole save until the file is committed
   torch.save, safetensors' save_file/load_file and dd run in bench/bench_ckpt_torch.py. */
#define _POSIX_C_SOURCE 200809L
#define BT_ALLOC_IMPLEMENTATION
#define BT_TENSOR_IMPLEMENTATION
#define BT_DATA_IMPLEMENTATION
#define BT_CKPT_IMPLEMENTATION
#include "bt_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#define MAXREPS 9

static double now_ms(void) { return bt__ck_now_ms(); }
static int cmp_double(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(double *v, int n) { qsort(v, (size_t)n, sizeof *v, cmp_double); return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]); }
static void sync_device(bt_device d) {
#ifdef BT_CUDA
    if (d.type == BT_GPU) bt_synchronize(d);
#else
    (void)d;
#endif
}
static void die(const char *what) { fprintf(stderr, "bench_ckpt: %s: %s\n", what, bt_ckpt_error()); exit(1); }

static void bench_crc(void) {
    size_t n = (size_t)1 << 30, i;
    unsigned char *buf = (unsigned char *)malloc(n);
    double t0, hw, tab, par;
    volatile uint32_t sink = 0;
    for (i = 0; i < n; i += 4096) buf[i] = (unsigned char)i;
    for (i = 0; i < n; i++) buf[i] ^= (unsigned char)(i * 2654435761u >> 13);
    sink ^= bt_crc32c(0, buf, n);
    t0 = now_ms(); sink ^= bt_crc32c(0, buf, n); hw = n / 1e6 / (now_ms() - t0);
    bt_crc32c_use_table(1);
    t0 = now_ms(); sink ^= bt_crc32c(0, buf, n); tab = n / 1e6 / (now_ms() - t0);
    bt_crc32c_use_table(0);
    t0 = now_ms(); sink ^= bt_crc32c_parallel(0, buf, n); par = n / 1e6 / (now_ms() - t0);
    printf("crc32c (1 GiB): %s 1 thread %.1f GB/s | table 1 thread %.2f GB/s | %d threads %.1f GB/s\n",
           bt_crc32c_backend(), hw, tab, bt__ck_threads(), par);
    (void)sink;
    free(buf);
}

/* write(2) + fsync of n bytes from buf: the disk as our saves see it */
static double raw_write_ms(const char *path, const void *buf, size_t n) {
    double t0 = now_ms();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const char *p = (const char *)buf;
    size_t left = n;
    if (fd < 0) { perror(path); exit(1); }
    while (left) {
        ssize_t w = write(fd, p, left > ((size_t)1 << 30) ? ((size_t)1 << 30) : left);
        if (w <= 0) { perror("write"); exit(1); }
        p += w; left -= (size_t)w;
    }
    if (fsync(fd) != 0) perror("fsync");
    close(fd);
    return now_ms() - t0;
}

int main(int argc, char **argv) {
    const char *dir = "/tmp/bt_bench_ckpt";
    int64_t N = 124475904;                  /* GPT-2 124M with the vocabulary padded to 50304 */
    int reps = 3, force_cpu = 0, i, r;
    bt_device dev = bt_cpu();
    bt_tensor *t[3];
    const char *names[3] = {"params", "adamw.m", "adamw.v"};
    double save_ms[MAXREPS], load_ms[MAXREPS], stall_ms[MAXREPS], wait_ms[MAXREPS], total_ms[MAXREPS], raw_ms[MAXREPS];
    char path[1024];
    double gb;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--params") && i + 1 < argc) N = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu")) force_cpu = 1;
        else { fprintf(stderr, "usage: bench_ckpt [--dir DIR] [--params N] [--reps R] [--cpu]\n"); return 2; }
    }
    if (reps < 1 || reps > MAXREPS || N < 1) { fprintf(stderr, "bench_ckpt: --reps 1..%d, --params >= 1\n", MAXREPS); return 2; }
#ifdef BT_CUDA
    if (!force_cpu && bt_k_device_count() > 0) dev = bt_cuda_device(0);
#else
    (void)force_cpu;
#endif
    if (bt_output_dir(dir)) { fprintf(stderr, "bench_ckpt: %s\n", bt_data_error()); return 1; }
    gb = 3.0 * N * 4 / 1e9;
    printf("state: 3 x %lld f32 = %.3f GB on %s; files in %s; median of %d\n", (long long)N, gb,
           dev.type == BT_GPU ? "cuda:0" : "the CPU", dir, reps);
    bench_crc();
    for (i = 0; i < 3; i++) t[i] = bt_randn(bt_shape1(N), BT_F32, dev, (uint64_t)(i + 1));
    sync_device(dev);

    {   /* the disk: the same number of bytes, plain write + fsync */
        void *h = malloc((size_t)N * 12);
        memset(h, 1, (size_t)N * 12);
        snprintf(path, sizeof path, "%s/raw.bin", dir);
        for (r = 0; r < reps; r++) raw_ms[r] = raw_write_ms(path, h, (size_t)N * 12);
        unlink(path);
        free(h);
        printf("raw write+fsync: %.0f ms (%.2f GB/s)\n", median(raw_ms, reps), gb / (median(raw_ms, reps) / 1e3));
    }

    snprintf(path, sizeof path, "%s/sync.safetensors", dir);
    for (r = 0; r < reps; r++) {
        double t0 = now_ms();
        bt_ckpt_writer *w = bt_ckpt_writer_new();
        for (i = 0; i < 3; i++) if (bt_ckpt_writer_add_tensor(w, names[i], t[i], 0, 0)) die("add");
        bt_ckpt_meta_set_i64(bt_ckpt_writer_meta(w), "step", r);
        if (bt_ckpt_writer_save(w, path)) die("save");
        bt_ckpt_writer_free(w);
        save_ms[r] = now_ms() - t0;
    }
    printf("sync save: %.0f ms (%.2f GB/s)\n", median(save_ms, reps), gb / (median(save_ms, reps) / 1e3));

    for (r = 0; r < reps; r++) {
        double t0 = now_ms();
        bt_ckpt_file *f = bt_ckpt_open(path, BT_CKPT_REQUIRE_CHECKSUMS);
        if (!f) die("open");
        for (i = 0; i < 3; i++) if (bt_ckpt_load(f, names[i], t[i], 0)) die("load");
        sync_device(dev);
        bt_ckpt_close(f);
        load_ms[r] = now_ms() - t0;
    }
    printf("load (checksums verified, page cache warm): %.0f ms (%.2f GB/s)\n", median(load_ms, reps), gb / (median(load_ms, reps) / 1e3));

    {
        bt_ckpt_saver *s = bt_ckpt_saver_new(dir, 1);
        bt_ckpt_saver_stats st;
        if (!s) die("saver");
        for (r = 0; r < reps + 1; r++) {           /* the first allocates the staging buffer: not counted */
            double t0;
            if (bt_ckpt_saver_wait(s)) die("async save");
            sync_device(dev);
            t0 = now_ms();
            if (bt_ckpt_saver_snapshot(s, r + 1, t, names, 3, NULL)) die("snapshot");
            if (r) stall_ms[r - 1] = now_ms() - t0;
#ifdef BT_CUDA
            if (dev.type == BT_GPU) {
                cudaEvent_t a, b;
                float ms = 0;
                cudaEventCreate(&a); cudaEventCreate(&b);
                cudaEventRecord(a, (cudaStream_t)bt_stream_current(dev));
                bt_ckpt_saver_fence(s, NULL);
                cudaEventRecord(b, (cudaStream_t)bt_stream_current(dev));
                cudaEventSynchronize(b);
                cudaEventElapsedTime(&ms, a, b);
                if (r) wait_ms[r - 1] = ms;
                cudaEventDestroy(a); cudaEventDestroy(b);
            } else
#endif
            if (r) wait_ms[r - 1] = 0;
            if (bt_ckpt_saver_wait(s)) die("async save");
            bt_ckpt_saver_get_stats(s, &st);
            if (r) total_ms[r - 1] = st.last_save_ms;
        }
        printf("async: host stall %.2f ms | compute stream fenced at once waits %.1f ms | whole save %.0f ms (%.2f GB/s; "
               "last: checksums %.0f ms, write %.0f ms)\n", median(stall_ms, reps), median(wait_ms, reps), median(total_ms, reps),
               gb / (median(total_ms, reps) / 1e3), st.last_checksum_ms, st.last_write_ms);
        bt_ckpt_saver_free(s);
    }
    snprintf(path, sizeof path, "%s/sync.safetensors", dir);
    unlink(path);
    for (i = 0; i < reps + 1; i++) { bt_ckpt_path(dir, i + 1, path, sizeof path); unlink(path); }
    for (i = 0; i < 3; i++) bt_release(t[i]);
    return 0;
}
