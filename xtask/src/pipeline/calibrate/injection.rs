//! How `calibrate` puts a known cost into a workload's arms and reads its size back: an
//! in-process arm's `--inject-ns`, or a server's `--spin-ns` sized by what it spent.

use crate::config::Measure;
use crate::measure::session::{Batch, Session};
use crate::measure::{BASELINE, MeasuredArm};
use crate::toolchain::build::Built;
use stats::median;

/// The name of the injected arm.
pub const INJECTED: &str = "release+inject";

/// How a known cost is put into a workload's arms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Injection {
    /// `mty-bench --inject-ns N`: N ns added to every measured round trip, timed by the arm.
    RoundTrip,
    /// The server's `--spin-ns N`: a fixed amount of work of about N ns of CPU added to every
    /// request it handles.
    ServerCpu,
}

impl Injection {
    pub(super) fn of(m: &Measure, workload: &str) -> Injection {
        match m
            .workloads
            .iter()
            .find(|w| w.name == workload)
            .map(|w| w.mode)
        {
            Some(crate::config::Mode::Service) => Injection::ServerCpu,
            _ => Injection::RoundTrip,
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Injection::RoundTrip => "--inject-ns",
            Injection::ServerCpu => "--spin-ns",
        }
    }

    /// The figure the injection is sized by.
    pub(super) fn figure(self) -> &'static str {
        match self {
            Injection::RoundTrip => "median",
            Injection::ServerCpu => "server CPU per request",
        }
    }

    /// The injected cost's share of release's figure in one round, in %.
    pub(super) fn round_pct(self, base: &Batch, injected: &Batch, n: u64) -> Option<f64> {
        match self {
            Injection::RoundTrip => {
                Some(100.0 * injected.inject_ns.unwrap_or(0.0) / base.median_ns)
            }
            // The spin as the server timed it (`x-spin-ns`), less release's (N = 0: the
            // clock's own cost); N where the driver did not report it.
            Injection::ServerCpu => {
                let spent = match (injected.inject_ns, base.inject_ns) {
                    (Some(i), Some(b)) => i - b,
                    _ => n as f64,
                };
                Some(100.0 * spent / base.cpu_per_request_ns?)
            }
        }
    }
}

/// `nominal` rescaled so that what it spent (`spent`, in %) would have been `target`; as it is
/// where nothing was spent (no report, or a probe too noisy to see it).
pub(super) fn scaled(nominal: u64, target: f64, spent: f64) -> u64 {
    if spent > 0.0 {
        // At most four times up or down a probe: one disturbed probe cannot throw it far.
        (nominal as f64 * (target / spent).clamp(0.25, 4.0))
            .round()
            .max(1.0) as u64
    } else {
        nominal
    }
}

/// A service workload driven by mty-loadgen, asked to sum the server's `x-spin-ns` over each
/// turn's window (`--sum-header`): the injected size as spent, not as timed at start-up.
/// Another driver, or another injection, is left as it is (then the size is N).
pub(super) fn asks_for_the_spin(
    mut w: crate::config::Workload,
    injection: Injection,
) -> crate::config::Workload {
    if injection != Injection::ServerCpu {
        return w;
    }
    if let Some(driver) = w.service.as_mut().map(|s| &mut s.driver)
        && driver
            .first()
            .and_then(|p| std::path::Path::new(p).file_name())
            .is_some_and(|n| n == "mty-loadgen")
        && !driver.iter().any(|a| a == "--sum-header")
    {
        driver.extend(["--sum-header".to_string(), "x-spin-ns".to_string()]);
    }
    w
}

/// A release arm with the injection's flag and N. Every arm of a row carries the flag, release
/// and the A/A arm with 0 written as wide as N. An arm's arguments alone move it (they are
/// copied to its heap), so all three must have the same arguments but the number.
pub(super) fn arm(
    injection: Injection,
    name: &str,
    build: &Built,
    n: u64,
    width: usize,
) -> MeasuredArm {
    MeasuredArm {
        name: name.to_string(),
        exe: build.exe.clone(),
        extra: vec![injection.flag().into(), format!("{n:0width$}")],
    }
}

/// The injected cost over release's figure of the same round, in %: the median over rounds
/// within a session, then over sessions (0 when nothing was injected).
pub(super) fn injected_pct(sessions: &[Session], injection: Injection, n: u64) -> f64 {
    let per_session: Vec<f64> = sessions
        .iter()
        .filter_map(|s| {
            let (base, inj) = (s.arm(BASELINE)?, s.arm(INJECTED)?);
            let rounds: Vec<f64> = base
                .iter()
                .zip(inj)
                .filter_map(|(b, i)| injection.round_pct(b, i, n))
                .collect();
            median(&rounds)
        })
        .collect();
    median(&per_session).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service's injected size is the spin the server reported, less release's (the clock's
    /// own cost), over release's CPU per request; without reports, N.
    #[test]
    fn a_services_injected_size_is_the_spin_as_spent() {
        let with = |cpu: f64, inject: Option<f64>| Batch {
            cpu_per_request_ns: Some(cpu),
            inject_ns: inject,
            ..crate::testing::fixtures::batch(1.0)
        };
        let pct = |b: &Batch, i: &Batch| Injection::ServerCpu.round_pct(b, i, 100).unwrap();
        assert_eq!(
            pct(&with(10_000.0, Some(30.0)), &with(10_300.0, Some(230.0))),
            2.0
        );
        assert_eq!(pct(&with(10_000.0, None), &with(10_300.0, None)), 1.0);
    }

    #[test]
    fn a_spin_is_scaled_by_what_it_spent() {
        assert_eq!(scaled(128, 1.0, 2.5), 51);
        assert_eq!(scaled(128, 1.0, 0.0), 128);
        assert_eq!(scaled(1, 1.0, 50.0), 1);
        assert_eq!(scaled(100, 1.0, 100.0), 25);
    }

    /// mty-loadgen is asked for the server's `x-spin-ns` once; another driver is left alone.
    #[test]
    fn the_driver_is_asked_for_the_spin_when_it_is_mty_loadgen() {
        let service = |driver: &[&str]| crate::config::Workload {
            mode: crate::config::Mode::Service,
            service: Some(crate::config::Service {
                driver: driver.iter().map(|s| s.to_string()).collect(),
                ready_line: None,
                ready_timeout_secs: None,
                stop_timeout_secs: None,
                keep_core_awake: None,
                persistent_driver: None,
            }),
            ..crate::testing::fixtures::measure_config().workloads[0].clone()
        };
        let driver = |w: crate::config::Workload| w.service.unwrap().driver.join(" ");
        let w = asks_for_the_spin(
            service(&["/x/mty-loadgen", "--rate", "10"]),
            Injection::ServerCpu,
        );
        assert_eq!(
            driver(w.clone()),
            "/x/mty-loadgen --rate 10 --sum-header x-spin-ns"
        );
        assert_eq!(
            driver(asks_for_the_spin(w, Injection::ServerCpu)),
            "/x/mty-loadgen --rate 10 --sum-header x-spin-ns"
        );
        assert_eq!(
            driver(asks_for_the_spin(
                service(&["wrk", "-R", "10"]),
                Injection::ServerCpu
            )),
            "wrk -R 10"
        );
    }
}
