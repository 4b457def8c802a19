// The page's logic: load the exported graph in onnxruntime-web, embed two sentences in one batch,
// and show the cosine of one word's vectors at each layer.
//
// Query parameters (all optional): model, first, second, word fill the fields; auto=1 runs at once;
// report=PATH then POSTs the result as JSON to PATH on this server (what the test does).
import * as ort from "./node_modules/onnxruntime-web/dist/ort.wasm.min.mjs";
import { charIds, cosine, layerVectors, tokenize } from "./elmo-chars.mjs";

const params = new URLSearchParams(location.search);
// Where the runtime's .wasm and its loader are: beside ort.wasm.min.mjs, served from this folder.
ort.env.wasm.wasmPaths = new URL("./node_modules/onnxruntime-web/dist/", import.meta.url).href;
// Threads need SharedArrayBuffer, which browsers give only to cross-origin-isolated pages (served
// with COOP/COEP headers, see README.md); without them, one thread.
ort.env.wasm.numThreads = self.crossOriginIsolated ? Math.min(4, navigator.hardwareConcurrency || 1) : 1;

const $ = (id) => document.getElementById(id);
for (const field of ["model", "first", "second", "word"]) {
  if (params.has(field)) $(field).value = params.get(field);
}
const status = (text) => { $("status").textContent = text; };

let loaded = { url: null, session: null };
async function session(url) {
  if (loaded.url !== url) {
    loaded = { url, session: await ort.InferenceSession.create(url, { executionProviders: ["wasm"] }) };
  }
  return loaded.session;
}

async function compare() {
  const started = performance.now();
  const word = $("word").value.trim();
  const sentences = [tokenize($("first").value), tokenize($("second").value)];
  const where = sentences.map((tokens) => tokens.indexOf(word));
  if (!word || where.includes(-1)) {
    throw new Error(`the word ${JSON.stringify(word)} must be a token of both sentences (split on spaces)`);
  }
  status(`Loading ${$("model").value} ...`);
  const graph = await session($("model").value);
  const loadedAt = performance.now();
  status("Embedding ...");
  const { data, dims } = charIds(sentences);
  const { layers } = await graph.run({ char_ids: new ort.Tensor("int64", data, dims) });
  const vectors = layerVectors(layers, sentences.map((s) => s.length)); // [sentence][layer][token]
  const cosines = vectors[0].map((_, l) => cosine(vectors[0][l][where[0]], vectors[1][l][where[1]]));
  const done = performance.now();

  const body = $("table").tBodies[0];
  body.replaceChildren(...cosines.map((c, l) => {
    const row = document.createElement("tr");
    const name = l === 0 ? "0 (token: no context)" : `${l} (LSTM)`;
    row.innerHTML = `<td>${name}</td><td class="num">${c.toFixed(4)}</td>` +
      `<td><span class="bar" style="width:${Math.max(0, c) * 12}rem"></span></td>`;
    return row;
  }));
  $("table").hidden = false;
  status(`"${word}": ${layers.dims[1]} layers of ${layers.dims[3]} dimensions; ` +
         `model loaded in ${((loadedAt - started) / 1000).toFixed(2)} s, two sentences embedded in ` +
         `${(done - loadedAt).toFixed(0)} ms (${ort.env.wasm.numThreads} thread${ort.env.wasm.numThreads > 1 ? "s" : ""}).`);
  return { sentences, where, cosines, vectors, threads: ort.env.wasm.numThreads,
           crossOriginIsolated: self.crossOriginIsolated, loadSeconds: (loadedAt - started) / 1000,
           embedMilliseconds: done - loadedAt };
}

async function report(result) {
  if (params.has("report")) {
    await fetch(params.get("report"), { method: "POST", headers: { "Content-Type": "application/json" },
                                         body: JSON.stringify(result) });
  }
}

async function run() {
  try {
    await report(await compare());
  } catch (e) {
    status(`Error: ${e.message ?? e}`);
    await report({ error: String(e.message ?? e) });
  }
}

$("run").addEventListener("click", run);
status("Ready: press Compare (the model downloads on the first run).");
if (params.get("auto") === "1") run();
