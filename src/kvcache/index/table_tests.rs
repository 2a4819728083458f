//! Key-table tests: holders and overflow lists, capacity eviction, endpoint removal, key
//! references.

use super::*;

#[test]
fn add_remove_overflow_and_refs() {
    let mut t = Table::new(1000, 7);
    for ep in 0..5 {
        assert!(t.add(42, ep, 0, AddMode::Counted));
    }
    assert!(!t.add(42, 1, 0, AddMode::Counted));
    assert_eq!((t.keys(), t.entries()), (1, 5));
    assert!(!t.remove(42, 1, 0, RemoveMode::Release));
    assert!(t.remove(42, 1, 0, RemoveMode::Release));
    for ep in [0, 2, 3] {
        assert!(t.remove(42, ep, 0, RemoveMode::Force));
    }
    let mut seen = Vec::new();
    assert!(t.for_each_holder(42, |h| seen.push(holder::endpoint(h))));
    assert_eq!(seen, [4]);
    assert!(t.remove(42, 4, 0, RemoveMode::Force));
    assert!(!t.for_each_holder(42, |_| ()));
    assert_eq!((t.keys(), t.entries()), (0, 0));
    assert_eq!(t.slab.live(), 0);
}

#[test]
fn capacity_evicts_and_endpoint_removal_compacts() {
    let mut t = Table::new(100, 3);
    for k in 0..1000u64 {
        t.add(k.wrapping_mul(0x1234_5678_9abc_def1), (k % 3) as u16, 0, AddMode::Set);
    }
    assert_eq!(t.keys(), 100);
    assert_eq!(t.evictions(), 900);
    let before = t.entries();
    let gone = t.remove_endpoint(1);
    assert_eq!(t.entries(), before - gone);
    let mut live = 0;
    for k in 0..1000u64 {
        t.for_each_holder(k.wrapping_mul(0x1234_5678_9abc_def1), |h| {
            assert_ne!(holder::endpoint(h), 1);
            live += 1;
        });
    }
    assert_eq!(live, t.entries());
}

/// SPREAD⁻¹ mod 2⁶⁴ (Newton's iteration): `key × SPREAD` of `x · inv` is `x`, so tests can
/// pick keys by the product that decides their order and reference.
fn spread_inverse() -> u64 {
    let mut inv = SPREAD;
    for _ in 0..5 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(SPREAD.wrapping_mul(inv)));
    }
    inv
}

#[test]
fn key_refs_resolve_per_holder_and_ambiguity_releases_all() {
    // k and k + inv have products one apart, hence (almost always) the same reference.
    let inv = spread_inverse();
    assert_eq!(SPREAD.wrapping_mul(inv), 1);
    let k1 = 0x1234_5678_9abc_def0u64;
    let k2 = k1.wrapping_add(inv);
    assert_eq!(key_ref(k1), key_ref(k2));
    let mut t = Table::new(1000, 7);
    for k in 1..500u64 {
        t.add(k.wrapping_mul(0x1234_5678_9abc_def1), 3, 0, AddMode::Counted);
    }
    t.add(k1, 1, 0, AddMode::Counted);
    t.add(k1, 1, 0, AddMode::Counted);
    t.add(k2, 2, 0, AddMode::Counted);
    assert_eq!(t.resolve_ref(key_ref(k1), 1, 0), RefMatch::One(k1));
    assert_eq!(t.resolve_ref(key_ref(k1), 2, 0), RefMatch::One(k2));
    assert_eq!(t.resolve_ref(key_ref(k1), 1, 1), RefMatch::None, "other tier");
    t.add(k2, 1, 0, AddMode::Counted);
    assert_eq!(t.resolve_ref(key_ref(k1), 1, 0), RefMatch::Ambiguous);
    assert_eq!(t.release_ref(key_ref(k1), 1, 0), 2);
    let mut k2_holders = Vec::new();
    t.for_each_holder(k2, |h| k2_holders.push(holder::endpoint(h)));
    assert_eq!(k2_holders, [2], "the ambiguous release dropped ep 1 from both keys");
    assert_eq!(t.resolve_ref(key_ref(k1), 1, 0), RefMatch::One(k1), "k1 had two references");
    assert_eq!(t.release_ref(key_ref(k1), 1, 0), 1);
    assert_eq!(t.resolve_ref(key_ref(k1), 1, 0), RefMatch::None);
    assert_eq!(t.resolve_ref(key_ref(0), 1, 0), RefMatch::None);
    t.add(0, 1, 0, AddMode::Counted);
    assert_eq!(t.resolve_ref(key_ref(0), 1, 0), RefMatch::One(0), "key 0 lives in the side slot");
}

