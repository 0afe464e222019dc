//! What the pipeline computes: the aggregators' state per family of kinds, and the sink's
//! over every record.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use mty_runtime::ByteSize;
use serde::Serialize;

use crate::record::{Family, Kind, Record};

/// Rejections listed in the outcome (the first lines rejected; all are counted).
const SHOWN_REJECTS: usize = 5;
/// Users and tags listed per family.
const TOP_USERS: usize = 3;
const TOP_TAGS: usize = 5;

/// FNV-1a, 64 bits: the records' digests, and the aggregators' maps. A fixed hash, so every
/// run builds the same tables (a random seed would make some runs slower than others).
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv64 {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type FnvMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv64>>;

/// The digest of a normalised record: FNV-1a over its fields, each closed by a byte no UTF-8
/// text holds (so `("ab", "c")` and `("a", "bc")` differ), integers little-endian.
pub fn digest(record: &Record) -> u64 {
    let mut h = Fnv64::default();
    h.write(&record.id.to_le_bytes());
    for text in [record.kind.name(), &record.user] {
        h.write(text.as_bytes());
        h.write(&[0xff]);
    }
    h.write(&record.cents.to_le_bytes());
    for tag in &record.tags {
        h.write(tag.as_bytes());
        h.write(&[0xfe]);
    }
    h.write(record.note.as_bytes());
    h.finish()
}

/// Records and their net amount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub records: u64,
    /// Refunds count negative.
    pub net_cents: i64,
}

impl Tally {
    fn add(&mut self, cents: i64) {
        self.records += 1;
        self.net_cents += cents;
    }
}

/// One record's effect on the aggregates, as the sink folds it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub kind: Kind,
    /// Signed: refunds negative.
    pub cents: i64,
    pub digest: u64,
}

/// The state of one family's aggregator: totals, per user, per tag.
pub struct Aggregator {
    family: Family,
    total: Tally,
    users: FnvMap<String, Tally>,
    tags: FnvMap<String, u64>,
}

impl Aggregator {
    pub fn new(family: Family) -> Self {
        Aggregator {
            family,
            total: Tally::default(),
            users: FnvMap::default(),
            tags: FnvMap::default(),
        }
    }

    /// Folds `record` (of this family) in; returns its effect for the sink.
    pub fn apply(&mut self, record: &Record) -> Applied {
        debug_assert_eq!(record.kind.family(), self.family, "routed by family");
        let cents = record.kind.sign() * record.cents;
        self.total.add(cents);
        // Look up by `&str` first: the key is copied only for a user or tag seen first.
        match self.users.get_mut(record.user.as_str()) {
            Some(tally) => tally.add(cents),
            None => {
                let mut tally = Tally::default();
                tally.add(cents);
                self.users.insert(record.user.clone(), tally);
            }
        }
        for tag in &record.tags {
            match self.tags.get_mut(tag.as_str()) {
                Some(count) => *count += 1,
                None => {
                    self.tags.insert(tag.clone(), 1);
                }
            }
        }
        Applied {
            kind: record.kind,
            cents,
            digest: digest(record),
        }
    }

    /// The totals so far: the busiest users (most records, then most money, then by name)
    /// and the commonest tags (then by name), so that ties resolve the same in every run.
    pub fn totals(&self) -> FamilyTotals {
        let mut users: Vec<(&String, &Tally)> = self.users.iter().collect();
        users.sort_unstable_by(|a, b| {
            (b.1.records, b.1.net_cents, a.0).cmp(&(a.1.records, a.1.net_cents, b.0))
        });
        let mut tags: Vec<(&String, &u64)> = self.tags.iter().collect();
        tags.sort_unstable_by(|a, b| (b.1, a.0).cmp(&(a.1, b.0)));
        FamilyTotals {
            family: self.family,
            total: self.total,
            users: self.users.len(),
            top_users: users
                .into_iter()
                .take(TOP_USERS)
                .map(|(user, &tally)| UserTally {
                    user: user.clone(),
                    tally,
                })
                .collect(),
            top_tags: tags
                .into_iter()
                .take(TOP_TAGS)
                .map(|(tag, &count)| (tag.clone(), count))
                .collect(),
        }
    }
}

