/* llama_logits.c - a Hugging Face LlamaForCausalLM directory (llama_io.h) run on one batch, for
   tests/llama_parity.py (which compares with transformers on the same weights and tokens).

     build/llama_logits --model DIR --tokens IDS.bin --targets TGT.bin --batch B --out OUT.safetensors
                        [--device cpu|cuda] [--export DIR2]

   DIR: config.json with model.safetensors, or shards and model.safetensors.index.json. IDS.bin,
   TGT.bin: B x T int32 (row-major; a target of -1 is ignored), T at most the model's context.
   OUT.safetensors (f32): "logits" [B, T, V] (the real vocabulary's columns), "loss" [1] (the mean
   cross-entropy, llama_loss), and "grad." + every tensor's transformers name: the gradient of that
   loss (q/k/v and gate/up cut out of the stacked leaves). --export DIR2: the model written back
   (llama_hf_export). fp32 matmuls (no TF32). Built by mk/llama.mk (build/llama_logits,
   build/llama_logits_cuda). */
#define _POSIX_C_SOURCE 200809L
#include "llama_io.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what, const char *why) { fprintf(stderr, "llama_logits: %s: %s\n", what, why); return 1; }

/* n int32 from path, n a multiple of B: *n; NULL with a message */
static int32_t *read_ids(const char *path, int64_t *n) {
    uint64_t size = 0;
    int fd = bt_input_open(path, &size);
    if (fd < 0) { fail(path, bt_data_error()); return NULL; }
    int32_t *ids = size % 4 == 0 && size > 0 ? (int32_t *)malloc(size) : NULL;
    if (!ids || pread(fd, ids, size, 0) != (ssize_t)size) { close(fd); free(ids); fail(path, "cannot read it (a nonempty array of int32)"); return NULL; }
    close(fd);
    *n = (int64_t)(size / 4);
    return ids;
}

int main(int argc, char **argv) {
    const char *model = NULL, *ids_path = NULL, *tgt_path = NULL, *out_path = NULL, *device = "cpu", *export_dir = NULL;
    int B = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--tokens")) ids_path = argv[i + 1];
        else if (!strcmp(argv[i], "--targets")) tgt_path = argv[i + 1];
        else if (!strcmp(argv[i], "--batch")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
        else if (!strcmp(argv[i], "--device")) device = argv[i + 1];
        else if (!strcmp(argv[i], "--export")) export_dir = argv[i + 1];
        else return fail(argv[i], "unknown option");
    }
    if (!model || !ids_path || !tgt_path || !out_path || B < 1)
        return fail("usage", "llama_logits --model DIR --tokens IDS.bin --targets TGT.bin --batch B --out OUT.safetensors [--device cpu|cuda] [--export DIR2]");
    bt_device dev = strcmp(device, "cpu") ? bt_cuda_device(0) : bt_cpu();
    bt_set_matmul_precision(BT_MATMUL_FP32);
    char err[1024];
    llama m;
    if (llama_hf_init_from(&m, model, dev, err, sizeof err)) return fail(model, err);
    const llama_config *c = &m.cfg;
    int64_t n = 0, nt = 0;
    int32_t *ids = read_ids(ids_path, &n), *tg = ids ? read_ids(tgt_path, &nt) : NULL;
    if (!ids || !tg) return 1;
    int64_t T = n / B;
    if (n != nt || n % B || T > c->maxT) return fail(ids_path, "tokens and targets must be B x T int32 each, T at most the context");
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->V || tg[i] < -1 || tg[i] >= c->V) return fail(ids_path, "a token id outside the vocabulary");

    bt_ckpt_writer *w = bt_ckpt_writer_new();
    bt_scope_begin();
    bt_tensor *idx = bt_from_data(ids, bt_shape2(B, T), BT_I32, dev), *tgt = bt_from_data(tg, bt_shape2(B, T), BT_I32, dev);
    int old = bt_set_grad_enabled(0);
    bt_tensor *logits = bt_narrow(llama_logits(&m, idx, BT_F32), 2, 0, c->V);
    bt_set_grad_enabled(old);
    bt_zero_(m.flat_grad);
    bt_tensor *loss = llama_loss(&m, idx, tgt, BT_F32);
    bt_backward(loss);
    double lv = bt_item(loss);
    int bad = bt_ckpt_writer_add_tensor(w, "logits", logits, 0, 0) || bt_ckpt_writer_add_tensor(w, "loss", bt_reshape(loss, bt_shape1(1)), 0, 0) ||
              llama_hf_add_tensors(&m, w, "grad.", 1) || bt_ckpt_writer_save(w, out_path);
    bt_scope_end();
    bt_ckpt_writer_free(w);
    if (bad) return fail(out_path, bt_ckpt_error());
    if (export_dir) {
        mkdir(export_dir, 0755);
        if (llama_hf_export(&m, export_dir, err, sizeof err)) return fail(export_dir, err);
    }
    printf("llama_logits: B %d T %lld of L %d H %d Hkv %d C %d F %d V %d%s on %s: loss %.9f -> %s\n", B, (long long)T, c->L, c->H, c->Hkv,
           c->C, c->F, c->V, c->tie ? " tied" : "", device, lv, out_path);
    free(ids); free(tg);
    llama_free(&m);
    return 0;
}
