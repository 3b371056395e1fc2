//! YAML from outside (object files for `plumb validate`, `plan`, `attach` and `plumbNadDir`; an
//! exec credential plugin's answer) read with bounds that the YAML parser lacks: nesting is
//! counted before the text reaches it ([`nesting_problem`]), and what aliases unfold to is
//! charged against a budget as the value is built ([`Bounded`], [`budget`]). Without them a
//! file of a few KiB or MiB held plumb for a minute or ran it out of memory.

use std::cell::Cell;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The deepest nesting of YAML collections read. serde_norway refuses more than 128 levels, but
/// only once libyaml has made an event of every one, some 4 µs and 170 bytes each: a 16 MiB
/// object file of `[` took 65 s and 2.7 GB to be refused ("recursion limit exceeded"), and an
/// exec credential plugin's 1 MiB answer of them 3 s.
pub const MAX_NESTING: usize = 1000;

/// Why YAML `text` cannot be read: collections nested more than [`MAX_NESTING`] deep,
/// found without parsing it, before it reaches the YAML parser. Flow collections (`[`, `{`)
/// and block collections begun on one line (`- - - x`) are counted; nesting by indentation
/// costs the square of its depth in bytes, so the file's size bounds it. On the safe side:
/// quoted scalars, block scalars and comments are skipped, and a bracket or a dash counts only
/// where a collection can begin (at a line's start, after `: `, after `[`, `{` or `,` inside a
/// flow collection, after an anchor or a tag), not inside a plain scalar (`note: see [1`), and
/// each document (`---`) is counted anew, so that a file this refuses nests far deeper than any
/// reader here accepts.
pub fn nesting_problem(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let blank = |i: usize| b.get(i).is_none_or(|c| c.is_ascii_whitespace());
    let (mut flow, mut block, mut line) = (0usize, 0usize, 1usize);
    // Whether a node may begin here: at a line's start, after `[`, `{`, `,`, `:`, or a block
    // indicator (`- `, `? `).
    let mut node_start = true;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                block = 0;
                node_start = true;
                // A document's start or end marker: the next document is counted anew.
                let next = &b[i + 1..];
                if (next.starts_with(b"---") || next.starts_with(b"..."))
                    && next.get(3).is_none_or(|c| c.is_ascii_whitespace())
                {
                    flow = 0;
                    i += 3;
                    continue;
                }
            }
            b' ' | b'\t' | b'\r' => {}
            b'#' if i == 0 || blank(i - 1) => {
                while i + 1 < b.len() && b[i + 1] != b'\n' {
                    i += 1;
                }
            }
            b'\'' | b'"' if node_start || i == 0 || blank(i - 1) => {
                // To the closing quote: `''` is a quote in single quotes, `\"` in double.
                i += 1;
                while i < b.len() {
                    match b[i] {
                        b'\n' => line += 1,
                        b'\\' if c == b'"' => i += 1,
                        b'\'' if c == b'\'' && b.get(i + 1) == Some(&b'\'') => i += 1,
                        q if q == c => break,
                        _ => {}
                    }
                    i += 1;
                }
                node_start = false;
            }
            b'|' | b'>' if node_start && flow == 0 && block_scalar_header(&b[i + 1..]) => {
                // A block scalar (`config: |`, the usual way to write a NAD's JSON): its lines
                // are text, not YAML. Counting their brackets refused text the parser reads.
                // Its lines are indented deeper than the line that starts it, and at least as
                // deep as its first (blank lines aside); the first line that is not ends it, and
                // is counted again (the parser reads it as YAML, or refuses the file).
                let line_start = b[..i]
                    .iter()
                    .rposition(|&c| c == b'\n')
                    .map_or(0, |p| p + 1);
                // The column of the node holding it: its key's (`- key: |`, after the dashes),
                // or for a sequence entry (`- |`) its dash's.
                let mut k = line_start + b[line_start..].iter().take_while(|&&c| c == b' ').count();
                let mut base = k - line_start;
                while k < i && b[k] == b'-' && blank(k + 1) {
                    base = k - line_start;
                    k += 1;
                    while k < i && b[k] == b' ' {
                        k += 1;
                    }
                }
                if k < i {
                    base = k - line_start;
                }
                let mut content: Option<usize> = None;
                while i + 1 < b.len() && b[i + 1] != b'\n' {
                    i += 1;
                }
                // `i` is the last byte read; each line after it is read whole, or not at all.
                while i + 1 < b.len() {
                    let start = i + 2;
                    let end = b[start.min(b.len())..]
                        .iter()
                        .position(|&c| c == b'\n')
                        .map_or(b.len(), |p| start + p);
                    let text = &b[start.min(end)..end];
                    let indent = text.iter().take_while(|&&c| c == b' ').count();
                    if !text.iter().all(u8::is_ascii_whitespace) {
                        match content {
                            None if indent > base => content = Some(indent),
                            Some(first) if indent >= first => {}
                            _ => break,
                        }
                    }
                    line += 1;
                    i = end - 1;
                }
                node_start = false;
            }
            // An anchor or a tag before a node (`&name [`, `!!seq [`): the node may begin next.
            b'&' | b'!' if node_start => {
                while i + 1 < b.len() && !b[i + 1].is_ascii_whitespace() {
                    i += 1;
                }
            }
            b'[' | b'{' if node_start => {
                flow += 1;
                if flow > MAX_NESTING {
                    break;
                }
                node_start = true;
            }
            b']' | b'}' => {
                flow = flow.saturating_sub(1);
                node_start = false;
            }
            // Indicators only inside a flow collection, or (`:`) before a blank: in a plain
            // scalar of block context (`a: x, - y`) they are text.
            b',' if flow > 0 => node_start = true,
            b':' if flow > 0 || blank(i + 1) => node_start = true,
            b'-' | b'?' if node_start && blank(i + 1) => {
                block += 1;
                if block > MAX_NESTING {
                    break;
                }
            }
            _ => node_start = false,
        }
        i += 1;
    }
    (flow > MAX_NESTING || block > MAX_NESTING).then(|| {
        format!(
            "line {line}: collections nested more than {MAX_NESTING} deep (plumb reads \
             at most 128 levels)"
        )
    })
}

