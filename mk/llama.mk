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
