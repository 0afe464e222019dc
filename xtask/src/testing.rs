//! Tests only: the fixtures several modules' tests share, and the one place a test skips for
//! a missing tool. Nothing here is compiled into `cargo xtask`.

pub mod fixtures;
pub mod optional;
