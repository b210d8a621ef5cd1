//! Separating a reasoning model's trace from its answer in streamed text: `<think>…</think>`
//! (Qwen 3 / 3.5 with `enable_thinking`, DeepSeek-R1 distills) and Gemma 4's thought channel
//! `<|channel>thought\n…<channel|>` (the markers transformers' response parser uses for
//! `gemma4`).
//!
//! Text arrives in arbitrary pieces, so a tag may be split across them: the splitter holds back
//! any tail that could still become a tag. Templates that open the think block themselves (the
//! generation prompt ends with `<think>`) start the splitter inside the trace, see
//! [`prompt_opens_think`].

/// Opening and closing tags of the reasoning trace.
pub const THINK_OPEN: &str = "<think>";
pub const THINK_CLOSE: &str = "</think>";

/// Gemma 4's thought channel: opening and closing markers.
pub const CHANNEL_OPEN: &str = "<|channel>thought\n";
pub const CHANNEL_CLOSE: &str = "<channel|>";

/// Every (open, close) pair of trace markers the splitter recognises.
const MARKERS: &[(&str, &str)] = &[(THINK_OPEN, THINK_CLOSE), (CHANNEL_OPEN, CHANNEL_CLOSE)];

/// Which part of the output a piece of text belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Reasoning,
    Answer,
}

/// A run of text of one part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub part: Part,
    pub text: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace seen: a `<think>` may still open the trace.
    Start,
    Thinking,
    /// Right after `</think>`: whitespace before the answer is dropped.
    AfterThink,
    Answer,
}

/// Streaming splitter of reasoning and answer.
#[derive(Clone, Debug)]
pub struct ThinkingSplitter {
    state: State,
    /// The closing tag of the open trace (`None` inside a trace the prompt opened: any).
    close: Option<&'static str>,
    /// Text not yet emitted (a possible tag prefix, or leading whitespace).
    held: String,
}

/// Whether a rendered prompt leaves the model inside an open think block (the template wrote
/// `<think>` at the end of the generation prompt, as DeepSeek-R1 distills and some Qwen
/// templates do).
pub fn prompt_opens_think(prompt: &str) -> bool {
    let p = prompt.trim_end();
    MARKERS.iter().any(|(open, close)| {
        let open = open.trim_end();
        match p.rfind(open) {
            Some(i) => !p[i..].contains(close) && p[i + open.len()..].trim().is_empty(),
            None => false,
        }
    })
}

impl ThinkingSplitter {
    /// A splitter for output that starts inside the trace (`in_think`, see
    /// [`prompt_opens_think`]) or before it (a `<think>` at the very start opens it; anything
    /// else is answer).
    pub fn new(in_think: bool) -> Self {
        ThinkingSplitter {
            state: if in_think {
                State::Thinking
            } else {
                State::Start
            },
            close: None,
            held: String::new(),
        }
    }

    /// Whether the splitter is inside the reasoning trace.
    pub fn in_reasoning(&self) -> bool {
        self.state == State::Thinking
    }

    /// Feeds one streamed piece; returns what can be emitted now.
    pub fn push(&mut self, piece: &str) -> Vec<Segment> {
        self.held.push_str(piece);
        let mut out = Vec::new();
        loop {
            match self.state {
                State::Start => {
                    let t = self.held.trim_start();
                    if t.is_empty() {
                        return out;
                    }
                    if let Some((open, close)) = MARKERS.iter().find(|(o, _)| t.starts_with(o)) {
                        self.held = t[open.len()..].to_string();
                        self.close = Some(close);
                        self.state = State::Thinking;
                    } else if MARKERS.iter().any(|(o, _)| o.starts_with(t)) {
                        return out; // maybe a split opening tag
                    } else {
                        self.state = State::Answer;
                    }
                }
                State::Thinking => match self.find_close() {
                    Some((i, n)) => {
                        emit(&mut out, Part::Reasoning, &self.held[..i]);
                        self.held = self.held[i + n..].to_string();
                        self.state = State::AfterThink;
                    }
                    None => {
                        let keep = self
                            .closes()
                            .map(|c| partial_tag_len(&self.held, c))
                            .max()
                            .unwrap_or(0);
                        let cut = self.held.len() - keep;
                        emit(&mut out, Part::Reasoning, &self.held[..cut]);
                        self.held = self.held[cut..].to_string();
                        return out;
                    }
                },
                State::AfterThink => {
                    let t = self.held.trim_start();
                    if t.is_empty() {
                        self.held.clear();
                        return out;
                    }
                    self.held = t.to_string();
                    self.state = State::Answer;
                }
                State::Answer => {
                    let text = std::mem::take(&mut self.held);
                    emit(&mut out, Part::Answer, &text);
                    return out;
                }
            }
        }
    }

