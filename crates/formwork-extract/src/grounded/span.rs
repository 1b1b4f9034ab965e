//! The automata of a document's quotes: its whole-word spans ([`SpanAutomaton`], by subset
//! construction under a linear work budget) and, as the fallback over that budget, all its
//! substrings ([`SuffixAutomaton`]). Both are DFAs over characters as per-state transition maps.

use std::collections::BTreeMap;

/// The suffix automaton of a document's characters: the minimal DFA of its substrings.
#[derive(Clone, Debug)]
pub struct SuffixAutomaton {
    /// Per state: transitions by character (ordered, so grammars are reproducible).
    pub(super) next: Vec<BTreeMap<char, u32>>,
    link: Vec<Option<u32>>,
    len: Vec<u32>,
}

impl SuffixAutomaton {
    /// Builds the automaton in O(n log σ) (the standard online construction).
    pub fn new(text: &str) -> Self {
        let mut sa = SuffixAutomaton {
            next: vec![BTreeMap::new()],
            link: vec![None],
            len: vec![0],
        };
        let mut last = 0u32;
        for c in text.chars() {
            let cur = sa.push(sa.len[last as usize] + 1, None);
            let mut p = Some(last);
            while let Some(q) = p {
                if sa.next[q as usize].contains_key(&c) {
                    break;
                }
                sa.next[q as usize].insert(c, cur);
                p = sa.link[q as usize];
            }
            match p {
                None => sa.link[cur as usize] = Some(0),
                Some(p) => {
                    let q = sa.next[p as usize][&c];
                    if sa.len[p as usize] + 1 == sa.len[q as usize] {
                        sa.link[cur as usize] = Some(q);
                    } else {
                        let clone = sa.push(sa.len[p as usize] + 1, sa.link[q as usize]);
                        sa.next[clone as usize] = sa.next[q as usize].clone();
                        let mut pp = Some(p);
                        while let Some(x) = pp {
                            if sa.next[x as usize].get(&c) != Some(&q) {
                                break;
                            }
                            sa.next[x as usize].insert(c, clone);
                            pp = sa.link[x as usize];
                        }
                        sa.link[q as usize] = Some(clone);
                        sa.link[cur as usize] = Some(clone);
                    }
                }
            }
            last = cur;
        }
        sa
    }

    fn push(&mut self, len: u32, link: Option<u32>) -> u32 {
        self.next.push(BTreeMap::new());
        self.link.push(link);
        self.len.push(len);
        (self.next.len() - 1) as u32
    }

    /// Number of states (at most 2n for n ≥ 2 characters).
    pub fn states_len(&self) -> usize {
        self.next.len()
    }

    /// Whether `s` is a substring of the text (every state is accepting).
    pub fn contains(&self, s: &str) -> bool {
        run(&self.next, s).is_some()
    }
}

/// The state a DFA given as per-state transition maps reaches on `s` from state 0, if any.
fn run(next: &[BTreeMap<char, u32>], s: &str) -> Option<u32> {
    s.chars()
        .try_fold(0u32, |q, c| next[q as usize].get(&c).copied())
}

/// The DFA of a document's **whole-word spans**: the non-empty substrings that start and end
/// at word boundaries (never inside a run of alphanumeric characters) and neither start nor
/// end with whitespace. A quote then never cuts a word (`"Boo"` out of "Book a table"), which
/// is what an extracted value or a piece of evidence is.
///
/// Built by subset construction over document positions: a state is the set of positions where
/// the span read so far can end, among occurrences that start at a word start; it accepts when
/// one of them is at a word end. Documents where this would exceed a work budget (long, highly
/// repetitive text) get `None`, and the caller falls back to any substring.
#[derive(Clone, Debug)]
pub struct SpanAutomaton {
    pub(super) next: Vec<BTreeMap<char, u32>>,
    pub(super) accept: Vec<bool>,
}

impl SpanAutomaton {
    /// Builds the automaton, or `None` when the construction would touch more than
    /// `64 n + 4096` positions in total (n = characters).
    pub fn new(text: &str) -> Option<Self> {
        let cs: Vec<char> = text.chars().collect();
        let n = cs.len();
        let word = |k: usize| cs[k].is_alphanumeric();
        let boundary = |k: usize| k == 0 || k == n || !(word(k - 1) && word(k));
        let starts: Vec<u32> = (0..n)
            .filter(|&i| boundary(i) && !cs[i].is_whitespace())
            .map(|i| i as u32)
            .collect();
        let end_ok: Vec<bool> = (0..=n)
            .map(|j| j > 0 && boundary(j) && !cs[j - 1].is_whitespace())
            .collect();
        let mut budget = 64 * n + 4096;
        let mut sets: Vec<Vec<u32>> = vec![starts];
        // The start state is never merged with a later one: it alone must not accept.
        let mut index: std::collections::HashMap<Vec<u32>, u32> = Default::default();
        let mut sa = SpanAutomaton {
            next: vec![BTreeMap::new()],
            accept: vec![false],
        };
        let mut q = 0;
        while q < sets.len() {
            budget = budget.checked_sub(sets[q].len())?;
            let mut by_char: BTreeMap<char, Vec<u32>> = BTreeMap::new();
            for &k in &sets[q] {
                if (k as usize) < n {
                    by_char.entry(cs[k as usize]).or_default().push(k + 1);
                }
            }
            for (c, to) in by_char {
                let id = match index.get(&to) {
                    Some(&id) => id,
                    None => {
                        let id = sets.len() as u32;
                        sa.accept.push(to.iter().any(|&j| end_ok[j as usize]));
                        sa.next.push(BTreeMap::new());
                        index.insert(to.clone(), id);
                        sets.push(to);
                        id
                    }
                };
                sa.next[q].insert(c, id);
            }
            q += 1;
        }
        Some(sa)
    }

    /// Number of states.
    pub fn states_len(&self) -> usize {
        self.next.len()
    }

    /// Whether `s` is a whole-word span of the text.
    pub fn contains(&self, s: &str) -> bool {
        run(&self.next, s).is_some_and(|q| self.accept[q as usize])
    }
}
