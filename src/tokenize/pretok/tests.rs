//! Equivalence of the fast pre-tokenizers with the stock ones: splits on random text drawn
//! from an alphabet rich in the characters the patterns treat specially, and token ids of
//! whole encodings on the fixture tokenizers.

use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::json;
use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, PreTokenizerWrapper};

use super::split::{GPT2_PATTERN, LLAMA3_PATTERN};
use super::{FastPreTokenizer, engine};
use crate::tokenize::encoder::Encoder;

/// Letters of several scripts (and case-folding corner cases), digits and other numbers,
/// apostrophes and contraction letters, every kind of whitespace, punctuation, emoji,
/// combining marks and controls.
const ALPHABET: &[char] = &[
    'a', 'Z', 'é', 'ß', 'ſ', 'K', 'İ', '日', '本', 'Ω', 'ж', 'ا', 'ー', 'ǅ', 'ʰ', '0', '7', '٣', '½', 'Ⅻ', '²', '\'',
    '’', 's', 'S', 't', 'T', 'r', 'R', 'e', 'E', 'v', 'V', 'm', 'M', 'l', 'L', 'd', 'D', ' ', ' ', ' ', '\r', '\n',
    '\t', '\u{b}', '\u{c}', '\u{a0}', '\u{85}', '\u{2028}', '\u{3000}', '\u{1c}', '.', ',', '!', '(', '-', '"', '#',
    '🙂', '🚀', '\u{301}', '\u{200d}', '\u{200b}', '\u{0}', '\u{7f}', '\u{fe0f}', '▁',
];

fn text() -> impl Strategy<Value = String> {
    let ch = prop_oneof![9 => proptest::sample::select(ALPHABET), 1 => any::<char>()];
    proptest::collection::vec(ch, 0..48).prop_map(|cs| cs.into_iter().collect())
}

fn wrapper(json: serde_json::Value) -> PreTokenizerWrapper {
    serde_json::from_value(json).expect("pre-tokenizer json")
}

/// (piece, original byte offsets) of `pre` applied to `text`.
fn pieces(pre: &dyn PreTokenizer, text: &str) -> Vec<(String, (usize, usize))> {
    let mut p = PreTokenizedString::from(text);
    pre.pre_tokenize(&mut p).expect("pre-tokenizes");
    p.get_splits(OffsetReferential::Original, OffsetType::Byte)
        .into_iter()
        .map(|(s, o, _)| (s.to_string(), o))
        .collect()
}

fn pair(json: serde_json::Value) -> (PreTokenizerWrapper, FastPreTokenizer) {
    let stock = wrapper(json);
    let model = tokenizers::models::ModelWrapper::BPE(tokenizers::models::bpe::BPE::default());
    let fast = FastPreTokenizer::from_stock(&stock, &model);
    assert!(fast.is_fast(), "recognised: {fast:?}");
    (stock, fast)
}

type Loaded = (tokenizers::Tokenizer, super::Engine, Encoder);

/// The stock fixture tokenizer, its fast engine and its direct encoder, loaded once.
fn fixture_set(family: &str) -> &'static Loaded {
    static LLAMA3: OnceLock<Loaded> = OnceLock::new();
    static MISTRAL: OnceLock<Loaded> = OnceLock::new();
    static GPT2: OnceLock<Loaded> = OnceLock::new();
    let cell = match family {
        "llama3" => &LLAMA3,
        "mistral" => &MISTRAL,
        _ => &GPT2,
    };
    cell.get_or_init(|| {
        let stock = fixture(family);
        let fast = engine(&stock);
        let direct = Encoder::new(&stock);
        assert!(direct.is_direct(), "{family} uses the direct encoder");
        (stock, fast, direct)
    })
}

/// The direct encoder's ids and added-token positions equal the stock encoding's.
fn check_direct(family: &str, s: &str) -> Result<(), TestCaseError> {
    let (stock, _, direct) = fixture_set(family);
    for special in [false, true] {
        let want = stock.encode(s, special).expect("stock encodes");
        prop_assert_eq!(direct.ids(s, special).expect("direct encodes"), want.get_ids(), "{} {:?}", family, s);
    }
    let want = stock.encode(s, false).expect("stock encodes");
    let (ids, added) = direct.ids_with_added(s).expect("direct encodes");
    prop_assert_eq!(&ids[..], want.get_ids());
    let added_ids = stock.get_added_tokens_decoder();
    let want_added: Vec<(usize, (usize, usize))> = want
        .get_ids()
        .iter()
        .zip(want.get_offsets())
        .enumerate()
        .filter(|(_, (id, o))| added_ids.get(id).is_some_and(|t| s.get(o.0..o.1) == Some(t.content.as_str())))
        .map(|(i, (_, &o))| (i, o))
        .collect();
    let got_added: Vec<(usize, (usize, usize))> = added.iter().map(|a| (a.index, (a.start, a.end))).collect();
    prop_assert_eq!(got_added, want_added);
    Ok(())
}

