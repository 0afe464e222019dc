//! Profile insight, numbers in and numbers out: what a profile holds (its functions' counts
//! from `llvm-profdata merge --text`), how two profiles overlap (`llvm-profdata overlap`), and
//! which functions hot in a measured workload the training under-weights or never ran. The
//! stage that runs the tools is `pipeline/stage/insight.rs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::toolchain::warnings::{crate_of, demangle};

/// One function of a profile: its symbol as the profile names it (unique: closures and
/// monomorphised copies demangle alike, so two profiles of one binary are matched on this),
/// its demangled name, the sum of its counters and the counters themselves.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionCount {
    pub symbol: String,
    pub name: String,
    pub count: u64,
    pub counters: Vec<u64>,
}

/// The functions of a profile in LLVM's text format (`llvm-profdata merge --text`): records
/// separated by blank lines, each a (possibly file-qualified) mangled name, its hash, its
/// counter count and counter values, then optional value-profile data.
pub fn parse_text_profile(text: &str) -> Result<Vec<FunctionCount>, String> {
    let mut out = Vec::new();
    for record in text.split("\n\n") {
        let mut lines = record.lines().filter(|l| !l.trim().is_empty());
        let Some(mut name) = lines.next() else {
            continue;
        };
        // The header: `# IR level Instrumentation Flag` and `:ir` before the first record.
        while name.starts_with('#') || name.starts_with(':') {
            match lines.next() {
                Some(next) => name = next,
                None => break,
            }
        }
        if name.starts_with('#') || name.starts_with(':') {
            continue;
        }
        let rest: Vec<&str> = lines.collect();
        let field = |key: &str| rest.iter().position(|l| l.trim() == key);
        let (Some(n_at), Some(values_at)) = (field("# Num Counters:"), field("# Counter Values:"))
        else {
            return Err(format!("the record of `{name}` has no counters"));
        };
        let n: usize = rest
            .get(n_at + 1)
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| format!("the record of `{name}` has no counter count"))?;
        let mut count = 0u64;
        let mut counters = Vec::with_capacity(n);
        for i in 0..n {
            let v: u64 = rest
                .get(values_at + 1 + i)
                .and_then(|l| l.trim().parse().ok())
                .ok_or_else(|| {
                    format!("the record of `{name}` has fewer than {n} counter values")
                })?;
            count = count.saturating_add(v);
            counters.push(v);
        }
        // Local symbols come as `<file>;<symbol>`.
        let symbol = name.rsplit(';').next().unwrap_or(name);
        out.push(FunctionCount {
            symbol: name.to_string(),
            name: demangle(symbol),
            count,
            counters,
        });
    }
    Ok(out)
}

/// `Edge profile overlap: 53.795%` from `llvm-profdata overlap` (program level), in %.
pub fn parse_overlap(text: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.trim()
            .strip_prefix("Edge profile overlap:")?
            .trim()
            .trim_end_matches('%')
            .parse()
            .ok()
    })
}

/// A function's share of a profile's total count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionShare {
    pub name: String,
    pub krate: String,
    pub share_pct: f64,
}

/// A crate's share of a profile: its functions, how many ran, and their share of the count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrateShare {
    pub krate: String,
    pub functions: usize,
    pub nonzero: usize,
    pub share_pct: f64,
}

/// What a profile holds: its hottest functions, and every crate's share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contents {
    pub total_count: u64,
    pub functions: usize,
    pub top: Vec<FunctionShare>,
    /// Crates by share, largest first.
    pub crates: Vec<CrateShare>,
}

