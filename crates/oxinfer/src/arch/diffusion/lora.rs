//! LoRA files fused into the UNet and the text encoder at load, as diffusers'
//! `load_lora_weights` + `fuse_lora(lora_scale)`: every weight `W` a LoRA module targets becomes
//! `W + scale · (alpha / rank) · up @ down` (float32), where `down` is `[rank, in]` (linear) or
//! `[rank, in, k, k]` (convolution: 1 × 1 or 3 × 3) and `up` is `[out, rank]` or `[out, rank, 1,
//! 1]`; a convolution's product is taken over the flattened `in · k · k`, as peft's conv merge.
//!
//! The key forms read (the ones `load_lora_weights` takes for SD 1.x / 2.x):
//! - kohya / A1111: `lora_unet_<module>.lora_down.weight`, `.lora_up.weight`, `.alpha`, with
//!   the module's diffusers name (`down_blocks_0_attentions_0_proj_in`) or its original LDM name
//!   (`input_blocks_1_1_proj_in`), and `lora_te_<module>` (`lora_te1_`) for the text encoder;
//! - diffusers / peft: `unet.<module>.lora_A.weight` / `.lora_B.weight` (also `.lora.down.weight`
//!   / `.lora.up.weight`, `.lora_linear_layer.down.weight`, and the attention processors'
//!   `processor.to_q_lora.down.weight`), `text_encoder.<module>...`; alpha is the rank (scale 1)
//!   unless the file's `lora_adapter_metadata` gives `lora_alpha`.
//!
//! A key of no known form, a module without its up or down matrix, shapes that do not fit the
//! weight, and a module that targets no weight of the model (a LoRA for another model) are each
//! an error naming the key.

use super::ldm::{unet_name, LdmPart};
use super::DiffusionError;
use crate::error::LoadError;
use crate::loader::safetensors::SafetensorsModel;
use crate::loader::{TensorStore, TensorView};
use crate::nn::Linear;
use oxinfer_kernels::WeightFormat;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A LoRA file to fuse, with its scale (diffusers' `lora_scale`).
#[derive(Clone, Debug, PartialEq)]
pub struct LoraSpec {
    /// The `.safetensors` file.
    pub path: PathBuf,
    /// How much of it: `W + scale · (alpha / rank) · up @ down`.
    pub scale: f32,
}

/// The model part a LoRA module targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LoraTarget {
    /// The UNet.
    Unet,
    /// The (first) text encoder.
    TextEncoder,
}

/// One LoRA module: the low-rank pair for one weight.
struct LoraModule {
    /// The key of its down matrix, for errors.
    key: String,
    down: Option<TensorView>,
    up: Option<TensorView>,
    alpha: Option<f32>,
}

/// A parsed LoRA file: its modules by target and flattened module name (`.` as `_`).
pub struct LoraFile {
    /// The file.
    pub path: PathBuf,
    /// Its scale.
    pub scale: f32,
    modules: BTreeMap<(LoraTarget, String), LoraModule>,
}

/// Which matrix (or alpha) of a module a key holds.
#[derive(Clone, Copy)]
enum Part {
    Down,
    Up,
    Alpha,
}

/// Key endings of the diffusers / peft form.
const DIFFUSERS_ENDINGS: [(&str, Part); 8] = [
    (".lora_A.weight", Part::Down),
    (".lora_B.weight", Part::Up),
    (".lora.down.weight", Part::Down),
    (".lora.up.weight", Part::Up),
    (".lora_linear_layer.down.weight", Part::Down),
    (".lora_linear_layer.up.weight", Part::Up),
    (".lora_down.weight", Part::Down),
    (".lora_up.weight", Part::Up),
];

/// The attention processors' LoRA names (diffusers' older form) → the layers they adapt, for
/// the UNet and the text encoder.
const PROCESSOR_NAMES: [(&str, &str, &str); 4] = [
    ("to_q_lora", "to_q", "q_proj"),
    ("to_k_lora", "to_k", "k_proj"),
    ("to_v_lora", "to_v", "v_proj"),
    ("to_out_lora", "to_out.0", "out_proj"),
];

