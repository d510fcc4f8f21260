//! `ptelab crosscheck` (not implemented yet).

use std::process::ExitCode;

use crate::cli::flags::CrosscheckArgs;

pub fn run(_args: &CrosscheckArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ptelab crosscheck` is not implemented yet")
}
