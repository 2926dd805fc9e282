#!/usr/bin/env bash
# Copies what a device-machine call needs and cannot build there (the data shards and the
# tokenizer files: ../shared is not sent) into .carry/ (git-ignored), to be named in `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe
mkdir -p .carry/data
cp data/tinyshakespeare_train.bin data/tinyshakespeare_val.bin data/encoder.json data/vocab.bpe .carry/data/
du -sh .carry
