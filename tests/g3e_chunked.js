// g3e_chunked.js - whole-file encoding with the npm package gpt-3-encoder, shared by
// tests/make_tokenizer_fixtures.js and bench/bench_tokenizer.js. Its encode() concatenates
// arrays once per piece (quadratic in the tokens), so the text is cut at safe points first:
// before a space that follows a non-space no pattern match spans the cut (a space can only start
// a match or sit in a whitespace run). Chunks of ~400 characters; the ids are unchanged.
'use strict';

function encodeChunked(encode, text) {
  const parts = text.split(/(?<=\S)(?= )/u);
  const ids = [];
  let buf = '';
  for (const p of parts) {
    buf += p;
    if (buf.length > 400) { for (const id of encode(buf)) ids.push(id); buf = ''; }
  }
  for (const id of encode(buf)) ids.push(id);
  return ids;
}

module.exports = { encodeChunked };
