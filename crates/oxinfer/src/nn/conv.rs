//! 2-D convolution over channels-last activations (layouts in
//! [`ConvGeom`](crate::backend::ConvGeom)): the dispatch to the installed backend's
//! [`Backend::conv2d`](crate::backend::Backend::conv2d), falling back to the CPU reference
//! ([`crate::backend::cpu_ref::conv`]).

use crate::backend::cpu_ref::conv::{check_conv_images, conv2d_cpu_images, ConvError};
use crate::backend::{self, ConvGeom, DeviceWeight, Job, NormSpec};
use oxinfer_kernels::WeightMatrix;

/// `y` `[oh * ow, n_out]` = the convolution of `x` `[h * w, cin]` (normalized first when `norm`
/// is given) with `w`. Offered to the installed backend when `dev` (what its `upload` made for
/// `w`) is given and the backend wants a matmul of `n_out × k²·cin` over `oh * ow` rows; else,
/// or when it declines, computed by [`crate::nn::conv2d_cpu`].
///
/// # Errors
/// Shapes that do not fit together ([`crate::backend::cpu_ref::conv::check_conv`]); nothing is
/// written then.
pub fn conv2d(
    x: &[f32],
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &WeightMatrix,
    dev: Option<&DeviceWeight>,
    y: &mut [f32],
) -> Result<(), ConvError> {
    conv2d_images(x, 1, g, norm, w, dev, y)
}

/// [`conv2d`] over `images` inputs stored one after another: `x` `[images][h * w][cin]`, `y`
/// `[images][oh * ow][n_out]`, each image normalized with its own statistics. A backend gets
/// one image per call; on the CPU ([`conv2d_cpu_images`]) the unfolded rows of all images share
/// one product, so a float weight is packed once for the batch.
///
/// # Errors
/// Shapes that do not fit together ([`check_conv_images`]); nothing is written then.
pub fn conv2d_images(
    x: &[f32],
    images: usize,
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &WeightMatrix,
    dev: Option<&DeviceWeight>,
    y: &mut [f32],
) -> Result<(), ConvError> {
    check_conv_images(x, images, g, norm, w, y)?;
    let (xs, ys) = (x.len() / images, y.len() / images);
    // Images before `first_cpu` were computed by the backend.
    let mut first_cpu = 0;
    if let (Some(dev), Some(b)) = (dev, backend::active()) {
        if b.wants(w.rows, w.cols, g.oh * g.ow) {
            for (xi, yi) in x.chunks_exact(xs).zip(y.chunks_exact_mut(ys)) {
                let mut job = Job { w: *w, dev, y: yi };
                if !b.conv2d(xi, g, norm, &mut job) {
                    break;
                }
                first_cpu += 1;
            }
        }
    }
    if first_cpu == images {
        return Ok(());
    }
    conv2d_cpu_images(
        &x[first_cpu * xs..],
        images - first_cpu,
        g,
        norm,
        w,
        &mut y[first_cpu * ys..],
    )
}
