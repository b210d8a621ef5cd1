//! NVRTC compilation of one program whose `#include "name"` directives are resolved from
//! in-memory files (NVRTC's headers), so each kernel file includes what it uses and nothing
//! depends on the order in which files are put together.

use cudarc::nvrtc::{result, sys, Ptx};
use std::ffi::{c_char, CStr, CString};

/// Compiles `main` with `files` (`(include name, text)`) available to its `#include "…"`
/// directives, for virtual architecture `arch` (`compute_90`, …), with `--std=c++17`.
///
/// # Errors
/// NVRTC missing, or a sentence with its compile log.
pub(crate) fn compile(main: &str, files: &[(&str, &str)], arch: &str) -> Result<Ptx, String> {
    // SAFETY: probing dlopen only.
    if !unsafe { sys::is_culib_present() } {
        return Err("NVRTC (libnvrtc) was not found".to_string());
    }
    let cstr = |s: &str| CString::new(s).map_err(|_| format!("NUL byte in kernel source {s:.40}"));
    let src = cstr(main)?;
    let names = files
        .iter()
        .map(|(n, _)| cstr(n))
        .collect::<Result<Vec<_>, _>>()?;
    let texts = files
        .iter()
        .map(|(_, t)| cstr(t))
        .collect::<Result<Vec<_>, _>>()?;
    let name_ptrs: Vec<*const c_char> = names.iter().map(|s| s.as_ptr()).collect();
    let text_ptrs: Vec<*const c_char> = texts.iter().map(|s| s.as_ptr()).collect();
    let mut prog = std::ptr::null_mut();
    // SAFETY: every pointer is to a NUL-terminated string alive until this function returns
    // (NVRTC copies them); both arrays hold `files.len()` entries.
    unsafe {
        sys::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            c"oxinfer.cu".as_ptr(),
            files.len() as i32,
            text_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
    }
    .result()
    .map_err(|e| format!("NVRTC: creating the program: {e:?}"))?;
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
    ];
    options.extend(extra_defines());
    // SAFETY: `prog` was created above and is destroyed once, after its last use.
    let out = unsafe {
        let r = match result::compile_program(prog, &options) {
            Ok(()) => result::get_ptx(prog)
                .map(|p| Ptx::from_src(text(&p)))
                .map_err(|e| format!("NVRTC: reading the PTX: {e:?}")),
            Err(e) => Err(match result::get_program_log(prog) {
                Ok(log) => format!("NVRTC compile failed:\n{}", text(&log)),
                Err(_) => format!("NVRTC compile failed: {e:?}"),
            }),
        };
        let _ = result::destroy_program(prog);
        r
    };
    out
}

/// `-D` options from `OXINFER_CUDA_DEFINES` (`NAME=VALUE` or `NAME`, separated by spaces or
/// commas): for measuring a kernel's compile-time variants (gemv.cu's `GEMV_Q4K_MIN_BLOCKS`, …)
/// with one binary. Nothing by default.
fn extra_defines() -> Vec<String> {
    std::env::var("OXINFER_CUDA_DEFINES")
        .unwrap_or_default()
        .split([' ', ','])
        .filter(|d| !d.is_empty())
        .map(|d| format!("-D{d}"))
        .collect()
}

/// A NUL-terminated buffer from NVRTC as text.
fn text(buf: &[c_char]) -> String {
    if !buf.contains(&0) {
        return String::new();
    }
    // SAFETY: the buffer holds a NUL (checked above), so the read stays inside it.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}
