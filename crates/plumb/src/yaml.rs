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
/// quoted scalars and comments are skipped, and a bracket counts only where a collection can
/// begin (at a line's start, after an indicator or a space), not inside a plain scalar, so that
/// a file this refuses nests far deeper than any reader here accepts.
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
            b'[' | b'{' if node_start || blank(i - 1) => {
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
            b',' | b':' => node_start = true,
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

/// How much the YAML of a file `len` bytes long may unfold to, counting each node and each byte
/// of text (keys included): 4 times its length, and 1 MiB more. Without aliases a document
/// holds less than its length; an alias (`*name`) repeats the whole of its anchor, and
/// serde_norway bounds how many aliases are followed (100 per event of the file), not what they
/// repeat: 100 KB of one anchor of 20,000 items and 20,000 aliases to it made 400 million
/// values, and `plumb validate` (or an ADD reading `plumbNadDir`) ran out of memory. The
/// API server refuses such repetition too (go-yaml's "excessive aliasing").
pub fn budget(len: usize) -> usize {
    len.saturating_mul(4).saturating_add(1 << 20)
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
                 1 MiB more, counting each value and each byte of text): a \"billion laughs\"?",
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
