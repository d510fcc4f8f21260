//! Outlier labels. Two classic rules, both robust (built from the median and
//! quartiles, not the mean), and both only *label*: ptelab keeps every sample
//! and reports the share of outliers as a warning, as hyperfine and criterion
//! do. Dropping outliers would hide exactly the interference (an interrupt, a
//! migration, a compaction pass) a kernel developer wants to know about.

pub mod mad;
pub mod tukey;
