//! Workload generators: the request stream (arrival time, prompt token ids, output length)
//! of a run, fully determined by the spec and its seed.
//!
//! * Shared prefix (llm-d / SGLang "generated shared prefix"): `groups` system prompts of
//!   `system_tokens`, each with `users` distinct questions of `question_tokens`; every
//!   request picks a (group, user) pair uniformly at random.
//! * Generated shared prefix (SGLang `bench_serving --dataset-name generated-shared-prefix`):
//!   the same groups and questions, but each (group, question) pair is sent exactly once, in
//!   a shuffled order (SGLang shuffles its `groups × prompts per group` list); a stream longer
//!   than that starts another shuffled round.
//! * Multi-turn chat: `users` conversations, user `u` in group `u % groups` (shared system
//!   prompt); turn `t` sends the system prompt, every earlier question and answer, then a new
//!   question; after `turns` turns the user starts a new conversation.
//!
//! Arrivals are Poisson at `qps`, rising linearly to `qps_end` over the run when given.
//! Answers are the engine's deterministic output tokens (`output_token`), so the next turn's
//! prompt matches what the pod cached while decoding. The next turn may be sent before the
//! previous answer finished in simulated time (no think-time coupling).

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Workload family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum WorkloadKind {
    /// Shared-prefix groups.
    SharedPrefix,
    /// Multi-turn chat.
    MultiTurn,
    /// SGLang bench_serving `generated-shared-prefix`: every (group, prompt) pair exactly
    /// once per round, in a shuffled order.
    GeneratedSharedPrefix,
}

/// Everything that defines a request stream.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct WorkloadSpec {
    /// Family.
    pub kind: WorkloadKind,
    /// Prefix groups (system prompts).
    pub groups: usize,
    /// Users (questions) per group; for multi-turn, the total number of users.
    pub users: usize,
    /// System prompt length in tokens.
    pub system_tokens: usize,
    /// Question length in tokens.
    pub question_tokens: usize,
    /// Output tokens per request.
    pub output_tokens: usize,
    /// Turns per conversation (multi-turn only).
    pub turns: usize,
    /// Arrival rate at the start, requests per second.
    pub qps: f64,
    /// Arrival rate at the end (rising load), or `None` for a fixed rate.
    pub qps_end: Option<f64>,
    /// Number of requests.
    pub requests: usize,
    /// RNG seed.
    pub seed: u64,
}

/// One request of the stream.
#[derive(Clone, Debug)]
pub struct SimRequest {
    /// Index in the stream.
    pub id: usize,
    /// Arrival time, simulated seconds.
    pub arrival: f64,
    /// Prompt token ids.
    pub prompt: Arc<[u32]>,
    /// Tokens to generate (at least 1).
    pub output_len: usize,
}

/// A pseudo-random token id in `100..32100` for a coordinate (splitmix64 finaliser).
pub fn token(a: u64, b: u64, c: u64) -> u32 {
    let mut z = a.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ b.wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ c.wrapping_mul(0x94D0_49BB_1331_11EB);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    100 + (z % 32_000) as u32
}

/// The `i`-th output token the engine generates for request `id`.
pub fn output_token(id: usize, i: usize) -> u32 {
    token(3, id as u64, i as u64)
}

fn system_prompt(group: usize, len: usize) -> Vec<u32> {
    (0..len).map(|i| token(1, group as u64, i as u64)).collect()
}

fn question(seed: u64, who: usize, n: usize, len: usize) -> impl Iterator<Item = u32> {
    (0..len).map(move |i| token(2 ^ (seed << 8), ((who as u64) << 20) | n as u64, i as u64))
}

fn shared_prefix_prompt(spec: &WorkloadSpec, system: &[u32], who: usize) -> Vec<u32> {
    let mut p = system.to_vec();
    p.extend(question(spec.seed, who, 0, spec.question_tokens));
    p
}