#[test]
fn keys_of_one_order_with_different_refs_resolve_apart() {
    // Products 2^24 apart: the same 32-bit order (unless bit 32 carries), different 40-bit refs.
    let inv = spread_inverse();
    let k1 = 0x0bad_cafe_0000_0001u64.wrapping_mul(inv);
    let k2 = k1.wrapping_add((1u64 << 24).wrapping_mul(inv));
    assert_eq!(key_order(k1), key_order(k2));
    assert_ne!(key_ref(k1), key_ref(k2));
    assert_eq!(ref_order(key_ref(k1)), key_order(k1));
    let mut t = Table::new(1000, 3);
    t.add(k1, 4, 0, AddMode::Counted);
    t.add(k2, 4, 0, AddMode::Counted);
    assert_eq!(t.resolve_ref(key_ref(k1), 4, 0), RefMatch::One(k1));
    assert_eq!(t.resolve_ref(key_ref(k2), 4, 0), RefMatch::One(k2));
    assert_eq!(t.release_ref(key_ref(k2), 4, 0), 1, "only k2 released");
    assert_ne!(t.slot_of(k1), 0);
    assert_eq!(t.slot_of(k2), 0);
}

/// The array is sorted by key order and every key can be found.
fn check_sorted_and_findable(t: &Table, keys: &[u64]) {
    let orders: Vec<u32> = t.buckets.iter().filter(|b| b[0] != 0).map(|b| key_order(b[0])).collect();
    assert!(orders.windows(2).all(|w| w[0] <= w[1]), "sorted by order");
    for k in keys {
        assert_ne!(t.slot_of(*k), 0, "key {k} findable");
    }
}

#[test]
fn ordered_runs_survive_growth_deletion_and_crowding() {
    let mut t = Table::new(1 << 20, 5);
    let keys: Vec<u64> = (1..=50_000u64).map(|k| k.wrapping_mul(0x2545_F491_4F6C_DD1D)).collect();
    for (i, k) in keys.iter().enumerate() {
        t.add(*k, (i % 7) as u16, 0, AddMode::Set);
    }
    let load = t.keys() as f64 / t.homes as f64;
    assert!((0.76..=0.881).contains(&load), "load {load}");
    check_sorted_and_findable(&t, &keys);
    for k in keys.iter().step_by(2) {
        assert_eq!(t.remove_where(*k, |_| true, RemoveMode::Force), 1);
    }
    let kept: Vec<u64> = keys.iter().skip(1).step_by(2).copied().collect();
    check_sorted_and_findable(&t, &kept);
    assert_eq!(t.keys(), kept.len());
    for k in keys.iter().step_by(2) {
        assert_eq!(t.slot_of(*k), 0, "removed key {k} gone");
    }
    // Forty keys with one reference whose home is the last bucket: the run spills past the
    // last home, the table grows until it fits, and lookups and misses still work.
    let inv = spread_inverse();
    let base = (u64::from(u32::MAX) << 32).wrapping_mul(inv);
    let crowd: Vec<u64> = (0..40u64).map(|i| base.wrapping_add(i.wrapping_mul(inv))).collect();
    assert!(crowd.iter().all(|k| key_order(*k) == u32::MAX && key_ref(*k) == key_ref(crowd[0])));
    let mut small = Table::new(1000, 9);
    for k in &crowd {
        small.add(*k, 1, 0, AddMode::Set);
    }
    check_sorted_and_findable(&small, &crowd);
    assert_eq!(small.resolve_ref(key_ref(base), 1, 0), RefMatch::Ambiguous);
    assert_eq!(small.slot_of(base.wrapping_add(41u64.wrapping_mul(inv))), 0, "a miss in the crowd");
    assert_eq!(small.release_ref(key_ref(base), 1, 0), 40);
    assert_eq!(small.keys(), 0);
}

