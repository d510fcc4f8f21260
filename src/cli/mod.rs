//! Command-line definition (`flags`) and the dispatch to each command.

pub mod bisect;
pub mod cluster;
pub mod flags;
pub mod guest;
pub mod kernel;
pub mod plan;
pub mod values;
pub mod vm;
