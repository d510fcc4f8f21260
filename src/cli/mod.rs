//! Command-line definition (`flags`) and the dispatch to each command.

pub mod flags;
#[cfg(ptelab_wip)]
pub mod plan;
