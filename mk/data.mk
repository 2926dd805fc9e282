# ---- data (bt_data.h): the bt_tokenize tool, token shards, fuzzing, the tokenizer benchmark ----
#   make bt_tokenize        text -> GPT-2 token shard (tools/bt_tokenize.c)
#   make data               shards under data/ (incremental; sources below)
#   make fuzz               libFuzzer, FUZZ_TIME s each: the shard reader and loader, encode/decode,
#                           the encoder.json/vocab.bpe readers, the model-file reader (gpt2_io.h),
#                           bt_tokenize's --eot splitting
#   make bench-tokenizer    our encoder's MB/s next to gpt-3-encoder's (node), same input, and
#                           bt_tokenize's corpus mode on WikiText-2 with 1 and 2 threads
#   make bench-tokenizer-stream GB=13   bt_tokenize's peak RSS and time on GB of generated text
#                           through a pipe (bench/bench_tokenize_gen.c), shards under $(BUILD)
#
# Sources: $(SHARED_DATA) (../shared/data) when it has the file, else a download into data/raw
# from the public source named in its README, checked against the README's sha256.
# Outputs (train_gpt2.c relies on these names):
#   data/tinyshakespeare_{train,val}.bin  llm.c's split: <|endoftext|> before each blank-line
#                                         separated document; val = the first 32,768 tokens
#   data/wikitext2_{train,val,test}.bin   WikiText-2 (v1, tokenized) train/valid/test, encoded
#                                         as they are (no <|endoftext|>): 2,448,382 / 258,659 / 295,877 tokens
#   data/encoder.json, data/vocab.bpe     the GPT-2 BPE files

SHARED_DATA ?= ../shared/data
DATA_DIR := data
DATA_RAW := $(DATA_DIR)/raw

.PHONY: data fuzz bench-tokenizer bench-tokenizer-corpus bench-tokenizer-stream

bt_tokenize: tools/bt_tokenize.c bt_data.h
	$(CC) $(CFLAGS) -pthread -o $@ $< $(LDLIBS) -lz
tools: bt_tokenize

# a source file: the shared copy if present, else data/raw/<same path> (downloaded by the rule below)
bt_data_src = $(if $(wildcard $(SHARED_DATA)/$(1)),$(SHARED_DATA)/$(1),$(DATA_RAW)/$(1))
BT_TS_TXT    := $(call bt_data_src,tinyshakespeare/input.txt)
BT_WT_TRAIN  := $(call bt_data_src,wikitext-2/train.txt)
BT_WT_VALID  := $(call bt_data_src,wikitext-2/valid.txt)
BT_WT_TEST   := $(call bt_data_src,wikitext-2/test.txt)
BT_ENC_JSON  := $(call bt_data_src,gpt2-tokenizer/encoder.json)
BT_VOCAB_BPE := $(call bt_data_src,gpt2-tokenizer/vocab.bpe)

BT_URL_tinyshakespeare/input.txt := https://raw.githubusercontent.com/karpathy/char-rnn/6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/tinyshakespeare/input.txt
BT_SHA_tinyshakespeare/input.txt := 86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed
BT_URL_wikitext-2/train.txt := https://raw.githubusercontent.com/pytorch/examples/77f55b912142e11fcfdf5b530231fb9c52f181e8/word_language_model/data/wikitext-2/train.txt
BT_SHA_wikitext-2/train.txt := 9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f
BT_URL_wikitext-2/valid.txt := https://raw.githubusercontent.com/pytorch/examples/77f55b912142e11fcfdf5b530231fb9c52f181e8/word_language_model/data/wikitext-2/valid.txt
BT_SHA_wikitext-2/valid.txt := f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8
BT_URL_wikitext-2/test.txt := https://raw.githubusercontent.com/pytorch/examples/77f55b912142e11fcfdf5b530231fb9c52f181e8/word_language_model/data/wikitext-2/test.txt
BT_SHA_wikitext-2/test.txt := d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0
BT_URL_gpt2-tokenizer/encoder.json := https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json
BT_SHA_gpt2-tokenizer/encoder.json := 196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
BT_URL_gpt2-tokenizer/vocab.bpe := https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe
BT_SHA_gpt2-tokenizer/vocab.bpe := 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

