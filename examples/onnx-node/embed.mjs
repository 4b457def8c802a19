// Embed one sentence with an ELMo biLM exported by `elmo export --format onnx`, from Node.js with
// onnxruntime-node: no Python. The character ids are built by ../web/elmo-chars.mjs (the rule
// docs/onnx.md writes out), the file the browser example uses too.
//
//   node embed.mjs MODEL.onnx "A sentence , split on spaces ." [OUT.json]
//
// Prints each layer's shape and the first values of each token's vector; with OUT.json, writes
// every layer's vectors there ({"tokens": [...], "layers": [[[...]]]}) to compare with Python's.
import { writeFileSync } from "node:fs";
import * as ort from "onnxruntime-node";
import { charIds, layerVectors, tokenize } from "../web/elmo-chars.mjs";

const [model, text, out] = process.argv.slice(2);
if (!model || text === undefined) {
  console.error('usage: node embed.mjs MODEL.onnx "A sentence ." [OUT.json]');
  process.exit(2);
}
const tokens = tokenize(text); // str.split(): elmo's tokenizer
const session = await ort.InferenceSession.create(model);
const { data, dims } = charIds([tokens]);
const { layers } = await session.run({ char_ids: new ort.Tensor("int64", data, dims) });
const vectors = layerVectors(layers, [tokens.length])[0]; // [layer][token][dim]
vectors.forEach((layer, l) => {
  console.log(`layer ${l}: ${tokens.length} x ${layers.dims[3]};`, layer.map((v, t) => `${tokens[t]} [${v.slice(0, 3).map((x) => x.toFixed(5)).join(", ")}, ...]`).join("; "));
});
if (out) writeFileSync(out, JSON.stringify({ tokens, layers: vectors }));