/// Whether `rest`, what follows a `|` or `>`, is a block scalar's header: at most an
/// indentation digit and a chomping indicator (`|-`, `>+2`), then the line's end or a comment.
fn block_scalar_header(rest: &[u8]) -> bool {
    let line = &rest[..rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())];
    let indicators = line
        .iter()
        .take_while(|c| matches!(c, b'1'..=b'9' | b'+' | b'-'))
        .count();
    let tail = &line[indicators..];
    let after_space = tail.iter().find(|c| !c.is_ascii_whitespace());
    indicators <= 2
        && (tail.is_empty()
            || (tail[0].is_ascii_whitespace() && matches!(after_space, None | Some(b'#'))))
}

/// How much the YAML of a file `len` bytes long may unfold to, counting each node and each byte
/// of text (keys included): 4 times its length, and 4 MiB more (a List of 120 NADs sharing one
/// 10 KB `config` by alias unfolds to 1.2 MB, and 1 MiB more refused it; 4 MiB of nodes is some
/// 100 MB at most). Without aliases a document
/// holds less than its length; an alias (`*name`) repeats the whole of its anchor, and
/// serde_norway bounds how many aliases are followed (100 per event of the file), not what they
/// repeat: 100 KB of one anchor of 20,000 items and 20,000 aliases to it made 400 million
/// values, and `plumb validate` (or an ADD reading `plumbNadDir`) ran out of memory.
pub fn budget(len: usize) -> usize {
    len.saturating_mul(4).saturating_add(4 << 20)
}

/// A JSON value read from YAML, charging what it holds to `left` (see [`budget`]): the
/// same value serde_json's own `Deserialize` makes, refused once `left` is spent.
pub struct Bounded<'a> {
    pub left: &'a Cell<usize>,
}

impl Bounded<'_> {
    fn charge<E: de::Error>(&self, units: usize) -> Result<(), E> {
        match self.left.get().checked_sub(units) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(E::custom(
                "its aliases (*name) repeat more than the file can hold (4 times its size, and \
                 4 MiB more, counting each value and each byte of text): a \"billion laughs\"?",
            )),
        }
    }

    fn reborrow(&self) -> Bounded<'_> {
        Bounded { left: self.left }
    }
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// A map key, charged for its text.
struct BoundedKey<'a>(Bounded<'a>);