/// `key`'s target, flattened module name and part, or `None` for a key of no known form.
fn classify(key: &str) -> Option<(LoraTarget, String, Part)> {
    for (prefix, target) in [
        ("lora_unet_", LoraTarget::Unet),
        ("lora_te_", LoraTarget::TextEncoder),
        ("lora_te1_", LoraTarget::TextEncoder),
    ] {
        if let Some(rest) = key.strip_prefix(prefix) {
            let (module, end) = rest.split_once('.')?;
            let part = match end {
                "lora_down.weight" => Part::Down,
                "lora_up.weight" => Part::Up,
                "alpha" => Part::Alpha,
                _ => return None,
            };
            return Some((target, module.to_string(), part));
        }
    }
    let (target, rest) = match key.split_once('.')? {
        ("unet", rest) => (LoraTarget::Unet, rest),
        ("text_encoder", rest) => (LoraTarget::TextEncoder, rest),
        _ => return None,
    };
    if let Some((module, part)) = DIFFUSERS_ENDINGS
        .iter()
        .find_map(|(end, part)| rest.strip_suffix(end).map(|m| (m, *part)))
    {
        return Some((target, module.replace('.', "_"), part));
    }
    // The attention processors' form: `….processor.to_q_lora.down.weight`.
    let (module, part) = [(".down.weight", Part::Down), (".up.weight", Part::Up)]
        .iter()
        .find_map(|(end, part)| rest.strip_suffix(end).map(|m| (m, *part)))?;
    let module = processor_module(module, target)?;
    Some((target, module.replace('.', "_"), part))
}

/// `…attn1.processor.to_q_lora` → `…attn1.to_q` (text encoder: `…self_attn.to_q_lora` →
/// `…self_attn.q_proj`); `None` for a name that is not an attention processor's LoRA.
fn processor_module(module: &str, target: LoraTarget) -> Option<String> {
    let (head, last) = module.rsplit_once('.')?;
    let (_, unet, te) = PROCESSOR_NAMES.iter().find(|(l, _, _)| *l == last)?;
    let head = head.strip_suffix(".processor").unwrap_or(head);
    Some(match target {
        LoraTarget::Unet => format!("{head}.{unet}"),
        LoraTarget::TextEncoder => format!("{head}.{te}"),
    })
}

/// `lora_alpha` of `target` in the file's `lora_adapter_metadata` (diffusers ≥ 0.34 writes it),
/// `None` without one.
///
/// # Errors
/// Metadata that is not JSON, or asks for what is not implemented (per-module alphas, DoRA).
fn metadata_alpha(
    file: &SafetensorsModel,
    path: &Path,
    target: LoraTarget,
) -> Result<Option<f32>, DiffusionError> {
    let Some(raw) = file.metadata("lora_adapter_metadata") else {
        return Ok(None);
    };
    let bad = |what: String| DiffusionError::Lora {
        path: path.to_path_buf(),
        key: "__metadata__.lora_adapter_metadata".into(),
        what,
    };
    let meta: serde_json::Value =
        serde_json::from_str(raw).map_err(|e| bad(format!("not JSON: {e}")))?;
    let prefix = match target {
        LoraTarget::Unet => "unet",
        LoraTarget::TextEncoder => "text_encoder",
    };
    let field = |name: &str| meta.get(format!("{prefix}.{name}"));
    if field("alpha_pattern").is_some_and(|p| p.as_object().is_some_and(|o| !o.is_empty())) {
        return Err(bad(format!(
            "{prefix}.alpha_pattern (per-module alphas) is not supported"
        )));
    }
    if field("use_dora").is_some_and(|d| d.as_bool() == Some(true)) {
        return Err(bad(format!("{prefix}.use_dora: DoRA is not supported")));
    }
    Ok(field("lora_alpha")
        .and_then(serde_json::Value::as_f64)
        .map(|a| a as f32))
}

