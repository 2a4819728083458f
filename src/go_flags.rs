//! Go `flag`-package compatibility for the command line: the argument lists that KServe's,
//! GIE's and llm-d's templates render for the Go EPPs must start epp unchanged.
//!
//! - [`normalize_args`] rewrites argv before clap sees it: `-flag` (Go's single dash) becomes
//!   `--flag` for known long flags, a bare boolean `--flag` becomes `--flag=true` (so a following
//!   argument is never taken as its value, as in Go), and a value wrapped in one pair of literal
//!   double quotes is unquoted (Helm renders `--kv-cache-usage-percentage-metric="sglang:token_usage"`
//!   and `--lora-info-metric ""` with the quotes reaching the process; `""` means empty). Older
//!   templates (KServe v1alpha1, early llm-d) spell flags in camelCase (`--poolName`,
//!   `-grpcHealthPort`, `--secureServing`): those map to the kebab-case flag. An empty argument
//!   (KServe renders `'{{ if .GlobalConfig.EnableTLS }}--secure-serving=true{{- end }}'` as `''`
//!   when TLS is off) is dropped.
//! - Value parsers for clap: [`parse_go_bool`] (`strconv.ParseBool`), [`parse_go_duration`]
//!   (`time.ParseDuration`, plus humantime forms such as `2min` that epp always accepted) and
//!   [`parse_quantity`] (`10MiB`, `4Mi`, `10M`, `1024`).
//!
//! Written by hand: clap has no notion of Go's flag grammar, and these rules are a few lines each.

use std::ffi::OsString;
use std::time::Duration;

/// How the normalizer must treat one long flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagKind {
    /// Takes a value (`--flag v` or `--flag=v`).
    Value,
    /// A Go boolean: bare `--flag` means true; a value only in the `=` form.
    Bool,
}

/// The long flags of a clap command (top level only: subcommands keep clap's own syntax),
/// with their kind. Booleans are the flags declared with `num_args = 0..=1`.
pub fn long_flags(command: &clap::Command) -> Vec<(String, FlagKind)> {
    let mut out = Vec::new();
    for arg in command.get_arguments() {
        let kind = match arg.get_num_args() {
            Some(range) if range.min_values() == 0 && range.max_values() == 1 => FlagKind::Bool,
            Some(range) if range.max_values() == 0 => continue,
            _ => FlagKind::Value,
        };
        let names = arg.get_long().into_iter().chain(arg.get_all_aliases().unwrap_or_default());
        for name in names {
            out.push((name.to_string(), kind));
        }
    }
    out
}

/// Rewrites Go-style arguments into clap's syntax (see the module doc). Arguments after a
/// subcommand name or `--` are left alone, as are non-UTF-8 arguments.
pub fn normalize_args(args: Vec<OsString>, flags: &[(String, FlagKind)], subcommands: &[String]) -> Vec<OsString> {
    let kind_of = |name: &str| flags.iter().find(|(n, _)| n == name).map(|(_, k)| *k);
    let resolve = |name: &str| -> Option<(String, FlagKind)> {
        if let Some(kind) = kind_of(name) {
            return Some((name.to_string(), kind));
        }
        let kebab = camel_to_kebab(name)?;
        kind_of(&kebab).map(|kind| (kebab, kind))
    };
    let mut out = Vec::with_capacity(args.len());
    let mut iter = args.into_iter();
    if let Some(program) = iter.next() {
        out.push(program);
    }
    // A value flag waiting for its separate value: the pair becomes `--flag=value`, so clap
    // never reads a value such as `-x` as a flag.
    let mut pending: Option<String> = None;
    while let Some(arg) = iter.next() {
        let Some(text) = arg.to_str() else {
            if let Some(flag) = pending.take() {
                out.push(flag.into());
            }
            out.push(arg);
            continue;
        };
        if let Some(flag) = pending.take() {
            out.push(format!("{flag}={}", unquote(text)).into());
            continue;
        }
        if text.is_empty() {
            continue;
        }
        if text == "--" || subcommands.iter().any(|s| s == text) {
            out.push(arg);
            out.extend(iter);
            return out;
        }
        let Some(body) = text.strip_prefix("--").or_else(|| text.strip_prefix('-').filter(|b| b.len() > 1)) else {
            out.push(arg);
            continue;
        };
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        match (resolve(name), value) {
            (Some((name, FlagKind::Bool)), None) => out.push(format!("--{name}=true").into()),
            (Some((name, _)), Some(v)) => out.push(format!("--{name}={}", unquote(v)).into()),
            (Some((name, FlagKind::Value)), None) => pending = Some(format!("--{name}")),
            // Unknown (clap reports it with a suggestion) or a short flag such as `-v`.
            (None, _) => out.push(arg),
        }
    }
    // A value flag at the very end: clap reports the missing value.
    out.extend(pending.map(OsString::from));
    out
}

