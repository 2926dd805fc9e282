/* fuzz_model_file.c - libFuzzer target: gpt2_io.h's model-file reader on arbitrary bytes.
   Built and run by `make fuzz`; not part of make test. Each input is written to a file and read
   as -e does: the header must be refused with a message naming the file, or name a config whose
   parameters exactly fill the file; then the weights load and one token runs through the KV
   cache (any header that passes must give a model that runs). */
#define BT_ALL_IMPLEMENTATION
#include "bt_all.h"

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gpt2_config cfg;
    char err[1024];
    if (!path[0]) snprintf(path, sizeof path, "%s/bt_fuzz_model.%ld.bin", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size)) abort();
    fclose(f);
    if (gpt2_read_header(path, &cfg, err, sizeof err) != 0) {
        if (!strstr(err, path)) abort();
    } else {
        gpt2 m;
        if (1024 + 4 * (size_t)gpt2_num_params(&cfg) != size) abort();
        gpt2_build(&m, cfg, bt_cpu());
        if (gpt2_load_weights(&m, path, err, sizeof err) != 0) abort();
        gpt2_kv_cache *kv = gpt2_kv_cache_create(&m, BT_F32);
        int32_t tok = 0;
        float *row = (float *)malloc(sizeof(float) * (size_t)cfg.Vp);
        bt_scope_begin();
        bt_to_host(gpt2_forward_cached(&m, kv, &tok, 1), row, BT_F32);
        bt_scope_end();
        free(row);
        gpt2_kv_cache_free(kv, cfg.L);
        gpt2_free(&m);
    }
    remove(path);
    return 0;
}
