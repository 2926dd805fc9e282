# ---- checkpoints (bt_ckpt.h): fuzzing and the benchmark ----
#   make fuzz            also runs fuzz_ckpt (the safetensors reader and the JSON parser), FUZZ_TIME s
#   make fuzz-ckpt       that one alone
#   make bench-ckpt      bench/bench_ckpt: CRC32C speed, sync save/load and the async stall of a
#                        GPT-2 124M training state (1.49 GB), then bench/bench_ckpt_torch.py (torch.save,
#                        safetensors, dd) when python3 has torch, then on a GPU what asynchronous
#                        checkpoints cost a train_gpt2 run (bench/bench_ckpt_train.sh). BENCH_CKPT_DIR:
#                        where the library benchmark's files go.
# (This file is read before mk/data.mk: names that data.mk defines are used only in recipes.)

CKPT_FUZZ := $(BUILD)/fuzz
BENCH_CKPT_DIR ?= /tmp/bt_bench_ckpt
BENCH_CKPT_ARGS ?=

.PHONY: fuzz-ckpt bench-ckpt

$(CKPT_FUZZ)/fuzz_ckpt: tests/fuzz_ckpt.c $(HEADERS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZFLAGS) -o $@ $< -lm -lpthread

fuzz-ckpt: $(CKPT_FUZZ)/fuzz_ckpt
	@mkdir -p $(CKPT_FUZZ)/corpus_ckpt
	BT_FUZZ_SEEDS=$(CKPT_FUZZ)/corpus_ckpt $(CKPT_FUZZ)/fuzz_ckpt -max_total_time=$(FUZZ_TIME) -max_len=16384 \
	  -print_final_stats=1 $(CKPT_FUZZ)/corpus_ckpt
fuzz: fuzz-ckpt

$(BUILD)/bench_ckpt: bench/bench_ckpt.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS) -lpthread
$(BUILD)/bench_ckpt_cuda: bench/bench_ckpt.c $(HEADERS) | $(BUILD)
	$(NVCC_PATH) $(NVFLAGS) -o $@ $< $(NVLIBS)

BENCH_CKPT_BIN := $(if $(NVCC_PATH),$(BUILD)/bench_ckpt_cuda,$(BUILD)/bench_ckpt)
bench-ckpt: $(BENCH_CKPT_BIN)
	@echo "machine: $$(lscpu | sed -n 's/^Model name: *//p' | head -1), $$(nproc) cores; $$(date -u +%Y-%m-%d)"
	$(BENCH_CKPT_BIN) --dir $(BENCH_CKPT_DIR) $(BENCH_CKPT_ARGS)
	@if python3 -c 'import torch' 2>/dev/null; then \
	  echo "python3 bench/bench_ckpt_torch.py --dir $(BENCH_CKPT_DIR)"; python3 bench/bench_ckpt_torch.py --dir $(BENCH_CKPT_DIR); \
	else echo "python3 has no torch: bench/bench_ckpt_torch.py skipped"; fi
	@if nvidia-smi -L >/dev/null 2>&1; then bash bench/bench_ckpt_train.sh; \
	else echo "no GPU: bench/bench_ckpt_train.sh (the stall of a training run) skipped"; fi
