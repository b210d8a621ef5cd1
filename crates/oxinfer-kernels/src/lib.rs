//! Weight formats and CPU kernels.
