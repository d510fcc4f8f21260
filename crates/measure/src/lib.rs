//! Measurement on the running kernel: phases (prepare, warm up, calibrate,
//! sample, teardown), the workload syscall sequences, and result shapes.

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_kernel as kernel;
use ptelab_record as record;
use ptelab_workload as workload;

pub mod marker;
pub mod mremap;
pub mod ops;
pub mod probe;
pub mod reclaim;
pub mod runner;
pub mod session;
