//! `oxinfer serve` over real HTTP on loopback, exercised by the official `openai` Python client:
//! runs the pytest suite in crates/oxinfer-server/tests/python against this build's binary.
//! Needs the real SmolLM2 model (scripts/fetch-test-models.sh) and the client's venv
//! (scripts/setup-server-test-venv.sh); prints one `skipped:` line when either is absent.

use std::path::PathBuf;
use std::process::Command;

fn home_cache(sub: &str) -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
        .join(".cache/oxinfer")
        .join(sub)
}

#[test]
fn openai_client_against_serve() {
    let models = std::env::var_os("OXINFER_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| home_cache("models"));
    let model = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !model.is_file() {
        println!(
            "skipped: {} not found (run scripts/fetch-test-models.sh)",
            model.display()
        );
        return;
    }
    let venv = std::env::var_os("OXINFER_SERVER_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| home_cache("servervenv"));
    let python = venv.join("bin/python");
    if !python.is_file() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} missing: .ci/run must run scripts/setup-server-test-venv.sh",
            python.display()
        );
        println!(
            "skipped: {} not found (run scripts/setup-server-test-venv.sh)",
            python.display()
        );
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
