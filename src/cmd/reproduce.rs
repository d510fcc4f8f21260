//! `ptelab reproduce` (not implemented yet).

use std::process::ExitCode;

use crate::cli::flags::ReproduceArgs;

pub fn run(_args: &ReproduceArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ptelab reproduce` is not implemented yet")
}