pub fn contents(functions: &[FunctionCount], top: usize) -> Contents {
    let total: u64 = functions.iter().map(|f| f.count).sum();
    let share = |c: u64| {
        if total == 0 {
            0.0
        } else {
            100.0 * c as f64 / total as f64
        }
    };
    let mut sorted: Vec<&FunctionCount> = functions.iter().collect();
    sorted.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
    let mut crates: BTreeMap<String, (usize, usize, u64)> = BTreeMap::new();
    for f in functions {
        let e = crates.entry(crate_of(&f.name)).or_default();
        e.0 += 1;
        e.1 += usize::from(f.count > 0);
        e.2 += f.count;
    }
    let mut crates: Vec<CrateShare> = crates
        .into_iter()
        .map(|(krate, (functions, nonzero, count))| CrateShare {
            krate,
            functions,
            nonzero,
            share_pct: share(count),
        })
        .collect();
    crates.sort_by(|a, b| b.share_pct.total_cmp(&a.share_pct));
    Contents {
        total_count: total,
        functions: functions.len(),
        top: sorted
            .iter()
            .take(top)
            .filter(|f| f.count > 0)
            .map(|f| FunctionShare {
                name: f.name.clone(),
                krate: crate_of(&f.name),
                share_pct: share(f.count),
            })
            .collect(),
        crates,
    }
}

/// A function hot in a measured workload, with its share there and in the training profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HotFunction {
    pub name: String,
    pub workload_share_pct: f64,
    pub training_share_pct: f64,
}

impl HotFunction {
    /// The training saw less than a tenth of this function's weight in the workload (or none).
    pub fn under_weighted(&self) -> bool {
        self.training_share_pct < self.workload_share_pct / 10.0
    }
}

/// The `top` hottest functions of `workload` with their shares in both profiles, and the
/// functions of the `required` paths that the workload ran and the training never did.
pub fn compare_hot(
    workload: &[FunctionCount],
    training: &[FunctionCount],
    required: &[String],
    top: usize,
) -> (Vec<HotFunction>, Vec<String>) {
    let total = |fs: &[FunctionCount]| fs.iter().map(|f| f.count).sum::<u64>().max(1) as f64;
    let (wt, tt) = (total(workload), total(training));
    let in_training = by_symbol(training);
    let trained = |f: &FunctionCount| in_training.get(f.symbol.as_str()).copied().unwrap_or(0);
    let mut hot: Vec<&FunctionCount> = workload.iter().filter(|f| f.count > 0).collect();
    hot.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
    let hot_functions = hot
        .iter()
        .take(top)
        .map(|f| HotFunction {
            name: f.name.clone(),
            workload_share_pct: 100.0 * f.count as f64 / wt,
            training_share_pct: 100.0 * trained(f) as f64 / tt,
        })
        .collect();
    let never: Vec<String> = hot
        .iter()
        .filter(|f| trained(f) == 0 && required.iter().any(|r| f.name.contains(r.as_str())))
        .map(|f| f.name.clone())
        .collect();
    (hot_functions, never)
}

/// The share (%) of `workload`'s count in functions the training never ran: the part of the
/// measured work PGO lays out blind (as cold).
pub fn untrained_share(workload: &[FunctionCount], training: &[FunctionCount]) -> f64 {
    let trained = by_symbol(training);
    let total: u64 = workload.iter().map(|f| f.count).sum();
    let blind: u64 = workload
        .iter()
        .filter(|f| trained.get(f.symbol.as_str()).copied().unwrap_or(0) == 0)
        .map(|f| f.count)
        .sum();
    if total == 0 {
        0.0
    } else {
        100.0 * blind as f64 / total as f64
    }
}

/// LLVM's hot count of a profile: the smallest counter among the largest that together hold
/// 99 % of the profile's count (`ProfileSummary`'s cutoff 990000). A block at or above it is
/// hot to the optimiser; far below it, the optimiser lays the code out as cold.
pub fn hot_threshold(functions: &[FunctionCount]) -> u64 {
    let mut all: Vec<u64> = functions
        .iter()
        .flat_map(|f| f.counters.iter().copied())
        .filter(|c| *c > 0)
        .collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    let total: u128 = all.iter().map(|c| *c as u128).sum();
    let mut sum = 0u128;
    for c in &all {
        sum += *c as u128;
        if sum * 100 >= total * 99 {
            return *c;
        }
    }
    all.last().copied().unwrap_or(0)
}

