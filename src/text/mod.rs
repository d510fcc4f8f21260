//! The text toolkit every renderer shares: number, size and duration
//! formatting ([`format`]) and one table with plain-text, Markdown and HTML
//! backends ([`table`]). It sits below every layer (it imports only the
//! workload layer's size format), so the kernel, cli and crosscheck layers
//! print sizes and tables the same way as `report`.

pub mod format;
pub mod nearest;
pub mod table;
