//! `ptelab task run FILE` (hidden): run the task a cluster's executor
//! wrote to FILE. A guest boot (`fleet::task`) writes the guests' answer
//! beside it, which the submitting ptelab reads back and stores; a
//! bisect's build (`bisect::build_on_slurm`) builds one commit into the
//! image cache.

use std::process::ExitCode;

use crate::bisect::build_on_slurm::{self, BUILD_TASK_SCHEMA};
use crate::cli::cluster::{TaskArgs, TaskCommand};

pub fn run(args: &TaskArgs) -> anyhow::Result<ExitCode> {
    let TaskCommand::Run { file } = &args.command;
    if crate::fleet::task::schema_of(file)? == BUILD_TASK_SCHEMA {
        return Ok(match build_on_slurm::run_task_file(file)? {
            true => ExitCode::SUCCESS,
            false => ExitCode::FAILURE,
        });
    }
    crate::fleet::task::run_file(file)?;
    Ok(ExitCode::SUCCESS)
}
