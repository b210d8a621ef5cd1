//! The server's request bodies: JSON → `ChatRequest` / `CompletionRequest` (what the handlers'
//! body parser does: `serde_json::from_slice` into these types), then the chat path's message
//! and tool handling rendered through a ChatML template with tools, both with native and with
//! fallback tool handling.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use oxinfer::chat_template::ChatTemplate;
use oxinfer_server::api::{ChatRequest, CompletionRequest};
use oxinfer_server::prompt;

const TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}\
{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}<|im_end|>\n{% endfor %}\
{% if tools %}{{ tools | tojson }}{% endif %}<|im_start|>assistant\n";

fuzz_target!(|data: &[u8]| {
    static TPL: OnceLock<ChatTemplate> = OnceLock::new();
    let tpl = TPL.get_or_init(|| ChatTemplate::new(TEMPLATE, None, None).expect("template"));
    let _ = serde_json::from_slice::<CompletionRequest>(data);
    let Ok(req) = serde_json::from_slice::<ChatRequest>(data) else {
        return;
    };
    for native in [true, false] {
        let _ = prompt::render_with(tpl, native, &req.messages, req.tools.as_deref());
    }
});
