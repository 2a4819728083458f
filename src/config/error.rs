//! Config problems: each with the path it concerns, what is wrong and, where we can tell, a
//! suggestion. The loader collects all of them in one pass.

use std::fmt;

pub use crate::suggest::closest;

/// One problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// Where, e.g. `schedulingProfiles[decode].plugins[2].pluginRef`.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it, when known.
    pub suggestion: Option<String>,
}

impl ConfigError {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into(), suggestion: None }
    }

    /// Adds a suggestion.
    pub fn suggest(mut self, s: impl Into<String>) -> Self {
        self.suggestion = Some(s.into());
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)?;
        if let Some(s) = &self.suggestion {
            write!(f, " ({s})")?;
        }
        Ok(())
    }
}

/// Every problem found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "invalid EndpointPickerConfig ({} problem{}):",
            self.0.len(),
            if self.0.len() == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

/// Suggestion for a reference to an undeclared plugin: the closest declared name; when none
/// is close, the closest registered type (declaring a plugin of that type may be the fix,
/// e.g. a profile naming a type that was never listed under `plugins`).
pub fn ref_suggestion<'a>(
    name: &str,
    declared: impl IntoIterator<Item = &'a str>,
    types: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    if let Some(s) = closest(name, declared) {
        return Some(format!(
            "did you mean {s:?}? (declared plugins are referred to by `name`, which defaults to `type`)"
        ));
    }
    closest(name, types).map(|t| format!("no plugin of that name is declared; add `- type: {t}` under `plugins`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_near_names() {
        let names = ["precise-prefix-cache-scorer", "queue-scorer"];
        assert_eq!(closest("prefix-cache-scorer", names), Some("precise-prefix-cache-scorer"));
        assert_eq!(closest("queue-scorr", names), Some("queue-scorer"));
        assert_eq!(closest("zzz", names), None);
    }
}
