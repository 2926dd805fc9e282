# ---- benchmarks (on a machine with a GPU; bench/RESULTS.md records what they measured) ----
#   make bench-kernels   every kernel family at GPT-2 shapes, timed with CUDA events, next to PyTorch
#                        where bench/bench_attention_torch.py can run (BT_BENCH_ONLY=attention|adamw|...)
#   make bench-gpt2      GPT-2 124M: train_gpt2 vs PyTorch eager and torch.compile, tokens/s and peak
#                        memory (bench/gpu_session.sh bench; B, T, STEPS, PRECS, ROUNDS from the environment)
.PHONY: bench-kernels bench-gpt2

$(BUILD)/bench_kernels: bench/bench_kernels.cu $(HEADERS) | $(BUILD)
	$(NVCC_PATH) $(NVFLAGS) -o $@ $< $(NVLIBS)

bench-kernels: $(BUILD)/bench_kernels
	$(BUILD)/bench_kernels

bench-gpt2: $(BUILD)/train_gpt2_cuda $(TEST_DATA)
	bash bench/gpu_session.sh bench
