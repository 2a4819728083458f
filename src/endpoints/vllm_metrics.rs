//! PLACEHOLDER (replaced by the parsers branch): Prometheus text -> PodMetrics.

/// Load figures of one model server.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodMetrics {
    /// Waiting requests.
    pub waiting_queue_size: u64,
    /// Running requests.
    pub running_requests: u64,
    /// KV cache usage fraction.
    pub kv_cache_usage: f64,
    /// Active LoRA adapters.
    pub active_models: Vec<String>,
    /// Waiting LoRA adapters.
    pub waiting_models: Vec<String>,
    /// max_lora.
    pub max_active_models: Option<u64>,
    /// Block size.
    pub cache_block_size: Option<u32>,
    /// GPU blocks.
    pub cache_num_blocks: Option<u64>,
}

/// Engine mapping.
#[derive(Clone, Debug)]
pub struct EngineMapping {
    /// Name.
    pub name: String,
}

/// Built-in mapping.
pub fn builtin_engine(name: &str) -> Option<EngineMapping> {
    Some(EngineMapping { name: name.to_string() })
}

/// Extraction result.
#[derive(Debug, Default)]
pub struct Extracted {
    /// Values.
    pub metrics: PodMetrics,
    /// Missing families.
    pub missing: Vec<String>,
    /// Whether anything was found.
    pub extracted_any: bool,
}

/// Extracts.
pub fn extract(text: &str, _mapping: &EngineMapping) -> Extracted {
    let mut out = Extracted::default();
    for line in text.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else { continue };
        let name = name.split('{').next().unwrap_or("");
        let Ok(v) = value.parse::<f64>() else { continue };
        match name {
            "vllm:num_requests_waiting" => out.metrics.waiting_queue_size = v as u64,
            "vllm:num_requests_running" => out.metrics.running_requests = v as u64,
            "vllm:kv_cache_usage_perc" | "vllm:gpu_cache_usage_perc" => out.metrics.kv_cache_usage = v,
            _ => continue,
        }
        out.extracted_any = true;
    }
    out
}
