//! What the vLLM pods of a manifest are started with: for each workload (decode template,
//! multi-node worker, prefill template) the tokens of every container's `args` plus the
//! `VLLM_ADDITIONAL_ARGS` env value (split like the image's shell would), and the env
//! values. Flag
//! lookups accept `--flag value` and `--flag=value`, with `-` or `_` in the name.

use serde_yaml::Value;

use super::at;

/// A pod template of the manifest.
#[derive(Clone, Debug)]
pub struct Workload {
    /// `decode`, `worker` or `prefill`.
    pub role: &'static str,
    /// Path of the pod spec, e.g. `spec.prefill.template`.
    pub path: String,
    /// Argument tokens of all containers, in order.
    pub args: Vec<String>,
    /// (name, value) of all containers' env entries with a literal value.
    pub env: Vec<(String, String)>,
}

impl Workload {
    /// The value of a flag (`--block-size`), last occurrence wins (as argparse does).
    pub fn flag(&self, name: &str) -> Option<String> {
        let want = normalise(name);
        let mut found = None;
        let mut tokens = self.args.iter().peekable();
        while let Some(t) = tokens.next() {
            if let Some((k, v)) = t.split_once('=') {
                if normalise(k) == want {
                    found = Some(unquote(v));
                }
            } else if normalise(t) == want {
                found = tokens.peek().map(|v| unquote(v));
            }
        }
        found
    }

    /// An env value.
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

fn normalise(flag: &str) -> String {
    flag.replace('_', "-")
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    for q in ['\'', '"'] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return v[1..v.len() - 1].to_string();
        }
    }
    v.to_string()
}

/// Splits a command line: whitespace separates, single and double quotes group (and are
/// removed), backslash escapes the next character outside single quotes.
pub fn shell_split(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None::<char>, false);
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => cur.push(c),
            (_, '\\') => cur.extend(chars.next()),
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if !cur.is_empty() || any {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if !cur.is_empty() || any {
        out.push(cur);
    }
    out
}

fn read(pod: &Value, role: &'static str, path: String) -> Workload {
    let mut w = Workload { role, path, args: Vec::new(), env: Vec::new() };
    for c in pod.get("containers").and_then(Value::as_sequence).into_iter().flatten() {
        // Kubernetes passes `args` to the process verbatim (no shell): one item, one token.
        let args = c.get("args").and_then(Value::as_sequence).into_iter().flatten().filter_map(Value::as_str);
        w.args.extend(args.map(str::to_string));
        for e in c.get("env").and_then(Value::as_sequence).into_iter().flatten() {
            if let (Some(k), Some(v)) = (e.get("name").and_then(Value::as_str), e.get("value").and_then(Value::as_str))
            {
                w.env.push((k.to_string(), v.to_string()));
                if k == "VLLM_ADDITIONAL_ARGS" {
                    w.args.extend(shell_split(v));
                }
            }
        }
    }
    w
}

/// The workloads a manifest declares (missing ones are skipped).
pub fn workloads(doc: &Value) -> Vec<Workload> {
    let mut out = Vec::new();
    if let Some(t) = at(doc, &["spec", "template"]) {
        out.push(read(t, "decode", "spec.template".into()));
    }
    if let Some(t) = at(doc, &["spec", "worker"]) {
        out.push(read(t, "worker", "spec.worker".into()));
    }
    if let Some(t) = at(doc, &["spec", "prefill", "template"]) {
        out.push(read(t, "prefill", "spec.prefill.template".into()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_finds_flags_in_both_spellings() {
        assert_eq!(
            shell_split(r#"--kv_transfer_config '{"kv_role":"kv_both"}' --block-size 64"#),
            vec!["--kv_transfer_config", r#"{"kv_role":"kv_both"}"#, "--block-size", "64"]
        );
        let w = Workload {
            role: "decode",
            path: String::new(),
            args: shell_split("--block-size=32 --kv-transfer-config='{\"a\":1}' --prefix-caching-hash-algo sha256"),
            env: vec![],
        };
        assert_eq!(w.flag("--block-size").as_deref(), Some("32"));
        assert_eq!(w.flag("--kv_transfer_config").as_deref(), Some("{\"a\":1}"));
        assert_eq!(w.flag("--prefix-caching-hash-algo").as_deref(), Some("sha256"));
        assert_eq!(w.flag("--missing"), None);
    }
}
