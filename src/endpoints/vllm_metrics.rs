//! Model-server Prometheus text -> [`PodMetrics`] (pure; no I/O).
//!
//! Owns the engine metric mappings of GIE's `core-metrics-extractor` ([`EngineMapping`],
//! [`builtin_engine`]) and the value-selection rules: for gauges the matching series with the
//! largest timestamp wins, and without timestamps the first one; for LoRA info the series
//! with the largest value (a Unix timestamp) wins; cache info is read from labels.
//!
//! A family that is absent is reported in [`Extracted::missing`] and leaves its field at the
//! default; it never blocks the other fields. Only lines of the mapped families are parsed
//! beyond their name.
//!
//! Does not: fetch `/metrics`, keep history, or judge staleness (see the scraper and store).

use super::metric_spec::MetricSpec;
use super::prom_text::{Sample, samples_where};

/// How one engine exposes the load signals; `None` specs are disabled.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineMapping {
    /// Engine name (`vllm`, `sglang`, ...), the value of the pod's engine-type label.
    pub name: String,
    /// Waiting-queue length gauge.
    pub queued: Option<MetricSpec>,
    /// Running-batch size gauge.
    pub running: Option<MetricSpec>,
    /// KV-cache usage gauge, a fraction in 0..1.
    pub kv_usage: Option<MetricSpec>,
    /// Used only when `kv_usage` has no matching series (vLLM <= 0.11 name).
    pub kv_usage_fallback: Option<MetricSpec>,
    /// LoRA adapters info gauge (labels `running_lora_adapters`, `waiting_lora_adapters`,
    /// `max_lora`; value = update time).
    pub lora: Option<MetricSpec>,
    /// Cache-config info gauge whose labels hold block size and block count.
    pub cache_info: Option<MetricSpec>,
    /// Label of `cache_info` holding the block size in tokens.
    pub cache_block_size_label: String,
    /// Label of `cache_info` holding the number of GPU blocks.
    pub cache_num_blocks_label: String,
    /// Gauge whose value is the block size (engines without an info metric).
    pub cache_block_size_spec: Option<MetricSpec>,
    /// Gauge whose value is the number of blocks (engines without an info metric).
    pub cache_num_blocks_spec: Option<MetricSpec>,
}

impl EngineMapping {
    /// A mapping of `name` with every metric disabled.
    pub fn disabled(name: &str) -> EngineMapping {
        EngineMapping {
            name: name.to_owned(),
            queued: None,
            running: None,
            kv_usage: None,
            kv_usage_fallback: None,
            lora: None,
            cache_info: None,
            cache_block_size_label: String::new(),
            cache_num_blocks_label: String::new(),
            cache_block_size_spec: None,
            cache_num_blocks_spec: None,
        }
    }
}

/// Names accepted by [`builtin_engine`].
pub const BUILTIN_ENGINES: [&str; 4] = ["vllm", "sglang", "trtllm-serve", "triton-tensorrt-llm"];

