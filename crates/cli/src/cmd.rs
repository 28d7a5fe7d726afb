//! The subcommands, as `DESIGN.md` fixes them.

use crate::output::{self, Table};
use anyhow::Result;
use clap::{Parser, Subcommand};
use heapdump_analyze::{DumpFile, Summary};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Heap dumps of native programs, and what they mean.
#[derive(Parser, Debug)]
#[command(name = "heapdump", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// What a dump holds: allocations, bytes, threads, roots, why and when it was taken.
    Summary {
        /// The dump file.
        dump: PathBuf,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Summary { dump, json } => summary(&dump, json),
    }
}

fn summary(path: &PathBuf, json: bool) -> Result<ExitCode> {
    let file = DumpFile::open(path)?;
    let s = Summary::of(&file)?;
    if let Some(t) = &s.truncated {
        eprintln!("heapdump: warning: {}: incomplete dump, summarised up to the damage: {t}", path.display());
    }
    if json {
        output::json(&s)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    print_summary(&mut out, path, &s)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn print_summary(out: &mut impl Write, path: &std::path::Path, s: &Summary) -> std::io::Result<()> {
    let mut t = Table::new(&["field", "value"]);
    t.row(vec!["dump".into(), path.display().to_string()]);
    t.row(vec!["program".into(), if s.cmdline.is_empty() { s.exe.clone() } else { s.cmdline.join(" ") }]);
    t.row(vec!["pid".into(), s.pid.to_string()]);
    t.row(vec!["reason".into(), s.reason.into()]);
    t.row(vec!["mode".into(), s.mode.into()]);
    t.row(vec!["live allocations".into(), s.allocations.to_string()]);
    t.row(vec!["live bytes".into(), format!("{} ({})", s.bytes, output::bytes(s.bytes))]);
    t.row(vec!["threads".into(), s.threads.to_string()]);
    t.row(vec!["roots".into(), s.roots.to_string()]);
    t.row(vec!["modules".into(), s.modules.to_string()]);
    let sites = match s.backtrace {
        "sampled" => format!("{} (sampled, mean {})", s.sites, output::bytes(s.sample_mean)),
        other => format!("{} ({other})", s.sites),
    };
    t.row(vec!["allocation sites".into(), sites]);
    t.row(vec!["pause".into(), s.pause_us.map_or("unknown (no trailer)".into(), |p| format!("{p} us"))]);
    t.row(vec!["file size".into(), output::bytes(s.file_bytes)]);
    if let Some(tr) = &s.truncated {
        t.row(vec!["incomplete".into(), tr.clone()]);
    }
    t.print(out)
}
