//! One module per subcommand: plan (validate flags against the machine), run,
//! render. Each returns the process exit code.

pub mod bench;
pub mod calibrate;
pub mod compare;
pub mod crosscheck;
pub mod doctor;
pub mod kernel;
pub mod model;
pub mod report;
pub mod reproduce;
pub mod runs;
pub mod show;
pub mod sweep;

use std::io::Write;

/// Print a JSON document on stdout (pretty, newline-terminated).
pub fn print_json(doc: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, doc)?;
    writeln!(out)?;
    Ok(())
}

/// Print text on stdout.
pub fn print_text(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    Ok(())
}
