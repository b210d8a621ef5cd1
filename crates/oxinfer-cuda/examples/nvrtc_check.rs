//! Compiles the backend's kernels with NVRTC (no GPU needed): the whole program, the IQ programs
//! (`iq.cu`, `iq_i8.cu`), all three at once on three threads as the backend does when it opens,
//! then each translation unit on its own (which checks that it includes every header it uses).
//! Prints the PTX sizes and compile times, or the compile log and exit status 1 on the first
//! failure (`OXINFER_PTX_OUT=FILE` also writes the whole program's PTX there, and each IQ
//! program's to `FILE.<unit>`; `OXINFER_PTX_UNIT=gemv.cu` compiles only that unit):
//! `cargo run -p oxinfer-cuda --example nvrtc_check [major minor]`.

/// `f()` and the seconds it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let start = std::time::Instant::now();
    let r = f();
    (r, start.elapsed().as_secs_f64())
}

/// PTX text of `unit` (`None`: the main program), compiled for `major.minor`.
fn ptx(unit: Option<&str>, major: i32, minor: i32) -> Result<String, String> {
    match unit {
        None => oxinfer_cuda::compile_ptx(major, minor),
        Some(u) => oxinfer_cuda::compile_unit_ptx(u, major, minor),
    }
    .map(|p| p.to_src())
}

fn main() {
    let a: Vec<i32> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let (major, minor) = (
        a.first().copied().unwrap_or(9),
        a.get(1).copied().unwrap_or(0),
    );
    let report = |what: &str, bytes: Result<usize, String>, secs: f64| match bytes {
        Ok(n) => println!("{what} compiled for {major}.{minor}: {n} bytes of PTX in {secs:.1} s"),
        Err(e) => {
            eprintln!("{what}: {e}");
            std::process::exit(1);
        }
    };
    let programs: Vec<(Option<&str>, String)> = std::iter::once((None, "all kernels".to_string()))
        .chain(oxinfer_cuda::IQ_UNITS.map(|u| (Some(u), format!("IQ program ({u})"))))
        .collect();
    let out = std::env::var("OXINFER_PTX_OUT").ok();
    // `OXINFER_PTX_UNIT=gemv.cu` compiles that translation unit alone (its PTX to
    // OXINFER_PTX_OUT when given) and stops: the quick loop for one file's registers.
    if let Ok(unit) = std::env::var("OXINFER_PTX_UNIT") {
        let (text, secs) = timed(|| ptx(Some(&unit), major, minor));
        if let (Some(path), Ok(text)) = (&out, &text) {
            if let Err(e) = std::fs::write(path, text) {
                eprintln!("{path}: {e}");
                std::process::exit(1);
            }
        }
        report(&unit, text.map(|t| t.len()), secs);
        return;
    }
    for (unit, what) in &programs {
        let (text, secs) = timed(|| ptx(*unit, major, minor));
        // `OXINFER_PTX_OUT=FILE` keeps the programs' PTX (for `ptxas -v`: registers, spills).
        if let (Some(path), Ok(text)) = (&out, &text) {
            let file = unit.map_or(path.clone(), |u| format!("{path}.{u}"));
            if let Err(e) = std::fs::write(&file, text) {
                eprintln!("{file}: {e}");
                std::process::exit(1);
            }
        }
        report(what, text.map(|t| t.len()), secs);
    }
    // What the backend does when it opens: the three programs at once, one thread each.
    let (bytes, secs) = timed(|| {
        std::thread::scope(|s| {
            let handles: Vec<_> = programs
                .iter()
                .map(|(unit, _)| s.spawn(move || ptx(*unit, major, minor).map(|t| t.len())))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("thread panicked".to_string()))
                })
                .sum::<Result<usize, String>>()
        })
    });
    report("all three programs in parallel", bytes, secs);
    for unit in oxinfer_cuda::KERNEL_UNITS {
        let (text, secs) = timed(|| ptx(Some(unit), major, minor));
        report(unit, text.map(|t| t.len()), secs);
    }
}