/// The built-in mapping for `name`, or `None` for an unknown engine.
pub fn builtin_engine(name: &str) -> Option<EngineMapping> {
    let spec = |n: &str| Some(MetricSpec::new(n));
    let empty = EngineMapping::disabled(name);
    Some(match name {
        "vllm" => EngineMapping {
            queued: spec("vllm:num_requests_waiting"),
            running: spec("vllm:num_requests_running"),
            kv_usage: spec("vllm:kv_cache_usage_perc"),
            kv_usage_fallback: spec("vllm:gpu_cache_usage_perc"),
            lora: spec("vllm:lora_requests_info"),
            cache_info: spec("vllm:cache_config_info"),
            cache_block_size_label: "block_size".into(),
            cache_num_blocks_label: "num_gpu_blocks".into(),
            ..empty
        },
        "sglang" => EngineMapping {
            queued: spec("sglang:num_queue_reqs"),
            running: spec("sglang:num_running_reqs"),
            kv_usage: spec("sglang:token_usage"),
            cache_info: spec("sglang:cache_config_info"),
            cache_block_size_label: "page_size".into(),
            cache_num_blocks_label: "num_pages".into(),
            ..empty
        },
        "trtllm-serve" => EngineMapping {
            queued: spec("trtllm_num_requests_waiting"),
            running: spec("trtllm_num_requests_running"),
            kv_usage: spec("trtllm_kv_cache_utilization"),
            cache_block_size_spec: spec("trtllm_kv_cache_tokens_per_block"),
            cache_num_blocks_spec: spec("trtllm_kv_cache_max_blocks"),
            ..empty
        },
        "triton-tensorrt-llm" => {
            let request = |t: &str| Some(MetricSpec::new("nv_trt_llm_request_metrics").with_label("request_type", t));
            let block = |t: &str| {
                let name = "nv_trt_llm_kv_cache_block_metrics";
                Some(MetricSpec::new(name).with_label("kv_cache_block_type", t))
            };
            EngineMapping {
                queued: request("waiting"),
                running: request("scheduled"),
                kv_usage: block("fraction"),
                cache_block_size_spec: block("tokens_per"),
                cache_num_blocks_spec: block("max"),
                ..empty
            }
        }
        _ => return None,
    })
}

/// Load signals of one pod from one scrape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodMetrics {
    /// Requests waiting to be scheduled (vLLM 0.33: waiting + deferred).
    pub waiting_queue_size: u64,
    /// Requests in the running batch.
    pub running_requests: u64,
    /// KV-cache usage as a fraction in 0..1.
    pub kv_cache_usage: f64,
    /// LoRA adapters currently running.
    pub active_models: Vec<String>,
    /// LoRA adapters with waiting requests.
    pub waiting_models: Vec<String>,
    /// Maximum number of concurrently loaded LoRA adapters.
    pub max_active_models: Option<u64>,
    /// KV-cache block size in tokens.
    pub cache_block_size: Option<u32>,
    /// Number of KV-cache blocks.
    pub cache_num_blocks: Option<u64>,
}

/// A field of [`PodMetrics`] whose metric can be missing from a scrape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricField {
    /// `waiting_queue_size`.
    Queued,
    /// `running_requests`.
    Running,
    /// `kv_cache_usage`.
    KvUsage,
    /// `active_models`, `waiting_models`, `max_active_models` (absent when LoRA is off).
    Lora,
    /// `cache_block_size` / `cache_num_blocks` from the info metric.
    CacheInfo,
    /// `cache_block_size` from a gauge.
    CacheBlockSize,
    /// `cache_num_blocks` from a gauge.
    CacheNumBlocks,
}

impl MetricField {
    /// A stable snake_case name, usable as a metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricField::Queued => "queued",
            MetricField::Running => "running",
            MetricField::KvUsage => "kv_usage",
            MetricField::Lora => "lora",
            MetricField::CacheInfo => "cache_info",
            MetricField::CacheBlockSize => "cache_block_size",
            MetricField::CacheNumBlocks => "cache_num_blocks",
        }
    }
}

/// The result of [`extract`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Extracted {
    /// Values found; fields listed in `missing` keep their defaults.
    pub metrics: PodMetrics,
    /// Configured fields with no matching series, in [`MetricField`] order.
    pub missing: Vec<MetricField>,
    /// Configured fields whose series held an invalid value (NaN, infinite, negative): the
    /// pod reports garbage, so its load is unknown (the scraper rejects the whole scrape).
    pub invalid: Vec<MetricField>,
    /// Whether at least one field was extracted (the scrape counts as an update).
    pub extracted_any: bool,
    /// Malformed lines of the mapped families (skipped).
    pub malformed_lines: usize,
}

/// Index of each spec in the per-scrape selection table.
#[derive(Clone, Copy)]
enum Slot {
    Queued,
    Running,
    KvUsage,
    KvFallback,
    Lora,
    CacheInfo,
    BlockSize,
    NumBlocks,
}

