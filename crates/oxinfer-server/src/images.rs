//! `POST /v1/images/generations` (OpenAI's shape) over a Stable Diffusion pipeline: `prompt`,
//! `n`, `size` (`"WxH"`, multiples of 8), `response_format` `b64_json` (PNG); oxinfer's own
//! fields `negative_prompt`, `steps`, `guidance_scale`, `scheduler` and `seed` (each image `i`
//! uses `seed + i`, and is the image the same request with that seed and `n` = 1 makes; without
//! a seed one is drawn and returned with each image, so any image can be made again). A
//! request's `n` images are made as one batch (one UNet call per denoising step runs all of
//! them), one request at a time (each step already uses every core); at most `queue` requests
//! wait, more get 503.
//!
//! `POST /v1/images/edits` (OpenAI's `images.edit`, a multipart/form-data body): one `image`
//! file (PNG, JPEG or WebP; its size is the output's, `size` may only repeat it), an optional
//! `mask`, `prompt` and the fields above, plus `strength` (in (0, 1], default 0.8 as `oxinfer
//! image`). Without a mask a plain UNet does image to image; with one, inpainting (an inpainting
//! model, of a 9-channel UNet, needs the mask and makes no image from text alone: its
//! generations answer 400). The mask follows OpenAI: its fully transparent pixels (alpha 0) are
//! repainted, all others kept; it is converted to the white = repaint mask of `oxinfer image
//! --mask` ([`openai_mask`]), so a request makes the PNG that command makes.
//!
//! A server on an image model answers only these, `/v1/models` and `/health`; its chat,
//! completion and embedding endpoints say so with a 400.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::multipart::{MultipartError, MultipartRejection};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Multipart, Request, State};
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
/// An edit's strength when the request gives none (`oxinfer image --strength`'s default).
pub const DEFAULT_STRENGTH: f32 = 0.8;

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
#[derive(Deserialize, Default)]
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
        if !valid_side(n) {
            return Err(bad(format!(
                "each side must be a positive multiple of 8, at most {MAX_SIDE}"
            )));
        }
        Ok(n)
    };
    Ok((side(w)?, side(h)?))
}

