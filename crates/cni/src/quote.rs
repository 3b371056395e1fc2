//! Text from outside (a configuration, an annotation, an API answer, a plugin's output) as it is
//! quoted in an error, an event or a log line: cut to a bounded length with one visible marker
//! that says how long it was (`start… (N bytes)`, or `(N bytes) …end` for a tail), so that no
//! input makes a huge message. Data (network-status, results) is never cut.

use std::borrow::Cow;

/// How much of a name or a value an error quotes.
pub const VALUE: usize = 100;

/// How much of a parser's message an error quotes: serde's own quote the value they refuse
/// whole (`invalid type: string "…"`).
pub const MESSAGE: usize = 300;

/// `text` cut to its first `max` bytes (on a character boundary), marked with its length.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes)", &text[..end], text.len()))
}

/// `text` quoted as a Rust string (`"…"`, escapes and all), cut to [`VALUE`] bytes first: a
/// name or value from outside as an error names it.
pub fn quoted(text: &str) -> String {
    format!("{:?}", cut(text, VALUE))
}

/// `text` cut to its last `max` bytes (on a character boundary), marked with its length: what
/// a plugin printed last usually says why it failed.
pub fn cut_start(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    Cow::Owned(format!("({} bytes) …{}", text.len(), &text[start..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_on_a_character_boundary_saying_how_long_it_was() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("abcdef", 3), "abc… (6 bytes)");
        assert_eq!(cut("ééé", 3), "é… (6 bytes)");
        assert_eq!(cut_start("abcdef", 3), "(6 bytes) …def");
        assert_eq!(cut_start("ééé", 3), "(6 bytes) …é");
        let big = "x".repeat(1 << 20);
        assert!(cut(&big, VALUE).len() < 2 * VALUE);
        assert!(cut_start(&big, VALUE).len() < 2 * VALUE);
    }
}
