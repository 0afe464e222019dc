//! The toolchain layer: the tools the pipeline drives (rustc and a version-matched
//! llvm-profdata, cargo, llvm-bolt, the linker) and what their outputs say, numbers and
//! strings in, values out.

pub mod bolt;
pub mod build;
pub mod cargo;
pub mod cost;
pub mod relink;
pub mod rustflags;
pub mod tools;
pub mod warnings;
