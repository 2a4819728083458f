//! Step-time model of a simulated engine: the NVIDIA Dynamo mocker polynomials. A step that
//! computes `N` uncached prompt tokens costs `4.21e-7·N² + 1.518e-2·N + 16.5` ms; a step
//! with decoding requests adds `−25.74u² + 54.01u + 5.74` ms, where `u` is the fraction of
//! the pod's KV blocks in use. Both terms scale with `scale` (1.0 = the mocker's GPU); the
//! prefill term also scales with `prefill_scale`, which sets how much a cache miss costs
//! next to a decode step. The mocker's ratio is that of a small model: a 10k-token prompt
//! costs 0.21 s, where Qwen3-32B on 2 H100s takes 4.3 s cold (anchors §5.1), so
//! `prefill_scale` 20 is that calibration point.

/// Step-time model parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepModel {
    /// Multiplier on every step time (2.0 = a GPU half as fast).
    pub scale: f64,
    /// Extra multiplier on the prefill term only.
    pub prefill_scale: f64,
}

impl Default for StepModel {
    fn default() -> Self {
        Self { scale: 1.0, prefill_scale: 1.0 }
    }
}

impl StepModel {
    /// Seconds one engine step takes.
    pub fn step_seconds(&self, prefill_tokens: usize, decoding: usize, kv_utilization: f64) -> f64 {
        let mut ms = 0.0;
        if prefill_tokens > 0 {
            let n = prefill_tokens as f64;
            ms += (4.209_989e-7 * n * n + 1.518_344e-2 * n + 16.501_42) * self.prefill_scale;
        }
        if decoding > 0 {
            let u = kv_utilization.clamp(0.0, 1.0);
            ms += -25.74 * u * u + 54.01 * u + 5.74;
        }
        ms * self.scale / 1000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_prompts_are_cheaper_and_decode_grows_with_kv_use() {
        let m = StepModel::default();
        assert!(m.step_seconds(8192, 0, 0.0) > 4.0 * m.step_seconds(512, 0, 0.0));
        assert!(m.step_seconds(0, 4, 0.8) > m.step_seconds(0, 4, 0.1));
        assert_eq!(m.step_seconds(0, 0, 0.5), 0.0);
    }
}