/// `poolName` -> `pool-name`; `None` when `name` has no upper-case letter.
fn camel_to_kebab(name: &str) -> Option<String> {
    if !name.chars().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            if !out.is_empty() {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// Strips one pair of enclosing double quotes.
pub fn unquote(value: &str) -> &str {
    value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value)
}

/// Go's `strconv.ParseBool`: `1 t T TRUE true True 0 f F FALSE false False`.
pub fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => Err(format!("invalid boolean {other:?} (true or false)")),
    }
}

/// Go's `time.ParseDuration` (`300ms`, `1m30s`, `1.5h`, `0`), falling back to humantime
/// (`2min`, `1 s`). Negative durations are rejected.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    go_duration(s).or_else(|go_err| humantime::parse_duration(s).map_err(|_| go_err))
}

fn go_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?} (Go syntax such as 500ms, 30s, 1m30s)");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let number: f64 = rest[..number_end].parse().map_err(|_| bad())?;
        rest = &rest[number_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let nanos_per = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        total += number * nanos_per;
        rest = &rest[unit_end..];
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(Duration::from_nanos(total.round() as u64))
}

/// A byte quantity: plain bytes (`4194304`), decimal (`10M`, `10MB`, `1k`) or binary (`4Mi`,
/// `10MiB`) suffixes as Kubernetes quantities and go-humanize accept them.
pub fn parse_quantity(s: &str) -> Result<usize, String> {
    let bad = || format!("invalid size {s:?} (bytes, or a number with a suffix such as 4Mi, 10MiB, 10MB)");
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let suffix = suffix.trim();
    let suffix = suffix.strip_suffix(['B', 'b']).unwrap_or(suffix);
    let multiplier: f64 = match suffix.to_ascii_lowercase().as_str() {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "ki" => 1024.0,
        "mi" => 1024.0 * 1024.0,
        "gi" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let bytes = number * multiplier;
    if !bytes.is_finite() || bytes > usize::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes.round() as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(args: &[&str]) -> Vec<String> {
        let flags = vec![
            ("secure-serving".to_string(), FlagKind::Bool),
            ("lora-info-metric".to_string(), FlagKind::Value),
            ("pool-name".to_string(), FlagKind::Value),
        ];
        let argv = std::iter::once("epp").chain(args.iter().copied()).map(OsString::from).collect();
        normalize_args(argv, &flags, &["validate".to_string()])
            .into_iter()
            .skip(1)
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn rewrites_go_syntax() {
        assert_eq!(norm(&["--secure-serving", "--pool-name", "p"]), ["--secure-serving=true", "--pool-name=p"]);
        assert_eq!(norm(&["-pool-name=p", "-secure-serving=false"]), ["--pool-name=p", "--secure-serving=false"]);
        assert_eq!(norm(&["--lora-info-metric", "\"\""]), ["--lora-info-metric="]);
        assert_eq!(norm(&["--lora-info-metric=\"a:b\""]), ["--lora-info-metric=a:b"]);
        // A value is never mistaken for a flag, even when it looks like one.
        assert_eq!(norm(&["--pool-name", "-x"]), ["--pool-name=-x"]);
        assert_eq!(norm(&["--pool-name"]), ["--pool-name"]);
        assert_eq!(norm(&["-v", "4", "--unknown"]), ["-v", "4", "--unknown"]);
        assert_eq!(norm(&["validate", "\"f\"", "--secure-serving"]), ["validate", "\"f\"", "--secure-serving"]);
        assert_eq!(norm(&["--poolName", "p", "-secureServing", ""]), ["--pool-name=p", "--secure-serving=true"]);
        assert_eq!(norm(&["--poolNames", "p"]), ["--poolNames", "p"]);
    }

    #[test]
    fn parses_go_values() {
        assert_eq!(parse_go_bool("True"), Ok(true));
        assert_eq!(parse_go_bool("0"), Ok(false));
        assert!(parse_go_bool("yes").is_err());
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("2min"), Ok(Duration::from_secs(120)));
        assert!(parse_go_duration("-1s").is_err());
        assert!(parse_go_duration("10").is_err());
        assert_eq!(parse_quantity("10MiB"), Ok(10 << 20));
        assert_eq!(parse_quantity("4Mi"), Ok(4 << 20));
        assert_eq!(parse_quantity("10MB"), Ok(10_000_000));
        assert_eq!(parse_quantity("1024"), Ok(1024));
        assert!(parse_quantity("ten").is_err());
        assert!(parse_quantity("1Xi").is_err());
    }
}
