//! Unit tests of the matcher: masks against fresh walks over random vocabularies, stickiness,
//! rollback, forced bytes.

use super::*;
use crate::grammar::{GrammarBuilder, Symbol};
use crate::toktrie::SyntheticVocab;

fn words_grammar() -> Grammar {
    // s ::= word ("," word)* ; word ::= /[a-z]+/
    let mut b = GrammarBuilder::new();
    let word = b.lexeme("word", "[a-z]+");
    let comma = b.literal(",");
    let s = b.rule_ref("s");
    b.define(
        "s",
        vec![
            vec![Symbol::Lexeme(word)],
            vec![Symbol::Rule(s), Symbol::Lexeme(comma), Symbol::Lexeme(word)],
        ],
    );
    b.build(s).unwrap()
}

fn matcher(g: Grammar, v: SyntheticVocab) -> Matcher {
    let cg = CompiledGrammar::new(g, Arc::new(v), Limits::default()).unwrap();
    Matcher::new(Arc::new(cg)).unwrap()
}

fn tok(v: &dyn Vocab, s: &str) -> TokenId {
    (0..v.vocab_len() as u32)
        .map(TokenId)
        .find(|&t| v.token_bytes(t) == s.as_bytes() && !v.is_special(t))
        .unwrap()
}

#[test]
fn mask_follows_lexeme_boundaries() {
    let v =
        SyntheticVocab::new(vec![b"ab".to_vec(), b"b,c".to_vec(), b",,".to_vec()]).with_eos("</s>");
    let vv = v.clone();
    let mut m = matcher(words_grammar(), v);
    let mut mask = TokenSet::new(vv.vocab_len());
    m.compute_mask(&mut mask).unwrap();
    assert!(mask.contains(tok(&vv, "ab")));
    assert!(mask.contains(tok(&vv, "b,c")));
    assert!(!mask.contains(tok(&vv, ",")));
    assert!(!mask.contains(vv.eos_tokens()[0]));
    m.consume_token(tok(&vv, "ab")).unwrap();
    m.compute_mask(&mut mask).unwrap();
    assert!(mask.contains(tok(&vv, "b,c")));
    assert!(mask.contains(tok(&vv, ",")));
    assert!(!mask.contains(tok(&vv, ",,")));
    assert!(mask.contains(vv.eos_tokens()[0]));
    m.consume_token(tok(&vv, "b,c")).unwrap();
    assert!(m.is_accepting());
    assert_eq!(m.output(), b"abb,c");
    m.consume_token(vv.eos_tokens()[0]).unwrap();
    assert!(m.is_stopped());
    m.compute_mask(&mut mask).unwrap();
    assert!(mask.is_empty());
}

#[test]
fn errors_are_sticky_until_reset() {
    let v = SyntheticVocab::byte_level();
    let mut m = matcher(words_grammar(), v);
    m.consume_bytes(b"ab").unwrap();
    let e = m.consume_bytes(b"!").unwrap_err();
    assert_eq!(
        e,
        MatcherError::ByteRejected {
            byte: b'!',
            offset: 2
        }
    );
    assert_eq!(m.consume_bytes(b"c"), Err(e.clone()));
    m.reset();
    m.consume_bytes(b"c").unwrap();
    assert_eq!(m.output(), b"c");
}

#[test]
fn rollback_restores_state() {
    let v = SyntheticVocab::byte_level();
    let mut m = matcher(words_grammar(), v);
    let mut before = TokenSet::new(257);
    let mut after = TokenSet::new(257);
    m.consume_bytes(b"ab").unwrap();
    m.compute_mask(&mut before).unwrap();
    m.consume_token(TokenId(b',' as u32)).unwrap();
    m.consume_token(TokenId(b'x' as u32)).unwrap();
    m.rollback(2).unwrap();
    m.compute_mask(&mut after).unwrap();
    assert_eq!(before, after);
    assert_eq!(m.output(), b"ab");
    assert!(matches!(
        m.rollback(5),
        Err(MatcherError::RollbackTooFar { .. })
    ));
}

