//! `POST /v1/images/generations` (OpenAI's shape) over a Stable Diffusion pipeline: `prompt`,
//! `n`, `size` (`"WxH"`, multiples of 8), `response_format` `b64_json` (PNG); oxinfer's own
//! fields `negative_prompt`, `steps`, `guidance_scale`, `scheduler` and `seed` (each image `i`
//! uses `seed + i`, and is the image the same request with that seed and `n` = 1 makes; without
//! a seed one is drawn and returned with each image, so any image can be made again). A
//! request's `n` images are made as one batch (one UNet call per denoising step runs all of
//! them), one request at a time (each step already uses every core); at most `queue` requests
//! wait, more get 503.
//!
//! A server on an image model answers only this, `/v1/models` and `/health`; its chat,
//! completion and embedding endpoints say so with a 400.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use base64::Engine;
use oxinfer::arch::diffusion::{image_seed, GenerateRequest, SchedulerKind, StableDiffusion};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::{off_worker, unix_now, ServerConfig};

/// Most images one request may ask for.
pub const MAX_IMAGES: usize = 4;
/// Most denoising steps one request may ask for.
pub const MAX_STEPS: usize = 150;
/// Largest image side, in pixels.
pub const MAX_SIDE: usize = 2048;

/// What the image handlers share.
struct ImageState {
    sd: Arc<StableDiffusion>,
    /// One request computes at a time.
    busy: Mutex<()>,
    /// Requests computing or waiting for `busy`.
    pending: AtomicUsize,
    cfg: ServerConfig,
}

/// The body of `POST /v1/images/generations`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageRequest {
    prompt: String,
    model: Option<String>,
    n: Option<usize>,
    size: Option<String>,
    response_format: Option<String>,
    #[allow(dead_code)]
    user: Option<String>,
    /// Not OpenAI: what to steer away from.
    negative_prompt: Option<String>,
    /// Not OpenAI: denoising steps (default 20; 4 for an LCM model).
    steps: Option<usize>,
    /// Not OpenAI: classifier-free guidance scale (default 7.5, 8.5 for an LCM UNet; 1 or less
    /// turns it off).
    guidance_scale: Option<f32>,
    /// Not OpenAI: euler, euler-a, ddim, dpm++2m or lcm (default: the model's).
    scheduler: Option<String>,
    /// Not OpenAI: the first image's seed.
    seed: Option<u64>,
}

/// `"WxH"` as `(width, height)`; `native` when absent. 400 naming `size` otherwise.
fn parse_size(size: Option<&str>, native: usize) -> Result<(usize, usize), ApiError> {
    let Some(s) = size else {
        return Ok((native, native));
    };
    let bad = |why: String| ApiError::bad_request(format!("size '{s}': {why}")).with_param("size");
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| bad("expected WIDTHxHEIGHT, e.g. 512x512".into()))?;
    let side = |v: &str| -> Result<usize, ApiError> {
        let n: usize = v
            .trim()
            .parse()
            .map_err(|_| bad(format!("'{v}' is not a whole number")))?;
        if n == 0 || !n.is_multiple_of(8) || n > MAX_SIDE {
            return Err(bad(format!(
                "each side must be a positive multiple of 8, at most {MAX_SIDE}"
            )));
        }
        Ok(n)
    };
    Ok((side(w)?, side(h)?))
}

/// A seed for a request that gave none.
fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    // splitmix64's finalizer: nearby clock readings give unrelated seeds.
    let mut z = t.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) >> 11
}

/// The checked request as the pipeline's: its `batch` is `n`, its seed the first image's.
fn pipeline_request(req: &ImageRequest, sd: &StableDiffusion) -> Result<GenerateRequest, ApiError> {
    let native = sd.native_size();
    match req.response_format.as_deref() {
        None | Some("b64_json") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "response_format '{other}' is not supported: images are returned inline \
                 (b64_json); this server hosts no URLs"
            ))
            .with_param("response_format"))
        }
    }
    if req.prompt.trim().is_empty() {
        return Err(ApiError::bad_request("prompt is empty").with_param("prompt"));
    }
    let n = req.n.unwrap_or(1);
    if !(1..=MAX_IMAGES).contains(&n) {
        return Err(
            ApiError::bad_request(format!("n = {n}: between 1 and {MAX_IMAGES}")).with_param("n"),
        );
    }
    let steps = req.steps.unwrap_or_else(|| sd.default_steps());
    if !(1..=MAX_STEPS).contains(&steps) {
        return Err(
            ApiError::bad_request(format!("steps = {steps}: between 1 and {MAX_STEPS}"))
                .with_param("steps"),
        );
    }
    let guidance_scale = req.guidance_scale.unwrap_or_else(|| sd.default_guidance());
    if !guidance_scale.is_finite() || !(0.0..=50.0).contains(&guidance_scale) {
        return Err(ApiError::bad_request(format!(
            "guidance_scale = {guidance_scale}: between 0 and 50"
        ))
        .with_param("guidance_scale"));
    }
    let scheduler = match req.scheduler.as_deref() {
        None => None,
        Some(s) => Some(SchedulerKind::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "scheduler '{s}' is not known ({})",
                SchedulerKind::NAMES
            ))
            .with_param("scheduler")
        })?),
    };
    let (width, height) = parse_size(req.size.as_deref(), native)?;
    let g = GenerateRequest {
        prompt: req.prompt.clone(),
        negative_prompt: req.negative_prompt.clone().unwrap_or_default(),
        steps,
        guidance_scale,
        width,
        height,
        scheduler,
        batch: n,
        seed: req.seed.unwrap_or_else(fresh_seed),
        ..GenerateRequest::default()
    };
    Ok(g)
}

