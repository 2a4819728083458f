//! Prometheus text exposition format (0.0.4) -> borrowed [`Sample`]s.
//!
//! A hand-written, allocation-free line parser: metric names `[a-zA-Z_:][a-zA-Z0-9_:]*`
//! (colons included, as in `vllm:*`), quoted label values with `\\`, `\"`, `\n` escapes and
//! any other character (including `}` and `,`) inside the quotes, values such as `3.0`,
//! `1.7672256001e+09`, `NaN`, `+Inf`, `-Inf`, and an optional integer millisecond
//! timestamp. `#` lines (HELP, TYPE, EOF) and blank lines are skipped.
//!
//! [`samples_where`] checks only the metric name of each line before deciding to parse the
//! rest, so callers interested in a few families pay little for the others: lines are found
//! with `memchr` (vector compares) and names scanned with a byte-class table, because a
//! real vLLM exposition is ~50 KB of mostly histogram lines, scraped by default every 50 ms
//! from every endpoint.
//!
//! Does not: know any metric name, interpret TYPE/HELP metadata, or group histograms.

use std::borrow::Cow;

/// One sample line, borrowing from the exposition text.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample<'a> {
    /// Metric name, e.g. `vllm:num_requests_running`.
    pub name: &'a str,
    /// The validated text between `{` and `}` (empty without labels).
    labels: &'a str,
    /// Sample value; may be NaN or infinite.
    pub value: f64,
    /// Optional timestamp in milliseconds since the Unix epoch.
    pub timestamp_ms: Option<i64>,
}

/// Why a line could not be parsed; `line` is 1-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PromError {
    /// The line does not start with a valid metric name.
    #[error("line {line}: invalid metric name")]
    Name {
        /// 1-based line number.
        line: usize,
    },
    /// A label set is malformed or not terminated.
    #[error("line {line}: malformed label set")]
    Labels {
        /// 1-based line number.
        line: usize,
    },
    /// The value is missing or not a float.
    #[error("line {line}: invalid sample value")]
    Value {
        /// 1-based line number.
        line: usize,
    },
    /// The timestamp is not an integer, or text follows it.
    #[error("line {line}: invalid timestamp")]
    Timestamp {
        /// 1-based line number.
        line: usize,
    },
}

impl<'a> Sample<'a> {
    /// Iterates the labels as `(name, unescaped value)` in exposition order.
    pub fn labels(&self) -> Labels<'a> {
        Labels { rest: self.labels.as_bytes(), src: self.labels }
    }

    /// The unescaped value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<Cow<'a, str>> {
        self.labels().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Whether every `(name, value)` in `wanted` is a label of this sample.
    pub fn has_labels<K: AsRef<str>, V: AsRef<str>>(&self, wanted: &[(K, V)]) -> bool {
        wanted.iter().all(|(k, v)| self.label(k.as_ref()).is_some_and(|got| got == v.as_ref()))
    }
}

/// Iterator over a sample's labels; see [`Sample::labels`].
#[derive(Clone, Debug)]
pub struct Labels<'a> {
    rest: &'a [u8],
    src: &'a str,
}

impl<'a> Iterator for Labels<'a> {
    type Item = (&'a str, Cow<'a, str>);

    fn next(&mut self) -> Option<Self::Item> {
        // The label text was validated by `parse_line`, so a failed scan just ends iteration.
        let mut skip = skip_ws(self.rest, 0);
        if self.rest.get(skip) == Some(&b',') {
            skip += 1;
        }
        let rest = self.rest.get(skip..)?;
        let (name, value, consumed) = scan_label(rest)?;
        let offset = self.src.len() - rest.len();
        self.rest = &rest[consumed..];
        let name = self.src.get(offset + name.0..offset + name.1)?;
        let raw = self.src.get(offset + value.0..offset + value.1)?;
        Some((name, unescape(raw)))
    }
}

/// Iterates all samples of `text`; malformed lines yield an error and iteration continues.
pub fn samples(text: &str) -> impl Iterator<Item = Result<Sample<'_>, PromError>> {
    samples_where(text, |_| true)
}

/// Iterates the samples whose metric name satisfies `keep`; other lines are only scanned
/// for their name. The name `keep` sees is the line's text up to its first blank or `{`
/// (empty when the line starts with `{`); a kept line whose name is not a valid metric
/// name yields [`PromError::Name`], a line whose name is not kept is skipped unchecked.
pub fn samples_where<'a>(
    text: &'a str,
    mut keep: impl FnMut(&str) -> bool,
) -> impl Iterator<Item = Result<Sample<'a>, PromError>> {
    lines(text).enumerate().filter_map(move |(index, line)| {
        let line = line.trim_start_matches([' ', '\t']);
        if line.is_empty() || line.starts_with('#') || line == "\r" {
            return None;
        }
        let line_no = index + 1;
        // The name as written runs to the first blank or `{`; only a kept one is validated.
        let written = memchr::memchr3(b' ', b'\t', b'{', line.as_bytes()).unwrap_or(line.len());
        let name = line.get(..written).unwrap_or(line);
        if !keep(name) {
            return None;
        }
        Some(match name_len(line.as_bytes()) {
            0 => Err(PromError::Name { line: line_no }),
            n => parse_after_name(line, n, line_no),
        })
    })
}