/// Whether an image side (pixels) is one the pipeline makes: a positive multiple of 8 (the
/// VAE's scale), at most [`MAX_SIDE`].
fn valid_side(n: usize) -> bool {
    n > 0 && n.is_multiple_of(8) && n <= MAX_SIDE
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
/// `(width, height)` is the checked output size.
fn pipeline_request(
    req: &ImageRequest,
    sd: &StableDiffusion,
    (width, height): (usize, usize),
) -> Result<GenerateRequest, ApiError> {
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
    if st.sd.is_inpainting() {
        return Err(ApiError::bad_request(format!(
            "the model '{}' is an inpainting model: it repaints part of a given image and \
             cannot make one from text alone; use POST /v1/images/edits with an image and a mask",
            st.cfg.model_id
        ))
        .with_param("model")
        .with_code("model_not_supported"));
    }
    let size = parse_size(req.size.as_deref(), st.sd.native_size())?;
    let g = pipeline_request(&req, &st.sd, size)?;
    compute(st, g).await
}

/// Runs `g` (one request computing, `queue` waiting, more get 503) and answers with its images.
async fn compute(st: Arc<ImageState>, g: GenerateRequest) -> Result<Response, ApiError> {
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

async fn handle_edit(
    State(st): State<Arc<ImageState>>,
    form: Result<Multipart, MultipartRejection>,
) -> Response {
    match run_edit(st, form).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// The fields of a `POST /v1/images/edits` form.
#[derive(Default)]
struct EditForm {
    req: ImageRequest,
    image: Option<Bytes>,
    mask: Option<Bytes>,
    strength: Option<f32>,
}

/// A form field's text parsed as a `T`; 400 naming the field otherwise.
fn form_value<T: std::str::FromStr>(name: &str, text: &str) -> Result<T, ApiError> {
    text.trim().parse().map_err(|_| {
        ApiError::bad_request(format!("{name} '{text}' is not a valid value for {name}"))
            .with_param(name)
    })
}

/// Reads the whole form: one `image` (or `image[]`), at most one `mask`, the text fields of
/// `/v1/images/generations` and `strength`; an unknown or repeated field is a 400.
async fn read_form(mut form: Multipart) -> Result<EditForm, ApiError> {
    let bad_form =
        |e: MultipartError| ApiError::bad_request(format!("the multipart form is not valid: {e}"));
    let mut f = EditForm::default();
    let mut seen = std::collections::HashSet::new();
    while let Some(field) = form.next_field().await.map_err(bad_form)? {
        let name = match field.name() {
            Some("image[]") => "image".to_string(),
            Some(n) => n.to_string(),
            None => return Err(ApiError::bad_request("a form field has no name")),
        };
        if !seen.insert(name.clone()) {
            let why = match name.as_str() {
                "image" => "one image per request",
                _ => "give each field once",
            };
            return Err(
                ApiError::bad_request(format!("the field '{name}' is repeated: {why}"))
                    .with_param(name),
            );
        }
        let data = field.bytes().await.map_err(bad_form)?;
        match name.as_str() {
            "image" => {
                f.image = Some(data);
                continue;
            }
            "mask" => {
                f.mask = Some(data);
                continue;
            }
            _ => {}
        }
        let text = std::str::from_utf8(&data)
            .map_err(|_| {
                ApiError::bad_request(format!("the field '{name}' is not UTF-8 text"))
                    .with_param(name.clone())
            })?
            .to_string();
        let r = &mut f.req;
        match name.as_str() {
            "prompt" => r.prompt = text,
            "model" => r.model = Some(text),
            "n" => r.n = Some(form_value("n", &text)?),
            "size" => r.size = Some(text),
            "response_format" => r.response_format = Some(text),
            "user" => r.user = Some(text),
            "negative_prompt" => r.negative_prompt = Some(text),
            "steps" => r.steps = Some(form_value("steps", &text)?),
            "guidance_scale" => r.guidance_scale = Some(form_value("guidance_scale", &text)?),
            "scheduler" => r.scheduler = Some(text),
            "seed" => r.seed = Some(form_value("seed", &text)?),
            "strength" => f.strength = Some(form_value("strength", &text)?),
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown field '{other}' (known: image, mask, prompt, model, n, size, \
                     response_format, user, negative_prompt, steps, guidance_scale, scheduler, \
                     seed, strength)"
                ))
                .with_param(other))
            }
        }
    }
    if !seen.contains("prompt") {
        return Err(ApiError::bad_request("missing field 'prompt'").with_param("prompt"));
    }
    Ok(f)
}

/// Decodes an uploaded PNG, JPEG or WebP file; 400 naming `field` when it is none of those or
/// does not decode (a truncated file, say).
fn decode_upload(field: &str, data: &[u8]) -> Result<image::DynamicImage, ApiError> {
    let bad = |why: String| ApiError::bad_request(format!("{field}: {why}")).with_param(field);
    let format =
        image::guess_format(data).map_err(|_| bad("not a PNG, JPEG or WebP file".into()))?;
    if ![
        image::ImageFormat::Png,
        image::ImageFormat::Jpeg,
        image::ImageFormat::WebP,
    ]
    .contains(&format)
    {
        return Err(bad(format!(
            "a {format:?} file; send a PNG, JPEG or WebP file"
        )));
    }
    image::load_from_memory_with_format(data, format)
        .map_err(|e| bad(format!("the {format:?} file does not decode: {e}")))
}

/// OpenAI's mask as the pipeline's: the mask's fully transparent pixels (alpha 0) are the ones
/// to repaint (1), every other pixel is kept (0): the white = repaint mask `oxinfer image
/// --mask` takes, binarized. A mask without an alpha channel is a 400 (its colours mean nothing
/// under OpenAI's convention).
fn openai_mask(img: &image::DynamicImage) -> Result<Vec<f32>, ApiError> {
    if !img.color().has_alpha() {
        return Err(ApiError::bad_request(
            "mask: it has no alpha channel; the mask is a PNG whose fully transparent pixels \
             (alpha 0) mark where the image is edited",
        )
        .with_param("mask"));
    }
    Ok(img
        .to_rgba8()
        .pixels()
        .map(|p| if p[3] == 0 { 1.0 } else { 0.0 })
        .collect())
}

