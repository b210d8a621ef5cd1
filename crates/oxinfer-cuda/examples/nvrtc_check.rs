//! Compiles the backend's kernels with NVRTC (no GPU needed): the whole program, the IQ program
//! (`iq.cu`), then each translation unit on its own (which checks that it includes every header
//! it uses). Prints the PTX sizes and compile times, or the compile log and exit status 1 on
//! the first failure (`OXINFER_PTX_OUT=FILE` also writes the whole program's PTX there, and the
//! IQ program's to `FILE.iq`):
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
    let report = |what: &str, ptx: Result<String, String>, secs: f64| match ptx {
        Ok(ptx) => println!(
            "{what} compiled for {major}.{minor}: {} bytes of PTX in {secs:.1} s",
            ptx.len()
        ),
        Err(e) => {
            eprintln!("{what}: {e}");
            std::process::exit(1);
        }
    };
    let timed = |f: &dyn Fn() -> Result<String, String>| {
        let start = std::time::Instant::now();
        let r = f();
        (r, start.elapsed().as_secs_f64())
    };
    let (all, secs) = timed(&|| oxinfer_cuda::compile_ptx(major, minor).map(|p| p.to_src()));
    let (iq, iq_secs) = timed(&|| oxinfer_cuda::compile_iq_ptx(major, minor).map(|p| p.to_src()));
    // `OXINFER_PTX_OUT=FILE` keeps the programs' PTX (for `ptxas -v`: registers, spills).
    if let Ok(path) = std::env::var("OXINFER_PTX_OUT") {
        for (file, ptx) in [(path.clone(), &all), (format!("{path}.iq"), &iq)] {
            if let Err(e) = ptx.as_ref().map(|p| std::fs::write(&file, p)) {
                eprintln!("{file}: {e:?}");
                std::process::exit(1);
            }
        }
    }
    report("all kernels", all, secs);
    report("IQ program (iq.cu)", iq, iq_secs);
    for unit in oxinfer_cuda::KERNEL_UNITS {
        let (ptx, secs) =
            timed(&|| oxinfer_cuda::compile_unit_ptx(unit, major, minor).map(|p| p.to_src()));
        report(unit, ptx, secs);
    }
}