impl<'de> DeserializeSeed<'de> for BoundedKey<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        let key = String::deserialize(d)?;
        self.0.charge(key.len())?;
        Ok(key)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.charge(1)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.charge(1)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.charge(1)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        self.charge(1)?;
        serde_json::Number::deserialize(de::value::I128Deserializer::<E>::new(v)).map(Value::Number)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        self.charge(1)?;
        serde_json::Number::deserialize(de::value::U128Deserializer::<E>::new(v)).map(Value::Number)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.charge(1)?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.charge(v.len().saturating_add(1))?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.charge(1)?;
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.charge(1)?;
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.charge(1)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.reborrow())? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.charge(1)?;
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key_seed(BoundedKey(self.reborrow()))? {
            let value = map.next_value_seed(self.reborrow())?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(text: &str) -> bool {
        serde_norway::Deserializer::from_str(text)
            .map(Value::deserialize)
            .collect::<Result<Vec<_>, _>>()
            .is_ok()
    }

    #[test]
    fn brackets_in_a_block_scalar_are_text_not_nesting() {
        // A NAD's JSON in `config: |`, however deep its brackets, is a string to the YAML
        // parser: refusing it turned a readable file away (found by the plumb_objects target).
        let deep = format!("{}{}", "[".repeat(1200), "]".repeat(1200));
        for (header, body_indent) in [("|", "    "), ("|-", "    "), (">+ # text", "      ")] {
            let text = format!(
                "kind: NetworkAttachmentDefinition\nspec:\n  config: {header}\n{body_indent}{{\n\n{body_indent}  \"a\": {deep}\n{body_indent}}}\nmetadata: {{name: n}}\n"
            );
            assert!(readable(&text), "{header}");
            assert_eq!(nesting_problem(&text), None, "{header}");
        }
        // Counting goes on after the block scalar, and in a sequence entry's.
        let after = format!("a: |\n  [[[\nb: {}\n", "[".repeat(1001));
        assert!(
            nesting_problem(&after).is_some_and(|p| p.starts_with("line 3:")),
            "{after:.40}"
        );
        let entry = format!("- |\n  {deep}\n- x\n");
        assert!(readable(&entry));
        assert_eq!(nesting_problem(&entry), None);
        // In a sequence entry's mapping the key's column counts, not the dash's: a line at the
        // key's column is not the block scalar's text.
        let in_entry = format!("- a: |\n  b: {}\n", "[".repeat(1001));
        assert!(nesting_problem(&in_entry).is_some(), "{in_entry:.40}");
        let in_entry = format!("- a: |\n   {deep}\n  b: x\n");
        assert!(readable(&in_entry));
        assert_eq!(nesting_problem(&in_entry), None);
        // Brackets and dashes in plain scalars are text, in however many documents.
        let plain: String = (0..1001)
            .map(|i| {
                format!(
                    "---\nkind: Pod\nmetadata:\n  name: p{i}\n  annotations:\n    note: see [1\n"
                )
            })
            .collect();
        assert!(readable(&plain));
        assert_eq!(nesting_problem(&plain), None);
        for value in [
            vec!["x ["; 1001].join(" "),
            format!("x{}", ", - y".repeat(1001)),
        ] {
            let text = format!("kind: Pod\nmetadata:\n  annotations:\n    a: {value}\n");
            assert!(readable(&text), "{text:.60}");
            assert_eq!(nesting_problem(&text), None, "{text:.60}");
        }
        // After an anchor or a tag a collection is counted.
        for prefix in ["&a ", "!!seq ", "&a !!seq "] {
            let text = format!("a: {prefix}{}", "[".repeat(1001));
            assert!(nesting_problem(&text).is_some(), "{prefix}");
        }
        // A line indented less than the block scalar's first is not its text.
        let shallower = format!("a: |\n      x\n   {}\n", "[".repeat(1001));
        assert!(nesting_problem(&shallower).is_some(), "{shallower:.40}");
        // Not a block scalar's header: counted as before.
        let not_header = format!("a: |x {}", "[".repeat(1001));
        assert!(nesting_problem(&not_header).is_none_or(|_| !readable(&not_header)));
        assert!(nesting_problem(&format!("a: {}", "[".repeat(1001))).is_some());
    }
}