/// How well a training profile stands for a workload's own, in what PGO reads of it: whether
/// the training weighs each of the workload's hot blocks as the workload does, relative to
/// the block's function. PGO lays a function out, splits it and inlines along its blocks'
/// counts relative to one another; a block the training runs at an eighth of the workload's
/// proportion is laid out as the rare path it is not. Each in % of the workload's count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    /// The workload's count on counters the training calls hot (its 99 % hot count).
    pub hot_pct: f64,
    /// The workload's count on its hot blocks (a tenth of their function's hottest counter or
    /// more) that the training weighs alike: in full down to half the workload's proportion,
    /// none at an eighth or less, a function the training never ran none. The number the
    /// warning is set on: it tells a failed training, not the better of two good ones
    /// (docs/findings.md).
    pub score_pct: f64,
    /// The functions that lose most of the score, largest loss first (at most 5).
    pub lacking: Vec<Lacking>,
}

/// Bumped when [`agreement`] changes, so that stages caching it run again.
pub const AGREEMENT_VERSION: &str = "2: hot-block proportions";

/// A block is hot in its function at this share of the function's hottest counter or more.
const HOT_BLOCK: f64 = 0.1;

/// A function of the workload that the training does not stand for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lacking {
    pub name: String,
    /// Its symbol in the profile (closures and copies demangle alike).
    #[serde(default)]
    pub symbol: String,
    /// Its share of the workload's count, %.
    pub workload_share_pct: f64,
    /// The score it loses, in points.
    pub loss_pct: f64,
}

/// The share of a hot block's count lost when the training weighs it at `ratio` times the
/// workload's proportion: none down to a half, all at an eighth, log-linear between.
fn block_loss(ratio: f64) -> f64 {
    if ratio <= 0.0 {
        1.0
    } else {
        ((-ratio.log2()) - 1.0).clamp(0.0, 2.0) / 2.0
    }
}

/// The count of the workload's function `f` lost when a training runs it as `trained` does
/// (its hot blocks weighed against their function; all of it when never trained).
pub fn function_loss(f: &FunctionCount, trained: Option<&FunctionCount>) -> f64 {
    let Some(t) = trained.filter(|t| t.count > 0 && t.counters.len() == f.counters.len()) else {
        return f.count as f64;
    };
    let top = |c: &[u64]| c.iter().copied().max().unwrap_or(0).max(1) as f64;
    let (wmax, tmax) = (top(&f.counters), top(&t.counters));
    f.counters
        .iter()
        .zip(&t.counters)
        .filter(|(wc, _)| **wc as f64 >= HOT_BLOCK * wmax)
        .map(|(wc, tc)| {
            let ratio = (*tc as f64 / tmax) / (*wc as f64 / wmax);
            *wc as f64 * block_loss(ratio)
        })
        .sum()
}

/// The [`Agreement`] of `training` with `workload` (two profiles of one executable).
pub fn agreement(workload: &[FunctionCount], training: &[FunctionCount]) -> Agreement {
    let hot = hot_threshold(training).max(1);
    let by_symbol: BTreeMap<&str, &FunctionCount> =
        training.iter().map(|f| (f.symbol.as_str(), f)).collect();
    let total = workload.iter().map(|f| f.count).sum::<u64>().max(1) as f64;
    let (mut on_hot, mut lost) = (0u64, 0.0);
    let mut lacking = Vec::new();
    for f in workload.iter().filter(|f| f.count > 0) {
        let trained = by_symbol.get(f.symbol.as_str()).copied();
        if let Some(t) = trained.filter(|t| t.counters.len() == f.counters.len()) {
            on_hot += f
                .counters
                .iter()
                .zip(&t.counters)
                .filter(|(_, tc)| **tc >= hot)
                .map(|(wc, _)| *wc)
                .sum::<u64>();
        }
        let loss = function_loss(f, trained);
        lost += loss;
        lacking.push(Lacking {
            name: f.name.clone(),
            symbol: f.symbol.clone(),
            workload_share_pct: 100.0 * f.count as f64 / total,
            loss_pct: 100.0 * loss / total,
        });
    }
    lacking.sort_by(|a, b| b.loss_pct.total_cmp(&a.loss_pct));
    lacking.truncate(5);
    lacking.retain(|l| l.loss_pct >= 0.5);
    Agreement {
        hot_pct: 100.0 * on_hot as f64 / total,
        score_pct: 100.0 * (1.0 - lost / total),
        lacking,
    }
}

