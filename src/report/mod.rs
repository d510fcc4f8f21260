//! Renderers: pure functions from results (or view models) to text.

pub mod cells;
pub mod compare;
