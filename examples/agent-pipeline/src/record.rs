//! One record: as read from its JSON line, and normalised for the aggregators.

use mty_runtime::ByteSize;
use serde::{Deserialize, Serialize};

/// The most bytes of a user name, once trimmed.
const MAX_USER_BYTES: usize = 32;
/// The largest amount an order or refund may carry.
const MAX_AMOUNT: f64 = 100_000.0;
/// The most distinct tags a record may carry.
const MAX_TAGS: usize = 8;
/// Notes are cut to this many characters.
const MAX_NOTE_CHARS: usize = 160;
/// Input quoted in a rejection's reason is cut to this many characters: reasons stay short
/// whatever the line held.
const MAX_QUOTED_CHARS: usize = 24;

/// A record as it appears on an input line: `{"id":…,"kind":…,"user":…,"amount":…,
/// "tags":[…],"note":…}`, the last three optional.
#[derive(Debug, Deserialize)]
pub struct RawRecord {
    id: u64,
    kind: String,
    user: String,
    #[serde(default)]
    amount: f64,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    note: String,
}

impl ByteSize for RawRecord {
    /// The text it holds: what a mailbox of raw records bounds.
    fn byte_size(&self) -> usize {
        self.kind.len()
            + self.user.len()
            + self.tags.iter().map(String::len).sum::<usize>()
            + self.note.len()
    }
}

/// What a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Order,
    Refund,
    Click,
    View,
    Signup,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Order,
        Kind::Refund,
        Kind::Click,
        Kind::View,
        Kind::Signup,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Order => "order",
            Kind::Refund => "refund",
            Kind::Click => "click",
            Kind::View => "view",
            Kind::Signup => "signup",
        }
    }

    /// The kind named `name`, in any ASCII case.
    fn parse(name: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|kind| kind.name().eq_ignore_ascii_case(name))
    }

    /// The aggregator that takes this kind.
    pub fn family(self) -> Family {
        match self {
            Kind::Order | Kind::Refund => Family::Payments,
            Kind::Click | Kind::View => Family::Engagement,
            Kind::Signup => Family::Accounts,
        }
    }

    /// What one cent of this kind's amount adds to the net: refunds take money back.
    pub fn sign(self) -> i64 {
        match self {
            Kind::Refund => -1,
            _ => 1,
        }
    }

    fn carries_amount(self) -> bool {
        self.family() == Family::Payments
    }
}

/// The kinds one aggregator takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Payments,
    Engagement,
    Accounts,
}

impl Family {
    pub const ALL: [Family; 3] = [Family::Payments, Family::Engagement, Family::Accounts];

    /// Its place in [`Family::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A record checked and normalised: a known kind, a lower-case user, the amount in cents,
/// tags lower-case, sorted and distinct, the note's whitespace collapsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub id: u64,
    pub kind: Kind,
    pub user: String,
    /// Zero for kinds without an amount; positive otherwise (see [`Kind::sign`]).
    pub cents: i64,
    pub tags: Vec<String>,
    pub note: String,
}

impl ByteSize for Record {
    /// The text it holds, as for [`RawRecord`].
    fn byte_size(&self) -> usize {
        self.user.len() + self.tags.iter().map(String::len).sum::<usize>() + self.note.len()
    }
}

/// Parses one input line, or says why it is not a record.
pub fn parse(line: &str) -> Result<RawRecord, String> {
    serde_json::from_str(line).map_err(|err| format!("not a record: {err}"))
}

