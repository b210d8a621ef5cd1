//! Ollama's params layer (`application/vnd.ollama.image.params`): the `PARAMETER` lines of the
//! model's Modelfile as one JSON object, e.g.
//! `{"stop": ["<|im_end|>"], "temperature": 0.7, "top_k": 20, "num_ctx": 4096}`.
//! They are defaults: a front end applies each one the user did not set.

/// The generation defaults an Ollama model ships. Each is `None` (or empty) when absent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OllamaParams {
    /// `temperature`.
    pub temperature: Option<f32>,
    /// `top_k` (0 = off).
    pub top_k: Option<usize>,
    /// `top_p`.
    pub top_p: Option<f32>,
    /// `min_p`.
    pub min_p: Option<f32>,
    /// `repeat_penalty`.
    pub repeat_penalty: Option<f32>,
    /// `seed`.
    pub seed: Option<u64>,
    /// `stop`: strings that end the reply.
    pub stop: Vec<String>,
    /// `num_ctx`: context length in tokens.
    pub num_ctx: Option<usize>,
    /// `num_predict`: most tokens to generate (Ollama's -1 = unlimited reads as `None`).
    pub num_predict: Option<usize>,
    /// Keys present but not used by oxinfer (`mirostat`, `num_gpu`, ...), sorted.
    pub ignored: Vec<String>,
}

impl OllamaParams {
    /// Parses the layer's JSON; a key of the wrong type is an error naming it.
    pub fn parse(json: &str) -> Result<OllamaParams, String> {
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
        let obj = v.as_object().ok_or("not a JSON object")?;
        let mut p = OllamaParams::default();
        for (key, value) in obj {
            let float = || {
                value
                    .as_f64()
                    .map(|f| f as f32)
                    .ok_or_else(|| format!("'{key}' is {value}, expected a number"))
            };
            let count = || {
                value
                    .as_i64()
                    .ok_or_else(|| format!("'{key}' is {value}, expected an integer"))
            };
            let unsigned = || {
                count().and_then(|n| {
                    usize::try_from(n).map_err(|_| format!("'{key}' is {n}, expected >= 0"))
                })
            };
            match key.as_str() {
                "temperature" => p.temperature = Some(float()?),
                "top_k" => p.top_k = Some(unsigned()?),
                "top_p" => p.top_p = Some(float()?),
                "min_p" => p.min_p = Some(float()?),
                "repeat_penalty" => p.repeat_penalty = Some(float()?),
                "seed" => p.seed = Some(count()? as u64),
                "num_ctx" => p.num_ctx = Some(unsigned()?),
                "num_predict" => p.num_predict = usize::try_from(count()?).ok(),
                "stop" => {
                    let list = match value {
                        serde_json::Value::String(s) => vec![s.clone()],
                        serde_json::Value::Array(a) => a
                            .iter()
                            .map(|s| s.as_str().map(str::to_string))
                            .collect::<Option<Vec<_>>>()
                            .ok_or_else(|| format!("'stop' is {value}, expected strings"))?,
                        _ => return Err(format!("'stop' is {value}, expected strings")),
                    };
                    p.stop.extend(list);
                }
                other => p.ignored.push(other.to_string()),
            }
        }
        p.ignored.sort();
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_keys_typed_others_listed_bad_types_named() {
        let p = OllamaParams::parse(
            r#"{"stop":["<|im_start|>","<|im_end|>"],"temperature":0.7,"top_k":20,
                "top_p":0.8,"min_p":0,"repeat_penalty":1.05,"num_ctx":4096,"num_predict":-1,
                "seed":7,"mirostat":2,"num_gpu":99}"#,
        )
        .unwrap();
        assert_eq!(p.stop, ["<|im_start|>", "<|im_end|>"]);
        assert_eq!(
            (p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty),
            (Some(0.7), Some(20), Some(0.8), Some(0.0), Some(1.05))
        );
        assert_eq!(
            (p.num_ctx, p.num_predict, p.seed),
            (Some(4096), None, Some(7))
        );
        assert_eq!(p.ignored, ["mirostat", "num_gpu"]);
        let e = OllamaParams::parse(r#"{"top_k":"many"}"#).unwrap_err();
        assert!(e.contains("'top_k'") && e.contains("integer"), "{e}");
        assert!(OllamaParams::parse("[1]").unwrap_err().contains("object"));
    }
}