impl LoraFile {
    /// Opens and parses `spec`'s file.
    ///
    /// # Errors
    /// A file that does not open; a key of no known form, an alpha that is not one number, a
    /// module without its down or up matrix (each names the key).
    pub fn open(spec: &LoraSpec) -> Result<Self, DiffusionError> {
        let path = &spec.path;
        let file = SafetensorsModel::open(path)?;
        let err = |key: &str, what: &str| DiffusionError::Lora {
            path: path.clone(),
            key: key.to_string(),
            what: what.to_string(),
        };
        let mut modules: BTreeMap<(LoraTarget, String), LoraModule> = BTreeMap::new();
        for (key, _) in file.entries() {
            let Some((target, module, part)) = classify(key) else {
                return Err(err(
                    key,
                    "not a LoRA key of a known form for SD 1.x / 2.x (kohya lora_unet_* / \
                     lora_te_* with lora_down / lora_up / alpha, or diffusers unet.* / \
                     text_encoder.* with lora_A / lora_B)",
                ));
            };
            let t = file.require(key)?;
            let m = modules
                .entry((target, module))
                .or_insert_with(|| LoraModule {
                    key: key.clone(),
                    down: None,
                    up: None,
                    alpha: None,
                });
            match part {
                Part::Down => {
                    m.key = key.clone();
                    m.down = Some(t);
                }
                Part::Up => m.up = Some(t),
                Part::Alpha => match t.to_f32()?[..] {
                    [a] => m.alpha = Some(a),
                    _ => return Err(err(key, "an alpha must be one number")),
                },
            }
        }
        for target in [LoraTarget::Unet, LoraTarget::TextEncoder] {
            if let Some(a) = metadata_alpha(&file, path, target)? {
                modules
                    .iter_mut()
                    .filter(|((t, _), m)| *t == target && m.alpha.is_none())
                    .for_each(|(_, m)| m.alpha = Some(a));
            }
        }
        for m in modules.values() {
            match (&m.down, &m.up) {
                (Some(_), Some(_)) => {}
                (None, _) => return Err(err(&m.key, "has no down (lora_A) matrix")),
                (_, None) => return Err(err(&m.key, "has no up (lora_B) matrix")),
            }
        }
        if modules.is_empty() {
            return Err(err("-", "no LoRA tensors in the file"));
        }
        Ok(LoraFile {
            path: path.clone(),
            scale: spec.scale,
            modules,
        })
    }

    /// Opens every file of `specs`.
    ///
    /// # Errors
    /// As [`Self::open`].
    pub fn open_all(specs: &[LoraSpec]) -> Result<Vec<Self>, DiffusionError> {
        specs.iter().map(Self::open).collect()
    }
}

/// `base` with the weights the LoRA files target fused: a tensor store for one model part.
pub struct LoraStore<'a> {
    base: &'a dyn TensorStore,
    loras: &'a [LoraFile],
    target: LoraTarget,
    /// The UNet's LDM layout, for LoRA modules named after it.
    ldm: Option<LdmPart>,
    /// The (file index, module) pairs fused so far.
    used: Mutex<BTreeSet<(usize, String)>>,
}

impl<'a> LoraStore<'a> {
    /// `base` (the weights of `target`) with `loras` fused; `ldm` the UNet's LDM layout
    /// ([`LdmPart::Unet`]), to match modules by their original names too.
    pub fn new(
        base: &'a dyn TensorStore,
        loras: &'a [LoraFile],
        target: LoraTarget,
        ldm: Option<LdmPart>,
    ) -> Self {
        LoraStore {
            base,
            loras,
            target,
            ldm,
            used: Mutex::new(BTreeSet::new()),
        }
    }

    /// The flattened names module `module` (a diffusers name) may have in a LoRA file.
    fn candidates(&self, module: &str) -> Vec<String> {
        let mut out = vec![module.replace('.', "_")];
        if let Some(LdmPart::Unet {
            layers_per_block,
            up_attn,
        }) = &self.ldm
        {
            let ldm = unet_name(&format!("{module}.weight"), *layers_per_block, up_attn);
            if let Some(n) = ldm.as_deref().and_then(|n| n.strip_suffix(".weight")) {
                out.push(n.replace('.', "_"));
            }
        }
        // Text encoder modules with and without the `text_model.` level (files name it;
        // transformers 5's CLIPTextModel and weight files saved from it do not).
        if self.target == LoraTarget::TextEncoder {
            match module.strip_prefix("text_model.") {
                Some(rest) => out.push(rest.replace('.', "_")),
                None => out.push(format!("text_model_{}", module.replace('.', "_"))),
            }
        }
        out
    }

