//! `agent-pipeline gen`: deterministic inputs, one JSON record per line.
//!
//! Two mixes, so that what a build is measured on is not what it was trained on: the
//! held-out mix has other proportions of kinds, more users, longer notes, more tags and
//! larger amounts, and a seed of its own. Both carry messy fields (case, spaces, duplicate
//! tags) for the normaliser and about 1 % of records it must reject.

use std::io::{self, Write};

use serde::Serialize;

/// Which proportions and sizes to draw from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    Train,
    Heldout,
}

impl Mix {
    pub fn parse(name: &str) -> Option<Mix> {
        match name {
            "train" => Some(Mix::Train),
            "heldout" => Some(Mix::Heldout),
            _ => None,
        }
    }

    fn spec(self) -> Spec {
        match self {
            Mix::Train => Spec {
                kinds: [
                    ("order", 30),
                    ("refund", 5),
                    ("click", 35),
                    ("view", 25),
                    ("signup", 5),
                ],
                users: 150,
                max_cents: 50_000,
                note_words: (0, 10),
                max_tags: 3,
            },
            Mix::Heldout => Spec {
                kinds: [
                    ("order", 20),
                    ("refund", 10),
                    ("click", 25),
                    ("view", 35),
                    ("signup", 10),
                ],
                users: 400,
                max_cents: 200_000,
                note_words: (3, 18),
                max_tags: 5,
            },
        }
    }
}

struct Spec {
    /// Kind names and their weights (out of 100).
    kinds: [(&'static str, u64); 5],
    /// Distinct users drawn from.
    users: u64,
    /// Orders' and refunds' largest amount, in cents.
    max_cents: u64,
    /// Words in a note, inclusive bounds.
    note_words: (u64, u64),
    max_tags: u64,
}

const TAGS: [&str; 12] = [
    "web",
    "app",
    "promo",
    "returning",
    "new",
    "eu",
    "us",
    "apac",
    "premium",
    "trial",
    "gift",
    "bulk",
];

const WORDS: [&str; 24] = [
    "delivered",
    "late",
    "parcel",
    "thanks",
    "again",
    "colour",
    "size",
    "swap",
    "gift",
    "wrap",
    "urgent",
    "weekend",
    "store",
    "pickup",
    "voucher",
    "applied",
    "second",
    "try",
    "checkout",
    "slow",
    "great",
    "service",
    "missing",
    "item",
];

/// SplitMix64: tiny, fast, and the same sequence on every platform.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift: no modulo bias worth the name at these sizes).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True `per_mille` times in a thousand.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// One generated line, before it is (maybe) broken.
#[derive(Serialize)]
struct Line {
    id: u64,
    kind: String,
    user: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    amount: Option<f64>,
    tags: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    note: String,
}

/// Writes `records` lines of `mix` drawn from `seed` to `out`.
pub fn generate(seed: u64, records: u64, mix: Mix, out: &mut impl Write) -> io::Result<()> {
    let spec = mix.spec();
    let mut rng = SplitMix64(seed);
    for id in 1..=records {
        let mut roll = rng.below(100);
        let (mut kind, _) = spec.kinds[spec.kinds.len() - 1];
        for (name, weight) in spec.kinds {
            if roll < weight {
                kind = name;
                break;
            }
            roll -= weight;
        }
        let mut line = Line {
            id,
            kind: kind.to_string(),
            user: format!("u{}", rng.below(spec.users)),
            amount: matches!(kind, "order" | "refund")
                .then(|| rng.between(100, spec.max_cents) as f64 / 100.0),
            tags: (0..rng.between(0, spec.max_tags))
                .map(|_| rng.pick(&TAGS).to_string())
                .collect(),
            note: (0..rng.between(spec.note_words.0, spec.note_words.1))
                .map(|_| rng.pick(&WORDS))
                .collect::<Vec<_>>()
                .join(" "),
        };
        // Messy but valid: the normaliser's work.
        if rng.chance(100) {
            line.kind = line.kind.to_ascii_uppercase();
        }
        if rng.chance(100) {
            line.user = format!("  {} ", line.user.to_ascii_uppercase());
        }
        if rng.chance(150) && !line.tags.is_empty() {
            let again = format!(" {} ", line.tags[0].to_ascii_uppercase());
            line.tags.push(again);
        }
        if rng.chance(150) {
            line.note = line.note.replace(' ', "   \t");
        }
        // Invalid: about 1 % of records, each failing one way.
        let mut text = serde_json::to_string(&line).expect("strings and numbers serialize");
        if rng.chance(10) {
            match rng.below(4) {
                0 => text.truncate(rng.between(1, text.len() as u64 - 1) as usize),
                1 => text = text.replacen(&format!("\"{}\"", line.kind), "\"purchase\"", 1),
                2 => text = text.replacen(&format!("\"{}\"", line.user), "\"\"", 1),
                _ => {
                    line.amount = Some(-line.amount.unwrap_or(1.0));
                    text = serde_json::to_string(&line).expect("strings and numbers serialize");
                }
            }
        }
        writeln!(out, "{text}")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated(seed: u64, records: u64, mix: Mix) -> String {
        let mut out = Vec::new();
        generate(seed, records, mix, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_same_seed_gives_the_same_lines() {
        let a = generated(7, 300, Mix::Train);
        assert_eq!(a, generated(7, 300, Mix::Train));
        assert_eq!(a.lines().count(), 300);
        assert_ne!(a, generated(8, 300, Mix::Train));
        assert_ne!(a, generated(7, 300, Mix::Heldout));
        // A prefix of a longer run: records are drawn one after another.
        assert!(generated(7, 301, Mix::Train).starts_with(&a));
    }

    #[test]
    fn the_mixes_differ_in_kinds_and_sizes() {
        let share = |text: &str, kind: &str| {
            let needle = format!("\"kind\":\"{kind}\"");
            text.lines().filter(|l| l.contains(&needle)).count() as f64 / 2000.0
        };
        let train = generated(1, 2000, Mix::Train);
        let heldout = generated(1, 2000, Mix::Heldout);
        assert!(share(&heldout, "view") > share(&train, "view") + 0.05);
        assert!(share(&heldout, "order") < share(&train, "order") - 0.05);
        assert!(
            heldout.len() > train.len() * 5 / 4,
            "held-out lines are longer"
        );
    }

    #[test]
    fn draws_stay_in_range() {
        let mut rng = SplitMix64(3);
        for _ in 0..10_000 {
            assert!(rng.below(7) < 7);
            assert!((5..=9).contains(&rng.between(5, 9)));
        }
        // SplitMix64's published first output for seed 0.
        assert_eq!(SplitMix64(0).next(), 0xe220_a839_7b1d_cdaf);
    }
}
