//! Weight precision on demand: on-load conversion of a safetensors checkpoint to BF16, Q8 or
//! Q4 ([`convert`]), and the pre-quantized checkpoint format that saves the result ([`writer`];
//! read back by the safetensors loader with no copy).
//!
//! Pre-quantized checkpoints are ordinary safetensors (see `DESIGN.md`, "File formats we
//! write"): a quantized matrix `X` `[rows, cols]` is stored as `X.q8` (I8 `[rows, cols]`) +
//! `X.q8s` (F32 `[rows, cols / 32]`), or `X.q4` (U8 `[rows, cols / 2]`, two 4-bit weights per
//! byte) + `X.q4s` (F16 `[rows, cols / 32]`): exactly the kernels' split formats
//! ([`oxinfer_kernels::WeightFormat::Q8`], [`oxinfer_kernels::WeightFormat::Q4`]). A stacked
//! MoE expert tensor `[experts, rows, cols]` keeps its leading dimensions (`X.q8`
//! `[experts, rows, cols]` + `X.q8s` `[experts, rows, cols / 32]`): each expert's rows are one
//! contiguous range of both, borrowed per expert by `nn::moe::expert_rows`. Every tensor
//! starts on a 16 KiB boundary of its file, shards hold at most 1 GiB, and `__metadata__`
//! records the precision under [`METADATA_KEY`].

pub mod convert;
pub mod writer;

pub use convert::{convert, convert_to, Converted, Overlay, QuantReport};
pub use writer::{write, WriteOptions, WriteReport};

use oxinfer_kernels::WeightFormat;

/// `__metadata__` key holding a pre-quantized checkpoint's precision (`bf16`, `q8`, `q4`).
pub const METADATA_KEY: &str = "oxinfer.precision";

/// Weight precision a checkpoint is converted to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Precision {
    /// bfloat16 (float checkpoints in F32/F16 become BF16; BF16 stays as it is).
    Bf16,
    /// Blocks of 32 int8 weights with one f32 scale (`Q8`).
    Q8,
    /// Blocks of 32 4-bit weights with one f16 scale, Q4_0-style (`Q4`).
    Q4,
}

impl Precision {
    /// Every precision, smallest reduction first.
    pub const ALL: [Precision; 3] = [Precision::Bf16, Precision::Q8, Precision::Q4];

    /// The spelling used by `--quant` and in metadata: `bf16`, `q8`, `q4`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::Q8 => "q8",
            Precision::Q4 => "q4",
        }
    }

    /// Parses [`Self::name`] (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
    }

    /// The weight format matrices are converted to.
    pub fn format(self) -> WeightFormat {
        match self {
            Precision::Bf16 => WeightFormat::BF16,
            Precision::Q8 => WeightFormat::Q8,
            Precision::Q4 => WeightFormat::Q4,
        }
    }
}

impl std::fmt::Display for Precision {
    /// Writes [`Precision::name`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Precision {
    type Err = String;
    /// Parses `bf16`, `q8` or `q4`.
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s).ok_or_else(|| format!("unknown precision '{s}' (expected bf16, q8 or q4)"))
    }
}
