//! rustc's PGO warnings, parsed from the optimised build's diagnostics: the proof that a
//! profile applied is the ABSENCE of "no profile data" and "hash mismatch" warnings for the
//! code that matters. Takes strings, not processes, so it is tested on real rustc output.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One PGO-related diagnostic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgoWarning {
    /// `no profile data available for function <sym>` (with `-pgo-warn-missing-function`).
    Missing(String),
    /// `function control flow change detected (hash mismatch) <sym>`: stale profile.
    HashMismatch(String),
    /// The profile itself was not usable (e.g. `invalid instrumentation profile data (bad
    /// magic)`: rustc then builds WITHOUT PGO and only warns).
    Unusable(String),
}

/// Classifies a diagnostic message, or `None` when it is not about PGO.
pub fn parse_warning(message: &str) -> Option<PgoWarning> {
    if let Some(sym) = symbol_after(message, "no profile data available for function ") {
        return Some(PgoWarning::Missing(sym));
    }
    if let Some(sym) = symbol_after(message, "(hash mismatch) ") {
        return Some(PgoWarning::HashMismatch(sym));
    }
    if message.contains("instrumentation profile")
        || message.contains("profile data may be corrupted")
    {
        return Some(PgoWarning::Unusable(
            message.lines().next().unwrap_or(message).trim().to_string(),
        ));
    }
    None
}

fn symbol_after(message: &str, marker: &str) -> Option<String> {
    let at = message.find(marker)?;
    let sym = message[at + marker.len()..].split_whitespace().next()?;
    Some(sym.to_string())
}

/// A symbol demangled without its hash: `tokio::sync::mpsc::list::Rx<T>::pop`.
pub fn demangle(symbol: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(symbol))
}

/// The crate a demangled path belongs to: its first path segment, looking through `<`.
pub fn crate_of(demangled: &str) -> String {
    let start = demangled.trim_start_matches(['<', '&', '*', ' ']);
    let name: String = start
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if name.is_empty() {
        "?".to_string()
    } else {
        name
    }
}

/// Every PGO warning of one build, counted per crate, and the verdict of the apply check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyReport {
    /// crate -> (functions without profile data, functions with a hash mismatch)
    pub per_crate: BTreeMap<String, CrateCounts>,
    pub missing_total: usize,
    pub mismatch_total: usize,
    /// Demangled names matching `apply_check.required` that lack profile data or mismatch.
    pub required_violations: Vec<String>,
    /// How many of `required_violations` are hash mismatches (a stale profile), not missing.
    pub required_mismatched: usize,
    /// Messages saying the profile itself was unusable.
    pub unusable: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrateCounts {
    pub missing: usize,
    pub mismatch: usize,
}

