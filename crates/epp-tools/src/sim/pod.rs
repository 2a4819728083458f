//! One simulated vLLM pod: an FCFS waiting queue, a running batch of at most `max_num_seqs`
//! requests, chunked prefill under a `max_batched_tokens` budget per step (decodes first,
//! one token each, then prompt chunks in admission order), and the `kv` block pool with its
//! prefix cache. `step` advances the engine by one step and reports what happened; the
//! caller (`engine`) owns the clock.
//!
//! Admission reserves every block the request will need (prompt + output, minus the cached
//! prefix) so running requests are never preempted; a request that does not fit waits.

use std::collections::VecDeque;

use super::kv::{self, BlockPool};
use super::timing::StepModel;
use super::workload::{SimRequest, output_token};
use epp::kvcache::events::KvEvent;

/// Engine settings of every pod.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct PodConfig {
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV capacity in blocks.
    pub kv_blocks: usize,
    /// Largest running batch.
    pub max_num_seqs: usize,
    /// Token budget of one step (decodes + prompt chunks).
    pub max_batched_tokens: usize,
    /// Step-time model.
    #[serde(skip)]
    pub model: StepModel,
}

/// Load as a scraper would see it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PodLoad {
    /// Requests waiting for admission.
    pub waiting: usize,
    /// Requests in the running batch.
    pub running: usize,
    /// Fraction of KV blocks in use.
    pub kv_usage: f64,
}

/// What one step did.
#[derive(Debug, Default)]
pub struct StepOutcome {
    /// Simulated duration of the step, seconds.
    pub duration: f64,
    /// `(request id, prompt tokens found cached)` admitted this step.
    pub admitted: Vec<(usize, usize)>,
    /// Requests whose first output token this step produced.
    pub first_tokens: Vec<usize>,
    /// Requests that finished this step.
    pub finished: Vec<usize>,
    /// KV events of the step, in order.
    pub events: Vec<KvEvent>,
}

#[derive(Debug)]
struct Active {
    req: SimRequest,
    prompt_hashes: Vec<u64>,
    /// Hashes of the sequence's full blocks so far (prompt, then output).
    chain: Vec<u64>,
    /// Hashes this request holds a reference on.
    held: Vec<u64>,
    computed: usize,
    generated: usize,
    reserved: usize,
}

impl Active {
    fn token_at(&self, i: usize) -> u32 {
        match self.req.prompt.get(i) {
            Some(t) => *t,
            None => output_token(self.req.id, i - self.req.prompt.len()),
        }
    }
}

/// A simulated pod.
#[derive(Debug)]
pub struct Pod {
    config: PodConfig,
    pool: BlockPool,
    /// Waiting requests with their prompt's block hashes (hashed once, at enqueue: the
    /// queue head is re-examined every step while it does not fit).
    waiting: VecDeque<(SimRequest, Vec<u64>)>,
    running: Vec<Active>,
    reserved: usize,
}

impl Pod {
    /// An idle pod with an empty cache.
    pub fn new(config: PodConfig) -> Self {
        Self {
            config,
            pool: BlockPool::new(config.block_size, config.kv_blocks),
            waiting: VecDeque::new(),
            running: Vec::new(),
            reserved: 0,
        }
    }

    /// Records KV events for `step` to return (on by default; off when nobody reads them).
    pub fn set_records_events(&mut self, on: bool) {
        self.pool.set_records_events(on);
    }

    /// Queues a request.
    pub fn enqueue(&mut self, req: SimRequest) {
        let hashes = kv::chain(&req.prompt, self.config.block_size);
        self.waiting.push_back((req, hashes));
    }

    /// True when a step would do something.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Current load.
    pub fn load(&self) -> PodLoad {
        PodLoad {
            waiting: self.waiting.len(),
            running: self.running.len(),
            kv_usage: self.pool.in_use() as f64 / self.pool.capacity().max(1) as f64,
        }
    }

    /// Prompt tokens of `prompt` cached on this pod right now (the oracle's view).
    pub fn cached_prefix_tokens(&self, prompt: &[u32]) -> usize {
        self.cached_prefix_blocks(&kv::chain(prompt, self.config.block_size)) * self.config.block_size
    }

    /// Leading blocks of a hash chain (`kv::chain` at this pod's block size) cached here.
    pub fn cached_prefix_blocks(&self, hashes: &[u64]) -> usize {
        self.pool.cached_prefix(hashes)
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.config.block_size
    }

    /// Blocks evicted so far.
    pub fn evictions(&self) -> u64 {
        self.pool.evictions()
    }

