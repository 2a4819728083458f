//! Python's `json.dumps(value)` text of a JSON value, as vLLM produces it when it turns an
//! Anthropic `tool_use.input` object into an OpenAI `function.arguments` string.
//!
//! The default `json.dumps` uses `", "` and `": "` separators, keeps object key order, and
//! escapes every character outside printable ASCII (`ensure_ascii=True`): `\n \r \t \b \f`
//! by name, others as `\uXXXX` (astral characters as a surrogate pair). Floats use Python's
//! `repr` (`1.0`, `1e-05`, `1e+16`). The value is streamed from the JSON text straight into
//! the output, so key order survives without an order-preserving map.
//!
//! Input: JSON text already validated by the caller's parse. Output: the string, or the
//! parser's error for text that is not JSON.

use std::fmt::{self, Write};

use serde::Deserializer;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// `json.dumps` of the JSON text `raw`.
///
/// Errors: `raw` is not a single JSON value.
pub fn dumps(raw: &str) -> Result<String, serde_json::Error> {
    let mut out = String::with_capacity(raw.len() + raw.len() / 8);
    let mut de = serde_json::Deserializer::from_str(raw);
    Dump(&mut out).deserialize(&mut de)?;
    de.end()?;
    Ok(out)
}

/// Writes one value into the borrowed string.
struct Dump<'s>(&'s mut String);

impl<'de> DeserializeSeed<'de> for Dump<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Dump<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0.push_str(if v { "true" } else { "false" });
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        let _ = write!(self.0, "{v}");
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        let _ = write!(self.0, "{v}");
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        push_float(self.0, v);
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        push_str(self.0, v);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push('[');
        if seq.next_element_seed(Dump(self.0))?.is_some() {
            // The separator is written only when an element follows.
            while seq.next_element_seed(Separated(self.0))?.is_some() {}
        }
        self.0.push(']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.push('{');
        let mut first = true;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if !first {
                self.0.push_str(", ");
            }
            first = false;
            push_str(self.0, &key);
            self.0.push_str(": ");
            map.next_value_seed(Dump(self.0))?;
        }
        self.0.push('}');
        Ok(())
    }
}

/// `", "` then one value; written only when the sequence has another element.
struct Separated<'s>(&'s mut String);

impl<'de> DeserializeSeed<'de> for Separated<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        self.0.push_str(", ");
        Dump(self.0).deserialize(deserializer)
    }
}

/// A JSON string literal with Python's `ensure_ascii` escaping.
fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: the shortest round-trip digits, positional for exponents in
/// `-4..16`, else scientific with a signed, at least two-digit exponent.
fn push_float(out: &mut String, v: f64) {
    if !v.is_finite() {
        // JSON text cannot hold these; Python would write the names.
        out.push_str(if v.is_nan() {
            "NaN"
        } else if v > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        });
        return;
    }
    let sci = format!("{v:e}"); // e.g. "-1.25e-7", "1e16"
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    out.push_str(sign);
    if (-4..16).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.unsigned_abs());
    }
}

#[cfg(test)]
mod tests {
    use super::dumps;

    #[test]
    fn matches_python_json_dumps() {
        // Expected strings are what CPython's json.dumps prints for the same values.
        let cases = [
            (r#"{"b":1,"a":[true,null,"x"]}"#, r#"{"b": 1, "a": [true, null, "x"]}"#),
            (r#"{}"#, "{}"),
            (r#"[]"#, "[]"),
            (r#"{"q":"caf\u00e9 \ud83d\ude00\n\t\"\\/"}"#, r#"{"q": "caf\u00e9 \ud83d\ude00\n\t\"\\/"}"#),
            (
                r#"[1.0,0.5,-2.25,100.0,1e16,1e-5,0.0001,123456789.125,-0.0]"#,
                "[1.0, 0.5, -2.25, 100.0, 1e+16, 1e-05, 0.0001, 123456789.125, -0.0]",
            ),
            (r#"[-7, 18446744073709551615]"#, "[-7, 18446744073709551615]"),
            (r#""\u007f\u0001""#, r#""\u007f\u0001""#),
        ];
        for (input, want) in cases {
            assert_eq!(dumps(input).unwrap(), want, "{input}");
        }
    }

    #[test]
    fn rejects_non_json() {
        assert!(dumps("{").is_err());
        assert!(dumps("1 2").is_err());
    }
}
