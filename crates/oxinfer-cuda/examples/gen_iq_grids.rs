//! Writes `src/kernels/iq_grids.cuh` (the IQ/MXFP4 lookup tables as CUDA arrays) from the CPU
//! dequantizer's tables: `cargo run -p oxinfer-cuda --example gen_iq_grids`. The crate's test
//! `iq_grids::tests::committed_header_is_current` fails until the file is regenerated.

fn main() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(oxinfer_cuda::iq_grids::IQ_GRIDS_PATH);
    if let Err(e) = std::fs::write(&path, oxinfer_cuda::iq_grids::render_iq_grids_cuh()) {
        eprintln!("{}: {e}", path.display());
        std::process::exit(1);
    }
    println!("wrote {}", path.display());
}
