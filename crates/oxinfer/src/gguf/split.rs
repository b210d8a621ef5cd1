//! Models split into several GGUF files, as llama.cpp's `llama-gguf-split --split` (and
//! `convert_hf_to_gguf.py --split-max-tensors`) writes them:
//!
//! ```text
//! name-00001-of-00003.gguf   every metadata key, then split.no = 0, split.count = 3,
//!                            split.tensors.count = <all tensors>; the first tensors
//! name-00002-of-00003.gguf   only split.no = 1, split.count, split.tensors.count; more tensors
//! name-00003-of-00003.gguf   ...
//! ```
//!
//! Each part is a complete GGUF file (header, its own tensor table, its own aligned data
//! section). [`join`] maps every part and presents them as one [`GgufFile`]: the first part's
//! metadata and one tensor table over all parts, each entry pointing into its own part. The
//! names follow llama.cpp's `llama_split_path` (`%s-%05d-of-%05d.gguf`), which its loader also
//! uses to find the parts.

use super::GgufFile;
use crate::error::LoadError;
use std::path::{Path, PathBuf};

/// The part's index, from 0 (`u16`).
pub const KEY_NO: &str = "split.no";
/// The number of parts (`u16`).
pub const KEY_COUNT: &str = "split.count";
/// The number of tensors in all parts together (`i32`).
pub const KEY_TENSORS: &str = "split.tensors.count";

/// The path of part `index` (from 0) of a model split into `count` files whose paths start with
/// `prefix`: `{prefix}-{index + 1:05}-of-{count:05}.gguf`, as llama.cpp's `llama_split_path`.
pub fn part_path(prefix: &str, index: u32, count: u32) -> PathBuf {
    PathBuf::from(format!("{prefix}-{:05}-of-{count:05}.gguf", index + 1))
}

/// The prefix of `path` when it is named as part `index` (from 0) of `count`
/// (`…/name-00002-of-00003.gguf` → `…/name`), as llama.cpp's `llama_split_prefix`; `None`
/// when the name does not say so.
pub fn split_prefix(path: &Path, index: u32, count: u32) -> Option<String> {
    let path = path.to_str()?;
    let suffix = format!("-{:05}-of-{count:05}.gguf", index + 1);
    path.strip_suffix(&suffix).map(str::to_string)
}

/// `(prefix, part number from 1, count)` of a path named as a part
/// (`…/name-00002-of-00003.gguf` → (`…/name`, 2, 3)); `None` for any other name.
pub fn part_of_name(path: &Path) -> Option<(String, u32, u32)> {
    let stem = path.to_str()?.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(count) || !digits(no) {
        return None;
    }
    Some((prefix.to_string(), no.parse().ok()?, count.parse().ok()?))
}

/// The first part when `paths` are exactly the parts of one split model (a folder holding
/// `name-00001-of-00002.gguf` and `name-00002-of-00002.gguf`); `None` otherwise.
pub fn first_part_of_set(paths: &[PathBuf]) -> Option<&PathBuf> {
    let parts: Vec<(String, u32, u32)> = paths
        .iter()
        .map(|p| part_of_name(p))
        .collect::<Option<_>>()?;
    let (prefix, _, count) = parts.iter().find(|p| p.1 == 1)?;
    let mut numbers: Vec<u32> = parts
        .iter()
        .filter(|p| &p.0 == prefix && p.2 == *count)
        .map(|p| p.1)
        .collect();
    numbers.sort_unstable();
    if numbers.len() != paths.len() || numbers != (1..=*count).collect::<Vec<_>>() {
        return None;
    }
    parts.iter().position(|p| p.1 == 1).map(|i| &paths[i])
}

/// `(split.no, split.count)` of one parsed file when it is part of a model split into more than
/// one file; `None` for a whole model.
pub fn split_info(g: &GgufFile) -> Result<Option<(u32, u32)>, LoadError> {
    let count = match g.get_u64(KEY_COUNT)? {
        None | Some(0 | 1) => return Ok(None),
        Some(n) => n,
    };
    let no = g.get_u64(KEY_NO)?.ok_or_else(|| {
        LoadError::field(
            g.path(),
            format!("metadata '{KEY_COUNT}' = {count} but '{KEY_NO}' is missing"),
        )
    })?;
    if no >= count || count > u64::from(u16::MAX) {
        return Err(LoadError::field(
            g.path(),
            format!("metadata '{KEY_NO}' = {no} does not fit '{KEY_COUNT}' = {count}"),
        ));
    }
    Ok(Some((no as u32, count as u32)))
}

