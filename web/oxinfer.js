// oxinfer in the browser: the page-side API. The engine runs in a Web Worker (worker.js), so
// loading and generating never block the page.
//
//   import { Oxinfer } from "./oxinfer.js";
//   const ox = new Oxinfer();
//   const info = await ox.load({ url: "models/SmolLM2-135M-Instruct.Q4_1.gguf" },
//                              { onProgress: (received, total) => {} });
//   const summary = await ox.generate([{ role: "user", content: "Hi" }],
//                                     { maxTokens: 64, temperature: 0 },
//                                     (tok) => out.append(tok.text));
//   for await (const tok of ox.stream(messages, options)) { ... }   // the same, as an iterator
//   ox.cancel();                                                      // stops a generation
//   const row = await ox.lastLogits([1, 504, 3575]);                  // Float32Array(vocab)
//   await new Oxinfer().setKernels("scalar");   // before its first load: the reference kernels
//   new Oxinfer(undefined, { build: "simd128" }); // that module, not the best one the browser runs
//
// A source is {url} (same origin, streamed), {blob} (a File from a picker or a drop, read in
// 16 MiB slices) or {bytes} (an ArrayBuffer). Options are those of crates/oxinfer-web
// (options.rs): maxTokens, temperature, topK, topP, minP, repeatPenalty, seed, stop,
// ignoreEos, prefillChunk. Errors reject with an Error of one line.

export class Oxinfer {
  /**
   * Starts the worker (module worker; `workerUrl` defaults to worker.js beside this file).
   * `build`: "auto" (the default: the relaxed-SIMD module where the browser has relaxed SIMD,
   * else the SIMD128 one), "simd128" or "relaxed".
   */
  constructor(workerUrl = new URL("./worker.js", import.meta.url), { build = "auto" } = {}) {
    const url = new URL(workerUrl, globalThis.location?.href);
    if (build !== "auto") url.searchParams.set("build", build);
    this.worker = new Worker(url, { type: "module" });
    this.nextId = 1;
    this.pending = new Map();
    this.worker.onmessage = (e) => this.#receive(e.data);
    this.worker.onerror = (e) => this.#failAll(e.message || "the worker failed to start");
  }

  /**
   * Chooses the kernels, "auto" (SIMD128, the default) or "scalar" (the reference kernels, as
   * OXINFER_KERNELS=scalar natively); only before the first load of this worker.
   */
  setKernels(name) {
    return this.#call({ op: "kernels", name });
  }

  /** Loads a GGUF model; resolves to its info (name, architecture, vocabSize, isa, …). */
  load(source, { context, onProgress } = {}) {
    // A relative URL is relative to the page, not to the worker's script.
    if (source.url !== undefined) source = { url: new URL(source.url, globalThis.location?.href).href };
    return this.#call({ op: "load", source, context }, { onProgress });
  }

  /** Token ids of `text` (BOS per the model when `addBos`). */
  tokenize(text, addBos = true) {
    return this.#call({ op: "tokenize", text, addBos });
  }

  /** The text of token ids. */
  detokenize(ids) {
    return this.#call({ op: "detokenize", ids: Array.from(ids) });
  }

  /** Prompt ids of a conversation [{role, content}], through the model's chat template. */
  chatTokens(messages) {
    return this.#call({ op: "chatTokens", messages });
  }

  /**
   * Generates after `prompt`: a conversation [{role, content}] or token ids. `onToken({id,
   * text})` is called per token; resolves to the summary {reason, tokens, promptIds,
   * promptTokens, cachedTokens, prefillTokens, prefillMs, decodeTokens, decodeMs}.
   */
  generate(prompt, options = {}, onToken = () => {}) {
    const req = isIds(prompt) ? { ids: Array.from(prompt) } : { messages: prompt };
    return this.#call({ op: "generate", ...req, options }, { onToken });
  }

  /** `generate` as an async iterator of tokens; `.summary` holds the summary at its end. */
  stream(prompt, options = {}) {
    const queue = [];
    let wake = null;
    let finished = false;
    let failure = null;
    const it = {
      summary: null,
      [Symbol.asyncIterator]() {
        return this;
      },
      next: async () => {
        while (queue.length === 0 && !finished) await new Promise((r) => (wake = r));
        if (queue.length) return { value: queue.shift(), done: false };
        if (failure) throw failure;
        return { value: undefined, done: true };
      },
      return: async () => {
        if (!finished) this.cancel();
        return { value: undefined, done: true };
      },
    };
    const poke = () => wake?.();
    this.generate(prompt, options, (t) => {
      queue.push(t);
      poke();
    }).then(
      (s) => {
        it.summary = s;
        finished = true;
        poke();
      },
      (e) => {
        failure = e;
        finished = true;
        poke();
      },
    );
    return it;
  }

  /** Stops the running generation (its promise resolves with reason "cancelled"). */
  cancel() {
    this.worker.postMessage({ op: "cancel" });
  }

  /** Forgets the cached conversation. */
  reset() {
    return this.#call({ op: "reset" });
  }

  /** The last position's logits after `ids` (Float32Array of vocabSize). */
  lastLogits(ids) {
    return this.#call({ op: "logits", ids: Array.from(ids) });
  }

  /** Stops the worker and frees its memory. */
  terminate() {
    this.worker.terminate();
    this.#failAll("the worker was terminated");
  }

  #call(req, handlers = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, ...handlers });
      this.worker.postMessage({ id, ...req });
    });
  }

  #receive(msg) {
    const p = this.pending.get(msg.id);
    if (!p) return;
    if (msg.type === "progress") p.onProgress?.(msg.received, msg.total);
    else if (msg.type === "token") p.onToken?.(msg.token);
    else {
      this.pending.delete(msg.id);
      if (msg.type === "result") p.resolve(msg.value);
      else p.reject(new Error(msg.message));
    }
  }

  #failAll(message) {
    for (const p of this.pending.values()) p.reject(new Error(message));
    this.pending.clear();
  }
}

function isIds(prompt) {
  return ArrayBuffer.isView(prompt) || (Array.isArray(prompt) && typeof prompt[0] === "number");
}