#[test]
fn forced_bytes_of_a_literal() {
    let mut b = GrammarBuilder::new();
    let lit = b.literal("{\"name\":");
    let num = b.lexeme("num", "[0-9]+");
    let s = b.define("s", vec![vec![Symbol::Lexeme(lit), Symbol::Lexeme(num)]]);
    let v = SyntheticVocab::new(vec![
        b"{\"".to_vec(),
        b"name".to_vec(),
        b"\":".to_vec(),
        b"\":1".to_vec(),
    ]);
    let vv = v.clone();
    let mut m = matcher(b.build(s).unwrap(), v);
    assert_eq!(m.compute_forced_bytes().unwrap(), b"{\"name\":");
    // `":` could grow into `":1`, so it is backed off.
    let toks = m.compute_forced_tokens().unwrap();
    let text: Vec<&[u8]> = toks.iter().map(|&t| vv.token_bytes(t)).collect();
    assert_eq!(text, vec![&b"{\""[..], b"name"]);
}

#[test]
fn grammars_compiled_from_one_env_share_its_trie() {
    let v = SyntheticVocab::new(vec![b"ab".to_vec(), b"b,c".to_vec()]).with_eos("</s>");
    let env = TokEnv::new(Arc::new(v.clone()));
    let a = Arc::new(CompiledGrammar::with_env(words_grammar(), &env, Limits::default()).unwrap());
    let b = Arc::new(CompiledGrammar::with_env(words_grammar(), &env, Limits::default()).unwrap());
    assert!(Arc::ptr_eq(a.tok_env().trie_arc(), b.tok_env().trie_arc()));
    assert!(Arc::ptr_eq(a.tok_env().trie_arc(), env.trie_arc()));
    // Same masks as a grammar compiled with its own trie.
    let own = Arc::new(
        CompiledGrammar::new(words_grammar(), Arc::new(v.clone()), Limits::default()).unwrap(),
    );
    let (mut x, mut y) = (TokenSet::new(v.vocab_len()), TokenSet::new(v.vocab_len()));
    let (mut ma, mut mo) = (Matcher::new(a).unwrap(), Matcher::new(own).unwrap());
    for step in [&b"ab"[..], b",", b"b"] {
        ma.compute_mask(&mut x).unwrap();
        mo.compute_mask(&mut y).unwrap();
        assert_eq!(x, y);
        ma.consume_bytes(step).unwrap();
        mo.consume_bytes(step).unwrap();
    }
}