    /// The closing tags that may end the current trace.
    fn closes(&self) -> impl Iterator<Item = &'static str> + '_ {
        MARKERS
            .iter()
            .map(|&(_, c)| c)
            .filter(move |c| self.close.is_none_or(|want| want == *c))
    }

    /// Where the first closing tag of the trace starts in `held`, and its length.
    fn find_close(&self) -> Option<(usize, usize)> {
        self.closes()
            .filter_map(|c| self.held.find(c).map(|i| (i, c.len())))
            .min()
    }

    /// Flushes whatever is held at the end of generation.
    pub fn finish(&mut self) -> Vec<Segment> {
        let mut out = Vec::new();
        let text = std::mem::take(&mut self.held);
        match self.state {
            State::Thinking => emit(&mut out, Part::Reasoning, &text),
            State::Start | State::Answer => emit(&mut out, Part::Answer, &text),
            State::AfterThink => {}
        }
        out
    }

    /// Splits a whole text at once: (reasoning, answer).
    pub fn split(text: &str, in_think: bool) -> (String, String) {
        let mut s = ThinkingSplitter::new(in_think);
        let mut segs = s.push(text);
        segs.extend(s.finish());
        let mut r = (String::new(), String::new());
        for seg in segs {
            match seg.part {
                Part::Reasoning => r.0.push_str(&seg.text),
                Part::Answer => r.1.push_str(&seg.text),
            }
        }
        r
    }
}

/// Writes streamed output through a [`ThinkingSplitter`]: the answer to one writer, the trace
/// to another, wrapped in ANSI dim codes when `dim` (a terminal).
pub struct TracePrinter {
    splitter: ThinkingSplitter,
    dim: bool,
    dimmed: bool,
    /// The answer text so far (without the trace).
    pub answer: String,
}

impl TracePrinter {
    pub fn new(in_think: bool, dim: bool) -> Self {
        TracePrinter {
            splitter: ThinkingSplitter::new(in_think),
            dim,
            dimmed: false,
            answer: String::new(),
        }
    }

    /// Writes one streamed piece.
    pub fn write(
        &mut self,
        piece: &str,
        answer: &mut dyn std::io::Write,
        trace: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        let segs = self.splitter.push(piece);
        self.emit(segs, answer, trace)
    }

    /// Writes what is held at the end and resets the terminal style.
    pub fn finish(
        &mut self,
        answer: &mut dyn std::io::Write,
        trace: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        let segs = self.splitter.finish();
        self.emit(segs, answer, trace)?;
        self.undim(trace)
    }

    fn undim(&mut self, trace: &mut dyn std::io::Write) -> std::io::Result<()> {
        if self.dimmed {
            trace.write_all(b"\x1b[0m\n")?;
            trace.flush()?;
            self.dimmed = false;
        }
        Ok(())
    }

    fn emit(
        &mut self,
        segs: Vec<Segment>,
        answer: &mut dyn std::io::Write,
        trace: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        for seg in segs {
            match seg.part {
                Part::Reasoning => {
                    if self.dim && !self.dimmed {
                        trace.write_all(b"\x1b[2m")?;
                        self.dimmed = true;
                    }
                    trace.write_all(seg.text.as_bytes())?;
                    trace.flush()?;
                }
                Part::Answer => {
                    self.undim(trace)?;
                    self.answer.push_str(&seg.text);
                    answer.write_all(seg.text.as_bytes())?;
                    answer.flush()?;
                }
            }
        }
        Ok(())
    }
}

fn emit(out: &mut Vec<Segment>, part: Part, text: &str) {
    if text.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(s) if s.part == part => s.text.push_str(text),
        _ => out.push(Segment {
            part,
            text: text.to_string(),
        }),
    }
}

