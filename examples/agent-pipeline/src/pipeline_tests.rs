//! The pipeline end to end, on a small input whose outcome is worked out by hand, and on
//! generated inputs under tight budgets.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use mty_lockstep::Lockstep;
use serde_json::json;

use super::*;
use crate::aggregate::digest;
use crate::generator::{self, Mix};
use crate::record::Kind;

/// Nine records on ten lines (line 5 is blank): six valid, some messy, and three rejected
/// (line 8 cut short).
const KNOWN: &str = r#"{"id":1,"kind":"order","user":"ann","amount":12.5,"tags":["web","Promo"],"note":"first  order"}
{"id":2,"kind":"Refund","user":" ANN ","amount":2.25,"tags":["web"]}
{"id":3,"kind":"click","user":"bob","tags":["web","WEB "]}
{"id":4,"kind":"view","user":"bob"}

{"id":6,"kind":"signup","user":"cy","tags":["promo"]}
{"id":7,"kind":"order","user":"bob","amount":100}
{"id":8,"kind":"order"
{"id":9,"kind":"purchase","user":"dan","amount":1}
{"id":10,"kind":"click","user":"dan","amount":3}
"#;

/// KNOWN's valid records, normalised by hand.
fn known_records() -> Vec<Record> {
    let record = |id, kind, user: &str, cents, tags: &[&str], note: &str| Record {
        id,
        kind,
        user: user.into(),
        cents,
        tags: tags.iter().map(|t| t.to_string()).collect(),
        note: note.into(),
    };
    vec![
        record(
            1,
            Kind::Order,
            "ann",
            1250,
            &["promo", "web"],
            "first order",
        ),
        record(2, Kind::Refund, "ann", 225, &["web"], ""),
        record(3, Kind::Click, "bob", 0, &["web"], ""),
        record(4, Kind::View, "bob", 0, &[], ""),
        record(6, Kind::Signup, "cy", 0, &["promo"], ""),
        record(7, Kind::Order, "bob", 10000, &[], ""),
    ]
}

/// KNOWN's outcome after `passes` passes over it.
fn known_outcome(passes: u64) -> serde_json::Value {
    let n = |count: u64| count * passes;
    let c = |cents: i64| cents * passes as i64;
    let checksum = known_records()
        .iter()
        .fold(0u64, |sum, r| sum.wrapping_add(digest(r)))
        .wrapping_mul(passes);
    json!({
        "records": n(9), "accepted": n(6), "rejected": n(3), "net_cents": c(11025),
        "kinds": {
            "order": {"records": n(2), "net_cents": c(11250)},
            "refund": {"records": n(1), "net_cents": c(-225)},
            "click": {"records": n(1), "net_cents": 0},
            "view": {"records": n(1), "net_cents": 0},
            "signup": {"records": n(1), "net_cents": 0},
        },
        "checksum": format!("{checksum:016x}"),
        "families": [
            {
                "family": "payments", "records": n(3), "net_cents": c(11025), "users": 2,
                "top_users": [
                    {"user": "ann", "records": n(2), "net_cents": c(1025)},
                    {"user": "bob", "records": n(1), "net_cents": c(10000)},
                ],
                "top_tags": [["web", n(2)], ["promo", n(1)]],
            },
            {
                "family": "engagement", "records": n(2), "net_cents": 0, "users": 1,
                "top_users": [{"user": "bob", "records": n(2), "net_cents": 0}],
                "top_tags": [["web", n(1)]],
            },
            {
                "family": "accounts", "records": n(1), "net_cents": 0, "users": 1,
                "top_users": [{"user": "cy", "records": n(1), "net_cents": 0}],
                "top_tags": [["promo", n(1)]],
            },
        ],
        "rejects": [
            {"line": 8, "reason": "not a record: EOF while parsing an object at line 1 column 22"},
            {"line": 9, "reason": "unknown kind `purchase`"},
            {"line": 10, "reason": "a click carries no amount, got 3"},
        ],
    })
}

fn feed(text: &str) -> Feed {
    Feed::read(text.as_bytes()).unwrap()
}

fn whole_run(text: &str, passes: u64, config: Config) -> Outcome {
    let mut feed = feed(text);
    let mut pipeline = Pipeline::start(config);
    let records = feed.len() as u64 * passes;
    pipeline.stream(&mut feed, records);
    pipeline.finish()
}

fn generated(seed: u64, records: u64, mix: Mix) -> String {
    let mut out = Vec::new();
    generator::generate(seed, records, mix, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn a_known_input_gives_the_outcome_worked_out_by_hand() {
    let outcome = whole_run(KNOWN, 1, Config::default());
    assert_eq!(serde_json::to_value(&outcome).unwrap(), known_outcome(1));
}

#[test]
fn repeated_passes_multiply_the_counts_and_list_each_rejected_line_once() {
    let outcome = whole_run(KNOWN, 3, Config::default());
    assert_eq!(serde_json::to_value(&outcome).unwrap(), known_outcome(3));
}

#[test]
fn records_one_at_a_time_give_the_same_outcome_and_a_time_each() {
    let mut feed = feed(KNOWN);
    let mut pipeline = Pipeline::start(Config::default());
    let mut times = Vec::new();
    pipeline.one_by_one(&mut feed, 9, &mut times);
    assert_eq!(times.len(), 9);
    assert!(times.iter().all(|&ns| ns > 0), "{times:?}");
    let outcome = pipeline.finish();
    assert_eq!(serde_json::to_value(&outcome).unwrap(), known_outcome(1));
}

#[test]
fn lockstep_batches_push_records_in_turn() {
    let mut feed = feed(KNOWN);
    let mut pipeline = Pipeline::start(Config::default());
    let mut output = Vec::new();
    let served = Lockstep::new(4)
        .serve_on("g\ng\nq\n".as_bytes(), &mut output, |n, times| {
            pipeline.one_by_one(&mut feed, n, times)
        })
        .unwrap();
    assert_eq!((served.batches, served.histogram.len()), (2, 8));
    assert_eq!(String::from_utf8(output).unwrap().lines().count(), 3);
    // The first eight records (lines 1-9 but the blank one): two of them rejected.
    let outcome = pipeline.finish();
    assert_eq!((outcome.accepted, outcome.rejected), (6, 2));
}

#[test]
fn a_line_longer_than_the_byte_budget_is_rejected() {
    let long = format!(
        r#"{{"id":1,"kind":"view","user":"a","note":"{}"}}"#,
        "x".repeat(200)
    );
    let config = Config {
        budget_bytes: 100,
        ..Config::default()
    };
    let outcome = whole_run(&format!("{long}\n{KNOWN}"), 1, config);
    assert_eq!((outcome.accepted, outcome.rejected), (6, 4));
    assert_eq!(
        outcome.rejects[0].reason,
        format!(
            "{} bytes, more than a stage's byte budget of 100",
            long.len()
        )
    );
}

/// Every stage's mailbox holds about one line's bytes, the sink's 8 effects, and the sink (the last stage) yields to the
/// other tasks ten times before each effect it takes: the stages back up to the parse
/// stage's byte budget, and the feeder waits there for bytes. The outcome is the same.
#[test]
fn tight_budgets_and_a_slow_sink_hold_back_the_feeder_and_change_nothing() {
    let text = generated(5, 300, Mix::Train);
    let longest = text.lines().map(str::len).max().unwrap();
    let config = Config {
        capacity: 64,
        budget_bytes: longest,
        window: 8,
    };
    let expected = whole_run(&text, 1, Config::default());

    let mut pipeline = Pipeline::start(config);
    let mut feed = feed(&text);
    let records = feed.len() as u64;
    let sent = Arc::new(AtomicU64::new(0));
    // The feeder: every record, as fast as the parse stage's mailbox admits it.
    let feeder = {
        let input = pipeline.input.clone();
        let sent = Arc::clone(&sent);
        let messages: Vec<_> = (0..records).map(|_| feed.next().1).collect();
        pipeline.rt.spawn(async move {
            for msg in messages {
                input.send(msg).await.expect("the parse stage is alive");
                sent.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let Pipeline {
        input,
        effects,
        sink,
        rt,
        ..
    } = &mut pipeline;
    let (max_bytes, max_slots, max_in_flight) = rt.block_on(async {
        let (mut max_bytes, mut max_slots, mut max_in_flight) = (0, 0, 0);
        for done in 0..records {
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            let stats = input.pool_stats();
            max_bytes = max_bytes.max(stats.bytes_in_use);
            max_slots = max_slots.max(stats.slots_in_use);
            max_in_flight = max_in_flight.max(sent.load(Ordering::Relaxed) - done);
            sink.fold(effects.recv().await.expect("an effect per record"));
        }
        feeder.await.expect("the feeder ran to the end");
        (max_bytes, max_slots, max_in_flight)
    });
    assert_eq!(pipeline.finish(), expected);

    // Bytes, not count, bound the parse stage's mailbox: it filled to within a line of its
    // budget while most of its slots stayed free.
    assert!(
        max_bytes <= longest && max_bytes * 2 > longest,
        "{max_bytes} of {longest}"
    );
    assert!(max_slots < config.capacity / 4, "{max_slots}");
    // The feeder was held back: never more in the pipeline than its mailboxes hold (the
    // sink's 8, a few records per stage, one in each stage's hands), far from all 300.
    assert!(max_in_flight < 50, "{max_in_flight} of {records}");
}