/// Profiles of one executable summed with weights, function by function (what llvm-profdata's
/// weighted merge makes of them, without running it): the tuner's candidate trainings.
pub fn weighted_sum(parts: &[(&[FunctionCount], u64)]) -> Vec<FunctionCount> {
    let mut out: Vec<FunctionCount> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for (functions, weight) in parts {
        for f in *functions {
            match index.get(&f.symbol) {
                Some(&i) if out[i].counters.len() == f.counters.len() => {
                    let o = &mut out[i];
                    for (a, b) in o.counters.iter_mut().zip(&f.counters) {
                        *a = a.saturating_add(b.saturating_mul(*weight));
                    }
                    o.count = o.count.saturating_add(f.count.saturating_mul(*weight));
                }
                Some(_) => {}
                None => {
                    index.insert(f.symbol.clone(), out.len());
                    out.push(FunctionCount {
                        count: f.count.saturating_mul(*weight),
                        counters: f
                            .counters
                            .iter()
                            .map(|c| c.saturating_mul(*weight))
                            .collect(),
                        ..f.clone()
                    });
                }
            }
        }
    }
    out
}

/// A function named by its symbol, with these counters (tests).
#[cfg(test)]
pub fn counted(symbol: &str, counters: &[u64]) -> FunctionCount {
    FunctionCount {
        symbol: symbol.into(),
        name: symbol.into(),
        count: counters.iter().sum(),
        counters: counters.to_vec(),
    }
}