    /// Runs one engine step.
    pub fn step(&mut self) -> StepOutcome {
        let mut out = StepOutcome::default();
        self.admit(&mut out);
        let mut budget = self.config.max_batched_tokens;
        let decoding: Vec<bool> = self.running.iter().map(|a| a.computed == a.req.prompt.len()).collect();
        let n_decode = decoding.iter().filter(|d| **d).count();
        budget = budget.saturating_sub(n_decode);
        let mut prefill = 0;
        for (a, is_decoding) in self.running.iter_mut().zip(&decoding) {
            if *is_decoding {
                a.generated += 1;
            } else if budget > 0 {
                let chunk = (a.req.prompt.len() - a.computed).min(budget);
                budget -= chunk;
                prefill += chunk;
                a.computed += chunk;
                if a.computed == a.req.prompt.len() {
                    a.generated = 1;
                    out.first_tokens.push(a.req.id);
                }
            }
            sync_blocks(a, &mut self.pool, &mut self.reserved, self.config.block_size);
        }
        let utilization = self.load().kv_usage;
        out.duration = self.config.model.step_seconds(prefill, n_decode, utilization);
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].generated >= self.running[i].req.output_len {
                let done = self.running.swap_remove(i);
                self.pool.release(&done.held);
                self.reserved = self.reserved.saturating_sub(done.reserved);
                out.finished.push(done.req.id);
            } else {
                i += 1;
            }
        }
        // swap_remove reorders; keep admission order for chunked prefill fairness.
        self.running.sort_by_key(|a| a.req.id);
        out.events = self.pool.take_events();
        out
    }

    fn admit(&mut self, out: &mut StepOutcome) {
        let bs = self.config.block_size;
        while self.running.len() < self.config.max_num_seqs {
            let Some((req, hashes)) = self.waiting.front() else { break };
            // vLLM always computes at least the last prompt token.
            let cached = self.pool.cached_prefix(hashes).min(req.prompt.len().saturating_sub(1) / bs);
            let total = (req.prompt.len() + req.output_len).div_ceil(bs);
            let to_reserve = total.saturating_sub(cached);
            let need = self.pool.in_use() + self.pool.free_among(&hashes[..cached]) + self.reserved + to_reserve;
            if need > self.pool.capacity() && !self.running.is_empty() {
                break;
            }
            let Some((req, hashes)) = self.waiting.pop_front() else { break };
            let mut held = Vec::with_capacity(total);
            for h in &hashes[..cached] {
                if self.pool.acquire(*h) {
                    held.push(*h);
                }
            }
            self.reserved += to_reserve;
            out.admitted.push((req.id, cached * bs));
            let chain = hashes[..cached].to_vec();
            self.running.push(Active {
                computed: cached * bs,
                req,
                prompt_hashes: hashes,
                chain,
                held,
                generated: 0,
                reserved: to_reserve,
            });
        }
    }
}

/// Stores the request's newly filled blocks, consuming its reservation.
fn sync_blocks(a: &mut Active, pool: &mut BlockPool, reserved: &mut usize, bs: usize) {
    let in_kv = a.computed + a.generated.saturating_sub(1);
    let mut tokens = Vec::with_capacity(bs);
    while a.chain.len() < in_kv / bs {
        let k = a.chain.len();
        let parent = a.chain.last().copied();
        let known = a.prompt_hashes.get(k).copied();
        tokens.clear();
        // A prompt block's hash is known; its tokens are only needed for the KV event.
        if known.is_none() || pool.records_events() {
            tokens.extend((k * bs..(k + 1) * bs).map(|i| a.token_at(i)));
        }
        let hash = known.unwrap_or_else(|| kv::block_hash(parent, &tokens));
        a.chain.push(hash);
        if pool.store(hash, parent, &tokens) {
            a.held.push(hash);
        }
        if a.reserved > 0 {
            a.reserved -= 1;
            *reserved = reserved.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        Pod::new(PodConfig {
            block_size: 4,
            kv_blocks: 64,
            max_num_seqs: 8,
            max_batched_tokens: 16,
            model: StepModel::default(),
        })
    }

    fn req(id: usize, prompt: Vec<u32>) -> SimRequest {
        SimRequest { id, arrival: 0.0, prompt: prompt.into(), output_len: 3 }
    }

    fn run(p: &mut Pod) -> Vec<StepOutcome> {
        let mut outs = Vec::new();
        while p.has_work() {
            outs.push(p.step());
        }
        outs
    }

    #[test]
    fn second_request_with_same_prefix_hits_the_cache() {
        let mut p = pod();
        p.enqueue(req(0, (0..20).collect()));
        let first = run(&mut p);
        assert_eq!(first[0].admitted, vec![(0, 0)]);
        assert_eq!(first.iter().map(|o| o.finished.len()).sum::<usize>(), 1);
        // 20 prompt tokens in chunks of 16: first token on the second step.
        assert_eq!(first[1].first_tokens, vec![0]);
        let mut ids: Vec<u32> = (0..16).collect();
        ids.extend([90, 91, 92]);
        p.enqueue(req(1, ids));
        let second = run(&mut p);
        assert_eq!(second[0].admitted, vec![(1, 16)]);
        assert_eq!(p.load().kv_usage, 0.0, "finished requests release their blocks");
        assert!(p.cached_prefix_tokens(&(0..20).collect::<Vec<_>>()) >= 16);
    }
}