/// One family's aggregates, as its aggregator reports them at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FamilyTotals {
    pub family: Family,
    #[serde(flatten)]
    pub total: Tally,
    /// Distinct users.
    pub users: usize,
    pub top_users: Vec<UserTally>,
    /// `[tag, records]` pairs.
    pub top_tags: Vec<(String, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserTally {
    pub user: String,
    #[serde(flatten)]
    pub tally: Tally,
}

/// What reaches the sink.
#[derive(Debug)]
pub enum Effect {
    /// A record the aggregators took.
    Applied(Applied),
    /// A record turned down, by line number in the input.
    Rejected { line: u64, reason: String },
    /// A family's aggregates, once the driver asked for them.
    Totals(FamilyTotals),
}

impl ByteSize for Effect {
    /// Only a family's totals carry text worth bounding; the rest take the mailbox's
    /// zero-byte fast path.
    fn byte_size(&self) -> usize {
        match self {
            Effect::Applied(_) | Effect::Rejected { .. } => 0,
            Effect::Totals(totals) => {
                totals.top_users.iter().map(|u| u.user.len()).sum::<usize>()
                    + totals.top_tags.iter().map(|(t, _)| t.len()).sum::<usize>()
            }
        }
    }
}

/// The sink's state: every record's effect, folded in whatever order they arrive (the
/// families' aggregators run side by side), so everything here is order-independent.
#[derive(Debug, Default)]
pub struct Sink {
    kinds: [Tally; Kind::ALL.len()],
    /// Wrapping sum of the accepted records' digests.
    checksum: u64,
    rejected: u64,
    /// The first lines rejected, by line number.
    rejects: BTreeMap<u64, String>,
    families: Vec<FamilyTotals>,
}

impl Sink {
    pub fn fold(&mut self, effect: Effect) {
        match effect {
            Effect::Applied(applied) => {
                self.kinds[applied.kind as usize].add(applied.cents);
                self.checksum = self.checksum.wrapping_add(applied.digest);
            }
            Effect::Rejected { line, reason } => self.reject(line, reason),
            Effect::Totals(totals) => self.families.push(totals),
        }
    }

    /// Counts the record on `line` as rejected for `reason`.
    pub fn reject(&mut self, line: u64, reason: String) {
        self.rejected += 1;
        self.rejects.insert(line, reason);
        if self.rejects.len() > SHOWN_REJECTS {
            self.rejects.pop_last();
        }
    }

    /// The outcome, once every family has reported its totals.
    ///
    /// # Panics
    /// If a family has not reported.
    pub fn outcome(mut self) -> Outcome {
        self.families
            .sort_unstable_by_key(|totals| totals.family.index());
        let reported: Vec<Family> = self.families.iter().map(|t| t.family).collect();
        assert_eq!(reported, Family::ALL, "every family reports once");
        let accepted = self.kinds.iter().map(|t| t.records).sum::<u64>();
        Outcome {
            records: accepted + self.rejected,
            accepted,
            rejected: self.rejected,
            net_cents: self.kinds.iter().map(|t| t.net_cents).sum(),
            kinds: Kind::ALL.into_iter().zip(self.kinds).collect(),
            checksum: format!("{:016x}", self.checksum),
            families: self.families,
            rejects: self
                .rejects
                .into_iter()
                .map(|(line, reason)| Reject { line, reason })
                .collect(),
        }
    }
}

/// The pipeline's result: deterministic for a given input and repeat count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub records: u64,
    pub accepted: u64,
    pub rejected: u64,
    pub net_cents: i64,
    pub kinds: BTreeMap<Kind, Tally>,
    /// The accepted records' digests, summed (wrapping): 16 hex digits.
    pub checksum: String,
    pub families: Vec<FamilyTotals>,
    /// The first few lines rejected, and why.
    pub rejects: Vec<Reject>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reject {
    pub line: u64,
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: u64, kind: Kind, user: &str, cents: i64, tags: &[&str]) -> Record {
        Record {
            id,
            kind,
            user: user.into(),
            cents,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            note: String::new(),
        }
    }

    #[test]
    fn digests_tell_fields_apart() {
        let a = record(1, Kind::Order, "ab", 100, &["c"]);
        let mut b = a.clone();
        b.user = "a".into();
        b.tags = vec!["bc".into()];
        assert_ne!(digest(&a), digest(&b));
        let mut c = a.clone();
        c.id = 2;
        assert_ne!(digest(&a), digest(&c));
        assert_eq!(digest(&a), digest(&a.clone()));
        // FNV-1a's published value for "a", as a check of the constants.
        let mut h = Fnv64::default();
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn aggregates_per_user_and_tag_with_ties_broken_by_name() {
        let mut agg = Aggregator::new(Family::Payments);
        let applied = agg.apply(&record(1, Kind::Order, "bo", 500, &["web"]));
        assert_eq!((applied.kind, applied.cents), (Kind::Order, 500));
        assert_eq!(
            agg.apply(&record(2, Kind::Refund, "bo", 200, &[])).cents,
            -200
        );
        agg.apply(&record(3, Kind::Order, "al", 300, &["web", "eu"]));
        agg.apply(&record(4, Kind::Order, "al", 100, &["eu"]));
        agg.apply(&record(5, Kind::Order, "cy", 100, &["app"]));
        let totals = agg.totals();
        assert_eq!(
            totals.total,
            Tally {
                records: 5,
                net_cents: 800
            }
        );
        assert_eq!(totals.users, 3);
        // al and bo both have 2 records: al's 400 beats bo's 300.
        let users: Vec<(&str, i64)> = totals
            .top_users
            .iter()
            .map(|u| (u.user.as_str(), u.tally.net_cents))
            .collect();
        assert_eq!(users, [("al", 400), ("bo", 300), ("cy", 100)]);
        let tags: Vec<(&str, u64)> = totals
            .top_tags
            .iter()
            .map(|(t, n)| (t.as_str(), *n))
            .collect();
        assert_eq!(tags, [("eu", 2), ("web", 2), ("app", 1)]);
    }

    #[test]
    fn the_sink_keeps_the_first_rejected_lines() {
        let mut sink = Sink::default();
        for line in [9, 3, 12, 7, 1, 30, 2] {
            sink.reject(line, format!("r{line}"));
        }
        for family in Family::ALL {
            sink.fold(Effect::Totals(Aggregator::new(family).totals()));
        }
        let outcome = sink.outcome();
        assert_eq!((outcome.rejected, outcome.records), (7, 7));
        let lines: Vec<u64> = outcome.rejects.iter().map(|r| r.line).collect();
        assert_eq!(lines, [1, 2, 3, 7, 9]);
    }
}