/// Generates the stream.
pub fn generate(spec: &WorkloadSpec) -> Vec<SimRequest> {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let groups = spec.groups.max(1);
    let users = spec.users.max(1);
    let systems: Vec<Vec<u32>> = (0..groups).map(|g| system_prompt(g, spec.system_tokens)).collect();
    // Multi-turn state per user: (turn, history).
    let mut chats: Vec<(usize, Vec<u32>)> = vec![(0, Vec::new()); users];
    let mut conversation = vec![0usize; users];
    let mut round: Vec<(usize, usize)> = Vec::new();
    let mut t = 0.0;
    let mut out = Vec::with_capacity(spec.requests);
    for id in 0..spec.requests {
        let progress = if spec.requests > 1 { id as f64 / (spec.requests - 1) as f64 } else { 0.0 };
        let rate = match spec.qps_end {
            Some(end) => spec.qps + (end - spec.qps) * progress,
            None => spec.qps,
        }
        .max(1e-6);
        let u: f64 = rng.random::<f64>().max(1e-12);
        t += -u.ln() / rate;
        let prompt: Vec<u32> = match spec.kind {
            WorkloadKind::SharedPrefix => {
                let g = rng.random_range(0..groups);
                let user = rng.random_range(0..users);
                shared_prefix_prompt(spec, &systems[g], g * users + user)
            }
            WorkloadKind::GeneratedSharedPrefix => {
                if round.is_empty() {
                    round = (0..groups).flat_map(|g| (0..users).map(move |u| (g, u))).collect();
                    round.shuffle(&mut rng);
                }
                let (g, user) = round.pop().unwrap_or_default();
                shared_prefix_prompt(spec, &systems[g], g * users + user)
            }
            WorkloadKind::MultiTurn => {
                let user = rng.random_range(0..users);
                let (turn, history) = &mut chats[user];
                if *turn >= spec.turns.max(1) {
                    *turn = 0;
                    history.clear();
                    conversation[user] += 1;
                }
                if history.is_empty() {
                    history.extend_from_slice(&systems[user % groups]);
                }
                let n = conversation[user] * 1000 + *turn;
                history.extend(question(spec.seed, user, n, spec.question_tokens));
                let prompt = history.clone();
                history.extend((0..spec.output_tokens).map(|i| output_token(id, i)));
                *turn += 1;
                prompt
            }
        };
        out.push(SimRequest { id, arrival: t, prompt: prompt.into(), output_len: spec.output_tokens.max(1) });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: WorkloadKind) -> WorkloadSpec {
        WorkloadSpec {
            kind,
            groups: 2,
            users: 3,
            system_tokens: 32,
            question_tokens: 8,
            output_tokens: 4,
            turns: 3,
            qps: 10.0,
            qps_end: None,
            requests: 20,
            seed: 1,
        }
    }

    #[test]
    fn same_seed_same_stream_and_groups_share_prefixes() {
        let a = generate(&spec(WorkloadKind::SharedPrefix));
        let b = generate(&spec(WorkloadKind::SharedPrefix));
        assert_eq!(a.len(), 20);
        assert!(a.iter().zip(&b).all(|(x, y)| x.prompt == y.prompt && x.arrival == y.arrival));
        assert!(a.windows(2).all(|w| w[0].arrival < w[1].arrival));
        let firsts: std::collections::HashSet<u32> = a.iter().map(|r| r.prompt[0]).collect();
        assert_eq!(firsts.len(), 2, "two groups, two system prompts");
    }

    #[test]
    fn generated_shared_prefix_sends_each_pair_once_per_round() {
        let mut s = spec(WorkloadKind::GeneratedSharedPrefix);
        s.requests = 6;
        let reqs = generate(&s);
        let distinct: std::collections::HashSet<&[u32]> = reqs.iter().map(|r| &r.prompt[..]).collect();
        assert_eq!(distinct.len(), 6, "2 groups x 3 prompts, each once");
        let first_pair: Vec<u32> = reqs.iter().map(|r| r.prompt[0]).collect();
        assert_ne!(first_pair[..3], first_pair[3..], "shuffled, not group by group");
    }

    #[test]
    fn next_turn_extends_the_previous_prompt_and_answer() {
        let reqs = generate(&spec(WorkloadKind::MultiTurn));
        let longer = reqs.iter().find(|r| r.prompt.len() > 40).expect("a second turn");
        let prev = reqs
            .iter()
            .rev()
            .find(|r| r.id < longer.id && longer.prompt.starts_with(&r.prompt))
            .expect("its first turn");
        let answer: Vec<u32> = (0..4).map(|i| output_token(prev.id, i)).collect();
        assert_eq!(&longer.prompt[prev.prompt.len()..prev.prompt.len() + 4], &answer[..]);
    }
}