async fn run_edit(
    st: Arc<ImageState>,
    form: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    let form = form.map_err(|r| {
        ApiError::bad_request(format!(
            "send the request as multipart/form-data (image, prompt, ...): {}",
            r.body_text()
        ))
    })?;
    let f = read_form(form).await?;
    st.cfg.check_model(f.req.model.as_deref())?;
    let data = f.image.as_ref().ok_or_else(|| {
        ApiError::bad_request("missing field 'image': the image to edit (a PNG, JPEG or WebP file)")
            .with_param("image")
    })?;
    let img = decode_upload("image", data)?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    if !valid_side(w) || !valid_side(h) {
        return Err(ApiError::bad_request(format!(
            "image: it is {w}x{h}; each side must be a positive multiple of 8, at most {MAX_SIDE}"
        ))
        .with_param("image"));
    }
    if let Some(s) = f.req.size.as_deref() {
        let asked = parse_size(Some(s), w)?;
        if asked != (w, h) {
            return Err(ApiError::bad_request(format!(
                "size '{s}' differs from the image's {w}x{h}: the output has the image's size \
                 (leave size out)"
            ))
            .with_param("size"));
        }
    }
    let mask = match &f.mask {
        None => None,
        Some(data) => {
            let m = decode_upload("mask", data)?;
            if (m.width() as usize, m.height() as usize) != (w, h) {
                return Err(ApiError::bad_request(format!(
                    "mask: it is {}x{}, the image {w}x{h}: they must be the same size",
                    m.width(),
                    m.height()
                ))
                .with_param("mask"));
            }
            Some(openai_mask(&m)?)
        }
    };
    if st.sd.is_inpainting() && mask.is_none() {
        return Err(ApiError::bad_request(format!(
            "the model '{}' is an inpainting model: give a mask (a PNG whose fully transparent \
             pixels mark where to edit)",
            st.cfg.model_id
        ))
        .with_param("mask"));
    }
    let strength = f.strength.unwrap_or(DEFAULT_STRENGTH);
    if !strength.is_finite() || strength <= 0.0 || strength > 1.0 {
        return Err(
            ApiError::bad_request(format!("strength = {strength}: must be in (0, 1]"))
                .with_param("strength"),
        );
    }
    let mut g = pipeline_request(&f.req, &st.sd, (w, h))?;
    g.init_image = Some(oxinfer::arch::diffusion::init_image_chw(&img));
    g.mask = mask;
    g.strength = strength;
    compute(st, g).await
}

/// The 400 of a text endpoint on an image server.
async fn text_unavailable(State(st): State<Arc<ImageState>>, req: Request) -> ApiError {
    crate::endpoint_unavailable(
        &st.cfg,
        "image",
        req.uri().path(),
        "/v1/images/generations and /v1/images/edits",
    )
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
    let meta = json!({
        "kind": "image",
        "native_size": sd.native_size(),
        "inpainting": sd.is_inpainting(),
    });
    let state = Arc::new(ImageState {
        sd,
        busy: Mutex::new(()),
        pending: AtomicUsize::new(0),
        cfg,
    });
    let own = Router::new()
        .route("/v1/images/generations", post(handle))
        .route("/v1/images/edits", post(handle_edit));
    crate::single_task_router(
        own,
        &["/v1/images/generations", "/v1/images/edits"],
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
    fn openai_masks_repaint_the_transparent_pixels() {
        // Alpha 0 is repainted whatever its colour; any other alpha is kept, white included.
        let px = [
            [255, 255, 255, 0],
            [0, 0, 0, 0],
            [255, 255, 255, 255],
            [0, 0, 0, 1],
        ];
        let img = image::RgbaImage::from_fn(4, 1, |x, _| image::Rgba(px[x as usize]));
        let m = openai_mask(&image::DynamicImage::ImageRgba8(img)).unwrap();
        assert_eq!(m, [1.0, 1.0, 0.0, 0.0]);
        let grey = image::DynamicImage::ImageLuma8(image::GrayImage::new(4, 1));
        let e = openai_mask(&grey).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("mask"));
        assert!(e.message.contains("alpha"), "{}", e.message);
    }

    #[test]
    fn uploads_that_are_not_images_are_400s() {
        for bad in [
            &b"GIF89a......"[..],
            b"not an image",
            b"\x89PNG\r\n\x1a\n\0\0",
        ] {
            let e = decode_upload("image", bad).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("image"));
        }
    }

    #[test]
    fn fresh_seeds_differ() {
        let a = fresh_seed();
        std::thread::sleep(std::time::Duration::from_millis(1));
        assert_ne!(a, fresh_seed());
    }
}
