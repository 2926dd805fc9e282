# ---- train_gpt2's checkpoints and Hugging Face files (train_gpt2.c section 7) ----
#   build/hf_logits, build/hf_logits_cuda: the logits of a model for tests/hf_interop.py (run by
#   make test-gpu on the GPU machine, which has transformers: tests/gpu_suite.sh)
$(BUILD)/hf_logits: tests/hf_logits.c train_gpt2.c $(HEADERS) | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)
$(BUILD)/hf_logits_cuda: tests/hf_logits.c train_gpt2.c $(HEADERS) | $(BUILD)
	$(NVCC_PATH) $(NVFLAGS) -o $@ $< $(NVLIBS)
# the tests that include train_gpt2.c are rebuilt when it changes
$(BUILD)/tests/test_gpt2 $(BUILD)/tests/asan_test_gpt2 $(BUILD)/tests/test_gpt2_gpu: train_gpt2.c
$(BUILD)/tests/test_train_ckpt $(BUILD)/tests/asan_test_train_ckpt: train_gpt2.c
