//! Renderers: pure functions from results (or view models) to text. Number
//! formatting and tables come from [`crate::text`], shared with every layer.

pub mod cells;
pub mod compare;
pub mod html;
pub mod json;
pub mod markdown;
pub mod mechanism;
pub mod phrase;
pub mod plot;
pub mod view;