/// One image as a PNG file.
fn png(rgb: Vec<u8>, width: usize, height: usize) -> Result<Vec<u8>, ApiError> {
    let img = image::RgbImage::from_raw(width as u32, height as u32, rgb)
        .ok_or_else(|| ApiError::internal("image buffer size"))?;
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)
        .map_err(|e| ApiError::internal(format!("PNG encoding: {e}")))?;
    Ok(out.into_inner())
}

/// Releases a request's place in the line when the request ends, however it ends.
struct Place<'a>(&'a AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn handle(
    State(st): State<Arc<ImageState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match run(st, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(
    st: Arc<ImageState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: ImageRequest = crate::gen::parse_body(body)?;
    st.cfg.check_model(req.model.as_deref())?;
    let g = pipeline_request(&req, &st.sd)?;
    // One computing plus `queue` waiting.
    let ahead = st.pending.fetch_add(1, Ordering::SeqCst);
    if ahead > st.cfg.queue {
        st.pending.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::busy(
            ahead - 1,
            std::time::Duration::from_secs(10),
        ));
    }
    let worker = st.clone();
    let images = off_worker(move || -> Result<Vec<Value>, ApiError> {
        let _place = Place(&worker.pending);
        let _one_at_a_time = worker.busy.lock().unwrap_or_else(|p| p.into_inner());
        let out = worker
            .sd
            .generate(&g, &mut |_, _, _| {})
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        (0..out.images)
            .map(|i| {
                let file = png(out.rgb8(i), out.width, out.height)?;
                Ok(json!({
                    "b64_json": base64::engine::general_purpose::STANDARD.encode(file),
                    "seed": image_seed(g.seed, i),
                }))
            })
            .collect()
    })
    .await??;
    Ok(axum::Json(json!({"created": unix_now(), "data": images})).into_response())
}

/// The 400 of a text endpoint on an image server.
async fn text_unavailable(State(st): State<Arc<ImageState>>, req: Request) -> ApiError {
    crate::endpoint_unavailable(&st.cfg, "image", req.uri().path(), "/v1/images/generations")
}

/// The 400 of `/v1/images/generations` on a server of a text-generation model.
pub(crate) async fn not_an_image_model(State(st): State<Arc<crate::AppState>>) -> ApiError {
    ApiError::bad_request(format!(
        "the model '{}' is a text-generation model, not an image model; serve a Stable \
         Diffusion diffusers folder with `oxinfer serve -m <folder>`",
        st.cfg.model_id
    ))
    .with_param("model")
    .with_code("model_not_supported")
}

/// The router of a server on an image model, behind the same key, body, JSON, `Host`/`Origin`
/// and logging layers as a generation server ([`crate::protect`]).
pub fn images_router(sd: Arc<StableDiffusion>, cfg: ServerConfig) -> Router {
    let meta = json!({"kind": "image", "native_size": sd.native_size()});
    let state = Arc::new(ImageState {
        sd,
        busy: Mutex::new(()),
        pending: AtomicUsize::new(0),
        cfg,
    });
    let own = Router::new().route("/v1/images/generations", post(handle));
    crate::single_task_router(
        own,
        &["/v1/images/generations"],
        post(text_unavailable),
        meta,
        &state.cfg,
        state.clone(),
    )
}

/// Serves an image model on `listener` (from [`crate::bind`]) until Ctrl-C (or SIGTERM).
pub async fn serve_images(
    listener: std::net::TcpListener,
    sd: Arc<StableDiffusion>,
    cfg: ServerConfig,
) -> std::io::Result<()> {
    let limits = cfg.limits;
    crate::serve_router(listener, images_router(sd, cfg), limits).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size(None, 512).unwrap(), (512, 512));
        assert_eq!(parse_size(Some("64x48"), 512).unwrap(), (64, 48));
        assert_eq!(parse_size(Some("64X48"), 512).unwrap(), (64, 48));
        for bad in ["60x64", "64", "0x64", "axb", "4096x64", "64x-8"] {
            let e = parse_size(Some(bad), 512).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("size"), "{bad}");
            assert!(e.message.contains(bad), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn fresh_seeds_differ() {
        let a = fresh_seed();
        std::thread::sleep(std::time::Duration::from_millis(1));
        assert_ne!(a, fresh_seed());
    }
}