/// Checks and normalises a record, or says why it is rejected.
pub fn normalise(raw: RawRecord) -> Result<Record, String> {
    let kind = Kind::parse(raw.kind.trim())
        .ok_or_else(|| format!("unknown kind `{}`", quoted(&raw.kind)))?;
    let user = raw.user.trim().to_ascii_lowercase();
    let user_ok = !user.is_empty()
        && user.len() <= MAX_USER_BYTES
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if !user_ok {
        return Err(format!("bad user `{}`", quoted(&raw.user)));
    }
    let cents = if kind.carries_amount() {
        if !(raw.amount > 0.0 && raw.amount <= MAX_AMOUNT) {
            return Err(format!(
                "{} amount {} is not in (0, {MAX_AMOUNT}]",
                kind.name(),
                raw.amount
            ));
        }
        (raw.amount * 100.0).round() as i64
    } else if raw.amount != 0.0 {
        return Err(format!(
            "a {} carries no amount, got {}",
            kind.name(),
            raw.amount
        ));
    } else {
        0
    };
    let mut tags: Vec<String> = raw
        .tags
        .iter()
        .map(|tag| tag.trim().to_ascii_lowercase())
        .filter(|tag| !tag.is_empty())
        .collect();
    tags.sort_unstable();
    tags.dedup();
    if tags.len() > MAX_TAGS {
        return Err(format!(
            "{} distinct tags, more than {MAX_TAGS}",
            tags.len()
        ));
    }
    let mut note = String::with_capacity(raw.note.len());
    for word in raw.note.split_whitespace() {
        if !note.is_empty() {
            note.push(' ');
        }
        note.push_str(word);
    }
    if let Some((cut, _)) = note.char_indices().nth(MAX_NOTE_CHARS) {
        note.truncate(cut);
    }
    Ok(Record {
        id: raw.id,
        kind,
        user,
        cents,
        tags,
        note,
    })
}

/// `text` as quoted in a reason: at most [`MAX_QUOTED_CHARS`] characters.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalised(line: &str) -> Result<Record, String> {
        normalise(parse(line)?)
    }

    #[test]
    fn normalises_case_whitespace_tags_and_amounts() {
        let record = normalised(
            r#"{"id":7,"kind":" Refund","user":" ANN_1 ","amount":2.25,"tags":["Web"," promo","web",""],"note":"  late\t parcel  again "}"#,
        )
        .unwrap();
        assert_eq!(
            record,
            Record {
                id: 7,
                kind: Kind::Refund,
                user: "ann_1".into(),
                cents: 225,
                tags: vec!["promo".into(), "web".into()],
                note: "late parcel again".into(),
            }
        );
        // Optional fields absent: no amount, tags or note.
        let click = normalised(r#"{"id":1,"kind":"click","user":"bob"}"#).unwrap();
        assert_eq!(
            (click.cents, click.tags.len(), click.note.as_str()),
            (0, 0, "")
        );
    }

    #[test]
    fn cuts_long_notes_at_a_character_boundary() {
        let line = format!(
            r#"{{"id":1,"kind":"view","user":"a","note":"{}"}}"#,
            "é".repeat(200)
        );
        assert_eq!(normalised(&line).unwrap().note, "é".repeat(MAX_NOTE_CHARS));
    }

    #[test]
    fn says_why_a_record_is_rejected() {
        let reason = |line: &str| normalised(line).unwrap_err();
        assert!(reason("{\"id\":1,").starts_with("not a record: "));
        assert!(reason(r#"{"kind":"order","user":"a","amount":1}"#).contains("missing field `id`"));
        assert_eq!(
            reason(r#"{"id":1,"kind":"purchase","user":"a"}"#),
            "unknown kind `purchase`"
        );
        assert_eq!(
            reason(r#"{"id":1,"kind":"order","user":"a b"}"#),
            "bad user `a b`"
        );
        assert_eq!(
            reason(r#"{"id":1,"kind":"view","user":"  "}"#),
            "bad user `  `"
        );
        assert_eq!(
            reason(r#"{"id":1,"kind":"order","user":"a","amount":-3.5}"#),
            "order amount -3.5 is not in (0, 100000]"
        );
        assert_eq!(
            reason(r#"{"id":1,"kind":"refund","user":"a"}"#),
            "refund amount 0 is not in (0, 100000]"
        );
        assert_eq!(
            reason(r#"{"id":1,"kind":"click","user":"a","amount":3}"#),
            "a click carries no amount, got 3"
        );
        let tags: Vec<String> = (0..9).map(|i| format!("\"t{i}\"")).collect();
        assert_eq!(
            reason(&format!(
                r#"{{"id":1,"kind":"view","user":"a","tags":[{}]}}"#,
                tags.join(",")
            )),
            "9 distinct tags, more than 8"
        );
        // Quoted input is cut short.
        let long = "x".repeat(100);
        assert_eq!(
            reason(&format!(r#"{{"id":1,"kind":"{long}","user":"a"}}"#)),
            format!("unknown kind `{}…`", "x".repeat(MAX_QUOTED_CHARS))
        );
    }
}
