//! Renderers: pure functions from results (or view models) to text.

pub mod cells;
pub mod compare;
pub mod html;
pub mod markdown;
pub mod plot;
pub mod view;
