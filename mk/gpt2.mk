# ---- GPT-2's Hugging Face files: build/hf_logits, build/hf_logits_cuda (tests/hf_logits.c) ----
#   the logits of a model for tests/hf_interop.py (make test-gpu: tests/gpu_suite.sh, on a machine with transformers)
$(BUILD)/hf_logits: tests/hf_logits.c $(HEADERS) $(IMPL_CPU) | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(IMPL_CPU) $(LDLIBS)
$(BUILD)/hf_logits_cuda: tests/hf_logits.c $(HEADERS) $(IMPL_CUDA) | $(BUILD)
	$(call nvcc_linked,$<)
# the tests of the program include train_gpt2.c (the Makefile's PROGRAM_TESTS, and test_gpt2_mlir,
# which compiles its own implementations): rebuilt when it changes
$(foreach t,$(PROGRAM_TESTS) test_gpt2_mlir,$(BUILD)/tests/$(t) $(BUILD)/tests/asan_$(t)): train_gpt2.c
