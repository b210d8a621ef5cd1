//! Reading diffusers' JSON config files: typed getters that name the file and field at fault.

use super::DiffusionError;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One parsed config file (`unet/config.json`, `scheduler/scheduler_config.json`, ...).
pub struct JsonConfig {
    /// The file, for messages.
    pub path: PathBuf,
    /// Its top-level object.
    pub json: Value,
}

impl JsonConfig {
    /// Reads and parses `path`.
    ///
    /// # Errors
    /// [`DiffusionError::Missing`] when the file does not exist, [`DiffusionError::Config`] when
    /// it is not a JSON object.
    pub fn read(path: &Path) -> Result<Self, DiffusionError> {
        if !path.is_file() {
            return Err(DiffusionError::Missing {
                path: path.to_path_buf(),
                what: "config file".into(),
            });
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| DiffusionError::config(path, e.to_string()))?;
        let json: Value = serde_json::from_str(&text)
            .map_err(|e| DiffusionError::config(path, format!("invalid JSON: {e}")))?;
        if !json.is_object() {
            return Err(DiffusionError::config(path, "not a JSON object"));
        }
        Ok(JsonConfig {
            path: path.to_path_buf(),
            json,
        })
    }

    /// A config made from a JSON value (tests, defaults).
    pub fn from_value(path: &Path, json: Value) -> Self {
        JsonConfig {
            path: path.to_path_buf(),
            json,
        }
    }

    fn err(&self, key: &str, what: &str) -> DiffusionError {
        DiffusionError::config(&self.path, format!("field '{key}': {what}"))
    }

    /// Whether `key` is present and not null.
    pub fn has(&self, key: &str) -> bool {
        self.json.get(key).is_some_and(|v| !v.is_null())
    }

    /// A non-negative integer field.
    pub fn usize(&self, key: &str) -> Result<usize, DiffusionError> {
        self.json
            .get(key)
            .and_then(Value::as_u64)
            .map(|v| v as usize)
            .ok_or_else(|| self.err(key, "missing or not a non-negative integer"))
    }

    /// A non-negative integer field, `default` when absent or null.
    pub fn usize_or(&self, key: &str, default: usize) -> Result<usize, DiffusionError> {
        if self.has(key) {
            self.usize(key)
        } else {
            Ok(default)
        }
    }

    /// A number field, `default` when absent or null.
    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64, DiffusionError> {
        match self.json.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| self.err(key, "not a number")),
        }
    }

    /// A boolean field, `default` when absent or null.
    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, DiffusionError> {
        match self.json.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| self.err(key, "not a boolean")),
        }
    }

    /// A string field, `default` when absent or null.
    pub fn str_or<'a>(&'a self, key: &str, default: &'a str) -> Result<&'a str, DiffusionError> {
        match self.json.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_str().ok_or_else(|| self.err(key, "not a string")),
        }
    }

    /// A list of strings.
    pub fn strings(&self, key: &str) -> Result<Vec<String>, DiffusionError> {
        let list = self
            .json
            .get(key)
            .and_then(Value::as_array)
            .ok_or_else(|| self.err(key, "missing or not a list"))?;
        list.iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| self.err(key, "not a list of strings"))
            })
            .collect()
    }

    /// A list of non-negative integers.
    pub fn usizes(&self, key: &str) -> Result<Vec<usize>, DiffusionError> {
        let list = self
            .json
            .get(key)
            .and_then(Value::as_array)
            .ok_or_else(|| self.err(key, "missing or not a list"))?;
        list.iter()
            .map(|v| {
                v.as_u64()
                    .map(|v| v as usize)
                    .ok_or_else(|| self.err(key, "not a list of non-negative integers"))
            })
            .collect()
    }

    /// An integer, or a list of `n` integers (one per block), as diffusers accepts for
    /// `attention_head_dim` and friends; `default` when absent or null.
    pub fn per_block(
        &self,
        key: &str,
        n: usize,
        default: usize,
    ) -> Result<Vec<usize>, DiffusionError> {
        match self.json.get(key) {
            None | Some(Value::Null) => Ok(vec![default; n]),
            Some(Value::Array(_)) => {
                let v = self.usizes(key)?;
                if v.len() != n {
                    return Err(self.err(key, &format!("has {} values, expected {n}", v.len())));
                }
                Ok(v)
            }
            Some(_) => Ok(vec![self.usize(key)?; n]),
        }
    }

    /// Fails with a message naming `key` when its value is not one of `allowed`.
    pub fn expect_str(
        &self,
        key: &str,
        default: &str,
        allowed: &[&str],
    ) -> Result<(), DiffusionError> {
        let v = self.str_or(key, default)?;
        if allowed.contains(&v) {
            Ok(())
        } else {
            Err(self.err(
                key,
                &format!("'{v}' is not supported (supported: {})", allowed.join(", ")),
            ))
        }
    }
}