/// The lines of `text` split at `\n`, as `str::split('\n')` gives them (a final empty line
/// after a trailing newline included).
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let ends = memchr::memchr_iter(b'\n', text.as_bytes()).map(Some).chain([None]);
    ends.map(move |end| {
        let end = end.unwrap_or(text.len());
        // `\n` is ASCII, so both ends are character boundaries.
        let line = text.get(start..end).unwrap_or("");
        start = end + 1;
        line
    })
}

/// Parses one non-comment line.
pub fn parse_line(line: &str, line_no: usize) -> Result<Sample<'_>, PromError> {
    let line = line.trim_start_matches([' ', '\t']);
    match name_len(line.as_bytes()) {
        0 => Err(PromError::Name { line: line_no }),
        n => parse_after_name(line, n, line_no),
    }
}

fn name_len(bytes: &[u8]) -> usize {
    match bytes.first() {
        Some(b) if b.is_ascii_alphabetic() || *b == b'_' || *b == b':' => {}
        _ => return 0,
    }
    bytes.iter().position(|b| !NAME_BYTE[usize::from(*b)]).unwrap_or(bytes.len())
}

/// Bytes that may follow the first of a metric name: `[a-zA-Z0-9_:]`.
const NAME_BYTE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || c == b'_' || c == b':';
        b += 1;
    }
    table
};

fn parse_after_name(line: &str, name_len: usize, line_no: usize) -> Result<Sample<'_>, PromError> {
    let bytes = line.as_bytes();
    // The name must end at a blank or `{`; `m-1 2` is a bad name, not value -1.
    if !matches!(bytes.get(name_len), Some(b' ' | b'\t' | b'{') | None) {
        return Err(PromError::Name { line: line_no });
    }
    let mut pos = skip_ws(bytes, name_len);
    let mut labels = "";
    if bytes.get(pos) == Some(&b'{') {
        let start = pos + 1;
        let end = scan_label_set(bytes, start).ok_or(PromError::Labels { line: line_no })?;
        labels = line.get(start..end).ok_or(PromError::Labels { line: line_no })?;
        pos = end + 1;
    }
    let mut fields = line[pos..].split_ascii_whitespace();
    let value = fields.next().and_then(parse_value).ok_or(PromError::Value { line: line_no })?;
    let timestamp_ms = match fields.next() {
        None => None,
        Some(ts) => Some(ts.parse::<i64>().map_err(|_| PromError::Timestamp { line: line_no })?),
    };
    if fields.next().is_some() {
        return Err(PromError::Timestamp { line: line_no });
    }
    Ok(Sample { name: &line[..name_len], labels, value, timestamp_ms })
}

fn parse_value(token: &str) -> Option<f64> {
    // Rust accepts "NaN", "inf", "+Inf", "-Inf" (case-insensitive) and exponent forms.
    token.parse().ok()
}

fn skip_ws(bytes: &[u8], mut pos: usize) -> usize {
    while matches!(bytes.get(pos), Some(b' ' | b'\t')) {
        pos += 1;
    }
    pos
}

/// Validates a label set starting just after `{`; returns the index of the closing `}`.
fn scan_label_set(bytes: &[u8], start: usize) -> Option<usize> {
    let mut pos = start;
    loop {
        pos = skip_ws(bytes, pos);
        if bytes.get(pos) == Some(&b'}') {
            return Some(pos);
        }
        let (_, _, consumed) = scan_label(&bytes[pos..])?;
        pos += consumed;
        pos = skip_ws(bytes, pos);
        match bytes.get(pos) {
            Some(b'}') => return Some(pos),
            Some(b',') => pos += 1,
            _ => return None,
        }
    }
}

/// A byte range `(start, end)`.
type Span = (usize, usize);

/// Scans `name="value"` (after optional blanks) at the start of `bytes`. Returns the name span, the raw (still escaped) value span, and bytes consumed.
fn scan_label(bytes: &[u8]) -> Option<(Span, Span, usize)> {
    let name_start = skip_ws(bytes, 0);
    let first = *bytes.get(name_start)?;
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return None;
    }
    let name_end = bytes[name_start..]
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
        .map_or(bytes.len(), |n| name_start + n);
    let mut pos = skip_ws(bytes, name_end);
    if bytes.get(pos) != Some(&b'=') {
        return None;
    }
    pos = skip_ws(bytes, pos + 1);
    if bytes.get(pos) != Some(&b'"') {
        return None;
    }
    let value_start = pos + 1;
    pos = value_start;
    loop {
        match *bytes.get(pos)? {
            b'\\' => pos += 2,
            b'"' => break,
            _ => pos += 1,
        }
    }
    Some(((name_start, name_end), (value_start, pos), pos + 1))
}

