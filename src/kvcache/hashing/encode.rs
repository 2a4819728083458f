//! Byte-exact serialisers used by block hashing: canonical CBOR (as
//! `cbor2.dumps(..., canonical=True)` and llm-d's Go CBOR) and pickle
//! protocol 5 (as CPython's `pickle.dumps(x, protocol=5)`), for the small set
//! of Python values vLLM hashes: None, ints, str, bytes and tuples.
//!
//! Pure functions appending to a caller-owned buffer, so hot paths reuse one
//! allocation. Pickle framing is one frame (vLLM's preimages are far below
//! CPython's 64 KiB frame target); memo GETs for repeated identical objects
//! are not produced (vLLM's shapes never repeat an object).

/// A Python value as vLLM hashes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PyValue<'a> {
    /// `None`.
    None,
    /// A Python int.
    Int(i64),
    /// A Python str.
    Str(&'a str),
    /// Python bytes.
    Bytes(&'a [u8]),
    /// A tuple of token ids (kept as a slice to avoid copying).
    Ints(&'a [u32]),
    /// A tuple.
    Tuple(Vec<PyValue<'a>>),
}

// ---------------------------------------------------------------- CBOR ---

/// Writes a CBOR head (major type + argument) in the shortest form.
pub fn cbor_head(out: &mut Vec<u8>, major: u8, arg: u64) {
    let m = major << 5;
    if arg < 24 {
        out.push(m | arg as u8);
    } else if arg <= 0xff {
        out.extend_from_slice(&[m | 24, arg as u8]);
    } else if arg <= 0xffff {
        out.push(m | 25);
        out.extend_from_slice(&(arg as u16).to_be_bytes());
    } else if arg <= 0xffff_ffff {
        out.push(m | 26);
        out.extend_from_slice(&(arg as u32).to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&arg.to_be_bytes());
    }
}

/// CBOR integer (major 0 or 1).
pub fn cbor_int(out: &mut Vec<u8>, v: i64) {
    if v >= 0 {
        cbor_head(out, 0, v as u64);
    } else {
        // -1 - n encoding: n = -1 - v, computed without overflow.
        cbor_head(out, 1, !(v as u64));
    }
}

/// CBOR text string.
pub fn cbor_text(out: &mut Vec<u8>, s: &str) {
    cbor_head(out, 3, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// CBOR `null`.
pub const CBOR_NULL: u8 = 0xf6;

/// Canonical CBOR of a Python value (tuples become arrays).
pub fn cbor(out: &mut Vec<u8>, v: &PyValue<'_>) {
    match v {
        PyValue::None => out.push(CBOR_NULL),
        PyValue::Int(i) => cbor_int(out, *i),
        PyValue::Str(s) => cbor_text(out, s),
        PyValue::Bytes(b) => {
            cbor_head(out, 2, b.len() as u64);
            out.extend_from_slice(b);
        }
        PyValue::Ints(ts) => {
            cbor_head(out, 4, ts.len() as u64);
            for t in *ts {
                cbor_head(out, 0, u64::from(*t));
            }
        }
        PyValue::Tuple(items) => {
            cbor_head(out, 4, items.len() as u64);
            for item in items {
                cbor(out, item);
            }
        }
    }
}

// -------------------------------------------------------------- pickle ---

const MEMOIZE: u8 = 0x94;

/// `pickle.dumps(v, protocol=5)` as CPython writes it.
pub fn pickle(out: &mut Vec<u8>, v: &PyValue<'_>) {
    let mut body = Vec::with_capacity(64);
    pickle_value(&mut body, v);
    body.push(b'.'); // STOP
    out.extend_from_slice(&[0x80, 5]); // PROTO 5
    // CPython frames any pickle of at least 4 bytes.
    if body.len() >= 4 {
        out.push(0x95); // FRAME
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    }
    out.extend_from_slice(&body);
}

fn pickle_int(out: &mut Vec<u8>, v: i64) {
    if (0..=0xff).contains(&v) {
        out.extend_from_slice(&[0x4b, v as u8]); // BININT1
    } else if (0..=0xffff).contains(&v) {
        out.push(0x4d); // BININT2
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if i32::try_from(v).is_ok() {
        out.push(0x4a); // BININT
        out.extend_from_slice(&(v as i32).to_le_bytes());
    } else {
        // LONG1: minimal two's-complement little-endian bytes.
        let bytes = v.to_le_bytes();
        let mut n = 8;
        while n > 1 {
            let top = bytes[n - 1];
            let next_sign = bytes[n - 2] & 0x80;
            if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                n -= 1;
            } else {
                break;
            }
        }
        out.extend_from_slice(&[0x8a, n as u8]);
        out.extend_from_slice(&bytes[..n]);
    }
}

fn pickle_tuple_end(out: &mut Vec<u8>, n: usize) {
    match n {
        1 => out.push(0x85),
        2 => out.push(0x86),
        3 => out.push(0x87),
        _ => out.push(b't'),
    }
    out.push(MEMOIZE);
}

fn pickle_value(out: &mut Vec<u8>, v: &PyValue<'_>) {
    match v {
        PyValue::None => out.push(b'N'),
        PyValue::Int(i) => pickle_int(out, *i),
        PyValue::Str(s) => {
            if s.len() < 256 {
                out.extend_from_slice(&[0x8c, s.len() as u8]); // SHORT_BINUNICODE
            } else {
                out.push(b'X'); // BINUNICODE
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            }
            out.extend_from_slice(s.as_bytes());
            out.push(MEMOIZE);
        }
        PyValue::Bytes(b) => {
            if b.len() < 256 {
                out.extend_from_slice(&[b'C', b.len() as u8]); // SHORT_BINBYTES
            } else {
                out.push(b'B'); // BINBYTES
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            }
            out.extend_from_slice(b);
            out.push(MEMOIZE);
        }
        PyValue::Ints(ts) => {
            if ts.is_empty() {
                out.push(b')'); // EMPTY_TUPLE, not memoised
                return;
            }
            if ts.len() > 3 {
                out.push(b'('); // MARK
            }
            for t in *ts {
                pickle_int(out, i64::from(*t));
            }
            pickle_tuple_end(out, ts.len());
        }
        PyValue::Tuple(items) => {
            if items.is_empty() {
                out.push(b')');
                return;
            }
            if items.len() > 3 {
                out.push(b'(');
            }
            for item in items {
                pickle_value(out, item);
            }
            pickle_tuple_end(out, items.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pickle_of_str_matches_cpython() {
        let mut out = Vec::new();
        pickle(&mut out, &PyValue::Str("42"));
        assert_eq!(out, [0x80, 5, 0x95, 6, 0, 0, 0, 0, 0, 0, 0, 0x8c, 2, b'4', b'2', 0x94, b'.']);
    }

    #[test]
    fn pickle_long_and_negative_ints() {
        let enc = |v| {
            let mut o = Vec::new();
            pickle_int(&mut o, v);
            o
        };
        assert_eq!(enc(-1), [0x4a, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(enc(1 << 31), [0x8a, 5, 0, 0, 0, 0x80, 0]);
        assert_eq!(enc(-(1 << 40)), [0x8a, 6, 0, 0, 0, 0, 0, 0xff]);
    }

    #[test]
    fn cbor_shortest_forms() {
        let enc = |v| {
            let mut o = Vec::new();
            cbor_int(&mut o, v);
            o
        };
        assert_eq!(enc(23), [0x17]);
        assert_eq!(enc(24), [0x18, 24]);
        assert_eq!(enc(65536), [0x1a, 0, 1, 0, 0]);
        assert_eq!(enc(-1), [0x20]);
        assert_eq!(enc(-25), [0x38, 24]);
    }
}
