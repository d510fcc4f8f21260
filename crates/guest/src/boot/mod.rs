//! Booting guest kernels: a command of this ptelab run in a QEMU guest of a
//! sourced kernel. The guest binary and its initramfs, the QEMU command line
//! and accelerator, ptelab as the guest's init, the framed answer on the
//! serial console, the guest's disk, the QEMU plugin and the profile it
//! counts.

pub mod binary;
#[cfg(test)]
mod boot_tests;
pub mod disk;
pub mod frame;
pub mod init;
pub mod initramfs;
pub mod plugin;
pub mod profile;
pub mod qemu;
pub mod run;
