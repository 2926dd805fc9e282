/* hf_logits.c - the logits of a GPT-2 (gpt2.h) for one token sequence, for tests/hf_interop.py
   (which compares them with transformers' GPT2LMHeadModel on the same tokens).

     build/hf_logits (--init-from PATH | -e MODEL) --tokens IDS.bin --out LOGITS.bin [--device cpu|cuda]

   PATH: a Hugging Face model.safetensors or its directory (train_gpt2's --init-from); MODEL: an
   llm.c model file (-e). IDS.bin: n int32 token ids (n at most the model's context). LOGITS.bin:
   n x V float32, row-major (the real vocabulary's columns: the padding is cut off). fp32 matmuls
   (no TF32). Built by mk/train_ckpt.mk (build/hf_logits, build/hf_logits_cuda). */
#define _POSIX_C_SOURCE 200809L   /* pread, stat */
#include "gpt2_io.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

static int fail(const char *what, const char *why) { fprintf(stderr, "hf_logits: %s: %s\n", what, why); return 1; }

int main(int argc, char **argv) {
    const char *init = NULL, *model = NULL, *ids_path = NULL, *out_path = NULL, *device = "cpu";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--init-from")) init = argv[i + 1];
        else if (!strcmp(argv[i], "-e")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--tokens")) ids_path = argv[i + 1];
        else if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
        else if (!strcmp(argv[i], "--device")) device = argv[i + 1];
        else return fail(argv[i], "unknown option");
    }
    if (!(init || model) || (init && model) || !ids_path || !out_path)
        return fail("usage", "hf_logits (--init-from PATH | -e MODEL) --tokens IDS.bin --out LOGITS.bin [--device cpu|cuda]");
    bt_device dev = strcmp(device, "cpu") ? bt_cuda_device(0) : bt_cpu();
    bt_set_matmul_precision(BT_MATMUL_FP32);
    char err[1024], prefix[16];
    gpt2 m;
    gpt2_config cfg;
    bt_ckpt_file *hf = NULL;
    if (init) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s%s", init, stat(init, &sb) == 0 && S_ISDIR(sb.st_mode) ? "/model.safetensors" : "");
        if (!(hf = bt_ckpt_open(path, 0))) return fail(path, bt_ckpt_error());
        if (gpt2_hf_config(hf, path, prefix, &cfg, err, sizeof err)) return fail(init, err);
        gpt2_build(&m, cfg, dev);
        if (gpt2_hf_load(&m, hf, path, prefix, err, sizeof err)) return fail(init, err);
        bt_ckpt_close(hf);
    } else {
        if (gpt2_read_header(model, &cfg, err, sizeof err)) return fail(model, err);
        gpt2_build(&m, cfg, dev);
        if (gpt2_load_weights(&m, model, err, sizeof err)) return fail(model, err);
    }

    uint64_t size = 0;
    int fd = bt_input_open(ids_path, &size);
    if (fd < 0) return fail(ids_path, bt_data_error());
    int n = (int)(size / 4);
    if (size % 4 || n < 1 || n > cfg.maxT) { close(fd); return fail(ids_path, "expected 1 to maxT int32 token ids"); }
    int32_t *ids = (int32_t *)malloc(size);
    if (!ids || pread(fd, ids, size, 0) != (ssize_t)size) { close(fd); return fail(ids_path, "cannot read it"); }
    close(fd);
    for (int i = 0; i < n; i++) if (ids[i] < 0 || ids[i] >= cfg.V) return fail(ids_path, "a token id outside the vocabulary");

    float *logits = (float *)malloc(sizeof(float) * (size_t)n * cfg.Vp);
    bt_set_grad_enabled(0);
    bt_scope_begin();
    bt_tensor *idx = bt_from_data(ids, bt_shape2(1, n), BT_I32, dev);
    bt_to_host(gpt2_logits(&m, idx, BT_F32), logits, BT_F32);   /* [1, n, Vp] */
    bt_scope_end();
    FILE *f = fopen(out_path, "wb");
    if (!f) return fail(out_path, strerror(errno));
    for (int i = 0; i < n; i++) fwrite(logits + (size_t)i * cfg.Vp, sizeof(float), (size_t)cfg.V, f);
    if (fclose(f)) return fail(out_path, strerror(errno));
    printf("hf_logits: %d positions x %d logits of L %d H %d C %d on %s -> %s\n", n, cfg.V, cfg.L, cfg.H, cfg.C, device, out_path);
    free(ids); free(logits);
    gpt2_free(&m);
    return 0;
}
