//! The JS API (wasm-bindgen): `ModelLoader` assembles a file from pieces, `Model` tokenizes,
//! generates a step at a time and returns logits. Values cross as typed arrays
//! (`Uint8Array`, `Uint32Array`, `Float32Array`) and JSON strings; every error is a JS `Error`
//! with one line of text. `web/worker.js` is the caller; see docs/wasm.md for the API.

use crate::chunks::ChunkedFile;
use crate::error::WebError;
use crate::options::GenerateSettings;
use crate::session::ChatEngine;
use oxinfer::{ChatMessage, Model};
use oxinfer_kernels::dispatch::{self, KernelSet};
use std::sync::Mutex;
use wasm_bindgen::prelude::*;

/// The message of the last panic, kept for [`last_panic`]: in wasm a panic aborts (a JS
/// `RuntimeError: unreachable`) without saying why.
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Records panic messages for [`last_panic`] (runs once, when the module starts).
#[wasm_bindgen(start)]
pub fn start() {
    std::panic::set_hook(Box::new(|info| {
        let mut last = LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner());
        *last = Some(info.to_string());
    }));
}

/// The message of the panic that stopped the module, if one did (the module cannot be used
/// after it: load it again in a new worker).
#[wasm_bindgen(js_name = lastPanic)]
pub fn last_panic() -> Option<String> {
    LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The instruction set the kernels run on (`simd128` in a browser with WebAssembly SIMD).
#[wasm_bindgen(js_name = kernelIsa)]
pub fn kernel_isa() -> String {
    oxinfer_kernels::dispatch::detected_isa().name().to_string()
}

/// Chooses the kernels of this module instance, `"auto"` (SIMD128, the default) or `"scalar"`
/// (the plain reference kernels: `OXINFER_KERNELS=scalar`, for comparing with a native run
/// token for token). The choice is made once, before the first model loads; returns the set
/// in effect, which differs from the one asked for when it was made already.
#[wasm_bindgen(js_name = setKernels)]
pub fn set_kernels(name: &str) -> Result<String, JsError> {
    let set = KernelSet::parse(name).ok_or_else(|| {
        JsError::new(&format!(
            "kernels: unknown set {name:?} (expected \"auto\" or \"scalar\")"
        ))
    })?;
    Ok(dispatch::set_kernel_set(set).name().to_string())
}

fn js(e: WebError) -> JsError {
    JsError::new(&e.to_string())
}

/// A model file arriving in pieces (a `File` read by slices, a `fetch` body read as a stream).
#[wasm_bindgen]
pub struct ModelLoader {
    file: ChunkedFile,
}

#[wasm_bindgen]
impl ModelLoader {
    /// A loader for the file `name` (used in messages) of `size` bytes (`undefined` when
    /// unknown).
    #[wasm_bindgen(constructor)]
    pub fn new(name: &str, size: Option<f64>) -> Result<ModelLoader, JsError> {
        let size = size.map(|s| s.max(0.0) as u64);
        Ok(ModelLoader {
            file: ChunkedFile::new(name, size).map_err(js)?,
        })
    }

    /// Appends the next piece (copied into the module's memory).
    pub fn push(&mut self, piece: &[u8]) -> Result<(), JsError> {
        self.file.push(piece).map_err(js)
    }

    /// Bytes received so far.
    #[wasm_bindgen(getter)]
    pub fn received(&self) -> f64 {
        self.file.received() as f64
    }

    /// Parses the file as a GGUF model, with a cache of `context` positions (`undefined`: the
    /// model's context length). The loader is consumed.
    pub fn finish(self, context: Option<u32>) -> Result<WebModel, JsError> {
        let (name, bytes) = self.file.finish().map_err(js)?;
        WebModel::from_bytes(&name, bytes, context)
    }
}

/// A loaded model with its generation slot.
#[wasm_bindgen(js_name = Model)]
pub struct WebModel {
    engine: ChatEngine,
}

#[wasm_bindgen(js_class = Model)]
impl WebModel {
    /// Loads a GGUF file from its bytes (`name` is used in messages), with a cache of
    /// `context` positions (`undefined`: the model's context length).
    #[wasm_bindgen(js_name = fromBytes)]
    pub fn from_bytes(
        name: &str,
        bytes: Vec<u8>,
        context: Option<u32>,
    ) -> Result<WebModel, JsError> {
        let model = Model::load_gguf_bytes(name, bytes).map_err(|e| js(e.into()))?;
        Ok(WebModel {
            engine: ChatEngine::new(model, context.map(|c| c as usize)),
        })
    }

    /// A JSON object describing the model: `name`, `architecture`, `parameters`,
    /// `vocabSize`, `contextLength`, `capacity` (positions of the cache), `hasChatTemplate`,
    /// `loadMs`, `isa`, `kernels` (`auto` or `scalar`).
    pub fn info(&self) -> String {
        let m = self.engine.model();
        let i = m.info();
        serde_json::json!({
            "name": m.path().display().to_string(),
            "architecture": i.architecture,
            "parameters": i.parameters,
            "vocabSize": m.config().vocab_size,
            "contextLength": i.context_length,
            "capacity": self.engine.capacity(),
            "hasChatTemplate": i.has_chat_template,
            "loadMs": m.load_time().as_secs_f64() * 1e3,
            "isa": kernel_isa(),
            "kernels": oxinfer_kernels::kernel_set().name(),
        })
        .to_string()
    }

    /// The ids of `text` (BOS prepended when `addBos` and the model asks for one; special-token
    /// text becomes control tokens, as in `oxinfer run --raw`).
    pub fn tokenize(&self, text: &str, add_bos: bool) -> Result<Vec<u32>, JsError> {
        let m = self.engine.model();
        m.tokenize(text, add_bos && m.adds_bos())
            .map_err(|e| js(e.into()))
    }

    /// The text of `ids`.
    pub fn detokenize(&self, ids: &[u32]) -> Result<String, JsError> {
        let tok = self
            .engine
            .model()
            .require_tokenizer()
            .map_err(|e| js(e.into()))?;
        Ok(tok.decode(ids))
    }

    /// The prompt ids of a conversation given as JSON (`[{"role": "user", "content": "…"}]`):
    /// rendered through the model's chat template with the assistant's turn opened.
    #[wasm_bindgen(js_name = chatTokens)]
    pub fn chat_tokens(&self, messages_json: &str) -> Result<Vec<u32>, JsError> {
        let messages: Vec<ChatMessage> = serde_json::from_str(messages_json)
            .map_err(|e| js(WebError::request(format!("chat messages: {e}"))))?;
        self.engine.chat_tokens(&messages).map_err(js)
    }

    /// Starts generating after `ids` with the options given as JSON (see `options.rs`: e.g.
    /// `{"maxTokens": 64, "temperature": 0}`).
    pub fn start(&mut self, ids: &[u32], options_json: &str) -> Result<(), JsError> {
        let opts = GenerateSettings::from_json(options_json).map_err(js)?;
        self.engine
            .start(ids.to_vec(), opts.to_options())
            .map_err(js)
    }

    /// Runs one forward pass; returns its events as a JSON array of `{"type": "token", "id",
    /// "text"}`, `{"type": "text", "text"}` and, last, `{"type": "done", "reason", "tokens",
    /// "promptTokens", "cachedTokens", "prefillTokens", "prefillMs", "decodeTokens",
    /// "decodeMs"}`. `[]` when nothing is running.
    pub fn step(&mut self) -> Result<String, JsError> {
        let events = self.engine.step().map_err(js)?;
        serde_json::to_string(&events).map_err(|e| JsError::new(&e.to_string()))
    }

    /// Whether a generation is running.
    #[wasm_bindgen(getter)]
    pub fn running(&self) -> bool {
        self.engine.is_running()
    }

    /// Stops the running generation (the cache keeps what it holds); whether one was running.
    pub fn cancel(&mut self) -> bool {
        self.engine.cancel()
    }

    /// Forgets the cached conversation.
    pub fn reset(&mut self) {
        self.engine.reset();
    }

    /// The logits of the last position after `ids` run from an empty cache (`vocabSize`
    /// floats): `oxinfer run --tokens IDS --dump-logits`'s last row.
    #[wasm_bindgen(js_name = lastLogits)]
    pub fn last_logits(&self, ids: &[u32]) -> Result<Vec<f32>, JsError> {
        self.engine.last_logits(ids).map_err(js)
    }
}