    /// `w` (the weight `name`) plus every matching LoRA module's product, summed in float32 and
    /// stored in `w`'s own float format ([`stored_as`]).
    fn fuse(&self, name: &str, w: TensorView) -> Result<TensorView, LoadError> {
        let Some(module) = name.strip_suffix(".weight") else {
            return Ok(w);
        };
        let names = self.candidates(module);
        let mut hits = Vec::new();
        for (i, lora) in self.loras.iter().enumerate() {
            for n in &names {
                if let Some(m) = lora.modules.get(&(self.target, n.clone())) {
                    hits.push((lora, m));
                    let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
                    used.insert((i, n.clone()));
                }
            }
        }
        if hits.is_empty() {
            return Ok(w);
        }
        let mut v = w.to_f32()?;
        let rows = w.shape.first().copied().unwrap_or(0);
        let cols = v.len() / rows.max(1);
        for (lora, m) in hits {
            let (Some(down), Some(up)) = (&m.down, &m.up) else {
                continue;
            };
            let rank = down.shape.first().copied().unwrap_or(0);
            let fits = rank > 0
                && up.shape.first() == Some(&rows)
                && up.numel() == rows * rank
                && down.numel() == rank * cols;
            if !fits {
                return Err(LoadError::tensor(
                    &lora.path,
                    &m.key,
                    format!(
                        "down {:?} and up {:?} do not fit the weight {name} {:?}",
                        down.shape, up.shape, w.shape
                    ),
                ));
            }
            let f = lora.scale * m.alpha.map_or(1.0, |a| a / rank as f32);
            let at = (lora.path.as_path(), m.key.as_str());
            add_product(&mut v, &up.to_f32()?, &down.to_f32()?, (rank, cols), f, at)?;
        }
        let (format, bytes) = stored_as(w.format, &v);
        Ok(TensorView::from_owned(
            w.path(),
            name,
            format,
            w.shape.clone(),
            bytes,
            Vec::new(),
        ))
    }

    /// The modules of `self.loras` for this store's target that no weight took.
    fn unused(&self) -> Vec<(usize, &str)> {
        let used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (i, lora) in self.loras.iter().enumerate() {
            for ((target, module), m) in &lora.modules {
                if *target == self.target && !used.contains(&(i, module.clone())) {
                    out.push((i, m.key.as_str()));
                }
            }
        }
        out
    }

    /// Checks that every LoRA module of this store's target was fused into a weight.
    ///
    /// # Errors
    /// The first module that targets no weight of the model (a LoRA for another model), named.
    pub fn check_all_fused(&self) -> Result<(), DiffusionError> {
        match self.unused().first() {
            None => Ok(()),
            Some(&(i, key)) => Err(DiffusionError::Lora {
                path: self.loras[i].path.clone(),
                key: key.to_string(),
                what: format!(
                    "targets no weight of this model's {} (a LoRA for another model?)",
                    match self.target {
                        LoraTarget::Unet => "UNet",
                        LoraTarget::TextEncoder => "text encoder",
                    }
                ),
            }),
        }
    }
}

/// A fused weight `v` (float32) stored as the checkpoint stored it: f16 and bf16 weights are
/// rounded once to their format (a half-precision diffusers pipeline's fused weights are half
/// precision too), so the fused model takes no more memory than the plain one; any other
/// format stays f32.
fn stored_as(format: WeightFormat, v: &[f32]) -> (WeightFormat, Vec<u8>) {
    match format {
        WeightFormat::F16 => (
            format,
            v.iter()
                .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                .collect(),
        ),
        WeightFormat::BF16 => (
            format,
            v.iter()
                .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                .collect(),
        ),
        _ => (
            WeightFormat::F32,
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ),
    }
}

