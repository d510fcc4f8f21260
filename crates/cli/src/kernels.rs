//! `ptelab kernel …`: guest kernels (Debian's prebuilt ones, cached, or an
//! image of the user's own build). Raw values, typed by the accessors here
//! (usage errors say what is accepted).

use clap::{Args, Subcommand};

use super::vm::{guest_arch, kernel_specs};
use crate::guest::KernelSpec;
use crate::workload::Arch;

#[derive(Debug, Args)]
pub struct KernelArgs {
    #[command(subcommand)]
    pub command: KernelCommand,
}

#[derive(Debug, Subcommand)]
pub enum KernelCommand {
    /// Download kernels into the cache (verified by apt), or check an image
    /// of your own build.
    ///
    /// SPEC: debian:6.17.13 (flavour cloud), debian:6.17 (the newest 6.17.x
    /// offered), debian:6.17.13-generic (flavours cloud, generic, rt, 16k),
    /// debian:6.17.13-arm64, or the path of an image of your own build
    /// (arch/x86/boot/bzImage, arch/arm64/boot/Image). A cached kernel is
    /// used without network; see docs/guests.md.
    Fetch(KernelFetchArgs),
    /// Cached kernels, or with --available what Debian offers now.
    List(KernelListArgs),
}

#[derive(Debug, Args)]
pub struct KernelFetchArgs {
    /// Kernel specs.
    #[arg(required = true, value_name = "SPEC")]
    pub specs: Vec<String>,
    /// Guest arch: x86_64 or arm64 (default: the spec's, else this host's).
    #[arg(long)]
    pub arch: Option<String>,
    /// Debian mirror URL (default: the Debian archive of apt's sources).
    #[arg(long, value_name = "URL")]
    pub mirror: Option<String>,
    /// Kernel config of tree kernels (tree:PATH@REV): copied into the build
    /// directory, then `make olddefconfig`. Default: ptelab's (docs/trees.md).
    #[arg(long, value_name = "FILE", conflicts_with = "defconfig")]
    pub config: Option<std::path::PathBuf>,
    /// Build tree kernels with the arch's defconfig alone.
    #[arg(long)]
    pub defconfig: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct KernelListArgs {
    /// What Debian offers now (versions per flavour) instead of the cache.
    #[arg(long)]
    pub available: bool,
    /// Only this arch: x86_64 or arm64 (with --available default: this host's).
    #[arg(long)]
    pub arch: Option<String>,
    /// Debian mirror URL for --available (default: the Debian archive of apt's sources).
    #[arg(long, value_name = "URL", requires = "available")]
    pub mirror: Option<String>,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

impl KernelFetchArgs {
    /// `--arch`, typed.
    pub fn guest_arch(&self) -> anyhow::Result<Option<Arch>> {
        guest_arch(&self.arch)
    }

    /// The specs, typed: every one is checked before anything is fetched.
    pub fn kernel_specs(&self) -> anyhow::Result<Vec<KernelSpec>> {
        kernel_specs(&self.specs)
    }
}

impl KernelListArgs {
    /// `--arch`, typed.
    pub fn guest_arch(&self) -> anyhow::Result<Option<Arch>> {
        guest_arch(&self.arch)
    }
}