const SLOTS: usize = 8;

/// Extracts [`PodMetrics`] from exposition `text` using `mapping`.
pub fn extract(text: &str, mapping: &EngineMapping) -> Extracted {
    let specs: [(Slot, Option<&MetricSpec>); SLOTS] = [
        (Slot::Queued, mapping.queued.as_ref()),
        (Slot::Running, mapping.running.as_ref()),
        (Slot::KvUsage, mapping.kv_usage.as_ref()),
        (Slot::KvFallback, mapping.kv_usage_fallback.as_ref()),
        (Slot::Lora, mapping.lora.as_ref()),
        (Slot::CacheInfo, mapping.cache_info.as_ref()),
        (Slot::BlockSize, mapping.cache_block_size_spec.as_ref()),
        (Slot::NumBlocks, mapping.cache_num_blocks_spec.as_ref()),
    ];
    let mut best: [Option<Sample<'_>>; SLOTS] = [None; SLOTS];
    let mut malformed_lines = 0;
    let wanted = |name: &str| specs.iter().any(|(_, s)| s.is_some_and(|s| s.name == name));
    for parsed in samples_where(text, wanted) {
        let Ok(sample) = parsed else {
            malformed_lines += 1;
            continue;
        };
        for (slot, spec) in &specs {
            if spec.is_some_and(|s| s.matches(&sample)) {
                let current = &mut best[*slot as usize];
                if replaces(*slot, current.as_ref(), &sample) {
                    *current = Some(sample);
                }
            }
        }
    }
    let mut out = Extracted { malformed_lines, ..Extracted::default() };
    out.apply(&specs, &best, mapping);
    out.extracted_any = out.missing.len() + out.invalid.len() < configured_fields(mapping);
    out
}

/// vLLM-style exposition text of `m` (the inverse of [`extract`] with the `vllm` mapping,
/// for simulated pods): waiting, running, KV usage, and `cache_config_info` when the block
/// size and count are known.
pub fn vllm_exposition(m: &PodMetrics) -> String {
    let mut s = format!(
        "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting {}\n\
         # TYPE vllm:num_requests_running gauge\nvllm:num_requests_running {}\n\
         # TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc {}\n",
        m.waiting_queue_size, m.running_requests, m.kv_cache_usage
    );
    if let (Some(size), Some(blocks)) = (m.cache_block_size, m.cache_num_blocks) {
        s.push_str(&format!(
            "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{block_size=\"{size}\",num_gpu_blocks=\"{blocks}\"}} 1\n"
        ));
    }
    s
}

/// Whether `candidate` should replace the current selection of `slot`.
fn replaces(slot: Slot, current: Option<&Sample<'_>>, candidate: &Sample<'_>) -> bool {
    match (slot, current) {
        (_, None) => true,
        // LoRA info: the value is the update time; newest wins (NaN never does).
        (Slot::Lora, Some(cur)) => candidate.value > cur.value,
        // Gauges: newest timestamp wins; without timestamps the first series stays.
        (_, Some(cur)) => candidate.timestamp_ms > cur.timestamp_ms,
    }
}

fn configured_fields(m: &EngineMapping) -> usize {
    [
        m.queued.is_some(),
        m.running.is_some(),
        m.kv_usage.is_some() || m.kv_usage_fallback.is_some(),
        m.lora.is_some(),
        m.cache_info.is_some(),
        m.cache_block_size_spec.is_some(),
        m.cache_num_blocks_spec.is_some(),
    ]
    .iter()
    .filter(|on| **on)
    .count()
}

impl Extracted {
    fn apply(
        &mut self,
        specs: &[(Slot, Option<&MetricSpec>); SLOTS],
        best: &[Option<Sample<'_>>; SLOTS],
        mapping: &EngineMapping,
    ) {
        let configured = |slot: Slot| specs[slot as usize].1.is_some();
        let mut invalid = Vec::new();
        let mut missing = Vec::new();
        // A gauge's value: `Err` when present but not a valid load figure.
        let value = |slot: Slot| -> Option<Result<f64, ()>> {
            best[slot as usize].map(|s| Some(s.value).filter(|v| valid_load(*v)).ok_or(()))
        };
        let m = &mut self.metrics;
        if configured(Slot::Queued)
            && let Some(v) = read(&mut missing, &mut invalid, MetricField::Queued, value(Slot::Queued))
        {
            m.waiting_queue_size = to_u64(v);
        }
        if configured(Slot::Running)
            && let Some(v) = read(&mut missing, &mut invalid, MetricField::Running, value(Slot::Running))
        {
            m.running_requests = to_u64(v);
        }
        if (configured(Slot::KvUsage) || configured(Slot::KvFallback))
            && let Some(v) = read(
                &mut missing,
                &mut invalid,
                MetricField::KvUsage,
                value(Slot::KvUsage).or_else(|| value(Slot::KvFallback)),
            )
        {
            m.kv_cache_usage = v;
        }
        if configured(Slot::Lora) {
            match &best[Slot::Lora as usize] {
                Some(s) => {
                    m.active_models = adapter_list(s, "running_lora_adapters");
                    m.waiting_models = adapter_list(s, "waiting_lora_adapters");
                    m.max_active_models = parsed_label(s, "max_lora");
                }
                None => missing.push(MetricField::Lora),
            }
        }
        if configured(Slot::CacheInfo) {
            match &best[Slot::CacheInfo as usize] {
                Some(s) => {
                    // Unset config values print as "None"; they fail to parse -> None.
                    m.cache_block_size = parsed_label(s, &mapping.cache_block_size_label);
                    m.cache_num_blocks = parsed_label(s, &mapping.cache_num_blocks_label);
                }
                None => missing.push(MetricField::CacheInfo),
            }
        }
        let block_size =
            value(Slot::BlockSize).map(|v| v.and_then(|v| if v <= f64::from(u32::MAX) { Ok(v) } else { Err(()) }));
        if configured(Slot::BlockSize)
            && let Some(v) = read(&mut missing, &mut invalid, MetricField::CacheBlockSize, block_size)
        {
            m.cache_block_size = Some(v as u32);
        }
        if configured(Slot::NumBlocks)
            && let Some(v) = read(&mut missing, &mut invalid, MetricField::CacheNumBlocks, value(Slot::NumBlocks))
        {
            m.cache_num_blocks = Some(to_u64(v));
        }
        self.missing = missing;
        self.invalid = invalid;
    }
}

/// `v` when valid; otherwise records `field` as missing or invalid.
fn read(
    missing: &mut Vec<MetricField>,
    invalid: &mut Vec<MetricField>,
    field: MetricField,
    v: Option<Result<f64, ()>>,
) -> Option<f64> {
    match v {
        Some(Ok(v)) => Some(v),
        Some(Err(())) => {
            invalid.push(field);
            None
        }
        None => {
            missing.push(field);
            None
        }
    }
}

/// A load figure must be a finite, non-negative number (NaN, `±Inf` and negative values are
/// a broken exporter, not an idle pod).
fn valid_load(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

/// Saturating float -> count conversion (negative -> 0, fractions truncated).
fn to_u64(v: f64) -> u64 {
    v.max(0.0) as u64
}

/// A numeric label value; absent, empty or non-numeric (`"None"`) -> `None`.
fn parsed_label<T: std::str::FromStr>(sample: &Sample<'_>, label: &str) -> Option<T> {
    sample.label(label).and_then(|v| v.trim().parse().ok())
}

/// A comma-separated adapter list label; names trimmed, empty entries dropped.
fn adapter_list(sample: &Sample<'_>, label: &str) -> Vec<String> {
    sample
        .label(label)
        .map_or_else(Vec::new, |v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
}

#[cfg(test)]
mod tests;