$(DATA_RAW)/%:
	@mkdir -p $(@D); url='$(BT_URL_$*)'; sha='$(BT_SHA_$*)'; \
	if [ -z "$$url" ]; then echo "make data: no source known for $@" >&2; exit 1; fi; \
	echo "make data: $(SHARED_DATA)/$* is absent; downloading $$url"; \
	if command -v curl >/dev/null 2>&1; then curl -fsSL --retry 2 --connect-timeout 20 -o '$@.part' "$$url"; \
	elif command -v wget >/dev/null 2>&1; then wget -q -T 20 -O '$@.part' "$$url"; \
	else echo "make data: neither curl nor wget is installed" >&2; false; fi \
	|| { rm -f '$@.part'; echo "make data: cannot download $$url (offline?). Put the file at $@," \
	     "or the shared data folder at $(SHARED_DATA) (make SHARED_DATA=...)." >&2; exit 1; }; \
	if ! echo "$$sha  $@.part" | sha256sum -c --status -; then \
	  echo "make data: $$url: sha256 differs from $$sha (see $(SHARED_DATA)/README.md); not used" >&2; \
	  rm -f '$@.part'; exit 1; fi; \
	mv '$@.part' '$@'

BT_TOK := ./bt_tokenize -q --encoder $(DATA_DIR)/encoder.json --vocab $(DATA_DIR)/vocab.bpe
BT_TOKFILES := $(DATA_DIR)/encoder.json $(DATA_DIR)/vocab.bpe

$(DATA_DIR)/encoder.json: $(BT_ENC_JSON)
	@mkdir -p $(@D)
	install -m 644 $< $@
$(DATA_DIR)/vocab.bpe: $(BT_VOCAB_BPE)
	@mkdir -p $(@D)
	install -m 644 $< $@

$(DATA_DIR)/tinyshakespeare_val.bin: $(BT_TS_TXT) bt_tokenize $(BT_TOKFILES)
	$(BT_TOK) --eot --limit 32768 $< $@
$(DATA_DIR)/tinyshakespeare_train.bin: $(BT_TS_TXT) bt_tokenize $(BT_TOKFILES)
	$(BT_TOK) --eot --skip 32768 $< $@
$(DATA_DIR)/wikitext2_train.bin: $(BT_WT_TRAIN) bt_tokenize $(BT_TOKFILES)
	$(BT_TOK) $< $@
$(DATA_DIR)/wikitext2_val.bin: $(BT_WT_VALID) bt_tokenize $(BT_TOKFILES)
	$(BT_TOK) $< $@
$(DATA_DIR)/wikitext2_test.bin: $(BT_WT_TEST) bt_tokenize $(BT_TOKFILES)
	$(BT_TOK) $< $@

BT_DATA_OUT := $(DATA_DIR)/tinyshakespeare_train.bin $(DATA_DIR)/tinyshakespeare_val.bin \
               $(DATA_DIR)/wikitext2_train.bin $(DATA_DIR)/wikitext2_val.bin $(DATA_DIR)/wikitext2_test.bin
data: bt_tokenize $(BT_TOKFILES) $(BT_DATA_OUT)

# ---- fuzzing (clang + libFuzzer: apt-get install -y clang-14 libclang-rt-14-dev) ----
FUZZ_TIME ?= 30
FUZZ_CC ?= $(shell command -v clang-14 2>/dev/null || command -v clang 2>/dev/null || echo clang)
FUZZFLAGS := -std=c11 -g -O1 -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
BT_FUZZ := $(BUILD)/fuzz

$(BT_FUZZ)/fuzz_%: tests/fuzz_%.c bt_data.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZFLAGS) -o $@ $< -lm
$(BT_FUZZ)/fuzz_model_file: $(HEADERS)
$(BT_FUZZ)/fuzz_eot: tools/bt_tokenize.c tests/fuzz_tokenizer.h
$(BT_FUZZ)/fuzz_tokenizer: tests/fuzz_tokenizer.h

BT_FUZZERS := fuzz_shard fuzz_tokenizer fuzz_tokenizer_files fuzz_hf_tokenizer fuzz_model_file fuzz_eot
fuzz: $(addprefix $(BT_FUZZ)/,$(BT_FUZZERS)) bt_tokenize $(BT_TOKFILES)
	@mkdir -p $(BT_FUZZ)/corpus_shard $(BT_FUZZ)/corpus_tokenizer
	./bt_tokenize -q tests/fixtures/gpt2_corpus.txt $(BT_FUZZ)/corpus_shard/seed.bin
	./bt_tokenize -q --u32 tests/fixtures/gpt2_corpus.txt $(BT_FUZZ)/corpus_shard/seed32.bin
	i=0; cut -f1 tests/fixtures/gpt2_cases.txt | grep -v '^#' | while read -r h; do \
	  i=$$((i + 1)); printf '%s' "$$h" | xxd -r -p > $(BT_FUZZ)/corpus_tokenizer/case_$$i; done
	python3 tests/fuzz_seeds.py $(BT_FUZZ) $(DATA_DIR)/encoder.json $(DATA_DIR)/vocab.bpe
	$(BT_FUZZ)/fuzz_shard -max_total_time=$(FUZZ_TIME) -max_len=8192 -print_final_stats=1 $(BT_FUZZ)/corpus_shard
	$(BT_FUZZ)/fuzz_tokenizer -max_total_time=$(FUZZ_TIME) -max_len=4096 -print_final_stats=1 $(BT_FUZZ)/corpus_tokenizer
	$(BT_FUZZ)/fuzz_tokenizer_files -max_total_time=$(FUZZ_TIME) -max_len=16384 -print_final_stats=1 $(BT_FUZZ)/corpus_tokenizer_files
	@mkdir -p $(BT_FUZZ)/corpus_hf_tokenizer && printf '\001Hello 1234567 IT'"'"'S\r\n\r\n  x' > $(BT_FUZZ)/corpus_hf_tokenizer/text
	$(BT_FUZZ)/fuzz_hf_tokenizer -max_total_time=$(FUZZ_TIME) -max_len=16384 -print_final_stats=1 $(BT_FUZZ)/corpus_hf_tokenizer
	$(BT_FUZZ)/fuzz_model_file -max_total_time=$(FUZZ_TIME) -max_len=8192 -print_final_stats=1 $(BT_FUZZ)/corpus_model_file
	$(BT_FUZZ)/fuzz_eot -max_total_time=$(FUZZ_TIME) -max_len=4096 -print_final_stats=1 $(BT_FUZZ)/corpus_eot

