//! PLACEHOLDER (replaced by the parsers branch).

/// Usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Cached tokens.
    pub cached_tokens: Option<u64>,
}

/// From JSON.
pub fn usage_from_json(_body: &[u8]) -> Option<Usage> {
    None
}

/// SSE scanner.
#[derive(Debug, Default)]
pub struct SseUsageScanner {
    usage: Option<Usage>,
}

impl SseUsageScanner {
    /// Feed.
    pub fn feed(&mut self, _chunk: &[u8]) {}
    /// Usage.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }
}

/// Restore model name.
pub fn restore_model_name(_chunk: &[u8], _target: &str, _incoming: &str) -> Option<Vec<u8>> {
    None
}
