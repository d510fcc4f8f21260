//! `ptelab doctor` (not implemented yet).

use std::process::ExitCode;

use crate::cli::flags::DoctorArgs;

pub fn run(_args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ptelab doctor` is not implemented yet")
}