/// Nested lists of words and strings: `value ::= word | str | "[" "]" | "[" items "]"`,
/// `items ::= value | items "," value`. Boundaries inside tokens cross nesting levels,
/// so cached masks depend on the parser rows, not only on the lexer state.
fn lists_grammar() -> Grammar {
    lists_of([("word", "[a-z]+"), ("str", r#""[a-z,\[\]]*""#)])
}

/// `value ::= leaf | "[" "]" | "[" items "]"`, `items ::= value | items "," value`, with
/// one alternative per `(name, regex)` leaf lexeme.
fn lists_of(leaves: [(&str, &str); 2]) -> Grammar {
    let mut b = GrammarBuilder::new();
    let mut alts: Vec<Vec<Symbol>> = leaves
        .iter()
        .map(|&(name, re)| vec![Symbol::Lexeme(b.lexeme(name, re))])
        .collect();
    let open = Symbol::Lexeme(b.literal("["));
    let close = Symbol::Lexeme(b.literal("]"));
    let comma = Symbol::Lexeme(b.literal(","));
    let value = Symbol::Rule(b.rule_ref("value"));
    let items = Symbol::Rule(b.rule_ref("items"));
    b.define("items", vec![vec![value], vec![items, comma, value]]);
    alts.push(vec![open, close]);
    alts.push(vec![open, items, close]);
    let v = b.define("value", alts);
    b.build(v).unwrap()
}

/// Seeded xorshift, so the walks are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Random tokens of 1–5 pieces drawn from `pieces`, plus each piece alone. The pieces are
/// written as one byte string, separated by `|` (no piece holds one).
fn random_vocab(rng: &mut Rng, pieces: &[u8]) -> SyntheticVocab {
    let pieces: Vec<&[u8]> = pieces.split(|&b| b == b'|').collect();
    let mut toks: Vec<Vec<u8>> = (0..400)
        .map(|_| {
            let len = 1 + rng.next() as usize % 5;
            (0..len)
                .flat_map(|_| pieces[rng.next() as usize % pieces.len()].to_vec())
                .collect()
        })
        .collect();
    toks.extend(pieces.iter().map(|p| p.to_vec()));
    SyntheticVocab::new(toks).with_eos("</s>")
}

/// Fails unless some mask entry of `g` was built through a detour (a loop state's entry, with
/// the subtree of the byte where the state differs taken out and walked afresh): the detour
/// tests check so that their walks reached the code they are about.
fn assert_detours_built(g: &CompiledGrammar) {
    let detours = g.shared.detours.load(std::sync::atomic::Ordering::Relaxed);
    assert!(detours > 0, "no entry was built through a detour");
}

/// Random walks by several matchers sharing one compiled grammar with the caches on (so
/// later walks hit entries stored by earlier ones, at other positions and depths), each
/// mask compared with a plain trie walk (caches off), and after rollbacks, over a
/// [`random_vocab`] of `pieces`; `seed` seeds the vocabulary and the walks. Returns the
/// cached compiled grammar for further checks.
fn compare_cached_with_plain(g: fn() -> Grammar, seed: u64, pieces: &[u8]) -> Arc<CompiledGrammar> {
    let mut rng = Rng(seed);
    let v = random_vocab(&mut rng, pieces);
    compare_walks(g(), g(), &v, &mut rng, (40, 30)).0
}

/// [`compare_cached_with_plain`] for two grammars of one language: `cached` with the caches
/// on, `plain` with them off; `walks.0` walks of up to `walks.1` tokens. Returns the cached
/// compiled grammar and each walk's output.
fn compare_walks(
    cached: Grammar,
    plain: Grammar,
    v: &SyntheticVocab,
    rng: &mut Rng,
    walks: (usize, usize),
) -> (Arc<CompiledGrammar>, Vec<Vec<u8>>) {
    let vocab: Arc<dyn Vocab> = Arc::new(v.clone());
    let cached = Arc::new(CompiledGrammar::new(cached, vocab.clone(), Limits::default()).unwrap());
    let plain_limits = Limits {
        mask_cache_bytes: 0,
        ..Limits::default()
    };
    let plain = Arc::new(CompiledGrammar::new(plain, vocab, plain_limits).unwrap());
    let (mut got, mut want) = (TokenSet::new(v.vocab_len()), TokenSet::new(v.vocab_len()));
    let mut steps = 0;
    let mut outputs = Vec::new();
    for walk in 0..walks.0 {
        let mut m = Matcher::new(cached.clone()).unwrap();
        let mut p = Matcher::new(plain.clone()).unwrap();
        let mut masks = Vec::new();
        for step in 0..walks.1 {
            m.compute_mask(&mut got).unwrap();
            p.compute_mask(&mut want).unwrap();
            assert_eq!(
                got,
                want,
                "walk {walk} step {step} after {:?}",
                String::from_utf8_lossy(p.output())
            );
            masks.push(got.clone());
            let allowed: Vec<TokenId> = want.iter().collect();
            if allowed.is_empty() {
                break;
            }
            // Prefer text over EOS so walks get deep.
            let t = allowed[rng.next() as usize % allowed.len()];
            if v.eos_tokens().contains(&t) && allowed.len() > 1 {
                continue;
            }
            m.consume_token(t).unwrap();
            p.consume_token(t).unwrap();
            if m.is_stopped() {
                break;
            }
        }
        outputs.push(p.output().to_vec());
        // Roll back a few tokens: the masks there are cached hits and equal the old ones.
        let back = m.steps_len().min(1 + walk % 4);
        m.rollback(back).unwrap();
        m.compute_mask(&mut got).unwrap();
        assert_eq!(
            got,
            masks[m.steps_len()],
            "walk {walk} after rollback({back})"
        );
        steps += m.steps_len();
    }
    assert!(steps > 100, "walks too short to exercise the caches");
    (cached, outputs)
}

/// The whole-mask cache (`MaskResult`, keyed by lexer state and row signature) and the
/// in-lexeme cache give the same masks as plain trie walks.
#[test]
fn cached_masks_equal_fresh_ones_over_random_walks() {
    let cached = compare_cached_with_plain(lists_grammar, 0x9e37_79b9_7f4a_7c15, b"[|]|,|a|b|\"");
    assert!(cached.shared.results.read().unwrap().len() > 0);
    // Each walk's matcher started from the lexer caches the one before it left (the plain
    // grammar's matchers, caches off, all started cold).
    assert_eq!(cached.shared.warm.len(), 1);
    assert!(cached.shared.sigs.len() > 1);
}

/// Lists of free-text strings: `"[^"\\]*"` (any character but quote and backslash,
/// Unicode) and `'[ -&(-~]*'` (printable ASCII but the quote), whose interior states loop
/// on 94+ ASCII bytes and so are walked through vocabulary slices.
fn text_grammar() -> Grammar {
    lists_of([("dq", r#""[^"\\]*""#), ("sq", r"'[ -&(-~]*'")])
}

/// Masks inside free-text lexemes built from vocabulary slices (the slice's tokens at once,
/// then only the frontier subtrees walked) equal plain walks, with tokens holding whole,
/// partial and malformed UTF-8, quotes and backslashes at every position.
#[test]
fn sliced_masks_equal_fresh_ones_over_random_walks() {
    let cached = compare_cached_with_plain(
        text_grammar,
        0x2545_f491_4f6c_dd1d,
        b"\"|'|[|]|,|a| |\\|\xc3\xa9|\xc3|\xa9|\xe2\x82\xac|\xe2\x82|\xed\xa0\x80|\
          \xf0\x9f\x98\x80|\xff|\n",
    );
    let slices = cached.env.slice_classes();
    assert!(slices.iter().any(|c| c.utf8), "{slices:?}");
    assert!(slices.iter().any(|c| !c.utf8), "{slices:?}");
}

/// Lists of strings with counted repetitions (a JSON string with `minLength` /
/// `maxLength`): content states advance one state per character instead of looping, so
/// slices are walked along a chain of states, up to a dead end at the bound. Bounds below
/// and above the longest token exercise partial chains (only the slice's short tokens),
/// dead ends, and chains as long as the slice's deepest path.
fn counted_grammar() -> Grammar {
    lists_of([
        ("dq", r#""(?:[^"\\]|\\["\\n]){1,7}""#),
        ("sq", r"'[ -&(-~]{0,40}'"),
    ])
}

#[test]
fn counted_string_masks_equal_fresh_ones_over_random_walks() {
    let cached = compare_cached_with_plain(
        counted_grammar,
        0x6a09_e667_f3bc_c908,
        b"\"|'|[|]|,|a|bc| |\\|n|\xc3\xa9|\xc3|\xe2\x82\xac|\xf0\x9f\x98\x80|\xff|\n",
    );
    assert!(!cached.env.slice_classes().is_empty());
}

/// A name and a free string in one lexeme set, the shape of an object key where a listed
/// name shares the quote with the additional-key string (which excludes the name, here
/// every string starting with it, and is followed by something else): `"ab"` then `!`,
/// any other string alone, or lists of them. Inside the name's prefix (`"a`) the state
/// differs from the string's loop only on the byte continuing the name, so its entries are
/// built through detours (the loop's entry, with that byte's subtree taken out and walked
/// afresh).
fn names_grammar() -> Grammar {
    let mut b = GrammarBuilder::new();
    let name = Symbol::Lexeme(b.lexeme("name", r#""ab""#));
    // Any string of [^"\\] not starting with "ab": after `"ab` only the name goes on.
    let other = r#""(?:[^a"\\][^"\\]*|a(?:[^b"\\][^"\\]*)?)?""#;
    let string = Symbol::Lexeme(b.lexeme("string", other));
    let bang = Symbol::Lexeme(b.literal("!"));
    let open = Symbol::Lexeme(b.literal("["));
    let close = Symbol::Lexeme(b.literal("]"));
    let comma = Symbol::Lexeme(b.literal(","));
    let value = Symbol::Rule(b.rule_ref("value"));
    let items = Symbol::Rule(b.rule_ref("items"));
    b.define("items", vec![vec![value], vec![items, comma, value]]);
    let v = b.define(
        "value",
        vec![
            vec![name, bang],
            vec![string],
            vec![open, close],
            vec![open, items, close],
        ],
    );
    b.build(v).unwrap()
}

#[test]
fn name_prefix_masks_equal_fresh_ones_over_random_walks() {
    let cached = compare_cached_with_plain(
        names_grammar,
        0x3c6e_f372_fe94_f82b,
        b"\"|[|]|,|a|ab|b|b\"|b\"]|ab\",|!|c|q| |\\|n|\xc3\xa9|\xc3|\xe2\x82\xac|\xff",
    );
    assert_detours_built(&cached);
}

#[test]
fn nullable_lexeme_becomes_optional() {
    // s ::= "[" /[0-9]*/ "]"
    let mut b = GrammarBuilder::new();
    let open = b.literal("[");
    let digits = b.lexeme("digits", "[0-9]*");
    let close = b.literal("]");
    let s = b.define(
        "s",
        vec![vec![
            Symbol::Lexeme(open),
            Symbol::Lexeme(digits),
            Symbol::Lexeme(close),
        ]],
    );
    let mut m = matcher(b.build(s).unwrap(), SyntheticVocab::byte_level());
    m.consume_bytes(b"[]").unwrap();
    assert!(m.is_accepting());
    m.reset();
    m.consume_bytes(b"[12]").unwrap();
    assert!(m.is_accepting());
}

/// Keys of an object-like list: the first item may be the name `a` or `ab`, later ones only
/// `ab`, each followed by `!`, or any other key followed by `?`; the other key is `other`.
fn keys_grammar(other: fn(&mut GrammarBuilder, &[LexemeId]) -> LexemeId) -> Grammar {
    let mut b = GrammarBuilder::new();
    let names: Vec<LexemeId> = ["a", "ab", "b\\\"q"]
        .iter()
        .map(|n| b.literal(&format!("\"{n}\"")))
        .collect();
    let other = Symbol::Lexeme(other(&mut b, &names));
    let [a, ab, _] = [0, 1, 2].map(|i| Symbol::Lexeme(names[i]));
    let [bang, what, open, close, comma] =
        ["!", "?", "[", "]", ","].map(|t| Symbol::Lexeme(b.literal(t)));
    let first = Symbol::Rule(b.define(
        "first",
        vec![vec![a, bang], vec![ab, bang], vec![other, what]],
    ));
    let later = Symbol::Rule(b.define("later", vec![vec![ab, bang], vec![other, what]]));
    let rest = Symbol::Rule(b.rule_ref("rest"));
    b.define("rest", vec![vec![], vec![comma, later, rest]]);
    let s = b.define("s", vec![vec![open, first, rest, close]]);
    b.build(s).unwrap()
}

/// The other key as an exception (the canonical key except the three names, which the lexer
/// builds into one automaton shared by both positions) and as one regex for the complement:
/// the masks are equal at every step of random walks, cached against plain, so exceptions
/// neither let an excepted name through as the other key (`"a"` after the first item, `"b\"q"`
/// anywhere) nor cut a prefix that still grows into another key (`"b\"` to `"b\"x"`).
#[test]
fn excepted_keys_mask_like_the_complement_regex_over_random_walks() {
    use crate::schema::regexes::{canonical_key, string_except};
    fn except(b: &mut GrammarBuilder, names: &[LexemeId]) -> LexemeId {
        b.lexeme_except("other key", &canonical_key(), names.to_vec())
    }
    fn complement(b: &mut GrammarBuilder, _: &[LexemeId]) -> LexemeId {
        let names = ["a", "ab", "b\"q"].map(String::from);
        b.lexeme_hir("other key", string_except(&names))
    }
    let mut rng = Rng(0x510e_527f_ade6_82d1);
    // The pieces from `a"` on are whole keys: a token ending exactly at an excepted name's
    // closing quote, from before the key and from right after its opening quote (where key
    // sets derive their masks from the full set's).
    let v = random_vocab(
        &mut rng,
        b"\"|\"a|a|ab|b|q|x|\\|\\\"|\\u0041|\\n|!|?|[|]|,|\"!|\"?|\xc3\xa9|a\"|ab\"|b\\\"q\"|\
          a\"!|\"a\"|\"b\\\"q\"|,\"a\"",
    );
    let (exc, outputs) = compare_walks(
        keys_grammar(except),
        keys_grammar(complement),
        &v,
        &mut rng,
        (60, 40),
    );
    let later_keys: usize = outputs
        .iter()
        .map(|o| o.windows(2).filter(|w| w == b",\"").count())
        .sum();
    assert!(later_keys > 20, "walks too short: {later_keys} later keys");
    // The key sets of the first and the later items differ only in the names they allow:
    // they share one automaton, with the full set (every name allowed) whose in-key mask
    // entries theirs are derived from.
    assert_eq!(
        exc.sets.automata_len() + 2,
        exc.sets.len(),
        "the two key sets and the full set share one automaton"
    );
}

/// Keys of a large object: listed names that share prefixes (`book`, `bookmark`,
/// `bookmarkThumb`, `boat`, `cat`, `catalog`) and any other key, which excepts them. Right
/// after the quote and inside a name's prefix the key state differs from the free-string loop
/// only along the names' paths, so entries are built through detours that descend those
/// paths ([`detour_splits`](super::entries)) rather than walk the subtrees of the names'
/// first letters. Masks are compared, cached against plain, with the complement regex.
#[test]
fn long_name_prefix_masks_equal_the_complement_regex_over_random_walks() {
    use crate::schema::regexes::{canonical_key, string_except};
    const NAMES: [&str; 6] = [
        "book",
        "bookmark",
        "bookmarkThumb",
        "boat",
        "cat",
        "catalog",
    ];
    fn grammar(other: fn(&mut GrammarBuilder, &[LexemeId]) -> LexemeId) -> Grammar {
        let mut b = GrammarBuilder::new();
        let names: Vec<LexemeId> = NAMES
            .iter()
            .map(|n| b.literal(&format!("\"{n}\"")))
            .collect();
        let other = Symbol::Lexeme(other(&mut b, &names));
        let [bang, what, open, close, comma] =
            ["!", "?", "[", "]", ","].map(|t| Symbol::Lexeme(b.literal(t)));
        let mut alts: Vec<Vec<Symbol>> = names
            .iter()
            .map(|&n| vec![Symbol::Lexeme(n), bang])
            .collect();
        alts.push(vec![other, what]);
        let item = Symbol::Rule(b.define("item", alts));
        let rest = Symbol::Rule(b.rule_ref("rest"));
        b.define("rest", vec![vec![], vec![comma, item, rest]]);
        let s = b.define("s", vec![vec![open, item, rest, close]]);
        b.build(s).unwrap()
    }
    fn except(b: &mut GrammarBuilder, names: &[LexemeId]) -> LexemeId {
        b.lexeme_except("other key", &canonical_key(), names.to_vec())
    }
    fn complement(b: &mut GrammarBuilder, _: &[LexemeId]) -> LexemeId {
        b.lexeme_hir("other key", string_except(&NAMES.map(String::from)))
    }
    let mut rng = Rng(0x1f83_d9ab_fb41_bd6b);
    let v = random_vocab(
        &mut rng,
        b"\"|\"b|b|bo|ok|o|k|mark|Thumb|at|c|cat|alog|x|\\|\\\"|\\u0062|!|?|[|]|,|\"!|\"?|\
          \xc3\xa9|book\"|bookmark\"!|at\"?|alog\"|\"cat\"|,\"book",
    );
    let (exc, outputs) =
        compare_walks(grammar(except), grammar(complement), &v, &mut rng, (80, 40));
    let keys: usize = outputs
        .iter()
        .map(|o| o.windows(2).filter(|w| w == b",\"").count())
        .sum();
    assert!(keys > 30, "walks too short: {keys} later keys");
    assert_detours_built(&exc);
}

/// A name with a byte the free string does not allow (`"a-b"` beside `"[^"\\-]*"`): inside
/// the name's prefix the key state goes on where the string's loop rejects, so the detour's
/// descent must walk that subtree from the key state rather than keep the loop's (empty)
/// part of the mask.
#[test]
fn a_name_leaving_the_string_class_is_walked_not_borrowed() {
    fn grammar() -> Grammar {
        let mut b = GrammarBuilder::new();
        let name = Symbol::Lexeme(b.lexeme("name", r#""a-b""#));
        let string = Symbol::Lexeme(b.lexeme("string", r#""[^"\\-]*""#));
        let [bang, open, close, comma] = ["!", "[", "]", ","].map(|t| Symbol::Lexeme(b.literal(t)));
        let value = Symbol::Rule(b.rule_ref("value"));
        let items = Symbol::Rule(b.rule_ref("items"));
        b.define("items", vec![vec![value], vec![items, comma, value]]);
        let v = b.define(
            "value",
            vec![vec![name, bang], vec![string], vec![open, items, close]],
        );
        b.build(v).unwrap()
    }
    let cached = compare_cached_with_plain(
        grammar,
        0x5be0_cd19_137e_2179,
        b"\"|\"a|a|-|-b|b|-b\"|-b\"!|c|!|[|]|,|\\|\xc3\xa9",
    );
    assert_detours_built(&cached);
}
