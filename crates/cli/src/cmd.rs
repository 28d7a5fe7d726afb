//! The subcommands, as `DESIGN.md` fixes them.

use crate::output::{self, Table};
use crate::views;
use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use heapdump_analyze::group::GroupBy;
use heapdump_analyze::Summary;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The version line: the tool's, and the dump format it writes and reads
/// (a test checks the numbers against `heapdump_format::raw`).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (writes dump format 1.6; reads 1.0 to 1.6)");

/// Heap dumps of native programs, and what they mean.
#[derive(Parser, Debug)]
#[command(name = "heapdump", version = VERSION, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Neither read nor write the analysis cache (kept under
    /// $XDG_CACHE_HOME/heapdump/analysis, keyed by the dump's checksum and
    /// this version: a second question on a dump skips the leak and
    /// dominator computations).
    #[arg(long, global = true)]
    no_cache: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum By {
    Site,
    Type,
    Size,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Kind {
    Definite,
    Indirect,
    Possible,
    Reachable,
}

/// What else fails `check`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum CheckKind {
    Possible,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum RetainedBy {
    Block,
    Site,
    Type,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DumpMode {
    Full,
    Compact,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Pprof,
    Heapsnapshot,
    Folded,
    Svg,
    Dot,
    Mermaid,
    Json,
    /// Tables for SQL engines: -o names a directory.
    Parquet,
}

/// `--format`'s values; a name one reaches for that is not one of them
/// (flamegraph, html) is refused with the format or command that makes it.
#[derive(Clone)]
struct FormatParser;

impl clap::builder::TypedValueParser for FormatParser {
    type Value = Format;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &std::ffi::OsStr) -> Result<Format, clap::Error> {
        let instead = match value.to_string_lossy().to_ascii_lowercase().as_str() {
            "flamegraph" | "flamegraphs" | "flame" | "flamechart" => {
                "a flamegraph is --format svg (--format folded writes its stacks as text, for flamegraph.pl or speedscope)"
            }
            "html" | "report" => "the HTML report is a command of its own: heapdump report DUMP -o report.html",
            "pb" | "proto" | "protobuf" | "go" => "pprof's profile.proto is --format pprof",
            "v8" | "chrome" | "devtools" | "snapshot" => "Chrome DevTools' and memlab's heap snapshot is --format heapsnapshot",
            "graphviz" | "gv" => "graphviz's input is --format dot",
            _ => return clap::builder::EnumValueParser::<Format>::new().parse_ref(cmd, arg, value),
        };
        let msg = format!("there is no --format {}: {instead}\n", value.to_string_lossy());
        Err(clap::Error::raw(clap::error::ErrorKind::InvalidValue, msg).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(Format::value_variants().iter().filter_map(ValueEnum::to_possible_value)))
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs a program with the tracker preloaded; dumps at exit, on a signal, on a threshold.
    Run {
        /// What dumps hold: raw contents (full) or the pointer graph (compact).
        #[arg(long, value_enum, default_value = "compact")]
        mode: DumpMode,
        /// Path of the first dump (later ones and children's get .<pid>.<n>).
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
        /// Signal that triggers a dump (name or number; 0 for none).
        #[arg(long, default_value = "SIGUSR2")]
        signal: String,
        /// Dump when live bytes first cross this (100M), then each further step.
        #[arg(long)]
        threshold: Option<String>,
        /// A dump every DURATION (30s, 500ms, 5m, 1h), taken beside the
        /// other triggers, named <stem>.<pid>.<n> in order: the series
        /// `heapdump growth` reads.
        #[arg(long, value_name = "DURATION")]
        every: Option<String>,
        /// Write dumps from a forked child, keeping the pause short.
        #[arg(long)]
        fork: bool,
        /// With --fork: first collapse the heap into transparent huge pages
        /// while the program runs, so that the fork copies 512 times fewer
        /// page-table entries (a pause of milliseconds on large heaps).
        #[arg(long, requires = "fork")]
        collapse: bool,
        /// Allocation sites: all, sampled[=BYTES], off.
        #[arg(long)]
        backtrace: Option<String>,
        /// Do not dump when the program exits.
        #[arg(long)]
        no_at_exit: bool,
        /// Dump when the memory a limit counts (the cgroup's, RLIMIT_AS,
        /// RLIMIT_DATA, physical memory) crosses this percentage of it, then
        /// at each step of half the headroom left.
        #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(1..=100))]
        near_limit: Option<u32>,
        /// Do not dump when a signal ends the program (SIGTERM, SIGINT,
        /// SIGHUP, SIGQUIT) or it crashes (SIGSEGV, SIGBUS, SIGABRT, SIGFPE,
        /// SIGILL). Without this, such a dump is taken and the signal given
        /// back, so the program ends as it would have.
        #[arg(long)]
        no_on_fatal: bool,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true)]
        program: Vec<std::ffi::OsString>,
    },
    /// Captures the heap of a running glibc process from outside (ptrace; no preload, no restart): the process goes on.
    Attach {
        /// The process.
        pid: i32,
        /// What the dump holds: the pointer graph (compact) or raw contents (full).
        #[arg(long, value_enum, default_value = "compact")]
        mode: DumpMode,
        /// The dump's path (default heapdump.<pid>.hdump).
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
    },
    /// Captures the heap a core file holds (the kernel's or gcore's) of a glibc process.
    Core {
        /// The core file.
        core: PathBuf,
        /// The executable, when the core's path to it is not this machine's.
        #[arg(long)]
        exe: Option<PathBuf>,
        /// What the dump holds: the pointer graph (compact) or raw contents (full).
        #[arg(long, value_enum, default_value = "compact")]
        mode: DumpMode,
        /// The dump's path (default heapdump.<pid>.hdump).
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
    },
    /// Runs a program traced, as run does, and fails when it leaks: its own status when it failed, else --error-exitcode when anything is definitely or indirectly lost, else 0.
    Check {
        /// Suppressions in valgrind's format or LeakSanitizer's
        /// (leak:PATTERN); may be given more than once.
        #[arg(long = "suppressions", value_name = "FILE")]
        suppressions: Vec<PathBuf>,
        /// The exit status when something is lost (LeakSanitizer's 23).
        #[arg(long, value_name = "N", default_value_t = 23, value_parser = clap::value_parser!(u8).range(1..))]
        error_exitcode: u8,
        /// Writes a JUnit XML report: one test case per process, its lost groups as the failure.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// What the dumps hold: raw contents (full) or the pointer graph (compact).
        #[arg(long, value_enum, default_value = "compact")]
        mode: DumpMode,
        /// Also fail on possibly lost blocks.
        #[arg(long, value_enum)]
        kind: Option<CheckKind>,
        /// Keep the dumps at this path (later ones and children's get
        /// .<pid>.<n>); default: a private temporary directory, removed.
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
        /// The program and its arguments, after `--`.
        #[arg(last = true, required = true)]
        program: Vec<std::ffi::OsString>,
    },
    /// What a dump holds: allocations, bytes, threads, roots, why and when it was taken.
    Summary {
        /// The dump file.
        dump: PathBuf,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// The live heap grouped by allocation site, type or size class.
    Top {
        /// The dump file.
        dump: PathBuf,
        /// What to group by.
        #[arg(long, value_enum, default_value = "site")]
        by: By,
        /// Rows to show.
        #[arg(short = 'n', default_value_t = 20)]
        n: usize,
        /// Frames shown per site: the first outside the allocator and its
        /// wrappers, then its callers.
        /// (With --tree: the callers shown, default 16.)
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
        depth: Option<u32>,
        /// A caller tree by bytes, bottom up (as `pprof -tree` and
        /// heaptrack's bottom-up view): each allocating function, then
        /// who called it, up to `main`.
        #[arg(long, conflicts_with = "by")]
        tree: bool,
        /// Also see through the functions this regular expression matches
        /// (whole names) when naming a site, as through the built-in list of
        /// allocation wrappers (xmalloc, g_malloc, PyMem_*, …).
        #[arg(long, value_name = "REGEX")]
        skip: Option<String>,
        /// The sites as they stood when the live heap last set its peak
        /// (nothing of them need be live now).
        #[arg(long, conflicts_with_all = ["by", "tree", "allocated"])]
        peak: bool,
        /// Allocations and bytes since the program started, by site, with
        /// the temporaries (blocks freed before their thread's next allocation).
        #[arg(long, conflicts_with_all = ["by", "tree"])]
        allocated: bool,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Leaks with valgrind memcheck's meanings, largest lost groups by site.
    Leaks {
        /// The dump file.
        dump: PathBuf,
        /// How many lost groups to show.
        #[arg(short = 'n', default_value_t = 10)]
        n: usize,
        /// Only groups of this kind (indirectly lost and still reachable
        /// blocks are then grouped by their own sites).
        #[arg(long, value_enum)]
        kind: Option<Kind>,
        /// Suppressions in valgrind's format ({ name Memcheck:Leak fun:… })
        /// or LeakSanitizer's (leak:PATTERN); may be given more than once.
        /// What they match is counted as suppressed.
        #[arg(long = "suppressions", value_name = "FILE")]
        suppressions: Vec<PathBuf>,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// The allocations that keep the most memory alive (dominator tree).
    Retained {
        /// The dump file.
        dump: PathBuf,
        /// block: the blocks that retain most; site, type: groups, each
        /// retaining what its members dominate, every byte once.
        #[arg(long, value_enum, default_value = "block")]
        by: RetainedBy,
        /// Rows to show.
        #[arg(short = 'n', default_value_t = 20)]
        n: usize,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// The shortest chain of pointers from a root to an allocation.
    Path {
        /// The dump file.
        dump: PathBuf,
        /// Address of (or inside) the allocation, hex (0x...) or decimal.
        address: String,
        /// Every pointer to the allocation (roots and blocks), each block
        /// with how it is itself reached.
        #[arg(long)]
        all: bool,
        /// With --all: at most this many holders.
        #[arg(short = 'n', default_value_t = 20)]
        n: usize,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Growth by site and by type between two dumps.
    Diff {
        /// The older dump.
        old: PathBuf,
        /// The newer dump.
        new: PathBuf,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// The structures that grow across dumps of one process (a cache, a
    /// queue, a map that only grows while everything stays reachable).
    Growth {
        /// Two or more dumps of one process, oldest first.
        #[arg(num_args = 2.., required = true)]
        dumps: Vec<PathBuf>,
        /// Structures to show.
        #[arg(short = 'n', default_value_t = 10)]
        n: usize,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Writes the dump in another tool's format.
    Export {
        /// The dump file.
        dump: PathBuf,
        /// Output format.
        #[arg(long, value_parser = FormatParser)]
        format: Format,
        /// Output file (`-`: standard output); for parquet, a directory.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// dot, mermaid: the subgraph around this address (default: the top retainers).
        #[arg(long)]
        address: Option<String>,
        /// dot, mermaid: pointer steps to follow.
        #[arg(long, default_value_t = 3)]
        depth: usize,
        /// dot, mermaid: at most this many nodes.
        #[arg(long, default_value_t = 200)]
        max_nodes: usize,
    },
    /// Writes a self-contained HTML report.
    Report {
        /// The dump file.
        dump: PathBuf,
        /// Output file.
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// An older dump of the same program: the report adds the growth since then.
        #[arg(long)]
        baseline: Option<PathBuf>,
    },
    /// Serves a local viewer of the dump (127.0.0.1 only, behind a per-run token in the printed address).
    Serve {
        /// The dump file.
        dump: PathBuf,
        /// An older dump of the same program: the viewer adds the growth since then.
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// Older dumps of the same process, oldest first: the Growth tab shows the structures that grow across them and DUMP, the last point.
        #[arg(long, num_args = 1.., value_name = "DUMP", conflicts_with = "baseline")]
        series: Vec<PathBuf>,
        /// Port to listen on (0: any free one; the address is printed).
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
    /// Runs a bundled example with a leak and a large cache, dumps it, and explains the dump.
    Demo,
    /// Prints a shell completion script (bash, zsh, fish) on standard output.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Prints a manual page (roff) on standard output: heapdump's own
    /// (`heapdump man > heapdump.1`) or a command's (`heapdump man top >
    /// heapdump-top.1`); with --dir, writes every page into a directory.
    Man {
        /// The command whose page to print (default: heapdump's own page).
        command: Option<String>,
        /// Writes every page (heapdump.1, heapdump-run.1, heapdump-top.1, …)
        /// into this directory instead, such as ~/.local/share/man/man1.
        #[arg(long, value_name = "DIR", conflicts_with = "command")]
        dir: Option<PathBuf>,
    },
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode> {
    views::set_no_cache(cli.no_cache);
    // `leaks`, `top`, `check` and `diff` never ask for the dominator tree:
    // every other question on a dump may.
    views::set_dominators(!matches!(
        cli.command,
        Command::Leaks { .. } | Command::Top { .. } | Command::Check { .. } | Command::Diff { .. }
    ));
    match cli.command {
        Command::Run {
            mode,
            output,
            signal,
            threshold,
            every,
            fork,
            collapse,
            backtrace,
            no_at_exit,
            near_limit,
            no_on_fatal,
            program,
        } => crate::run::run(crate::run::RunOptions {
            mode: match mode {
                DumpMode::Full => "full".into(),
                DumpMode::Compact => "compact".into(),
            },
            output,
            signal: Some(signal),
            threshold,
            every,
            fork,
            collapse,
            backtrace,
            no_at_exit,
            near_limit,
            no_on_fatal,
            program,
        }),
        Command::Check { suppressions, error_exitcode, junit, mode, kind, output, program } => {
            crate::check::check(crate::check::CheckOptions {
                suppressions,
                error_exitcode,
                junit,
                mode: match mode {
                    DumpMode::Full => "full".into(),
                    DumpMode::Compact => "compact".into(),
                },
                possible: matches!(kind, Some(CheckKind::Possible)),
                output,
                program,
            })
        }
        Command::Attach { pid, mode, output } => outside(Outside::Attach(pid), mode, output),
        Command::Core { core, exe, mode, output } => outside(Outside::Core(core, exe), mode, output),
        Command::Summary { dump, json } => summary(&dump, json),
        Command::Top { dump, by, n, depth, tree, skip, peak, allocated, json } => {
            let by = match by {
                By::Site => GroupBy::Site,
                By::Type => GroupBy::Type,
                By::Size => GroupBy::Size,
            };
            let skip = match skip {
                Some(r) => Some(
                    regex::Regex::new(&format!("^(?:{r})$"))
                        .map_err(|e| crate::output::Usage(format!("invalid --skip {r:?}: {}", e.to_string().replace('\n', " "))))?,
                ),
                None => None,
            };
            if peak || allocated {
                return views::top_totals(&dump, peak, n, depth.map_or(1, |d| d as usize), skip, json);
            }
            if tree {
                return views::top_tree(&dump, n, depth.map_or(16, |d| d as usize), skip, json).map(|_| ExitCode::SUCCESS);
            }
            views::top(&dump, by, n, depth.map_or(1, |d| d as usize), skip, json).map(|_| ExitCode::SUCCESS)
        }
        Command::Leaks { dump, n, kind, suppressions, json } => {
            use heapdump_analyze::leaks::LeakKind;
            let kind = kind.map(|k| match k {
                Kind::Definite => LeakKind::DefinitelyLost,
                Kind::Indirect => LeakKind::IndirectlyLost,
                Kind::Possible => LeakKind::PossiblyLost,
                Kind::Reachable => LeakKind::StillReachable,
            });
            let mut sup = None;
            for path in &suppressions {
                let text = read_suppressions(path)?;
                let parsed = heapdump_analyze::suppress::Suppressions::parse(&text)
                    .map_err(|e| crate::output::Usage(format!("{}: {e}", path.display())))?;
                sup.get_or_insert_with(heapdump_analyze::suppress::Suppressions::default).extend(parsed);
            }
            views::leaks(&dump, n, kind, sup, json).map(|v| if v { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Retained { dump, by, n, json } => match by {
            RetainedBy::Block => views::retained(&dump, n, json),
            RetainedBy::Site => views::retained_grouped(&dump, GroupBy::Site, n, json),
            RetainedBy::Type => views::retained_grouped(&dump, GroupBy::Type, n, json),
        }
        .map(|_| ExitCode::SUCCESS),
        Command::Path { dump, address, all: false, json, .. } => views::path(&dump, &address, json).map(|_| ExitCode::SUCCESS),
        Command::Path { dump, address, all: true, n, json } => views::path_all(&dump, &address, n, json).map(|_| ExitCode::SUCCESS),
        Command::Diff { old, new, json } => views::diff(&old, &new, json).map(|_| ExitCode::SUCCESS),
        Command::Growth { dumps, n, json } => views::growth(&dumps, n, json).map(|_| ExitCode::SUCCESS),
        Command::Export { dump, format, output, address, depth, max_nodes } => {
            export(&dump, format, &output, address.as_deref(), depth, max_nodes)
        }
        Command::Report { dump, output, baseline } => {
            not_over_input(&output, [Some(&dump), baseline.as_ref()].into_iter().flatten())?;
            let loaded = views::load(&dump)?;
            let diff = match &baseline {
                Some(b) => {
                    let old = views::load(b)?;
                    Some(loaded.diff(&old))
                }
                None => None,
            };
            let ex = views::session(&loaded);
            write_atomically(&output, |w| heapdump_export::write_html(&ex, diff.as_ref(), w))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve { dump, baseline, series, port } => crate::serve::serve(&dump, baseline.as_deref(), &series, port),
        Command::Demo => demo(),
        Command::Completions { shell } => {
            let mut out = std::io::stdout().lock();
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "heapdump", &mut out);
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { command, dir } => man(command.as_deref(), dir.as_deref()),
    }
}

/// A capture from outside: a running process or a core file.
enum Outside {
    Attach(i32),
    Core(PathBuf, Option<PathBuf>),
}

/// `attach` and `core`: capture, say what was written and what to know.
fn outside(what: Outside, mode: DumpMode, output: Option<PathBuf>) -> Result<ExitCode> {
    let mode = match mode {
        DumpMode::Full => heapdump_format::Mode::Full,
        DumpMode::Compact => heapdump_format::Mode::Compact,
    };
    let (info, out, from) = match &what {
        Outside::Attach(pid) => {
            let out = output.clone().unwrap_or_else(|| PathBuf::from(format!("heapdump.{pid}.hdump")));
            (heapdump_attach::attach(*pid, mode, &out)?, out, format!("process {pid}"))
        }
        Outside::Core(core, exe) => {
            let out = output.clone().unwrap_or_else(|| {
                let stem = core.file_name().map_or("core".into(), |n| n.to_string_lossy().into_owned());
                PathBuf::from(format!("{stem}.hdump"))
            });
            (heapdump_attach::core(core, exe.as_deref(), mode, &out)?, out, format!("core {}", core.display()))
        }
    };
    for w in &info.warnings {
        eprintln!("heapdump: warning: {w}");
    }
    let held = match what {
        Outside::Attach(_) if info.stops > 1 => format!(", held {:.1} ms in {} stops", info.pause_ns as f64 / 1e6, info.stops),
        Outside::Attach(_) => format!(", held {:.1} ms", info.pause_ns as f64 / 1e6),
        Outside::Core(..) => String::new(),
    };
    println!(
        "heapdump: wrote {} ({from}: {} allocations, {} usable bytes, {} threads, {}{held})",
        out.display(),
        info.allocations,
        info.bytes,
        info.threads,
        info.heap(),
    );
    Ok(ExitCode::SUCCESS)
}

fn summary(path: &Path, json: bool) -> Result<ExitCode> {
    let s = heapdump_analyze::summary(path)?;
    if let Some(t) = &s.truncated {
        eprintln!("heapdump: warning: {}: incomplete dump, summarised up to the damage: {t}", path.display());
    }
    if json {
        output::json(&views::summary_json(&s, || views::peak_json(path))?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    print_summary(&mut out, path, &s)?;
    if s.truncated.is_none() {
        views::summary_suspects(&mut out, path)?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn print_summary(out: &mut impl Write, path: &Path, s: &Summary) -> std::io::Result<()> {
    let mut t = Table::new(&["field", "value"]);
    t.row(vec!["dump".into(), path.display().to_string()]);
    t.row(vec!["program".into(), if s.cmdline.is_empty() { s.exe.clone() } else { s.cmdline.join(" ") }]);
    t.row(vec!["pid".into(), s.pid.to_string()]);
    t.row(vec!["reason".into(), s.reason.clone()]);
    if let Some(g) = &s.signal {
        t.row(vec!["signal".into(), g.describe()]);
    }
    if let Some(l) = &s.limit {
        let share = l.used as f64 * 100.0 / l.bytes.max(1) as f64;
        t.row(vec!["limit".into(), format!("{} of {} {} ({share:.0}%)", output::bytes(l.used), output::bytes(l.bytes), l.kind)]);
    }
    t.row(vec!["mode".into(), s.mode.clone()]);
    if let Some(a) = &s.allocator {
        t.row(vec!["allocator".into(), a.clone()]);
    }
    for w in &s.warnings {
        t.row(vec!["warning".into(), w.clone()]);
    }
    t.row(vec!["live allocations".into(), s.allocations.to_string()]);
    t.row(vec!["live bytes".into(), format!("{} ({})", s.bytes, output::bytes(s.bytes))]);
    if let (Some(peak), Some(n), Some(b)) = (s.peak_bytes, s.total_allocations, s.total_bytes) {
        t.row(vec!["peak live bytes".into(), format!("{peak} ({})", output::bytes(peak))]);
        t.row(vec!["allocated since start".into(), format!("{n} allocations, {}", output::bytes(b))]);
    }
    t.row(vec![
        "threads".into(),
        if s.threads_not_stopped > 0 {
            format!(
                "{} ({} not stopped: they block the stop signal or did not answer; their stacks were read as they waited in the kernel, their registers are unknown)",
                s.threads, s.threads_not_stopped
            )
        } else {
            s.threads.to_string()
        },
    ]);
    t.row(vec!["roots".into(), s.roots.to_string()]);
    t.row(vec!["modules".into(), s.modules.to_string()]);
    let sites = match s.backtrace.as_str() {
        _ if s.outside => "none: captured from outside the process (sizes are the allocator's usable sizes)".to_string(),
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

/// Writes `path` through a temporary file in the same directory, renamed
/// into place only when complete: a failed export leaves no half file.
/// Only a regular file (or nothing) is replaced: a FIFO, a device or a
/// socket at `path` is written through, as a symlink is followed to what it
/// names (renaming over `-o /dev/stdout` would replace the device node by
/// a file).
fn write_atomically(path: &Path, f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    // `-o -`: standard output, as the usual tools take it.
    if path.as_os_str() == "-" {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        return f(&mut out).and_then(|_| out.flush()).context("writing to standard output");
    }
    let mut written = 0u64;
    write_file(path, |w| {
        let mut counted = Counted { inner: w, n: &mut written };
        f(&mut counted)
    })?;
    // Said on stderr, so that a script sees where the output went.
    eprintln!("heapdump: wrote {} ({})", path.display(), output::bytes(written));
    Ok(())
}

/// A writer that counts what goes through it.
struct Counted<'a> {
    inner: &'a mut dyn Write,
    n: &'a mut u64,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let k = self.inner.write(buf)?;
        *self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn write_file(path: &Path, f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let target = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    };
    match std::fs::metadata(&target) {
        Ok(m) if !m.is_file() && !m.is_dir() => {
            let file = std::fs::OpenOptions::new().write(true).open(&target).with_context(|| format!("cannot open {}", path.display()))?;
            let mut w = std::io::BufWriter::new(file);
            return f(&mut w).and_then(|_| w.flush()).with_context(|| format!("writing {}", path.display()));
        }
        Ok(m) if m.is_dir() => anyhow::bail!("cannot write {}: it is a directory", path.display()),
        _ => {}
    }
    let dir = target.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = target.file_name().with_context(|| format!("{}: not a file name", path.display()))?;
    let tmp = dir.join(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id()));
    // Never through whatever is at the temporary name (O_EXCL).
    // Errors name the user's path (the temporary one is ours).
    let file =
        std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp).with_context(|| format!("cannot write {}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    let r = f(&mut w).and_then(|_| w.flush()).and_then(|_| w.get_ref().sync_all());
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(anyhow::Error::new(e).context(format!("writing {}", path.display())));
    }
    drop(w);
    if let Err(e) = std::fs::rename(&tmp, &target) {
        let _ = std::fs::remove_file(&tmp);
        return Err(anyhow::Error::new(e).context(format!("cannot write {}", path.display())));
    }
    Ok(())
}

/// Refuses an output that is one of the command's input dumps (the same
/// file, by any path): written in its place, the dump would be lost.
fn not_over_input<'a>(output: &Path, inputs: impl IntoIterator<Item = &'a PathBuf>) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(out) = std::fs::metadata(output) else { return Ok(()) };
    for input in inputs {
        if std::fs::metadata(input).is_ok_and(|i| (i.dev(), i.ino()) == (out.dev(), out.ino())) {
            return Err(output::Usage(format!(
                "-o {} is the dump {} itself: writing there would replace it (name another file)",
                output.display(),
                input.display()
            ))
            .into());
        }
    }
    Ok(())
}

fn export(dump: &Path, format: Format, output: &Path, address: Option<&str>, depth: usize, max_nodes: usize) -> Result<ExitCode> {
    not_over_input(output, [&dump.to_path_buf()])?;
    let address = address.map(views::parse_address).transpose()?;
    let loaded = views::load(dump)?;
    let ex = views::session(&loaded);
    // The subgraph's centre, looked for before anything is written: a
    // question about the dump (exit 1), not a failure to write the output.
    if let (Some(a), Format::Dot | Format::Mermaid) = (address, format) {
        if ex.heap().find(a).is_none() {
            return Err(heapdump_analyze::AnalyzeError::NoSuchAllocation { address: a }.into());
        }
    }
    if let Format::Parquet = format {
        return export_parquet(&ex, output);
    }
    let opts = heapdump_export::GraphOptions { address, depth, max_nodes };
    write_atomically(output, |w| match format {
        Format::Pprof => heapdump_export::write_pprof(&ex, w),
        Format::Heapsnapshot => heapdump_export::write_heapsnapshot(&ex, w),
        Format::Folded => heapdump_export::write_folded(&ex, w),
        Format::Svg => heapdump_export::write_svg(&ex, w),
        Format::Dot => heapdump_export::write_dot(&ex, &opts, w),
        Format::Mermaid => heapdump_export::write_mermaid(&ex, &opts, w),
        Format::Json => heapdump_export::write_json(&ex, w),
        Format::Parquet => unreachable!("written above"),
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `export --format parquet -o DIR`: the five tables into DIR, each file
/// renamed into place when whole; said on stderr, as the other exports.
fn export_parquet(ex: &heapdump_analyze::Analysis<'_>, dir: &Path) -> Result<ExitCode> {
    if dir.as_os_str() == "-" {
        return Err(output::Usage("--format parquet writes a directory of tables: -o DIR, not standard output".into()).into());
    }
    if dir.exists() && !dir.is_dir() {
        return Err(output::Usage(format!("--format parquet writes a directory of tables: {} is not a directory", dir.display())).into());
    }
    let files = heapdump_export::write_parquet(ex, dir).with_context(|| format!("writing the parquet tables into {}", dir.display()))?;
    let bytes: u64 = files.iter().map(|f| f.bytes).sum();
    let rows: Vec<String> =
        files.iter().map(|f| format!("{} {}", f.path.file_stem().unwrap_or_default().to_string_lossy(), f.rows)).collect();
    eprintln!(
        "heapdump: wrote {} (dump {}: {} rows; {})",
        dir.display(),
        heapdump_export::dump_id(ex),
        rows.join(", "),
        output::bytes(bytes)
    );
    Ok(ExitCode::SUCCESS)
}

/// Finds a program shipped next to this executable: `name`, of the
/// workspace's `package` (the error says how to get it there).
pub fn sibling(name: &str, package: &str) -> Result<PathBuf> {
    let me = std::env::current_exe().context("cannot locate the heapdump executable")?;
    let dir = me.parent().context("the heapdump executable has no directory")?;
    let p = dir.join(name);
    if p.exists() {
        return Ok(p);
    }
    anyhow::bail!(
        "{name} not found next to {}: it is the {package} package's; from heapdump's source tree, `cargo install --path crates/demo --bin {name}` puts it beside an installed heapdump, `cargo build --release -p {package}` beside target/release/heapdump",
        me.display()
    )
}

/// How to run this heapdump from a shell: `heapdump` when that is what
/// PATH finds, else the executable's own path (after a build, say).
fn invocation() -> String {
    let Ok(me) = std::env::current_exe() else { return "heapdump".into() };
    let same = |p: &Path| std::fs::canonicalize(p).ok() == std::fs::canonicalize(&me).ok();
    let found = std::env::var_os("PATH").and_then(|paths| {
        use std::os::unix::fs::PermissionsExt;
        std::env::split_paths(&paths)
            .map(|d| d.join("heapdump"))
            .find(|c| std::fs::metadata(c).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
    });
    if found.is_some_and(|f| same(&f)) {
        return "heapdump".into();
    }
    let s = me.to_string_lossy().into_owned();
    if s.chars().all(|c| c.is_ascii_alphanumeric() || "/._+-".contains(c)) {
        s
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn demo() -> Result<ExitCode> {
    let program = sibling("heapdump-demo", "heapdump-demo")?;
    println!("== running the bundled example: {}", program.display());
    // Its output is passed on by this process, so that a reader going
    // away ends the demo as it ends any command. It names its dump after
    // its own pid (heapdump-demo.<pid>.hdump), as `run` names a program's.
    let child = std::process::Command::new(&program)
        .env("HEAPDUMP_BACKTRACE", "all")
        .env("HEAPDUMP_SIGNAL", "0")
        .env_remove("HEAPDUMP_OUTPUT")
        .env_remove("HEAPDUMP_AT_EXIT")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot run {}", program.display()))?;
    let out = PathBuf::from(format!("heapdump-demo.{}.hdump", child.id()));
    let ran = child.wait_with_output().with_context(|| format!("cannot run {}", program.display()))?;
    if !ran.status.success() {
        anyhow::bail!("the example program failed ({})", ran.status);
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&ran.stdout)?;
    writeln!(stdout, "\n== summary")?;
    print_summary(&mut stdout, &out, &heapdump_analyze::summary(&out)?)?;
    let loaded = views::load(&out)?;
    let heap = loaded.heap();
    // One analysis serves both views.
    let a = views::session(&loaded);
    a.dominators();
    writeln!(stdout, "\n== leaks")?;
    views::print_leaks(&mut stdout, &a.leak_report(), 3)?;
    writeln!(stdout, "\n== top retainers")?;
    let rows = a.retainers(8);
    views::print_retainers(&mut stdout, &rows, heap.total_bytes())?;
    let abs = std::fs::canonicalize(&out).unwrap_or(out.clone());
    writeln!(stdout, "\nThe dump is {}. Go on with:", abs.display())?;
    let heapdump = invocation();
    for sub in ["top --by site", "top --by type", "leaks --json", "retained -n 30", "summary --json"] {
        writeln!(stdout, "  {heapdump} {sub} {}", out.display())?;
    }
    if let Some(r) = rows.first() {
        writeln!(stdout, "  {heapdump} path {} {}", out.display(), r.address)?;
    }
    writeln!(stdout, "  {heapdump} serve {}    # the same in your browser: the dominator tree, blocks, a flamegraph", out.display())?;
    Ok(ExitCode::SUCCESS)
}

/// `man`: heapdump's page, a command's (`heapdump-top(1)`, as the top
/// page's SEE ALSO names them), or all of them into a directory.
fn man(command: Option<&str>, dir: Option<&Path>) -> Result<ExitCode> {
    let mut cli = <Cli as clap::CommandFactory>::command().disable_help_subcommand(true);
    // Names the commands `heapdump-top` and their synopses `heapdump top`.
    cli.build();
    let page = |c: &clap::Command| clap_mangen::Man::new(c.clone()).source(format!("heapdump {}", env!("CARGO_PKG_VERSION")));
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let pages = std::iter::once(&cli).chain(cli.get_subcommands().filter(|c| !c.is_hide_set()));
        for c in pages {
            let p = page(c);
            write_atomically(&dir.join(p.get_filename()), |w| p.render(w))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let p = match command {
        None => page(&cli),
        Some(name) => match cli.find_subcommand(name) {
            Some(c) => page(c),
            None => {
                let names: Vec<&str> = cli.get_subcommands().map(|c| c.get_name()).collect();
                return Err(output::Usage(format!("no command {name:?} to show the manual of: one of {}", names.join(", "))).into());
            }
        },
    };
    // Whole, then written: a reader that goes away ends it quietly.
    let mut roff = Vec::new();
    p.render(&mut roff)?;
    let mut out = std::io::stdout().lock();
    out.write_all(&roff)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// A suppressions file's text: a regular file of at most 16 MiB (valgrind's
/// suppression files run to a few hundred KiB), never a device or a FIFO,
/// which would be read without end.
pub(crate) fn read_suppressions(path: &Path) -> Result<String> {
    use std::io::Read;
    const MAX: u64 = 16 << 20;
    let cannot = || format!("cannot read suppressions {}", path.display());
    let (f, len) = heapdump_analyze::input::open_regular(path).with_context(cannot)?;
    if len > MAX {
        anyhow::bail!("cannot read suppressions {}: {} bytes, more than a suppressions file's {MAX}", path.display(), len);
    }
    let mut text = String::new();
    f.take(MAX).read_to_string(&mut text).with_context(cannot)?;
    Ok(text)
}
