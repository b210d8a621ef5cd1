// The engine's Web Worker: loads the wasm module (web/pkg or web/pkg-relaxed, made by
// scripts/build-web.sh: see below), holds one model, and answers the requests of oxinfer.js. A
// generation runs one forward pass per step and returns to the event loop between steps, so a
// `cancel` message stops it after at most one pass and every token is posted as soon as it is
// sampled.
//
// Requests: {id, op, ...}. Replies: {id, type: "result", value}, {id, type: "error", message},
// and while an op runs {id, type: "progress", received, total} (load) or {id, type: "token",
// token: {id, text}} (generate).
//
// Two builds of the module: web/pkg-relaxed (relaxed SIMD: faster int8 kernels) where the
// engine has relaxed SIMD, else web/pkg (SIMD128). A module that uses relaxed SIMD does not
// load where it is missing, so the choice is made before loading, by validating a tiny module
// that uses `i32x4.relaxed_dot_i8x16_i7x16_add_s`. `?build=simd128` or `?build=relaxed` on
// the worker's URL (Oxinfer's `build` option) forces one.

/** (func (param v128 v128 v128) (result v128) local.get 0 1 2, i32x4.relaxed_dot_i8x16_i7x16_add_s) */
const RELAXED_PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
  0x01, 0x08, 0x01, 0x60, 0x03, 0x7b, 0x7b, 0x7b, 0x01, 0x7b, // type: (v128 v128 v128) -> v128
  0x03, 0x02, 0x01, 0x00, // function 0 has type 0
  0x0a, 0x0d, 0x01, 0x0b, 0x00, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0xfd, 0x93, 0x02, 0x0b, // code
]);

const BUILDS = { simd128: "./pkg/oxinfer_web.js", relaxed: "./pkg-relaxed/oxinfer_web.js" };

/** The build this worker runs: the one asked for, or the best the engine validates. */
function chooseBuild() {
  const asked = new URL(self.location.href).searchParams.get("build");
  if (asked !== null && asked !== "auto") {
    if (!(asked in BUILDS)) throw new Error(`build: unknown build '${asked}' (expected auto, simd128 or relaxed)`);
    return asked;
  }
  return WebAssembly.validate(RELAXED_PROBE) ? "relaxed" : "simd128";
}

// The module's exports once it is loaded and instantiated.
const ready = (async () => {
  const exports = await import(BUILDS[chooseBuild()]);
  await exports.default();
  return exports;
})();
// The same, once `ready` has resolved (every request awaits it first).
let pkg = null;
let model = null;
let cancelRequested = false;
// Requests run one at a time, in order; `cancel` alone jumps the queue.
let queue = Promise.resolve();

// Reads sources in pieces of this size (a File by slices; a fetch body as it streams).
const PIECE = 16 << 20;

self.onmessage = (e) => {
  const req = e.data;
  if (req.op === "cancel") {
    cancelRequested = true;
    return;
  }
  queue = queue.then(() => handle(req));
};

async function handle(req) {
  try {
    pkg = await ready;
    const op = OPS[req.op];
    if (!op) throw new Error(`unknown request '${req.op}'`);
    const value = await op(req);
    const transfer = value instanceof Float32Array || value instanceof Uint32Array ? [value.buffer] : [];
    self.postMessage({ id: req.id, type: "result", value }, transfer);
  } catch (err) {
    self.postMessage({ id: req.id, type: "error", message: describe(err) });
  }
}

// One line for an error; a wasm trap (a panic in the engine) is reported with the panic's
// message, and the model is dropped (the module cannot be trusted after a trap).
function describe(err) {
  if (err instanceof WebAssembly.RuntimeError) {
    model = null;
    const why = pkg?.lastPanic();
    return `the engine stopped (${why || err.message}); load the model again`;
  }
  return err && err.message ? err.message : String(err);
}

function requireModel() {
  if (!model) throw new Error("no model is loaded");
  return model;
}

const OPS = {
  async kernels(req) {
    const inEffect = pkg.setKernels(req.name);
    if (inEffect !== req.name) {
      throw new Error(`the kernels are already '${inEffect}' in this worker (chosen once, before the first load); use a new Oxinfer`);
    }
    return inEffect;
  },
  async load(req) {
    if (model) {
      model.free();
      model = null;
    }
    const post = (received, total) =>
      self.postMessage({ id: req.id, type: "progress", received, total });
    const loader = await readSource(req.source, post);
    model = loader.finish(req.context ?? undefined);
    return JSON.parse(model.info());
  },
  async tokenize(req) {
    return requireModel().tokenize(req.text, req.addBos ?? true);
  },
  async detokenize(req) {
    return requireModel().detokenize(Uint32Array.from(req.ids));
  },
  async chatTokens(req) {
    return requireModel().chatTokens(JSON.stringify(req.messages));
  },
  async logits(req) {
    return requireModel().lastLogits(Uint32Array.from(req.ids));
  },
  async reset() {
    requireModel().reset();
  },
  async generate(req) {
    const m = requireModel();
    const ids = req.messages ? m.chatTokens(JSON.stringify(req.messages)) : Uint32Array.from(req.ids);
    cancelRequested = false;
    m.start(ids, JSON.stringify(req.options ?? {}));
    let summary = null;
    while (m.running) {
      if (cancelRequested) {
        m.cancel();
        summary = { reason: "cancelled" };
        break;
      }
      for (const ev of JSON.parse(m.step())) {
        if (ev.type === "done") summary = ev;
        else self.postMessage({ id: req.id, type: "token", token: { id: ev.id ?? null, text: ev.text } });
      }
      await yieldToEventLoop();
    }
    return { promptIds: Array.from(ids), ...summary };
  },
};

// A ModelLoader filled from `source`: {url}, {blob} (a File or Blob) or {bytes} (an
// ArrayBuffer), reporting progress as pieces arrive.
async function readSource(source, progress) {
  const { ModelLoader } = pkg;
  if (source.url !== undefined) {
    const resp = await fetch(source.url);
    if (!resp.ok) throw new Error(`${source.url}: HTTP ${resp.status} ${resp.statusText}`);
    const len = resp.headers.get("Content-Length");
    const total = len === null ? undefined : Number(len);
    const loader = new ModelLoader(nameOf(resp.url || source.url), total);
    const reader = resp.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      loader.push(value);
      progress(loader.received, total);
    }
    return loader;
  }
  if (source.blob !== undefined) {
    const blob = source.blob;
    const loader = new ModelLoader(blob.name || "model.gguf", blob.size);
    for (let at = 0; at < blob.size; at += PIECE) {
      const piece = await blob.slice(at, Math.min(at + PIECE, blob.size)).arrayBuffer();
      loader.push(new Uint8Array(piece));
      progress(loader.received, blob.size);
    }
    return loader;
  }
  if (source.bytes !== undefined) {
    const loader = new ModelLoader(source.name || "model.gguf", source.bytes.byteLength);
    loader.push(new Uint8Array(source.bytes));
    progress(loader.received, source.bytes.byteLength);
    return loader;
  }
  throw new Error("load: the source must be {url}, {blob} or {bytes}");
}

function nameOf(url) {
  const path = new URL(url, self.location.href).pathname;
  return decodeURIComponent(path.slice(path.lastIndexOf("/") + 1)) || "model.gguf";
}

// Lets queued messages (a cancel) run: a MessageChannel task, without setTimeout's clamping.
const channel = new MessageChannel();
let wake = null;
channel.port1.onmessage = () => wake?.();
function yieldToEventLoop() {
  return new Promise((resolve) => {
    wake = resolve;
    channel.port2.postMessage(0);
  });
}
