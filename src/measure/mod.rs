//! Measurement on the running kernel: phases (prepare, warm up, calibrate,
//! sample, teardown), the workload syscall sequences, and result shapes.

#[cfg(ptelab_wip)]
pub mod ops;
pub mod result;
#[cfg(ptelab_wip)]
pub mod runner;
#[cfg(ptelab_wip)]
pub mod session;
