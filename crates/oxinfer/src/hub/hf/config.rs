//! Where the Hub is and who we are to it, from the environment variables `huggingface_hub`
//! reads (`constants.py`): `HF_ENDPOINT`, `HF_TOKEN`, `HF_TOKEN_PATH`, `HF_HOME`,
//! `HF_HUB_CACHE`, `HF_HUB_OFFLINE`, `HF_HUB_DOWNLOAD_TIMEOUT`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// How long a transfer may go without receiving a byte when `HF_HUB_DOWNLOAD_TIMEOUT` is not
/// set (`huggingface_hub` waits 10 s; a slow mirror on a loaded link gets more here).
pub const DEFAULT_DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The Hub's address, the token, the cache folder and whether the network may be used.
#[derive(Debug, Clone)]
pub struct HfConfig {
    /// `$HF_ENDPOINT` without a trailing `/`, default `https://huggingface.co`.
    pub endpoint: String,
    /// `$HF_TOKEN`, else the first line of `$HF_TOKEN_PATH` or `$HF_HOME/token`.
    pub token: Option<String>,
    /// `$HF_HUB_CACHE`, else `$HF_HOME/hub`; `$HF_HOME` defaults to
    /// `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
    pub hub_cache: PathBuf,
    /// `$HF_HUB_OFFLINE` is `1`, `ON`, `YES` or `TRUE`: only the cache is used.
    pub offline: bool,
    /// `$HF_HUB_DOWNLOAD_TIMEOUT` (whole seconds, at least 1), else (unset, or unusable: one
    /// warning line on stderr) [`DEFAULT_DOWNLOAD_TIMEOUT`]: the longest wait for the next bytes of an answer. It
    /// bounds silence, not a transfer's length: a slow download runs as long as bytes keep
    /// arriving; a stalled one is resumed with a Range request.
    pub download_timeout: Duration,
}

impl HfConfig {
    /// The configuration from this process's environment.
    pub fn from_env() -> Self {
        Self::from_vars(|k| std::env::var_os(k))
    }

    /// The configuration from `var` (an environment lookup), for tests.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Self {
        let text = |k: &str| {
            var(k)
                .map(|v| v.to_string_lossy().trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let home = text("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let base = text("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| {
                    text("HOME")
                        .or_else(|| text("USERPROFILE"))
                        .map(|h| PathBuf::from(h).join(".cache"))
                })
                .unwrap_or_else(std::env::temp_dir);
            base.join("huggingface")
        });
        let token = text("HF_TOKEN").or_else(|| {
            let path = text("HF_TOKEN_PATH")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join("token"));
            let file = std::fs::read_to_string(path).ok()?;
            let line = file.lines().next()?.trim().to_string();
            (!line.is_empty()).then_some(line)
        });
        let offline = text("HF_HUB_OFFLINE").is_some_and(|v| {
            ["1", "ON", "YES", "TRUE"]
                .iter()
                .any(|t| v.eq_ignore_ascii_case(t))
        });
        let download_timeout = match text("HF_HUB_DOWNLOAD_TIMEOUT") {
            None => DEFAULT_DOWNLOAD_TIMEOUT,
            Some(v) => match v.parse::<u64>() {
                Ok(s) if s > 0 => Duration::from_secs(s),
                _ => {
                    eprintln!(
                        "oxinfer: warning: HF_HUB_DOWNLOAD_TIMEOUT={v:?} is not a whole number \
                         of seconds above 0; using {} s",
                        DEFAULT_DOWNLOAD_TIMEOUT.as_secs()
                    );
                    DEFAULT_DOWNLOAD_TIMEOUT
                }
            },
        };
        HfConfig {
            endpoint: text("HF_ENDPOINT")
                .unwrap_or_else(|| "https://huggingface.co".into())
                .trim_end_matches('/')
                .to_string(),
            token,
            hub_cache: text("HF_HUB_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join("hub")),
            offline,
            download_timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> HfConfig {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        HfConfig::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn environment_is_read_as_huggingface_hub_reads_it() {
        let c = cfg(&[("HOME", "/h")]);
        assert_eq!(c.endpoint, "https://huggingface.co");
        assert_eq!(c.hub_cache, PathBuf::from("/h/.cache/huggingface/hub"));
        assert!(!c.offline);
        assert_eq!(c.download_timeout, DEFAULT_DOWNLOAD_TIMEOUT);
        let c = cfg(&[
            ("HF_HOME", "/x"),
            ("HF_HUB_DOWNLOAD_TIMEOUT", "3"),
            ("HF_ENDPOINT", "http://mirror/"),
            ("HF_HUB_OFFLINE", "yes"),
            ("HF_TOKEN", "hf_abc"),
        ]);
        assert_eq!(c.endpoint, "http://mirror");
        assert_eq!(c.hub_cache, PathBuf::from("/x/hub"));
        assert!(c.offline);
        assert_eq!(c.token.as_deref(), Some("hf_abc"));
        assert_eq!(c.download_timeout, Duration::from_secs(3));
        let c = cfg(&[
            ("HF_HUB_CACHE", "/c"),
            ("HF_HUB_OFFLINE", "0"),
            ("HF_HUB_DOWNLOAD_TIMEOUT", "soon"),
        ]);
        assert_eq!(c.hub_cache, PathBuf::from("/c"));
        assert!(!c.offline);
        assert_eq!(c.download_timeout, DEFAULT_DOWNLOAD_TIMEOUT);
    }
}
