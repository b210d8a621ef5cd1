//! Compiles the backend's kernels with NVRTC (no GPU needed) and prints the PTX size, or the
//! compile log on failure: `cargo run -p oxinfer-cuda --example nvrtc_check [major minor]`.

fn main() {
    let a: Vec<i32> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let (major, minor) = (
        a.first().copied().unwrap_or(9),
        a.get(1).copied().unwrap_or(0),
    );
    match oxinfer_cuda::compile_ptx(major, minor) {
        Ok(ptx) => println!(
            "compiled for {major}.{minor}: {} bytes of PTX",
            ptx.to_src().len()
        ),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
