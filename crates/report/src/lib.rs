//! Renderers: pure functions from results (or view models) to text. Number
//! formatting and tables come from [`crate::text`], shared with every layer.

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_analysis as analysis;
use ptelab_record as record;
use ptelab_store as store;
use ptelab_text as text;
#[cfg(test)]
use ptelab_workload as workload;

pub mod compare;
pub mod html;
pub mod json;
pub mod markdown;
pub mod mechanism;
pub mod phrase;
pub mod plot;
pub mod view;
