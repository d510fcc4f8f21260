//! Measurement on the running kernel: phases (prepare, warm up, calibrate,
//! sample, teardown), the workload syscall sequences, and result shapes.

pub mod marker;
pub mod mremap;
pub mod ops;
pub mod probe;
pub mod reclaim;
pub mod runner;
pub mod session;
