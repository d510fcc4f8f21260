//! The text toolkit every renderer shares: number, size and duration
//! formatting ([`format`]), one table with plain-text, Markdown and HTML
//! backends ([`table`]), and secrets masked out of stored text ([`redact`]). It sits below every layer (it imports only the
//! workload layer's size format), so the kernel, cli and crosscheck layers
//! print sizes and tables the same way as `report`.

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_workload as workload;

pub mod format;
pub mod nearest;
pub mod redact;
pub mod table;
