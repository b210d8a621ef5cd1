//! Compiles the backend's kernels with NVRTC (no GPU needed): the whole program, then each
//! translation unit on its own (which checks that it includes every header it uses). Prints the
//! PTX sizes, or the compile log and exit status 1 on the first failure (`OXINFER_PTX_OUT=FILE`
//! also writes the whole program's PTX there):
//! `cargo run -p oxinfer-cuda --example nvrtc_check [major minor]`.

fn main() {
    let a: Vec<i32> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let (major, minor) = (
        a.first().copied().unwrap_or(9),
        a.get(1).copied().unwrap_or(0),
    );
    let report = |what: &str, ptx: Result<String, String>| match ptx {
        Ok(ptx) => println!(
            "{what} compiled for {major}.{minor}: {} bytes of PTX",
            ptx.len()
        ),
        Err(e) => {
            eprintln!("{what}: {e}");
            std::process::exit(1);
        }
    };
    let all = oxinfer_cuda::compile_ptx(major, minor).map(|p| p.to_src());
    // `OXINFER_PTX_OUT=FILE` keeps the whole program's PTX (for `ptxas -v`: registers, spills).
    if let (Ok(path), Ok(ptx)) = (std::env::var("OXINFER_PTX_OUT"), &all) {
        if let Err(e) = std::fs::write(&path, ptx) {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    }
    report("all kernels", all);
    for unit in oxinfer_cuda::KERNEL_UNITS {
        let ptx = oxinfer_cuda::compile_unit_ptx(unit, major, minor).map(|p| p.to_src());
        report(unit, ptx);
    }
}
