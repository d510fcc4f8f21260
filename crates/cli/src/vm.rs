//! `ptelab vm`: run a ptelab command in QEMU guests of other kernels.

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::flags::StoreOpts;
use super::values;
use crate::guest::KernelSpec;
use crate::workload::Arch;

/// `--accel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AccelFlag {
    /// KVM where /dev/kvm can boot the guest, else TCG.
    Auto,
    /// Hardware virtualization: figures are time.
    Kvm,
    /// QEMU's translator with icount: figures are guest instructions.
    Tcg,
}

/// How guests boot: shared by every command that runs guests.
#[derive(Clone, Debug, Args)]
pub struct GuestOpts {
    /// Accelerator: auto (KVM where it can boot the guest, else TCG), kvm or tcg.
    #[arg(long, value_enum, default_value_t = AccelFlag::Auto)]
    pub accel: AccelFlag,
    /// Give up on a guest after this long (boot, command and power-off).
    #[arg(long, value_parser = values::duration, default_value = "20m", value_name = "DURATION")]
    pub timeout: Duration,
    /// Guests run side by side (each takes one host CPU under TCG; default:
    /// one for vm, every online CPU for reproduce).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: Option<u32>,
    /// Debian mirror URL (default: the Debian archive of apt's sources).
    #[arg(long, value_name = "URL")]
    pub mirror: Option<String>,
    /// Count the mechanism too: ptelab's QEMU plugin counts, per call,
    /// kernel function entries and instructions and TLB invalidations
    /// (TCG guests only; docs/guests.md, "Mechanism counters").
    #[arg(long)]
    pub profile: bool,
    /// Kernel config of tree kernels (tree:PATH@REV) and bisect --repo
    /// steps: copied into the build directory, then `make olddefconfig`.
    /// Default: ptelab's (the arch's defconfig and ptelab's fragment,
    /// docs/trees.md).
    #[arg(long, value_name = "FILE", conflicts_with = "defconfig")]
    pub config: Option<std::path::PathBuf>,
    /// Build tree kernels and bisect steps with the arch's defconfig alone.
    #[arg(long)]
    pub defconfig: bool,
}

impl GuestOpts {
    /// The config tree kernels build with; `builds`: some kernel is built.
    pub fn build_config(&self, builds: bool) -> anyhow::Result<crate::guest::build::Config> {
        build_config(self.config.as_deref(), self.defconfig, builds)
    }
}

/// `--config FILE` / `--defconfig` as the config tree kernels build with,
/// refused where no kernel is built (`builds` false).
pub fn build_config(
    file: Option<&std::path::Path>,
    defconfig: bool,
    builds: bool,
) -> anyhow::Result<crate::guest::build::Config> {
    if !builds && (file.is_some() || defconfig) {
        crate::error::bail_usage!(
            "--config and --defconfig choose how tree kernels (tree:PATH@REV) and bisect \
             --repo steps are built, and none is named here"
        );
    }
    Ok(crate::guest::build::Config::from_flags(file, defconfig))
}

#[derive(Debug, Args)]
pub struct VmArgs {
    /// Guest kernel (repeatable, or comma-separated; one stored run each):
    /// debian:6.17.13, debian:6.17 (the newest 6.17.x), debian:6.17.13-arm64,
    /// or the image of your own build (arch/x86/boot/bzImage,
    /// arch/arm64/boot/Image). See `ptelab kernel`.
    #[arg(
        long = "kernel",
        alias = "kernels",
        value_name = "SPEC",
        required = true,
        value_delimiter = ','
    )]
    pub kernels: Vec<String>,
    /// A patch series (an mbox, as `b4 am` writes it): every tree kernel
    /// (tree:PATH@REV) runs twice, as named and with the series applied on
    /// it by `git am` (the base and the patch). See docs/trees.md.
    #[arg(long, value_name = "FILE.mbox")]
    pub series: Option<std::path::PathBuf>,
    /// Guest arch: x86_64 or arm64 (default: the spec's, else this host's).
    #[arg(long)]
    pub arch: Option<String>,
    #[command(flatten)]
    pub guest: GuestOpts,
    /// Guest memory (binary suffixes: 512M, 2G).
    #[arg(long, value_parser = values::size, default_value = "1G", value_name = "SIZE")]
    pub memory: u64,
    /// A static executable for the guest's arch to put in the guest
    /// (repeatable), run with `-- exec NAME ARGS…`: a reference program,
    /// such as a seed's own reproducer, measured in the same kind of guest.
    #[arg(long = "file", value_name = "PATH")]
    pub files: Vec<std::path::PathBuf>,
    /// Kernel parameter added to the guest's command line (repeatable), e.g.
    /// transparent_hugepage=never for a program that does not ask for its
    /// folio size the way ptelab does.
    #[arg(long = "append", value_name = "PARAM")]
    pub append: Vec<String>,
    #[command(flatten)]
    pub out: StoreOpts,
    #[command(flatten)]
    pub cluster: super::cluster::ClusterOpts,
    /// The command run in each guest, after `--`: bench, sweep, crosscheck,
    /// doctor or model, with its own flags (e.g. `-- bench mprotect-toggle
    /// --size 4M`), or `exec NAME ARGS…` for a program given with --file.
    /// Results of bench and sweep are stored on this host. Several bench and
    /// sweep commands joined by `--then` run one after the other in one boot
    /// of each kernel, one stored run each.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The guest commands of `words` (after `--`), split at `--then`; an empty
