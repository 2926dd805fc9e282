# ---- examples/train_llama.c: a Llama-style model (RMSNorm, SwiGLU, no hand-written fusion) ----
#   make build/train_llama        CPU build (with --mlir when MLIR=1)
#   make build/train_llama_cuda   CUDA build (with --mlir when MLIR=1)
#   tests/test_llama.c includes the program: losses with and without --mlir agree, the loss falls
$(BUILD)/train_llama: examples/train_llama.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)
$(BUILD)/train_llama_cuda: examples/train_llama.c $(HEADERS) | $(BUILD)
	$(NVCC_PATH) $(NVFLAGS) -o $@ $< $(NVLIBS)
$(BUILD)/tests/test_llama: tests/test_llama.c examples/train_llama.c $(HEADERS) tests/bt_test.h | $(BUILD)/tests
	$(CC) $(CFLAGS) $(TEST_MLIR_FLAGS) -o $@ $< $(LDLIBS) $(TEST_MLIR_LIBS)
$(BUILD)/tests/asan_test_llama: tests/test_llama.c examples/train_llama.c $(HEADERS) tests/bt_test.h | $(BUILD)/tests
	$(CC) $(ASANFLAGS) $(TEST_MLIR_FLAGS) -o $@ $< $(LDLIBS) $(TEST_MLIR_LIBS)
# ---- llama.h's Hugging Face files: build/llama_logits, build/llama_logits_cuda (tests/llama_logits.c) ----
#   logits, loss and every gradient of a LlamaForCausalLM directory on one batch, for tests/llama_parity.py
#   (on a machine with torch and transformers: python3 tests/llama_parity.py)
$(BUILD)/llama_logits: tests/llama_logits.c $(HEADERS) $(IMPL_CPU) | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(IMPL_CPU) $(LDLIBS)
$(BUILD)/llama_logits_cuda: tests/llama_logits.c $(HEADERS) $(IMPL_CUDA) | $(BUILD)
	$(call nvcc_linked,$<)
