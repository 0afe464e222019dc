//! The measurement layer: workloads as processes and the protocol that times them. One
//! lockstep session (`lockstep.rs`) runs every arm as a live process taking turns on one
//! core; the arms themselves are the workload's own executable, a whole-process arm
//! (`process_arm.rs`) or a service arm (`service_arm.rs`, over `service.rs`); the schedule
//! (`schedule.rs`) runs sessions until the stopping rule is satisfied and records how each
//! comparison stopped (`stops.rs`). Callgrind's instruction counts and the comparator rows
//! (C++, Go) are measured here too.

pub mod arms;
pub mod callgrind;
pub mod comparators;
pub mod instructions;
pub mod lockstep;
pub mod machine;
pub mod process_arm;
pub mod program;
pub mod progress;
pub mod schedule;
pub mod service;
pub mod service_arm;
pub mod service_driver;
pub mod service_port;
pub mod session;
pub mod stops;
pub mod threads;

pub use arms::{AB_NEW, BASELINE, BASELINE_AGAIN, MeasuredArm, arms, layout_arm, layout_arms_of};
pub use progress::{Group, groups};
pub use schedule::{run_groups, run_lockstep, session_seed};
pub use stops::{ComparisonStop, Role, StopReason, Stopping, spend};
