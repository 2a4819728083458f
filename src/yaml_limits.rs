//! A cheap pre-scan of YAML text before `yaml_serde` sees it: refuses documents above a size
//! or nesting depth with a clear error. Deep nesting is the expensive input (40,000 levels
//! took 5.8 s to parse, 100,000 over a minute); real configs and endpoint files nest fewer
//! than 15 levels.
//!
//! The depth is an upper estimate that never needs a parse: block nesting is the number of
//! enclosing indentation levels plus `- ` sequence markers at the start of a line; flow
//! nesting counts `[` / `{` outside quoted scalars. Block scalars (`|`, `>`) are skipped, so
//! templates and expressions inside them never count. Written by hand because no maintained
//! crate checks YAML shape without building the whole tree.

/// Limits of one kind of document.
#[derive(Clone, Copy, Debug)]
pub struct YamlLimits {
    /// Largest document (bytes).
    pub max_bytes: usize,
    /// Deepest nesting.
    pub max_depth: usize,
}

/// EndpointPickerConfig documents (`--config-file`, `--config-text`).
pub const CONFIG: YamlLimits = YamlLimits { max_bytes: 4 << 20, max_depth: 64 };

/// Endpoints files (`--endpoints-file`, `file-discovery`): room for ~100,000 endpoints.
pub const ENDPOINTS: YamlLimits = YamlLimits { max_bytes: 32 << 20, max_depth: 64 };

/// Why a document was refused before parsing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum YamlLimitError {
    /// Larger than `max_bytes`.
    #[error("document is {size} bytes; at most {max} are accepted")]
    TooLarge {
        /// The document's size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// Nested deeper than `max_depth`.
    #[error("nesting deeper than {max} levels at line {line}")]
    TooDeep {
        /// The limit.
        max: usize,
        /// First line (1-based) past it.
        line: usize,
    },
}

/// Checks `text` against `limits`; the error says which limit and where.
pub fn check(text: &str, limits: YamlLimits) -> Result<(), YamlLimitError> {
    if text.len() > limits.max_bytes {
        return Err(YamlLimitError::TooLarge { size: text.len(), max: limits.max_bytes });
    }
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    let mut block_scalar_parent: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        let content = line.trim_start_matches(' ');
        let indent = line.len() - content.len();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if let Some(parent) = block_scalar_parent {
            if indent > parent {
                continue;
            }
            block_scalar_parent = None;
        }
        if flow == 0 {
            while indents.last().is_some_and(|&i| i >= indent) {
                indents.pop();
            }
            indents.push(indent);
        }
        let (dashes, rest) = sequence_markers(content);
        let scan = scan_flow(rest, flow);
        flow = scan.depth;
        let depth = indents.len() + dashes + scan.max_depth;
        if depth > limits.max_depth {
            return Err(YamlLimitError::TooDeep { max: limits.max_depth, line: n + 1 });
        }
        if flow == 0 && scan.opens_block_scalar {
            block_scalar_parent = Some(indent);
        }
    }
    Ok(())
}

/// Leading `- ` markers of a line (each one more level) and the rest.
fn sequence_markers(mut s: &str) -> (usize, &str) {
    let mut n = 0;
    while let Some(rest) = s.strip_prefix("- ").or_else(|| s.strip_prefix('-').filter(|r| r.is_empty())) {
        n += 1;
        s = rest.trim_start_matches(' ');
    }
    (n, s)
}

struct FlowScan {
    depth: usize,
    max_depth: usize,
    opens_block_scalar: bool,
}

/// Flow brackets of one line outside quoted scalars and comments.
fn scan_flow(line: &str, mut depth: usize) -> FlowScan {
    let start = depth;
    let mut max_depth = 0;
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some('"') if c == '\\' => {
                chars.next();
            }
            Some(q) if c == q => {
                if q == '\'' && chars.peek() == Some(&'\'') {
                    chars.next();
                } else {
                    quote = None;
                }
            }
            Some(_) => {}
            // A quote opens a scalar only where a value starts (not `it's`).
            None if (c == '"' || c == '\'') && matches!(prev, ' ' | '[' | '{' | ',' | ':') => quote = Some(c),
            None if c == '#' && prev == ' ' => break,
            None if c == '[' || c == '{' => {
                depth += 1;
                max_depth = max_depth.max(depth - start.min(depth));
            }
            None if c == ']' || c == '}' => depth = depth.saturating_sub(1),
            None => {}
        }
        prev = c;
    }
    let tail = line.split(" #").next().unwrap_or("").trim_end();
    let opens_block_scalar = quote.is_none()
        && tail.rsplit(' ').next().is_some_and(|t| {
            let t = t.trim_start_matches(['-', ':']);
            (t.starts_with('|') || t.starts_with('>'))
                && t[1..].chars().all(|c| c == '-' || c == '+' || c.is_ascii_digit())
        });
    FlowScan { depth, max_depth: max_depth + start, opens_block_scalar }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: YamlLimits = YamlLimits { max_bytes: 1 << 20, max_depth: 64 };

    #[test]
    fn real_documents_pass() {
        let config = "apiVersion: v1\nplugins:\n- type: queue-scorer\n  parameters: {a: [1, 2, {b: c}]}\n\
                      - type: x\n  parameters:\n    template: |\n      {% if x %}{{{{{{{{[[[[\n      {% endif %}\n\
                      schedulingProfiles:\n- name: d\n  plugins: [{pluginRef: q, weight: 2}]\n  note: \"it's [ok\"\n  other: it's [fine]\n";
        assert_eq!(check(config, L), Ok(()));
    }

    #[test]
    fn deep_flow_block_and_dash_nesting_are_refused() {
        let flow = "[".repeat(40_000) + &"]".repeat(40_000);
        assert!(check(&flow, L).unwrap_err().to_string().contains("nesting deeper than 64"));
        let mut block = String::new();
        for i in 0..100 {
            block.push_str(&" ".repeat(i));
            block.push_str("a:\n");
        }
        assert!(check(&block, L).is_err());
        let dashes = "- ".repeat(100) + "x\n";
        assert!(check(&dashes, L).is_err());
        let multi_line_flow = "a: {\n".to_string() + &"b: {\n".repeat(100);
        assert!(check(&multi_line_flow, L).is_err());
    }

    #[test]
    fn size_is_limited() {
        let small = YamlLimits { max_bytes: 10, max_depth: 64 };
        assert_eq!(check("endpoints: []", small), Err(YamlLimitError::TooLarge { size: 13, max: small.max_bytes }));
    }

    #[test]
    fn deep_input_is_refused_fast() {
        let flow = "[".repeat(100_000);
        let start = std::time::Instant::now();
        assert!(check(&flow, L).is_err());
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }
}
