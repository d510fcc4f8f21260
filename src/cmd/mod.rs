//! One module per subcommand: plan (validate flags against the machine), run,
//! render. Each returns the process exit code.

pub mod bench;
pub mod compare;
pub mod crosscheck;
pub mod doctor;
pub mod model;
pub mod report;
pub mod reproduce;
pub mod runs;
pub mod show;
pub mod sweep;
