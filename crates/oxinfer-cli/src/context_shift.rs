//! Context shift of `oxinfer chat`: when the conversation outgrows the context, the oldest
//! turns after the system messages are dropped (whole user/assistant exchanges) until the
//! prompt and room for a reply fit. The session's KV cache stays consistent by itself: the
//! next generation keeps only the prefix it shares with the shortened conversation (the
//! system prompt) and runs the rest.

use anyhow::{bail, Result};
use oxinfer::ChatMessage;

/// The prompt tokens of `messages` after dropping the oldest turns that follow the first
/// `keep` messages (the system prompt) until the prompt plus `room` reply tokens fit in
/// `ctx` positions; the last message (the new user turn) always stays. `tokens` renders and
/// tokenizes a conversation. Returns the tokens and how many messages were dropped.
///
/// # Errors
/// The conversation does not fit and `shift` is off, or even the system prompt and the last
/// message do not fit.
pub fn fit(
    messages: &mut Vec<ChatMessage>,
    keep: usize,
    ctx: usize,
    room: usize,
    shift: bool,
    mut tokens: impl FnMut(&[ChatMessage]) -> Result<Vec<u32>>,
) -> Result<(Vec<u32>, usize)> {
    let mut dropped = 0;
    loop {
        let ids = tokens(messages)?;
        if ids.len() + room <= ctx {
            return Ok((ids, dropped));
        }
        if !shift {
            bail!(
                "the conversation ({} tokens, plus {room} for the reply) outgrew the context of \
                 {ctx} tokens, and context shift is off (--no-context-shift): /clear it or \
                 raise -c",
                ids.len()
            );
        }
        // Drop the oldest exchange: everything up to (not including) the next user message.
        let first = keep;
        if messages.len() <= first + 1 {
            bail!(
                "the system prompt and the last message alone ({} tokens, plus {room} for the \
                 reply) exceed the context of {ctx} tokens: raise -c",
                ids.len()
            );
        }
        let next_user = (first + 1..messages.len() - 1)
            .find(|&i| messages[i].role == "user")
            .unwrap_or(messages.len() - 1);
        dropped += next_user - first;
        messages.drain(first..next_user);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token per character of every message's content.
    fn count(m: &[ChatMessage]) -> Result<Vec<u32>> {
        let n: usize = m.iter().map(|m| m.content.len()).sum();
        Ok(vec![0; n])
    }

    fn conversation() -> Vec<ChatMessage> {
        vec![
            ChatMessage::new("system", "SSSS"),
            ChatMessage::new("user", "u1u1"),
            ChatMessage::new("assistant", "a1a1"),
            ChatMessage::new("user", "u2u2"),
            ChatMessage::new("assistant", "a2a2"),
            ChatMessage::new("user", "u3u3"),
        ]
    }

    #[test]
    fn oldest_turns_after_the_system_prompt_go_first() {
        let mut m = conversation();
        let (ids, dropped) = fit(&mut m, 1, 18, 2, true, count).unwrap();
        assert_eq!((ids.len(), dropped), (16, 2));
        let roles: Vec<&str> = m.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert_eq!(m[1].content, "u2u2");
        // Everything fits: nothing is dropped.
        let mut m = conversation();
        assert_eq!(fit(&mut m, 1, 100, 10, true, count).unwrap().1, 0);
    }

    #[test]
    fn without_shift_or_room_it_is_an_error() {
        let mut m = conversation();
        let e = fit(&mut m, 1, 18, 2, false, count).unwrap_err().to_string();
        assert!(e.contains("--no-context-shift"), "{e}");
        assert_eq!(m.len(), 6, "nothing dropped");
        let e = fit(&mut m, 1, 9, 2, true, count).unwrap_err().to_string();
        assert!(e.contains("alone"), "{e}");
    }
}