/// one is a usage error.
pub fn split_commands(words: &[String]) -> anyhow::Result<Vec<Vec<String>>> {
    use crate::guest::THEN;
    let commands: Vec<Vec<String>> = words.split(|w| w == THEN).map(|c| c.to_vec()).collect();
    if commands.iter().any(|c| c.is_empty()) {
        crate::error::bail_usage!(
            "{THEN} joins two guest commands: `-- bench … {THEN} sweep …`, nothing before, after or between two"
        );
    }
    Ok(commands)
}

/// A guest's `--arch` flag, typed: a usage error names what is accepted.
pub fn guest_arch(raw: &Option<String>) -> anyhow::Result<Option<Arch>> {
    raw.as_deref().map(Arch::parse_flag).transpose()
}

/// Kernel specs, typed: the first bad one is a usage error saying what is
/// accepted.
pub fn kernel_specs(raw: &[String]) -> anyhow::Result<Vec<KernelSpec>> {
    raw.iter().map(|s| KernelSpec::parse(s)).collect()
}

/// `specs`, each that takes a series followed by itself with `series`
/// applied; a series no spec takes is a usage error.
pub fn with_series(
    specs: Vec<KernelSpec>,
    series: Option<&std::path::Path>,
) -> anyhow::Result<Vec<KernelSpec>> {
    let Some(series) = series else {
        return Ok(specs);
    };
    if !series.is_file() {
        crate::error::bail_usage!(
            "--series {} is not a file: pass an mbox of the patches (as `b4 am` writes it)",
            series.display()
        );
    }
    let (mut out, mut patched) = (Vec::new(), 0);
    for spec in specs {
        let with = spec.with_series(series);
        patched += usize::from(with.is_some());
        out.push(spec);
        out.extend(with);
    }
    if patched == 0 {
        crate::error::bail_usage!(
            "--series applies to tree kernels (tree:PATH@REV without a series of their own), \
             and none is named here"
        );
    }
    Ok(out)
}

impl VmArgs {
    /// `--arch`, typed.
    pub fn guest_arch(&self) -> anyhow::Result<Option<Arch>> {
        guest_arch(&self.arch)
    }

    /// The guest commands, in the order one boot runs them.
    pub fn commands(&self) -> anyhow::Result<Vec<Vec<String>>> {
        split_commands(&self.command)
    }

    /// `--kernel`, typed, each tree kernel followed by itself with
    /// `--series` applied.
    pub fn kernel_specs(&self) -> anyhow::Result<Vec<KernelSpec>> {
        with_series(kernel_specs(&self.kernels)?, self.series.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn then_splits_the_guest_commands_and_refuses_an_empty_one() {
        assert_eq!(
            split_commands(&words("bench a --size 4M --then sweep b")).unwrap(),
            [words("bench a --size 4M"), words("sweep b")]
        );
        assert_eq!(split_commands(&words("doctor")).unwrap(), [words("doctor")]);
        for bad in [
            "--then sweep b",
            "bench a --then",
            "bench a --then --then sweep b",
        ] {
            let e = split_commands(&words(bad)).unwrap_err();
            assert!(crate::error::is_usage(&e), "{bad}");
            assert!(e.to_string().contains("--then joins"), "{e}");
        }
    }
}
