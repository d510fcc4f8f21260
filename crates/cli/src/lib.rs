//! The command line: its definition (`flags`, clap), the values typed at
//! the flags (`values`), and the validated plan of a measurement (`plan`).

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_error as error;
use ptelab_guest as guest;
use ptelab_kernel as kernel;
use ptelab_measure as measure;
use ptelab_record as record;
use ptelab_store as store;
use ptelab_text as text;
use ptelab_workload as workload;

pub mod bisect;
pub mod cluster;
pub mod flags;
pub mod guest_command;
pub mod kernels;
pub mod patch;
pub mod plan;
pub mod values;
pub mod vm;
