//! Metric selectors of `core-metrics-extractor` engine configs -> [`MetricSpec`].
//!
//! Syntax: a PromQL-style selector `name{label=value,...}`; values may be bare, `"double"`
//! or `'single'` quoted (quoted values understand `\\`, `\"`, `\'`, `\n`). Only equality
//! matchers exist here: `!=`, `=~` and `!~` are rejected rather than silently dropped, so a
//! config never selects more series than its author wrote.
//!
//! Does not: parse exposition text (see [`super::prom_text`]) or know engine metric names.

use std::fmt;

use super::prom_text::Sample;

/// A metric family name plus required label values; matches samples with at least these
/// labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricSpec {
    /// Metric name, e.g. `vllm:num_requests_waiting`.
    pub name: String,
    /// Required `(label, value)` pairs, in selector order.
    pub labels: Vec<(String, String)>,
}

/// Why a selector string was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The selector is empty (an empty string disables a metric: see [`parse_optional_spec`]).
    #[error("empty metric selector")]
    Empty,
    /// The metric name is missing or has invalid characters.
    #[error("invalid metric name in selector `{spec}`")]
    Name {
        /// The selector as written.
        spec: String,
    },
    /// The label block is malformed.
    #[error("malformed label matcher in selector `{spec}`")]
    Labels {
        /// The selector as written.
        spec: String,
    },
    /// A matcher other than `=`.
    #[error("only `=` label matchers are supported (selector `{spec}`, label `{label}`)")]
    UnsupportedMatcher {
        /// The selector as written.
        spec: String,
        /// The label using the unsupported matcher.
        label: String,
    },
}

impl MetricSpec {
    /// A spec matching every series of `name`.
    pub fn new(name: impl Into<String>) -> MetricSpec {
        MetricSpec { name: name.into(), labels: Vec::new() }
    }

    /// Adds a required label value.
    pub fn with_label(mut self, label: impl Into<String>, value: impl Into<String>) -> MetricSpec {
        self.labels.push((label.into(), value.into()));
        self
    }

    /// Whether `sample` belongs to this spec's family and carries all its labels.
    pub fn matches(&self, sample: &Sample<'_>) -> bool {
        sample.name == self.name && sample.has_labels(&self.labels)
    }
}

impl fmt::Display for MetricSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if self.labels.is_empty() {
            return Ok(());
        }
        f.write_str("{")?;
        for (i, (k, v)) in self.labels.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))?;
        }
        f.write_str("}")
    }
}

/// Parses a selector; an empty or blank string is [`SpecError::Empty`].
pub fn parse_spec(s: &str) -> Result<MetricSpec, SpecError> {
    let spec = s.trim();
    if spec.is_empty() {
        return Err(SpecError::Empty);
    }
    let name_err = || SpecError::Name { spec: spec.to_owned() };
    let labels_err = || SpecError::Labels { spec: spec.to_owned() };
    let name_end = spec.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')).unwrap_or(spec.len());
    let name = &spec[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(name_err());
    }
    let rest = spec[name_end..].trim_start();
    let mut out = MetricSpec::new(name);
    if rest.is_empty() {
        return Ok(out);
    }
    let inner = rest
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .ok_or_else(|| if rest.starts_with('{') { labels_err() } else { name_err() })?;
    let mut chars = inner.chars().peekable();
    loop {
        skip_blanks(&mut chars);
        if chars.peek().is_none() {
            return Ok(out);
        }
        let label: String = take_while(&mut chars, |c| c.is_ascii_alphanumeric() || c == '_');
        if label.is_empty() || label.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(labels_err());
        }
        skip_blanks(&mut chars);
        match (chars.next(), chars.peek()) {
            (Some('='), Some('~')) | (Some('!'), _) => {
                return Err(SpecError::UnsupportedMatcher { spec: spec.to_owned(), label });
            }
            (Some('='), _) => {}
            _ => return Err(labels_err()),
        }
        skip_blanks(&mut chars);
        let value = match chars.peek() {
            Some(&quote @ ('"' | '\'')) => {
                chars.next();
                quoted(&mut chars, quote).ok_or_else(labels_err)?
            }
            _ => take_while(&mut chars, |c| c != ',').trim_end().to_owned(),
        };
        out.labels.push((label, value));
        skip_blanks(&mut chars);
        match chars.next() {
            None => return Ok(out),
            Some(',') => {}
            Some(_) => return Err(labels_err()),
        }
    }
}

/// Parses a selector where an empty string means "metric disabled" (`Ok(None)`).
pub fn parse_optional_spec(s: &str) -> Result<Option<MetricSpec>, SpecError> {
    match parse_spec(s) {
        Err(SpecError::Empty) => Ok(None),
        other => other.map(Some),
    }
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

fn skip_blanks(chars: &mut Chars<'_>) {
    while chars.next_if(|c| c.is_whitespace()).is_some() {}
}

fn take_while(chars: &mut Chars<'_>, keep: impl Fn(char) -> bool) -> String {
    let mut out = String::new();
    while let Some(c) = chars.next_if(|&c| keep(c)) {
        out.push(c);
    }
    out
}

fn quoted(chars: &mut Chars<'_>, quote: char) -> Option<String> {
    let mut out = String::new();
    loop {
        match chars.next()? {
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c if c == quote => return Some(out),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_label_forms() {
        assert_eq!(parse_spec(" vllm:num_requests_waiting "), Ok(MetricSpec::new("vllm:num_requests_waiting")));
        let expected = MetricSpec::new("nv_trt_llm_request_metrics").with_label("request_type", "waiting");
        for s in [
            "nv_trt_llm_request_metrics{request_type=waiting}",
            "nv_trt_llm_request_metrics{request_type=\"waiting\"}",
            "nv_trt_llm_request_metrics { request_type = 'waiting' , }",
        ] {
            assert_eq!(parse_spec(s), Ok(expected.clone()), "{s}");
        }
        let two = parse_spec(r#"m{a="x,}\"y",b=2}"#).unwrap();
        assert_eq!(two.labels, [("a".into(), "x,}\"y".into()), ("b".into(), "2".into())]);
        assert_eq!(parse_spec(&two.to_string()), Ok(two));
    }

    #[test]
    fn rejects_bad_selectors() {
        assert_eq!(parse_spec("  "), Err(SpecError::Empty));
        assert_eq!(parse_optional_spec(""), Ok(None));
        assert!(matches!(parse_spec("9m"), Err(SpecError::Name { .. })));
        assert!(matches!(parse_spec("m x"), Err(SpecError::Name { .. })));
        assert!(matches!(parse_spec("m{a}"), Err(SpecError::Labels { .. })));
        assert!(matches!(parse_spec("m{a=\"x}"), Err(SpecError::Labels { .. })));
        assert!(matches!(parse_spec("m{a=\"x\" b=1}"), Err(SpecError::Labels { .. })));
        for op in ["!=", "=~", "!~"] {
            let err = parse_spec(&format!("m{{a{op}\"x\"}}"));
            assert!(matches!(err, Err(SpecError::UnsupportedMatcher { .. })), "{op}");
        }
    }
}
