// bilm-tf's character ids for an ELMo graph exported by `elmo export --format onnx`, in plain
// JavaScript: the rule docs/onnx.md writes out. No dependency, so the browser page beside it and
// the Node.js client (examples/onnx-node/embed.mjs) import the same file.
//
//   import { tokenize, charIds } from "./elmo-chars.mjs";
//   const { data, dims } = charIds([tokenize("The bank raised rates .")]);
//   const input = new ort.Tensor("int64", data, dims);   // the graph's char_ids

export const WIDTH = 50; // ids per token
const BOW = 259, EOW = 260, PAD = 261; // begin-of-word, end-of-word, in-word padding (bilm-tf's 258-260, + 1)
const BOS = 257, EOS = 258; // <S> and </S>: one-"byte" tokens 256 and 257, + 1

// A line split on whitespace, as elmo's tokenizer (Python's str.split()) splits it.
export function tokenize(text) {
  return text.split(/\s+/).filter((t) => t.length > 0);
}

function markerIds(id) {
  const ids = new Array(WIDTH).fill(PAD);
  ids[0] = BOW; ids[1] = id; ids[2] = EOW;
  return ids;
}

// The 50 ids of one token: BOW, its UTF-8 bytes (the first 48) each + 1, EOW, then PAD; the
// literal tokens <S> and </S> are the sentence markers, as in bilm-tf.
export function tokenIds(token) {
  if (token === "<S>" || token === "</S>") return markerIds(token === "<S>" ? BOS : EOS);
  const bytes = new TextEncoder().encode(token).subarray(0, WIDTH - 2); // may cut a character, as bilm-tf does
  const ids = new Array(WIDTH).fill(PAD);
  ids[0] = BOW;
  bytes.forEach((b, i) => { ids[i + 1] = b + 1; });
  ids[bytes.length + 1] = EOW;
  return ids;
}

// The graph's char_ids for a batch of token lists: int64 data of shape (batch, longest + 2, 50),
// each row <S>, its tokens, </S>, then zero rows. Every sentence needs at least one token.
export function charIds(sentences) {
  if (sentences.length === 0 || sentences.some((s) => s.length === 0)) {
    throw new Error("charIds: every sentence needs at least one token");
  }
  const time = Math.max(...sentences.map((s) => s.length)) + 2;
  const data = new BigInt64Array(sentences.length * time * WIDTH); // zeros: rows past </S>
  sentences.forEach((tokens, row) => {
    const rows = [markerIds(BOS), ...tokens.map(tokenIds), markerIds(EOS)];
    rows.forEach((ids, t) => ids.forEach((id, k) => {
      data[(row * time + t) * WIDTH + k] = BigInt(id);
    }));
  });
  return { data, dims: [sentences.length, time, WIDTH] };
}

// The graph's `layers` output (float32, (batch, L + 1, time, dim)) as vectors[sentence][layer][token],
// each cut to its sentence's own tokens.
export function layerVectors(layers, lengths) {
  const [batch, nLayers, time, dim] = layers.dims;
  const out = [];
  for (let b = 0; b < batch; b++) {
    out.push([]);
    for (let l = 0; l < nLayers; l++) {
      out[b].push([]);
      for (let t = 0; t < lengths[b]; t++) {
        const start = ((b * nLayers + l) * time + t) * dim;
        out[b][l].push(Array.from(layers.data.subarray(start, start + dim)));
      }
    }
  }
  return out;
}

export function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return dot / Math.sqrt(na * nb);
}