/// Length of the longest tail of `s` that is a proper prefix of `tag`.
fn partial_tag_len(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && tag.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pieces: &[&str], in_think: bool) -> (String, String, Vec<Segment>) {
        let mut s = ThinkingSplitter::new(in_think);
        let mut all = Vec::new();
        for p in pieces {
            all.extend(s.push(p));
        }
        all.extend(s.finish());
        let (mut r, mut a) = (String::new(), String::new());
        for seg in &all {
            match seg.part {
                Part::Reasoning => r.push_str(&seg.text),
                Part::Answer => a.push_str(&seg.text),
            }
        }
        (r, a, all)
    }

    /// Tags split at every possible place give the same reasoning and answer.
    #[test]
    fn tags_split_anywhere() {
        let text = "<think>\nLet me add 2 and 2. </thin k? no.\n</think>\n\nThe answer is 4.";
        for cut in 0..=text.len() {
            if !text.is_char_boundary(cut) {
                continue;
            }
            for cut2 in cut..=text.len() {
                if !text.is_char_boundary(cut2) {
                    continue;
                }
                let (r, a, _) = run(&[&text[..cut], &text[cut..cut2], &text[cut2..]], false);
                assert_eq!(
                    r, "\nLet me add 2 and 2. </thin k? no.\n",
                    "cuts {cut} {cut2}"
                );
                assert_eq!(a, "The answer is 4.", "cuts {cut} {cut2}");
            }
        }
    }

    /// One character per piece, streamed: reasoning is emitted as it arrives, not at the end.
    #[test]
    fn streams_reasoning_before_close() {
        let mut s = ThinkingSplitter::new(true);
        let mut seen = String::new();
        for c in "thinking hard".chars() {
            for seg in s.push(&c.to_string()) {
                assert_eq!(seg.part, Part::Reasoning);
                seen.push_str(&seg.text);
            }
        }
        assert_eq!(seen, "thinking hard");
        assert!(s.in_reasoning());
        let segs = s.push("</think>\n\nHi");
        assert_eq!(
            segs,
            vec![Segment {
                part: Part::Answer,
                text: "Hi".into()
            }]
        );
    }

    /// The template opened the block (DeepSeek-R1 distill, Qwen3 thinking): no `<think>` in
    /// the output; and output without any tag is all answer.
    #[test]
    fn opened_by_template_and_no_tags() {
        let (r, a, _) = run(&["Okay, so", " 1+1=2.\n</", "think>\n\n", "2"], true);
        assert_eq!((r.as_str(), a.as_str()), ("Okay, so 1+1=2.\n", "2"));
        let (r, a, _) = run(&["Hello", " <think> world"], false);
        assert_eq!((r.as_str(), a.as_str()), ("", "Hello <think> world"));
        let (r, a, _) = run(&["<th", "ink>unfinished"], false);
        assert_eq!((r.as_str(), a.as_str()), ("unfinished", ""));
        let (r, a, _) = run(&["<thi"], false);
        assert_eq!((r.as_str(), a.as_str()), ("", "<thi"));
        // Qwen3 with thinking off: the template writes an empty block, the output is answer.
        assert!(prompt_opens_think("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens_think(
            "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        ));
        assert!(!prompt_opens_think("<|im_start|>assistant\n"));
    }

    /// Gemma 4's thought channel, split anywhere; with thinking off the template closes an
    /// empty channel in the prompt and the output is all answer.
    #[test]
    fn gemma4_thought_channel() {
        let text = "<|channel>thought\nAdd 2 and 2; </think> is just text.<channel|>It is 4.";
        for cut in 0..=text.len() {
            let (r, a, _) = run(&[&text[..cut], &text[cut..]], false);
            assert_eq!(r, "Add 2 and 2; </think> is just text.", "cut {cut}");
            assert_eq!(a, "It is 4.", "cut {cut}");
        }
        let (r, a, _) = run(&["<|chan", "nel>thought\nhmm"], false);
        assert_eq!((r.as_str(), a.as_str()), ("hmm", ""));
        let (r, a, _) = run(&["<|channel>other"], false);
        assert_eq!((r.as_str(), a.as_str()), ("", "<|channel>other"));
        assert!(!prompt_opens_think(
            "<|turn>model\n<|channel>thought\n<channel|>"
        ));
        assert!(prompt_opens_think("<|turn>model\n<|channel>thought\n"));
        let (r, a, _) = run(&["still thinking<chan", "nel|>\nDone."], true);
        assert_eq!((r.as_str(), a.as_str()), ("still thinking", "Done."));
        assert!(!prompt_opens_think("<|turn>model\n"));
    }
}
