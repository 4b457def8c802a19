// Embed one sentence with an ELMo biLM exported by `elmo export --format onnx`, from Node.js with
// onnxruntime-node: no Python. The character ids are built here by the rule docs/onnx.md writes out.
//
//   node embed.mjs MODEL.onnx "A sentence , split on spaces ." [OUT.json]
//
// Prints each layer's shape and the first values of each token's vector; with OUT.json, writes
// every layer's vectors there ({"tokens": [...], "layers": [[[...]]]}) to compare with Python's.
import { writeFileSync } from "node:fs";
import * as ort from "onnxruntime-node";

const WIDTH = 50; // ids per token
const BOW = 259, EOW = 260, PAD = 261; // begin-of-word, end-of-word, in-word padding (bilm-tf's 258-260, + 1)
const BOS = 257, EOS = 258; // <S> and </S>: one-"byte" tokens 256 and 257, + 1

// The 50 ids of one token: BOW, its UTF-8 bytes (the first 48) each + 1, EOW, then PAD.
function tokenIds(token) {
  if (token === "<S>" || token === "</S>") return markerIds(token === "<S>" ? BOS : EOS);
  const bytes = new TextEncoder().encode(token).subarray(0, WIDTH - 2); // may cut a character, as bilm-tf does
  const ids = new Array(WIDTH).fill(PAD);
  ids[0] = BOW;
  bytes.forEach((b, i) => { ids[i + 1] = b + 1; });
  ids[bytes.length + 1] = EOW;
  return ids;
}

function markerIds(id) {
  const ids = new Array(WIDTH).fill(PAD);
  ids[0] = BOW; ids[1] = id; ids[2] = EOW;
  return ids;
}

// The graph's input for a batch of token lists: (batch, longest + 2, 50) int64; <S>, tokens, </S>, zero rows.
function batchIds(sentences) {
  const time = Math.max(...sentences.map((s) => s.length)) + 2;
  const data = new BigInt64Array(sentences.length * time * WIDTH); // zeros: rows past </S>
  sentences.forEach((tokens, row) => {
    const rows = [markerIds(BOS), ...tokens.map(tokenIds), markerIds(EOS)];
    rows.forEach((ids, t) => ids.forEach((id, k) => {
      data[(row * time + t) * WIDTH + k] = BigInt(id);
    }));
  });
  return new ort.Tensor("int64", data, [sentences.length, time, WIDTH]);
}

const [model, text, out] = process.argv.slice(2);
if (!model || text === undefined) {
  console.error('usage: node embed.mjs MODEL.onnx "A sentence ." [OUT.json]');
  process.exit(2);
}
const tokens = text.split(/\s+/).filter((t) => t.length > 0); // str.split(): elmo's tokenizer
const session = await ort.InferenceSession.create(model);
const { layers } = await session.run({ char_ids: batchIds([tokens]) });
const [, nLayers, time, dim] = layers.dims; // (1, L + 1, tokens, 2 * projection_dim)
const vectors = [];
for (let l = 0; l < nLayers; l++) {
  vectors.push([]);
  for (let t = 0; t < time; t++) {
    const start = (l * time + t) * dim;
    vectors[l].push(Array.from(layers.data.subarray(start, start + dim)));
  }
  console.log(`layer ${l}: ${time} x ${dim};`, vectors[l].map((v, t) => `${tokens[t]} [${v.slice(0, 3).map((x) => x.toFixed(5)).join(", ")}, ...]`).join("; "));
}
if (out) writeFileSync(out, JSON.stringify({ tokens, layers: vectors }));
