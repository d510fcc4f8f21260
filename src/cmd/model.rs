//! `ptelab model` (not implemented yet).

use std::process::ExitCode;

use crate::cli::flags::ModelArgs;

pub fn run(_args: &ModelArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`ptelab model` is not implemented yet")
}