/// `file` as a whole model: itself when it is not split; otherwise every part mapped and joined
/// (from the first part, whichever part `file` is). A missing part, a part whose `split.no` /
/// `split.count` do not match its name, a tensor in two parts, or a total that differs from
/// `split.tensors.count` is an error naming the file.
pub fn join(file: GgufFile) -> Result<GgufFile, LoadError> {
    let Some((no, count)) = split_info(&file)? else {
        return Ok(file);
    };
    let prefix = split_prefix(file.path(), no, count).ok_or_else(|| {
        LoadError::malformed(
            file.path(),
            format!(
                "is part {} of a GGUF split into {count} files (metadata {KEY_NO} = {no}), but \
                 its name does not end in '-{:05}-of-{count:05}.gguf' as llama.cpp names the \
                 parts, so the other parts cannot be found: give the parts their \
                 llama-gguf-split names",
                no + 1,
                no + 1
            ),
        )
    })?;
    let mut joined = if no == 0 {
        file
    } else {
        open_part(&prefix, 0, count)?
    };
    for index in 1..count {
        let part = open_part(&prefix, index, count)?;
        absorb(&mut joined, part, index as usize)?;
    }
    let total = joined.tensors.len() as u64;
    match joined.get_u64(KEY_TENSORS)? {
        Some(n) if n != total => Err(LoadError::field(
            joined.path(),
            format!(
                "metadata '{KEY_TENSORS}' = {n}, but the {count} parts hold {total} tensors \
                 (a part from another split?)"
            ),
        )),
        _ => Ok(joined),
    }
}

/// Part `index` of `count`, opened and checked to say it is that part.
fn open_part(prefix: &str, index: u32, count: u32) -> Result<GgufFile, LoadError> {
    let path = part_path(prefix, index, count);
    if !path.is_file() {
        return Err(LoadError::malformed(
            &path,
            format!(
                "part {} of {count} of the split GGUF model {} is missing (no such file)",
                index + 1,
                part_path(prefix, 0, count).display()
            ),
        ));
    }
    let part = GgufFile::open_single(&path)?;
    let info = split_info(&part)?;
    if info != Some((index, count)) {
        let said = match info {
            Some((no, n)) => format!("part {} of {n}", no + 1),
            None => "a whole model (no split metadata)".to_string(),
        };
        return Err(LoadError::field(
            &path,
            format!(
                "its metadata says {said}, but its name says part {} of {count} (a file from \
                 another model?)",
                index + 1
            ),
        ));
    }
    Ok(part)
}

/// Adds the tensors and the mapping of `part` (part number `index` + 1) to `joined`.
fn absorb(joined: &mut GgufFile, part: GgufFile, index: usize) -> Result<(), LoadError> {
    debug_assert_eq!(joined.parts.len(), index);
    for mut info in part.tensors {
        if let Some(&first) = joined.by_name.get(&info.name) {
            let other = joined.parts[joined.tensors[first].part].path();
            return Err(LoadError::tensor(
                &part.path,
                &info.name,
                format!(
                    "is also in {} (parts of two models mixed?)",
                    other.display()
                ),
            ));
        }
        info.part = index;
        joined
            .by_name
            .insert(info.name.clone(), joined.tensors.len());
        joined.tensors.push(info);
    }
    joined.parts.extend(part.parts);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_names_follow_llama_cpp() {
        assert_eq!(
            part_path("/m/SmolLM2", 1, 3),
            PathBuf::from("/m/SmolLM2-00002-of-00003.gguf")
        );
        let p = Path::new("/m/a-b-00003-of-00012.gguf");
        assert_eq!(split_prefix(p, 2, 12).as_deref(), Some("/m/a-b"));
        assert_eq!(split_prefix(p, 1, 12), None);
        assert_eq!(split_prefix(p, 2, 3), None);
        assert_eq!(part_of_name(p), Some(("/m/a-b".into(), 3, 12)));
        assert_eq!(part_of_name(Path::new("/m/a-3-of-12.gguf")), None);
        let set: Vec<PathBuf> = ["m-00002-of-00002.gguf", "m-00001-of-00002.gguf"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(first_part_of_set(&set), Some(&set[1]));
        assert_eq!(first_part_of_set(&set[..1]), None);
        let mixed = vec![set[1].clone(), PathBuf::from("other.gguf")];
        assert_eq!(first_part_of_set(&mixed), None);
    }
}
