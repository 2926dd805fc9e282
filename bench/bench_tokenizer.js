// bench_tokenizer.js - GPT-2 encoding speed of the npm package gpt-3-encoder (make bench-tokenizer), measured like
// bench_tokenizer.c: the same input files, wall time of encoding only (file read and module
// load excluded), one thread. "cold" is the first pass in a fresh process (empty BPE cache);
// "warm" is the median of 5 further passes. Each file runs in its own process (the package's
// cache cannot be cleared).
//   node bench/bench_tokenizer.js GPT3_ENCODER_DIR FILE...     (make bench-tokenizer)
// gpt-3-encoder's encode() is quadratic in the number of tokens (a whole 1 MB file does not
// finish in minutes), so the text is encoded in ~400-character safe chunks (tests/g3e_chunked.js);
// the ids are the same (tests/ check this).
'use strict';
const fs = require('fs');
const path = require('path');
const { encodeChunked } = require(path.join(__dirname, '..', 'tests', 'g3e_chunked.js'));
const { execFileSync } = require('child_process');

const [encDir, ...files] = process.argv.slice(2);
if (!encDir || !files.length) { console.error('usage: node bench_tokenizer.js GPT3_ENCODER_DIR FILE...'); process.exit(2); }

if (files.length > 1) {   // one process per file
  for (const f of files) process.stdout.write(execFileSync(process.execPath, [__filename, encDir, f]));
  process.exit(0);
}
const t0 = process.hrtime.bigint();
const { encode } = require(path.resolve(encDir));
const tl = Number(process.hrtime.bigint() - t0) / 1e6;
const text = fs.readFileSync(files[0], 'utf8');
const bytes = Buffer.byteLength(text, 'utf8');

const times = [];
let n = 0;
for (let r = 0; r < 6; r++) {
  const t = process.hrtime.bigint();
  n = encodeChunked(encode, text).length;
  times.push(Number(process.hrtime.bigint() - t) / 1e9);
}
const cold = times[0], warm = times.slice(1).sort((a, b) => a - b)[2];
console.log(`gpt-3-encoder  ${files[0].padEnd(45)} ${String(bytes).padStart(9)} bytes ${String(n).padStart(8)} tokens  ` +
            `cold ${(bytes / cold / 1e6).toFixed(1).padStart(7)} MB/s  warm ${(bytes / warm / 1e6).toFixed(1).padStart(7)} MB/s` +
            `  (module load ${tl.toFixed(0)} ms, node ${process.version})`);