# ---- tokenizer benchmark: bench/bench_tokenizer.c and, when it is installed, gpt-3-encoder ----
#   GPT3_ENCODER: the npm package's folder (mkdir -p /tmp/g3e && cd /tmp/g3e && npm install gpt-3-encoder)
GPT3_ENCODER ?= /tmp/g3e/node_modules/gpt-3-encoder
BENCH_TOK_INPUTS ?= $(BT_TS_TXT) $(BT_WT_TRAIN)

$(BUILD)/bench_tokenizer: bench/bench_tokenizer.c bt_data.h | $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)

bench-tokenizer: $(BUILD)/bench_tokenizer $(BT_TOKFILES) $(BENCH_TOK_INPUTS)
	@echo "machine: $$(lscpu | sed -n 's/^Model name: *//p' | head -1), $$(nproc) cores; $$(date -u +%Y-%m-%d)"
	$(BUILD)/bench_tokenizer $(DATA_DIR)/encoder.json $(DATA_DIR)/vocab.bpe $(BENCH_TOK_INPUTS)
	@$(MAKE) --no-print-directory bench-tokenizer-corpus
	@if [ -d "$(GPT3_ENCODER)" ] && command -v node >/dev/null 2>&1; then \
	  echo "node bench/bench_tokenizer.js $(GPT3_ENCODER) $(BENCH_TOK_INPUTS)"; \
	  node bench/bench_tokenizer.js $(GPT3_ENCODER) $(BENCH_TOK_INPUTS); \
	else echo "gpt-3-encoder not found at $(GPT3_ENCODER) (or no node): reference skipped"; fi

# corpus mode (--out): WikiText-2's train, valid and test files, shards under $(BUILD)/bench_corpus;
# the summary line's MB/s counts from the first chunk read to the last shard committed (fsync included)
BENCH_CORPUS_IN ?= $(BT_WT_TRAIN) $(BT_WT_VALID) $(BT_WT_TEST)
bench-tokenizer-corpus: bt_tokenize $(BT_TOKFILES) $(BENCH_CORPUS_IN)
	@mkdir -p $(BUILD)/bench_corpus
	@for t in 1 2; do echo "./bt_tokenize --threads $$t --restart --out $(BUILD)/bench_corpus/wt2 $(BENCH_CORPUS_IN)"; \
	  ./bt_tokenize --encoder $(DATA_DIR)/encoder.json --vocab $(DATA_DIR)/vocab.bpe --threads $$t --restart --out $(BUILD)/bench_corpus/wt2 $(BENCH_CORPUS_IN) 2>&1 | grep inputs || exit 1; done

# memory at scale: GB of text through a pipe, 2 threads; GNU time's peak RSS is bt_tokenize's own
GB ?= 13
$(BUILD)/bench_tokenize_gen: bench/bench_tokenize_gen.c | $(BUILD)
	$(CC) -O2 -Wall -Wextra -o $@ $<
bench-tokenizer-stream: bt_tokenize $(BUILD)/bench_tokenize_gen $(BT_TOKFILES) $(BT_WT_TRAIN)
	@mkdir -p $(BUILD)/bench_stream
	$(BUILD)/bench_tokenize_gen $(GB)000000000 $(BT_WT_TRAIN) | /usr/bin/time -f "peak RSS %M KiB, %e s wall, %U s user" \
	  ./bt_tokenize --encoder $(DATA_DIR)/encoder.json --vocab $(DATA_DIR)/vocab.bpe --threads 2 --restart --out $(BUILD)/bench_stream/s /dev/stdin
	rm -f $(BUILD)/bench_stream/s_*.bin
