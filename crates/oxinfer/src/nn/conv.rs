//! 2-D convolution over channels-last activations (layouts in
//! [`ConvGeom`](crate::backend::ConvGeom)): the dispatch to the installed backend's
//! [`Backend::conv2d`](crate::backend::Backend::conv2d), falling back to the CPU reference
//! ([`crate::backend::cpu_ref::conv`]).

use crate::backend::cpu_ref::conv::{check_conv, conv2d_cpu, ConvError};
use crate::backend::{self, ConvGeom, DeviceWeight, Job, NormSpec};
use oxinfer_kernels::WeightMatrix;

/// `y` `[oh * ow, n_out]` = the convolution of `x` `[h * w, cin]` (normalized first when `norm`
/// is given) with `w`. Offered to the installed backend when `dev` (what its `upload` made for
/// `w`) is given and the backend wants a matmul of `n_out × k²·cin` over `oh * ow` rows; else,
/// or when it declines, computed by [`conv2d_cpu`].
///
/// # Errors
/// Shapes that do not fit together ([`check_conv`]); nothing is written then.
pub fn conv2d(
    x: &[f32],
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &WeightMatrix,
    dev: Option<&DeviceWeight>,
    y: &mut [f32],
) -> Result<(), ConvError> {
    check_conv(x, g, norm, w, y)?;
    if let (Some(dev), Some(b)) = (dev, backend::active()) {
        if b.wants(w.rows, w.cols, g.oh * g.ow) {
            let mut job = Job { w: *w, dev, y };
            if b.conv2d(x, g, norm, &mut job) {
                return Ok(());
            }
        }
    }
    conv2d_cpu(x, g, norm, w, y)
}
