//! Stop strings over streamed text: text is released only once it can no longer be the start
//! of a stop string, so a stop string never reaches the caller, even split across tokens.

/// Matches stop strings against text arriving in pieces.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not yet released (a possible stop-string prefix).
    held: String,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> Self {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
        }
    }

    /// Feeds `text`; returns the text that is safe to release and whether a stop string was
    /// found (in which case the released text ends right before it).
    pub fn push(&mut self, text: &str) -> (String, bool) {
        self.held.push_str(text);
        if self.stops.is_empty() {
            return (std::mem::take(&mut self.held), false);
        }
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let out = self.held[..at].to_string();
            self.held.clear();
            return (out, true);
        }
        // Hold back the longest suffix that is a prefix of some stop string.
        let mut keep = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if i > keep && self.held.ends_with(&s[..i]) {
                    keep = i;
                }
            }
        }
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        (out, false)
    }

    /// Releases whatever is still held (generation ended without a stop string).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_split_across_pieces() {
        let mut m = StopMatcher::new(&["</end>".to_string()]);
        let mut out = String::new();
        let mut stopped = false;
        for piece in ["Hello <", "/e", "nd> tail"] {
            let (t, s) = m.push(piece);
            out += &t;
            if s {
                stopped = true;
                break;
            }
        }
        assert!(stopped);
        assert_eq!(out, "Hello ");
    }

    #[test]
    fn held_prefix_released_at_finish() {
        let mut m = StopMatcher::new(&["STOP".to_string()]);
        let (t, s) = m.push("abc ST");
        assert_eq!((t.as_str(), s), ("abc ", false));
        assert_eq!(m.finish(), "ST");
    }

    #[test]
    fn multibyte_text_is_not_split() {
        let mut m = StopMatcher::new(&["é!".to_string()]);
        let (t, s) = m.push("caféé");
        assert_eq!((t.as_str(), s), ("café", false));
        let (t, s) = m.push("!");
        assert_eq!((t.as_str(), s), ("", true));
    }
}
