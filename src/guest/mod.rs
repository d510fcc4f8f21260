//! Guest kernels: which kernel a guest boots (specs), where Debian's prebuilt
//! kernels come from (the archive, through apt with a private state), and the
//! local cache they are kept in, and running a command in a QEMU guest of
//! such a kernel (initramfs, qemu, init, frame, run). See docs/guests.md.
//!
//! This layer runs external tools (`apt-get`, `apt-cache`, `dpkg-deb`) and
//! writes only below the user's cache directory; it never touches the
//! system's apt configuration or state.

pub mod binary;
#[cfg(test)]
mod boot_tests;
pub mod cache;
pub mod debian;
pub mod disk;
pub mod fetch;
pub mod frame;
pub mod image;
pub mod init;
pub mod initramfs;
pub mod plugin;
pub mod profile;
pub mod qemu;
pub mod run;
pub mod sources;
pub mod spec;

pub use spec::{Arch, KernelSpec};
