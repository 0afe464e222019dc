//! Foundations every layer stands on: running external commands, writing files atomically,
//! and the list of the pipeline's stages.

pub mod exec;
pub mod fsx;
pub mod stages;
