//! Everything that touches the running kernel: THP knobs, host facts,
//! regions with a requested folio layout, layout verification, perf, memory
//! cgroups, swapfiles, the small /proc readers (`procfs`) the rest share, and
//! the allocator that puts `ptelab model`'s large arrays in huge pages.
//! `ptelab doctor` checks this machine by calling these same functions.

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_error as error;
use ptelab_record as record;
use ptelab_text as text;
use ptelab_workload as workload;

pub mod cgroup;
pub mod files;
pub mod host;
pub mod hugealloc;
pub mod layout;
pub mod mmenv;
pub mod procfs;
pub mod region;
pub mod signals;
pub mod swap;
pub mod thp;
pub mod tlbtrace;