/// Counts by symbol.
fn by_symbol(functions: &[FunctionCount]) -> BTreeMap<&str, u64> {
    let mut out: BTreeMap<&str, u64> = BTreeMap::new();
    for f in functions {
        *out.entry(f.symbol.as_str()).or_default() += f.count;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::callgrind::{parse_events, simulated};

    // Real output, kept as fixtures: `llvm-profdata merge --text` of a mty-bench profile
    // (LLVM 22.1.2-rust-1.95.0-stable, shortened to three records), `llvm-profdata overlap`
    // of the training profile and an `agent_send_latency` profile, and callgrind 3.19 with
    // `--branch-sim=yes --cache-sim=yes` on 2,000 messages.
    const TEXT: &str = "# IR level Instrumentation Flag
:ir
_ZN11mty_runtime4pool9PoolInner4lock17h916a1e8cbf483f1bE
# Func Hash:
742261418966908927
# Num Counters:
2
# Counter Values:
2172977
10

tokio.8a2182543107452e-cgu.0;_ZN5tokio7runtime4park11wake_by_ref17hf0e7cc6db88809bcE
# Func Hash:
742261418966908927
# Num Counters:
1
# Counter Values:
0

_ZN103_$LT$tokio..runtime..blocking..schedule..BlockingSchedule$u20$as$u20$tokio..runtime..task..Schedule$GT$8schedule17hd5bda08304612a3aE
# Func Hash:
515008862426419385
# Num Counters:
3
# Counter Values:
0
7
3
# Num Value Kinds:
0
";

    const OVERLAP: &str = "Profile overlap information for base_profile: pgo-data/merged-58347433420225b5.profdata and test_profile: /tmp/wl/w.profdata
Program level:
  # of functions overlap: 1177
  Edge profile overlap: 53.795%
  Edge profile base count sum: 144081471
  Edge profile test count sum: 1718771
  IndirectCall profile overlap: 0.764%
";

    const CALLGRIND: &str =
        "==4975== Events    : Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim
==4975== Collected : 4008536 1225001 920200 2638 68794 4921 2469 1919 4679 585541 6673 22080 719
==4975== 
==4975== I   refs:      4,008,536
";

    #[test]
    fn parses_a_text_profile_into_demangled_function_counts() {
        let f = parse_text_profile(TEXT).unwrap();
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].name, "mty_runtime::pool::PoolInner::lock");
        assert_eq!(f[0].count, 2172987);
        assert_eq!(
            f[1].name, "tokio::runtime::park::wake_by_ref",
            "file prefix dropped"
        );
        assert_eq!(
            f[2].count, 10,
            "value-profile data after the counters is skipped"
        );
        assert!(
            parse_text_profile("f\n# Num Counters:\n2\n# Counter Values:\n1\n")
                .unwrap_err()
                .contains("fewer than 2 counter values")
        );
    }

    #[test]
    fn contents_rank_functions_and_crates_by_share() {
        let c = contents(&parse_text_profile(TEXT).unwrap(), 10);
        assert_eq!(c.total_count, 2172997);
        assert_eq!(c.top.len(), 2, "functions that never ran are not 'hot'");
        assert_eq!(c.top[0].krate, "mty_runtime");
        assert!((c.top[0].share_pct - 100.0 * 2172987.0 / 2172997.0).abs() < 1e-9);
        let tokio = c.crates.iter().find(|k| k.krate == "tokio").unwrap();
        assert_eq!((tokio.functions, tokio.nonzero), (2, 1));
    }

    #[test]
    fn parses_overlap_and_callgrind_events() {
        assert_eq!(parse_overlap(OVERLAP), Some(53.795));
        assert_eq!(parse_overlap("nothing"), None);
        let e = parse_events(CALLGRIND).unwrap();
        assert_eq!((e["Ir"], e["Bcm"], e["Bim"]), (4008536, 6673, 719));
        let doubled: BTreeMap<String, u64> = e.iter().map(|(k, v)| (k.clone(), v * 2)).collect();
        let s = simulated(&e, &doubled, 2000);
        assert_eq!(s.cond_branches, 585541.0 / 2000.0);
        assert_eq!(s.d1_misses, (68794.0 + 4921.0) / 2000.0);
        assert_eq!(s.ll_misses, (2469.0 + 1919.0 + 4679.0) / 2000.0);
        assert_eq!(
            parse_events("==1== Events    : Ir Bc\n==1== Collected : 5\n"),
            None
        );
    }

    #[test]
    fn hot_functions_the_training_missed_are_named() {
        let f = |symbol: &str, name: &str, count| FunctionCount {
            symbol: symbol.into(),
            name: name.into(),
            count,
            counters: vec![count],
        };
        let w = vec![
            f("_ZN1s", "mty_runtime::mailbox::send", 90),
            f("_ZN1p", "tokio::sync::mpsc::list::Rx<T>::pop", 10),
            // Another closure that demangles like a trained one: matched by symbol, not name.
            f("_ZN1c2", "mty_bench::latency::mailbox::{{closure}}", 0),
        ];
        let t = vec![
            f("_ZN1s", "mty_runtime::mailbox::send", 1),
            f("_ZN1x", "serde::x", 999),
            f("_ZN1c1", "mty_bench::latency::mailbox::{{closure}}", 5),
        ];
        let (hot, never) = compare_hot(&w, &t, &["tokio::sync::mpsc::".into()], 5);
        assert_eq!(hot[0].name, "mty_runtime::mailbox::send");
        assert!((hot[0].training_share_pct - 100.0 / 1005.0).abs() < 1e-9);
        assert!(hot[0].under_weighted() && hot[1].under_weighted());
        assert_eq!(never, ["tokio::sync::mpsc::list::Rx<T>::pop"]);
        assert_eq!(untrained_share(&w, &t), 10.0);
        assert_eq!(hot.len(), 2, "functions the workload never ran are not hot");
        assert_eq!(untrained_share(&t, &t), 0.0);
    }

    #[test]
    fn the_hot_count_holds_99_percent_of_the_profile() {
        // 900 + 90 = 990 of 1000: 99 % reached at the counter of 90.
        let p = vec![counted("a", &[900, 5]), counted("b", &[90, 5, 0])];
        assert_eq!(hot_threshold(&p), 90);
        assert_eq!(hot_threshold(&[]), 0);
    }

    #[test]
    fn agreement_weighs_each_hot_block_against_its_function() {
        let w = vec![counted("f", &[100, 100, 5]), counted("g", &[100, 0])];
        // The same profile, scaled: full agreement.
        let same = vec![counted("f", &[1000, 1000, 50]), counted("g", &[1000, 0])];
        let a = agreement(&w, &same);
        assert!((a.score_pct - 100.0).abs() < 1e-9, "{a:?}");
        assert!(a.lacking.is_empty(), "{a:?}");
        // `f`'s second block at half the workload's proportion: no loss yet; its cold third
        // block (under a tenth of the hottest) is not weighed at all.
        let half = vec![counted("f", &[1000, 500, 0]), counted("g", &[1000, 0])];
        assert!((agreement(&w, &half).score_pct - 100.0).abs() < 1e-9);
        // At a quarter: half of that block's count lost (50 of 305); at an eighth, all of it.
        let quarter = vec![counted("f", &[1000, 250, 50]), counted("g", &[1000, 0])];
        let a = agreement(&w, &quarter);
        assert!(
            (a.score_pct - 100.0 * (1.0 - 50.0 / 305.0)).abs() < 1e-9,
            "{a:?}"
        );
        assert_eq!(a.lacking[0].name, "f");
        let eighth = vec![counted("f", &[1000, 125, 50]), counted("g", &[1000, 0])];
        let a = agreement(&w, &eighth);
        assert!(
            (a.score_pct - 100.0 * (1.0 - 100.0 / 305.0)).abs() < 1e-9,
            "{a:?}"
        );
        // Only relative weights count: `g` run rarely overall but in the same proportions.
        let rare_g = vec![counted("f", &[100_000, 100_000, 0]), counted("g", &[1, 0])];
        assert!((agreement(&w, &rare_g).score_pct - 100.0).abs() < 1e-9);
        // ... though LLVM's hot count is the training's: `g` is under it.
        assert!((agreement(&w, &rare_g).hot_pct - 200.0 / 305.0 * 100.0).abs() < 1e-9);
        // A function the training never ran, or ran in another build (other counters).
        let other = vec![counted("f", &[1, 2, 3, 4]), counted("g", &[1000, 0])];
        let a = agreement(&w, &other);
        assert!((a.score_pct - 100.0 * 100.0 / 305.0).abs() < 1e-9, "{a:?}");
    }

    #[test]
    fn a_weighted_sum_is_what_a_weighted_merge_makes() {
        let a = vec![counted("f", &[1, 2]), counted("g", &[3])];
        let b = vec![counted("f", &[10, 20]), counted("h", &[5])];
        let sum = weighted_sum(&[(&a, 3), (&b, 2)]);
        let by: BTreeMap<&str, &FunctionCount> =
            sum.iter().map(|f| (f.symbol.as_str(), f)).collect();
        assert_eq!(by["f"].counters, [23, 46]);
        assert_eq!(by["f"].count, 69);
        assert_eq!(by["g"].counters, [9]);
        assert_eq!(by["h"].counters, [10]);
    }
}