/// `w[o, c] += f · Σ_j up[o, j] · down[j, c]` for `down` of `(rank, cols)`: the product as one
/// linear layer of weight `downᵀ` (`[cols, rank]`) over the `rows` rows of `up`.
///
/// # Errors
/// Sizes that do not fit (named after `name`).
fn add_product(
    w: &mut [f32],
    up: &[f32],
    down: &[f32],
    (rank, cols): (usize, usize),
    f: f32,
    (path, name): (&Path, &str),
) -> Result<(), LoadError> {
    let mut dt = vec![0f32; cols * rank];
    for (j, row) in down.chunks_exact(cols.max(1)).enumerate() {
        for (c, &x) in row.iter().enumerate() {
            dt[c * rank + j] = x;
        }
    }
    let down_t = TensorView::from_f32(path, name, vec![cols, rank], &dt);
    let product = Linear::from_view(down_t, None)?.forward_wide(up, up.len() / rank.max(1));
    if product.len() != w.len() {
        return Err(LoadError::tensor(
            path,
            name,
            format!(
                "LoRA product of {} values for a weight of {}",
                product.len(),
                w.len()
            ),
        ));
    }
    w.iter_mut().zip(product).for_each(|(x, d)| *x += d * f);
    Ok(())
}

impl TensorStore for LoraStore<'_> {
    fn path(&self) -> &Path {
        self.base.path()
    }

    fn get(&self, name: &str) -> Option<Result<TensorView, LoadError>> {
        let t = self.base.get(name)?;
        if self.loras.is_empty() {
            return Some(t);
        }
        Some(t.and_then(|t| self.fuse(name, t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_forms_map_to_one_module_name() {
        let name = |k: &str| classify(k).map(|(t, m, _)| (t, m));
        let unet = |m: &str| Some((LoraTarget::Unet, m.to_string()));
        let te = |m: &str| Some((LoraTarget::TextEncoder, m.to_string()));
        let q = "down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q";
        for k in [
            "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight",
            "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.weight",
            "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.lora.up.weight",
            "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn1.processor.to_q_lora.down.weight",
        ] {
            assert_eq!(name(k), unet(q), "{k}");
        }
        assert_eq!(
            name("unet.mid_block.attentions.0.transformer_blocks.0.attn2.processor.to_out_lora.up.weight"),
            unet("mid_block_attentions_0_transformer_blocks_0_attn2_to_out_0")
        );
        let qp = "text_model_encoder_layers_0_self_attn_q_proj";
        assert_eq!(name(&format!("lora_te_{qp}.alpha")), te(qp));
        assert_eq!(
            name("text_encoder.text_model.encoder.layers.0.self_attn.to_q_lora.down.weight"),
            te(qp)
        );
        for bad in [
            "lora_te2_text_model_encoder_layers_0_mlp_fc1.lora_down.weight",
            "lora_unet_conv_in.hada_w1_a",
            "lora_unet_conv_in.dora_scale",
            "vae.decoder.conv_in.lora_A.weight",
            "model.diffusion_model.input_blocks.0.0.weight",
        ] {
            assert!(classify(bad).is_none(), "{bad}");
        }
    }

    /// A fused f16 / bf16 weight is stored in its own format, rounded once.
    #[test]
    fn fused_half_weights_keep_their_format() {
        let v = [1.0f32, -2.5, 3.3333333, 1e-3];
        let (f, b) = stored_as(WeightFormat::F16, &v);
        assert_eq!((f, b.len()), (WeightFormat::F16, 8));
        let back: Vec<f32> = b
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect();
        let want: Vec<f32> = v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect();
        assert_eq!(back, want);
        let (f, b) = stored_as(WeightFormat::BF16, &v);
        assert_eq!((f, b.len()), (WeightFormat::BF16, 8));
        assert_eq!(stored_as(WeightFormat::F32, &v).1.len(), 16);
    }

    /// A 2 x 3 weight with one rank-1 module: `W + f · up ⊗ down`.
    #[test]
    fn product_adds_to_each_row() {
        let mut w = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let at = (Path::new("x"), "k");
        add_product(&mut w, &[1.0, 2.0], &[1.0, 0.0, -1.0], (1, 3), 0.5, at).unwrap();
        assert_eq!(w, [1.5, 2.0, 2.5, 5.0, 5.0, 5.0]);
        // Rank 2, 3 x 2 weight: up [3, 2], down [2, 2].
        let mut w = vec![0.0; 6];
        let up = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        add_product(&mut w, &up, &[1.0, 2.0, 3.0, 4.0], (2, 2), 1.0, at).unwrap();
        assert_eq!(w, [1.0, 2.0, 3.0, 4.0, 4.0, 6.0]);
    }
}
