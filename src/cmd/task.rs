//! `ptelab task run FILE` (hidden): run the task a cluster's executor
//! wrote to FILE. A guest boot (`fleet::task`) writes the guests' answer
//! beside it, which the submitting ptelab reads back and stores; a
//! kernel build (`fleet::builds`) builds one commit into the
//! image cache.

use std::process::ExitCode;

use crate::cli::cluster::{TaskArgs, TaskCommand};
use crate::fleet::builds::{self, BUILD_TASK_SCHEMA};

pub fn run(args: &TaskArgs) -> anyhow::Result<ExitCode> {
    let TaskCommand::Run { file } = &args.command;
    if crate::fleet::task::schema_of(file)? == BUILD_TASK_SCHEMA {
        return Ok(
            match builds::run_task_file(file, crate::kernel::signals::interrupted())? {
                true => ExitCode::SUCCESS,
                false => ExitCode::FAILURE,
            },
        );
    }
    crate::fleet::task::run_file(file)?;
    Ok(ExitCode::SUCCESS)
}