/// A fixture tokenizer; `gpt2` is the llama3 one with GPT-2's pre-tokenizer
/// (`ByteLevel(add_prefix_space, use_regex)`, the regex built in).
fn fixture(family: &str) -> tokenizers::Tokenizer {
    if family == "gpt2" {
        let mut json: serde_json::Value =
            serde_json::from_str(&fixture("llama3").to_string(false).expect("serialises")).expect("json");
        json["pre_tokenizer"] =
            json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true});
        return json.to_string().parse().expect("gpt2-style tokenizer");
    }
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizers").join(family).join("tokenizer.json");
    tokenizers::Tokenizer::from_file(path).expect("fixture tokenizer")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn llama3_split_equals_regex(s in text()) {
        let (stock, fast) = pair(json!({"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": false}));
        prop_assert_eq!(pieces(&fast, &s), pieces(&stock, &s));
    }

    #[test]
    fn gpt2_byte_level_equals_regex(s in text(), prefix in any::<bool>()) {
        let (stock, fast) = pair(json!({"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": true, "use_regex": true}));
        prop_assert_eq!(pieces(&fast, &s), pieces(&stock, &s));
        let (stock, fast) = pair(json!({"type": "Split", "pattern": {"Regex": GPT2_PATTERN}, "behavior": "Isolated", "invert": false}));
        prop_assert_eq!(pieces(&fast, &s), pieces(&stock, &s));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// Whole encodings (added tokens, model, offsets) on both fixture tokenizers, with text
    /// that also contains special-token fragments.
    #[test]
    fn fixture_ids_equal_stock(parts in proptest::collection::vec(
        prop_oneof![4 => text(), 1 => proptest::sample::select(vec![
            "<|eot_id|>".to_string(), "<|start_header_id|>".into(), "[INST]".into(), "[/INST]".into(), "<s>".into(),
            "  ".into(), "\n\n".into(), "The quick brown fox".into(), " don't".into(),
        ])], 0..8))
    {
        let s: String = parts.concat();
        for family in ["llama3", "mistral", "gpt2"] {
            let (stock, fast, _) = fixture_set(family);
            check_direct(family, &s)?;
            for special in [false, true] {
                let want = stock.encode(s.as_str(), special).expect("stock encodes");
                let got = fast.encode(s.as_str(), special).expect("fast encodes");
                prop_assert_eq!(got.get_ids(), want.get_ids(), "{} {:?}", family, s);
                prop_assert_eq!(got.get_offsets(), want.get_offsets());
            }
        }
    }
}

#[test]
fn fixtures_use_the_fast_path() {
    for family in ["llama3", "mistral", "gpt2"] {
        let fast = engine(&fixture(family));
        assert!(fast.get_pre_tokenizer().is_some_and(FastPreTokenizer::is_fast), "{family}");
    }
}

#[test]
fn unknown_configurations_stay_stock() {
    let model = tokenizers::models::ModelWrapper::BPE(tokenizers::models::bpe::BPE::default());
    for json in [
        json!({"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": false}),
        json!({"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Removed", "invert": false}),
        json!({"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": true}),
        json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}),
        json!({"type": "Whitespace"}),
        json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}),
        // A default BPE has an empty vocabulary: no `▁`, so no word cuts.
        json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}),
    ] {
        let fast = FastPreTokenizer::from_stock(&wrapper(json.clone()), &model);
        assert!(!fast.is_fast(), "{json}");
    }
}

#[test]
fn long_prompt_ids_equal_stock() {
    let line = "Grüße — it's 12345 items; don't\r\n\tcode(x) 🙂  日本語 ▁x  \n";
    let text = line.repeat(300);
    for family in ["llama3", "mistral", "gpt2"] {
        let (stock, fast, direct) = fixture_set(family);
        let want = stock.encode(text.as_str(), true).expect("stock encodes");
        let got = fast.encode_fast(text.as_str(), true).expect("fast encodes");
        assert_eq!(got.get_ids(), want.get_ids(), "{family}");
        assert_eq!(direct.ids(&text, true).expect("direct encodes"), want.get_ids(), "{family} direct");
        check_direct(family, &text).expect("direct equals stock");
    }
}