fn unescape(raw: &str) -> Cow<'_, str> {
    if !raw.contains('\\') {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other), // `\\`, `\"`, and lenient for anything else
            None => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Sample<'_> {
        parse_line(line, 1).expect("valid line")
    }

    #[test]
    fn names_with_colons_values_and_timestamps() {
        let s = one("vllm:num_requests_running 3.0");
        assert_eq!((s.name, s.value, s.timestamp_ms), ("vllm:num_requests_running", 3.0, None));
        let s = one(r#"x{a="1"} 1.7672256001e+09 1700000000123"#);
        assert_eq!((s.value, s.timestamp_ms), (1.7672256001e9, Some(1_700_000_000_123)));
        assert!(one("x NaN").value.is_nan());
        assert_eq!(one("x +Inf").value, f64::INFINITY);
        assert_eq!(one("x -Inf").value, f64::NEG_INFINITY);
        assert_eq!(one("x{} 2").value, 2.0);
    }

    #[test]
    fn label_escapes_and_specials_inside_quotes() {
        let s = one(r#"m{a="x}y,z",b="q\"uo\\te\nnl" , c = "" ,} 1"#);
        let labels: Vec<_> = s.labels().map(|(k, v)| (k, v.into_owned())).collect();
        assert_eq!(labels, [("a", "x}y,z".to_owned()), ("b", "q\"uo\\te\nnl".to_owned()), ("c", String::new())]);
        assert!(s.has_labels(&[("a", "x}y,z"), ("c", "")]));
        assert!(!s.has_labels(&[("a", "x")]));
        assert_eq!(s.label("missing"), None);
    }

    #[test]
    fn malformed_lines_are_errors_not_panics() {
        for (line, expected) in [
            ("9bad 1", PromError::Name { line: 1 }),
            ("m-1 2", PromError::Name { line: 1 }),
            (r#"m{a="1" 2"#, PromError::Labels { line: 1 }),
            (r#"m{a=1} 2"#, PromError::Labels { line: 1 }),
            (r#"m{a="1\"} 2"#, PromError::Labels { line: 1 }),
            ("m", PromError::Value { line: 1 }),
            ("m abc", PromError::Value { line: 1 }),
            ("m 1 2.5", PromError::Timestamp { line: 1 }),
            ("m 1 2 3", PromError::Timestamp { line: 1 }),
        ] {
            assert_eq!(parse_line(line, 1), Err(expected), "{line}");
        }
    }

    #[test]
    fn samples_skip_comments_and_filter_by_name() {
        let text = "# HELP a x\n# TYPE a gauge\na 1\n\n  b{x=\"1\"} 2\r\nbad{ 3\n";
        let all: Vec<_> = samples(text).collect();
        assert_eq!(all.len(), 3);
        assert_eq!(all[1].as_ref().map(|s| s.value), Ok(2.0));
        assert!(all[2].is_err());
        let only_b: Vec<_> = samples_where(text, |n| n == "b").collect();
        assert_eq!(only_b.len(), 1);
        // The name `keep` sees runs to the first blank or `{`; a kept invalid one is an error.
        let text = "a-b 1\na-b{x=\"1\"} 2\n{x=\"1\"} 3\na 4\n";
        let seen: Vec<_> = samples_where(text, |n| n == "a-b" || n.is_empty()).collect();
        assert_eq!(
            seen,
            [Err(PromError::Name { line: 1 }), Err(PromError::Name { line: 2 }), Err(PromError::Name { line: 3 })]
        );
        assert_eq!(samples_where(text, |n| n == "a").map(|s| s.map(|s| s.value)).collect::<Vec<_>>(), [Ok(4.0)]);
    }

    #[test]
    fn lines_split_like_str_split() {
        for text in ["", "\n", "a", "a\n", "a\nb", "\n\nx\r\n", "é\nü\n\n"] {
            assert_eq!(lines(text).collect::<Vec<_>>(), text.split('\n').collect::<Vec<_>>(), "{text:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
            for s in samples(&text).flatten() {
                let _ = s.labels().count();
            }
        }

        #[test]
        fn never_panics_on_exposition_like_text(
            text in r#"([a-z_:]{0,4}(\{([a-z_ ]{0,3}=? ?"([a-z}{,\\" \n]|\\\\|\\"){0,6}"? ?,?){0,3}\}?)? ?[0-9.eEnaNIf+-]{0,6} ?[0-9]{0,3}\n?){0,6}"#
        ) {
            for s in samples(&text).flatten() {
                let _ = s.labels().map(|(_, v)| v.len()).sum::<usize>();
            }
        }
    }
}
