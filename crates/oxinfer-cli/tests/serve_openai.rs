//! `oxinfer serve` over real HTTP on loopback, exercised by the official `openai` Python client:
//! runs the pytest suite in crates/oxinfer-server/tests/python against this build's binary.
//! Needs the real SmolLM2 model (fetched on first use, `common::real_model`) and the client's
//! venv (scripts/setup-server-test-venv.sh); prints one `skipped:` line when either is absent
//! (and fails under CI).

#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{real_model, skip};

#[test]
fn openai_client_against_serve() {
    let Some(model) = real_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let venv = std::env::var_os("OXINFER_SERVER_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // Where scripts/setup-server-test-venv.sh puts it.
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/oxinfer/servervenv")
        });
    let python = venv.join("bin/python");
    if !python.is_file() {
        let reason = "not found: .ci/run must run scripts/setup-server-test-venv.sh";
        skip(&python.display().to_string(), reason, true);
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(root.join("crates/oxinfer-server/tests/python"))
        .env("OXINFER_BIN", env!("CARGO_BIN_EXE_oxinfer"))
        .env("OXINFER_TEST_MODEL", &model)
        .current_dir(&root)
        .output()
        .expect("running pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "server tests failed:\n{stdout}");
}
