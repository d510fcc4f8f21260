//! The command a guest runs (after `--` of `vm` and `bisect`), checked on
//! the host with the definitions the guest parses it with, so that a typo
//! costs no boot.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Parser;

use super::flags::{Cli, Command};
use crate::error::bail_usage;
use crate::guest::build::kconfig::Need;

/// Guest commands and whether their results come back to be stored.
const COMMANDS: [(&str, bool); 5] = [
    ("bench", true),
    ("sweep", true),
    ("crosscheck", false),
    ("doctor", false),
    ("model", false),
];

/// Flags that belong to `vm` itself, not to the guest command.
const HOST_FLAGS: [&str; 4] = ["--db", "--tag", "--json", "--no-store"];

/// The guest command, checked on the host.
pub struct GuestCommand {
    pub name: String,
    /// `exec NAME`: the `--file` to run instead of ptelab.
    pub program: Option<String>,
    /// Arguments after `ptelab` in the guest.
    pub args: Vec<String>,
    /// bench and sweep: cells come back and are stored here.
    pub measures: bool,
    /// Bytes the largest cell maps (bench, sweep).
    pub need: Option<u64>,
    /// Bytes of files the command writes at once, when it needs a disk
    /// (the reclaim workload: its file, or its swapfile).
    pub disk: Option<u64>,
    /// The workload of a bench or sweep.
    pub workload: Option<crate::workload::WorkloadKind>,
    /// The folio layouts of a bench or sweep.
    pub folios: Vec<crate::workload::FolioSpec>,
}

impl GuestCommand {
    /// Check `words` (the command after `--` of `host`, e.g. `vm`): a
    /// known guest command, no flag of the host command, its own flags
    /// parsed by the definitions the guest uses.
    pub fn parse(host: &str, words: &[String], files: &[PathBuf]) -> anyhow::Result<GuestCommand> {
        let name = words.first().cloned().unwrap_or_default();
        if name == "exec" {
            let names: Vec<&str> = files
                .iter()
                .filter_map(|f| f.file_name().and_then(|n| n.to_str()))
                .collect();
            let Some(program) = words.get(1).filter(|p| names.contains(&p.as_str())) else {
                bail_usage!(
                    "exec runs a program given with --file: accepted names are {}",
                    if names.is_empty() {
                        "none (no --file given)".to_string()
                    } else {
                        names.join(", ")
                    }
                );
            };
            return Ok(GuestCommand {
                name,
                program: Some(program.clone()),
                args: words[2..].to_vec(),
                measures: false,
                need: None,
                disk: None,
                workload: None,
                folios: Vec::new(),
            });
        }
        let Some(&(_, measures)) = COMMANDS.iter().find(|(c, _)| *c == name) else {
            let names: Vec<&str> = COMMANDS.iter().map(|(c, _)| *c).collect();
            bail_usage!(
                "'{name}' cannot run in a guest: accepted commands after -- are {}, and exec NAME for a --file",
                names.join(", ")
            );
        };
        for w in &words[1..] {
            if let Some(f) = HOST_FLAGS
                .iter()
                .find(|f| w == *f || w.starts_with(&format!("{f}=")))
            {
                let kernel = if host == "vm" { " --kernel SPEC" } else { "" };
                bail_usage!(
                    "{f} belongs to {host}, not to the guest command: `ptelab {host} {f} …{kernel} -- {name} …` \
                     (results are stored on this host)"
                );
            }
        }
        // The guest parses the same flags; parse them here first so that a
        // typo costs no boot.
        let cli =
            Cli::try_parse_from(std::iter::once("ptelab".to_string()).chain(words.iter().cloned()))
                .map_err(|e| {
                    crate::error::usage(format!(
                        "in the guest command: {}",
                        first_line(&e.to_string())
                    ))
                })?;
        let need = match &cli.command {
            Command::Bench(b) => {
                Some(b.size.unwrap_or_else(|| b.workload.default_size()) * b.measure.regions as u64)
            }
            Command::Sweep(s) => {
                Some(s.sizes.iter().copied().max().unwrap_or(0) * s.measure.regions as u64)
            }
            _ => None,
        };
        let (workload, folios) = match &cli.command {
            Command::Bench(b) => (Some(b.workload), vec![b.folio]),
            Command::Sweep(s) => (Some(s.workload), s.folios.clone()),
            _ => (None, Vec::new()),
        };
        let mut args = words.to_vec();
        if measures {
            args.extend(["--no-store".to_string(), "--json".to_string()]);
        }
        // crosscheck answers with its document; the host renders it.
        if name == "crosscheck" && !args.iter().any(|a| a == "--json") {
            args.push("--json".to_string());
        }
        Ok(GuestCommand {
            name,
            program: None,
            args,
            measures,
            need,
            disk: cli.command.guest_disk_bytes(),
            workload,
            folios,
        })
    }
}

impl GuestCommand {
    /// What its cells need of a built kernel's config (`symbols`: kernel
    /// functions are named, as `--profile` does).
    pub fn needs(&self, symbols: bool) -> BTreeSet<Need> {
        match self.workload {
            Some(w) => Need::of(w, &self.folios, symbols),
            None => BTreeSet::new(),
        }
    }

    /// What progress lines and logs call it: its workload, else its name.
    pub fn label(&self) -> String {
        self.workload
            .map_or_else(|| self.name.clone(), |w| w.name().to_string())
    }
}

pub fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim_start_matches("error: ")
}

#[cfg(test)]
mod tests {
    use super::*;

    impl GuestCommand {
        fn parse_words(words: &[String]) -> anyhow::Result<GuestCommand> {
            GuestCommand::parse("vm", words, &[PathBuf::from("/tmp/mprot")])
        }
    }

    #[test]
    fn the_guest_command_is_checked_on_the_host() {
        let words = |w: &str| w.split_whitespace().map(String::from).collect::<Vec<_>>();
        let c =
            GuestCommand::parse_words(&words("sweep mprotect-toggle --sizes 4K,40M --regions 2"))
                .unwrap();
        assert!(c.measures);
        assert_eq!(c.need, Some(80 << 20));
        assert_eq!(c.disk, None, "only the reclaim workload gets a disk");
        let r = GuestCommand::parse_words(&words("bench reclaim --size 64M --folio 64K")).unwrap();
        assert_eq!(r.disk, Some(64 << 20));
        let r = GuestCommand::parse_words(&words("sweep reclaim --sizes 4M,32M --swapfile 48M"))
            .unwrap();
        assert_eq!(r.disk, Some(48 << 20));
        assert_eq!(c.args[c.args.len() - 2..], ["--no-store", "--json"]);
        let d = GuestCommand::parse_words(&words("doctor")).unwrap();
        assert!(!d.measures && d.need.is_none() && d.args == ["doctor"]);
        for bad in [
            "calibrate",
            "bench mprotect-toggle --tag=x",
            "bench nonsense",
        ] {
            let e = GuestCommand::parse_words(&words(bad)).err().unwrap();
            assert!(crate::error::is_usage(&e), "{bad}: {e:#}");
        }
    }
}