impl ApplyReport {
    /// Builds the report from diagnostic messages, checking `required` path prefixes.
    pub fn from_messages<'a>(
        messages: impl IntoIterator<Item = &'a str>,
        required: &[String],
    ) -> Self {
        let mut report = ApplyReport::default();
        for message in messages {
            let (sym, missing) = match parse_warning(message) {
                Some(PgoWarning::Missing(sym)) => (sym, true),
                Some(PgoWarning::HashMismatch(sym)) => (sym, false),
                Some(PgoWarning::Unusable(text)) => {
                    report.unusable.push(text);
                    continue;
                }
                None => continue,
            };
            let name = demangle(&sym);
            let counts = report.per_crate.entry(crate_of(&name)).or_default();
            if missing {
                counts.missing += 1;
                report.missing_total += 1;
            } else {
                counts.mismatch += 1;
                report.mismatch_total += 1;
            }
            if required.iter().any(|r| name.contains(r.as_str()))
                && !report.required_violations.contains(&name)
            {
                report.required_violations.push(name);
                if !missing {
                    report.required_mismatched += 1;
                }
            }
        }
        report.required_violations.sort();
        report
    }

    /// Whether the profile applied to everything `required` names.
    pub fn applied(&self) -> bool {
        self.required_violations.is_empty() && self.unusable.is_empty()
    }

    /// Whether it applied but for functions whose profile is stale (hash mismatches): what
    /// `--allow-stale` accepts.
    pub fn applied_but_stale(&self) -> bool {
        self.unusable.is_empty() && self.required_violations.len() == self.required_mismatched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real rustc 1.95 / LLVM 22 output: mty-bench trained under `--release` and optimised
    // under `--profile release` with the profile of another cargo profile (the trap), and
    // the forms FACTS.md recorded for a hash mismatch and for a .profraw passed as the profile.
    const MISSING_OWN: &str = "mty_bench.c6446f32c9c36522-cgu.08: no profile data available for function _ZN9mty_bench5train7payload17h68a357ac4f8cb2ccE Hash = 656349720324888924 up to 0 count discarded";
    const MISSING_TOKIO: &str = "mty_bench.c6446f32c9c36522-cgu.12: no profile data available for function _ZN5tokio4sync4mpsc7bounded15Permit$LT$T$GT$4send17h8a7911bd9e3a946cE Hash = 742261418966908927 up to 0 count discarded";
    const MISSING_RUNTIME: &str = "mty_bench.c6446f32c9c36522-cgu.00: no profile data available for function _ZN11mty_runtime4pool8SlabPool9try_admit17h278aa27f94a13a0fE Hash = 927205938558261884 up to 0 count discarded";
    const MISSING_STD_IMPL: &str = "mty_bench.c6446f32c9c36522-cgu.15: no profile data available for function _ZN77_$LT$alloc..raw_vec..RawVec$LT$T$C$A$GT$$u20$as$u20$core..ops..drop..Drop$GT$4drop17h040b5eb0efa1ec35E Hash = 784007056844089447 up to 0 count discarded";
    const MISMATCH: &str = "mty_runtime.fe3aaa880eb1c6c3-cgu.0: function control flow change detected (hash mismatch) _ZN11mty_runtime4pool8SlabPool5close17h7c3331594a07024dE Hash = 742261418966908927 up to 7 count discarded";
    const BAD_MAGIC: &str = "/tmp/x.profraw: invalid instrumentation profile data (bad magic)";

    #[test]
    fn classifies_real_warnings() {
        assert_eq!(
            parse_warning(MISSING_OWN),
            Some(PgoWarning::Missing(
                "_ZN9mty_bench5train7payload17h68a357ac4f8cb2ccE".into()
            ))
        );
        assert!(
            matches!(parse_warning(MISMATCH), Some(PgoWarning::HashMismatch(s)) if s.starts_with("_ZN11mty_runtime"))
        );
        assert!(matches!(
            parse_warning(BAD_MAGIC),
            Some(PgoWarning::Unusable(_))
        ));
        assert_eq!(parse_warning("unused variable: `x`"), None);
    }

    #[test]
    fn demangles_and_finds_the_crate() {
        assert_eq!(
            demangle("_ZN9mty_bench5train7payload17h68a357ac4f8cb2ccE"),
            "mty_bench::train::payload"
        );
        let impl_name = demangle(
            "_ZN77_$LT$alloc..raw_vec..RawVec$LT$T$C$A$GT$$u20$as$u20$core..ops..drop..Drop$GT$4drop17h040b5eb0efa1ec35E",
        );
        assert_eq!(
            impl_name,
            "<alloc::raw_vec::RawVec<T,A> as core::ops::drop::Drop>::drop"
        );
        assert_eq!(crate_of(&impl_name), "alloc");
        assert_eq!(crate_of("tokio::sync::mpsc::list::Rx<T>::pop"), "tokio");
    }

    #[test]
    fn the_apply_check_fails_on_required_code_and_counts_the_rest() {
        let required = vec![
            "mty_runtime::".to_string(),
            "tokio::sync::mpsc::".to_string(),
        ];
        let report = ApplyReport::from_messages(
            [
                MISSING_OWN,
                MISSING_TOKIO,
                MISSING_RUNTIME,
                MISSING_STD_IMPL,
                MISMATCH,
                "unrelated",
            ],
            &required,
        );
        assert_eq!(report.missing_total, 4);
        assert_eq!(report.mismatch_total, 1);
        assert_eq!(
            report.per_crate["mty_bench"],
            CrateCounts {
                missing: 1,
                mismatch: 0
            }
        );
        assert_eq!(
            report.per_crate["mty_runtime"],
            CrateCounts {
                missing: 1,
                mismatch: 1
            }
        );
        assert_eq!(
            report.per_crate["alloc"],
            CrateCounts {
                missing: 1,
                mismatch: 0
            }
        );
        assert_eq!(
            report.per_crate["tokio"],
            CrateCounts {
                missing: 1,
                mismatch: 0
            }
        );
        assert_eq!(
            report.required_violations,
            vec![
                "mty_runtime::pool::SlabPool::close",
                "mty_runtime::pool::SlabPool::try_admit",
                "tokio::sync::mpsc::bounded::Permit<T>::send",
            ]
        );
        assert!(!report.applied());
        assert_eq!(report.required_mismatched, 1);
        assert!(
            !report.applied_but_stale(),
            "missing functions are not staleness"
        );
        let stale_only = ApplyReport::from_messages([MISMATCH], &required);
        assert!(!stale_only.applied() && stale_only.applied_but_stale());
        // Warnings only for code outside `required`: counted, but the profile applied.
        let own_only = ApplyReport::from_messages([MISSING_OWN], &required);
        assert!(own_only.applied());
        assert_eq!(own_only.missing_total, 1);
        assert!(!ApplyReport::from_messages([BAD_MAGIC], &required).applied());
    }
}