#[test]
fn same_holders_compares_identities_not_refcounts() {
    let (mut a, mut b) = (Table::new(1000, 1), Table::new(1000, 2));
    let same = |a: &Table, ka: u64, b: &Table, kb: u64| Table::same_holders(a, a.slot_of(ka), b, b.slot_of(kb));
    // Endpoint 0 in tier 0 has identity 0: still not the empty slot.
    a.add(1, 0, 0, AddMode::Counted);
    assert!(!same(&a, 1, &b, 9), "a holder against an absent key");
    b.add(2, 0, 0, AddMode::Counted);
    b.add(2, 0, 0, AddMode::Counted);
    assert!(same(&a, 1, &b, 2), "refcounts aside");
    b.add(2, 0, 1, AddMode::Counted);
    assert!(!same(&a, 1, &b, 2), "another tier");
    // Overflow lists, in two tables.
    for ep in 1..=7 {
        a.add(10, ep, 0, AddMode::Counted);
        b.add(20, ep, 0, AddMode::Counted);
    }
    assert!(same(&a, 10, &b, 20));
    b.add(20, 8, 0, AddMode::Counted);
    assert!(!same(&a, 10, &b, 20), "one more holder");
    a.add(10, 9, 0, AddMode::Counted);
    assert!(!same(&a, 10, &b, 20), "a different holder");
    assert!(!same(&a, 10, &a, 1), "a list against an inline slot");
    // Lists compare as sets, and a removal keeps the comparison right.
    for ep in [3, 1, 2, 4] {
        a.add(30, ep, 0, AddMode::Counted);
    }
    for ep in 1..=3 {
        b.add(40, ep, 0, AddMode::Counted);
    }
    assert!(!same(&a, 30, &b, 40));
    assert!(a.remove(30, 4, 0, RemoveMode::Force));
    assert!(same(&a, 30, &b, 40), "the same set in another order");
}

#[test]
fn a_lookup_finds_keys_far_from_their_home() {
    // Forty keys of one order: all but the first few sit past the buckets a lookup checks
    // near the home when it stages a key, so those are read when the loop reaches them.
    let inv = spread_inverse();
    let base = (1u64 << 40).wrapping_mul(inv);
    let crowd: Vec<u64> = (1..=40u64).map(|i| base.wrapping_add(i.wrapping_mul(inv))).collect();
    assert!(crowd.iter().all(|k| key_order(*k) == key_order(crowd[0])));
    let mut t = Table::new(1000, 3);
    for (i, k) in crowd.iter().enumerate() {
        t.add(*k, 1, 0, AddMode::Set);
        if i < 25 {
            t.add(*k, 2, 0, AddMode::Set);
        }
    }
    let mut query = crowd.clone();
    query.push(base.wrapping_add(99u64.wrapping_mul(inv))); // a miss in the crowd ends both runs
    query.extend(&crowd[..5]);
    let views = [t.view()];
    let w = super::super::TierWeights::default();
    let runs = super::super::runs::longest_runs(&query, &views, 0, &w, |runs| {
        let mut v: Vec<_> = runs.iter().map(|r| (r.ep, r.blocks, r.weighted)).collect();
        v.sort_by_key(|r| r.0);
        v
    });
    assert_eq!(runs, vec![(1, 40, 40.0), (2, 25, 25.0)]);
}
