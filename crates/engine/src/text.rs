//! Text from outside (files, API answers, a plugin's output) as plumb quotes it in an error or
//! a log line: cut to a bounded length, saying how long it was, so that a huge input never
//! makes a huge message.

/// The most of a parser's message an error quotes: serde's own quote the value they refuse
/// whole (`invalid type: string "…"`).
pub const QUOTED_MESSAGE: usize = 300;

/// `text`, cut after `max` characters, saying how long it was.
pub fn cut_at(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}… ({} bytes)", &text[..end], text.len()).into(),
        None => text.into(),
    }
}
