//! `ptelab compare` (not implemented yet).

use std::process::ExitCode;

use crate::cli::flags::CompareArgs;

pub fn run(_args: &CompareArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ptelab compare` is not implemented yet")
}
