//! `heapdump check`: a leak gate for CI. Runs the program as `run` does
//! (`run::launch`: the preload library, its children, every dump waited
//! for), takes each process's exit dump, and asks the analysis for its
//! verdict (`LeakReport::failing`): nothing here decides what is lost.

use crate::output::Usage;
use crate::run::{self, RunOptions};
use anyhow::{Context, Result};
use heapdump_analyze::leaks::Count;
use heapdump_analyze::suppress::Suppressions;
use heapdump_analyze::{LeakGroup, Options};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `check`, as DESIGN.md fixes them.
pub struct CheckOptions {
    pub suppressions: Vec<PathBuf>,
    pub error_exitcode: u8,
    pub junit: Option<PathBuf>,
    pub mode: String,
    /// `--kind possible`: possibly lost blocks fail the check too.
    pub possible: bool,
    /// Where the dumps go (kept); default: a private temporary directory,
    /// removed at the end.
    pub output: Option<PathBuf>,
    pub program: Vec<OsString>,
}

/// One process's verdict.
struct Verdict {
    /// `name[pid]`.
    program: String,
    /// Its command line, as its dump says.
    cmdline: String,
    /// What fails the check, after the suppressions.
    failing: Count,
    groups: Vec<LeakGroup>,
    suppressed: Count,
    /// Why no verdict could be given (an incomplete dump).
    error: Option<String>,
}

pub fn check(o: CheckOptions) -> Result<ExitCode> {
    if o.program.is_empty() {
        return Err(Usage("check needs a program: heapdump check [OPTIONS] -- PROGRAM [ARGS...]".into()).into());
    }
    // Read before the program runs: a bad file is a usage error, not a
    // verdict.
    let mut sup = Suppressions::default();
    for path in &o.suppressions {
        let text = crate::cmd::read_suppressions(path)?;
        sup.extend(Suppressions::parse(&text).map_err(|e| Usage(format!("{}: {e}", path.display())))?);
    }
    // Only what the program's exit dumps need: no dump signal of ours in
    // the program, no dump of a process a signal ends, a stack for every
    // block.
    let tmp = match &o.output {
        Some(_) => None,
        None => {
            Some(tempfile::Builder::new().prefix("heapdump-check.").tempdir().context("cannot make a temporary directory for the dumps")?)
        }
    };
    let output = match (&o.output, &tmp) {
        (Some(p), _) => p.clone(),
        (None, Some(t)) => t.path().join("check.hdump"),
        (None, None) => unreachable!("a temporary directory when no -o"),
    };
    let ran = run::launch(RunOptions {
        mode: o.mode.clone(),
        output: Some(output),
        signal: Some("0".into()),
        backtrace: Some("all".into()),
        no_on_fatal: true,
        program: o.program.clone(),
        // No threshold, no schedule, no fork: the exit dumps only.
        ..Default::default()
    })?;
    if !ran.started {
        return Ok(ExitCode::from(ran.code));
    }
    let mut verdicts = vec![];
    for d in &ran.dumps {
        if o.output.is_some() {
            eprintln!("{}", d.line());
        }
        if !d.complete() {
            verdicts.push(Verdict::error(d.program(), String::new(), format!("no complete dump ({})", d.line())));
            continue;
        }
        verdicts.push(verdict(d, &sup, o.possible));
    }
    drop(tmp);
    let mut err = std::io::stderr().lock();
    for v in &verdicts {
        v.print(&mut err)?;
    }
    if let Some(path) = &o.junit {
        let xml = junit(&verdicts, o.possible);
        std::fs::write(path, xml).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let leaking = verdicts.iter().filter(|v| v.failing.blocks > 0).count();
    let failed = verdicts.iter().filter(|v| v.error.is_some()).count();
    if ran.code != 0 {
        writeln!(err, "heapdump: check: the program failed (exit status {}): check exits with its status", ran.code)?;
        return Ok(ExitCode::from(ran.code));
    }
    if verdicts.is_empty() {
        writeln!(err, "heapdump: check: no process wrote an exit dump: nothing to check (is the program statically linked?)")?;
        return Ok(ExitCode::from(1));
    }
    if leaking > 0 {
        let c =
            verdicts.iter().fold(Count::default(), |a, v| Count { bytes: a.bytes + v.failing.bytes, blocks: a.blocks + v.failing.blocks });
        writeln!(
            err,
            "heapdump: check: {} bytes in {} blocks lost in {leaking} of {} processes: exit status {}",
            c.bytes,
            c.blocks,
            verdicts.len(),
            o.error_exitcode
        )?;
        return Ok(ExitCode::from(o.error_exitcode));
    }
    if failed > 0 {
        writeln!(err, "heapdump: check: {failed} of {} processes could not be checked", verdicts.len())?;
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The verdict on one complete dump.
fn verdict(d: &run::Dump, sup: &Suppressions, possible: bool) -> Verdict {
    let path = std::path::Path::new(d.path());
    let cmdline = heapdump_analyze::summary(path).map(|s| s.cmdline.join(" ")).unwrap_or_default();
    // Dumps of one run, analysed once: no cache kept for them.
    let dump = match heapdump_analyze::open(path, &Options::default().cache(false)) {
        Ok(x) => x,
        Err(e) => return Verdict::error(d.program(), cmdline, format!("{e:#}")),
    };
    let a = dump.analysis();
    if let Err(none) = a.leak_verdict() {
        return Verdict::error(d.program(), cmdline, none.to_string());
    }
    let mut sup = sup.clone();
    let r = a.leak_report_with(None, Some(&mut sup));
    Verdict {
        program: d.program(),
        cmdline,
        failing: r.failing(possible),
        groups: r.failing_groups(possible).cloned().collect(),
        suppressed: r.suppressed.unwrap_or_default(),
        error: None,
    }
}

impl Verdict {
    fn error(program: String, cmdline: String, why: String) -> Verdict {
        Verdict { program, cmdline, failing: Count::default(), groups: vec![], suppressed: Count::default(), error: Some(why) }
    }

    /// valgrind's loss records: `==PID== N (D direct, I indirect) bytes in
    /// B blocks are definitely lost in loss record i of n`, then the stack.
    /// Nothing for a clean process.
    fn print(&self, out: &mut impl Write) -> std::io::Result<()> {
        if let Some(e) = &self.error {
            return writeln!(out, "heapdump: check: {}: not checked: {e}", self.program);
        }
        if self.failing.blocks == 0 {
            return Ok(());
        }
        let p = &self.program;
        writeln!(out, "=={p}== {} bytes in {} blocks lost: {}", self.failing.bytes, self.failing.blocks, self.cmdline)?;
        let n = self.groups.len();
        for (i, g) in self.groups.iter().enumerate() {
            writeln!(out, "=={p}== {} in loss record {} of {n}", record_head(g), i + 1)?;
            for (k, f) in g.stack.iter().enumerate() {
                writeln!(out, "=={p}==    {} {f}", if k == 0 { "at" } else { "by" })?;
            }
            writeln!(out, "=={p}==")?;
        }
        if self.suppressed.blocks > 0 {
            writeln!(out, "=={p}== suppressed: {} bytes in {} blocks", self.suppressed.bytes, self.suppressed.blocks)?;
        }
        Ok(())
    }
}

/// A group's first line, as valgrind words it.
fn record_head(g: &LeakGroup) -> String {
    let bytes = if g.indirect_blocks > 0 {
        format!("{} ({} direct, {} indirect) bytes", g.bytes + g.indirect_bytes, g.bytes, g.indirect_bytes)
    } else {
        format!("{} bytes", g.bytes)
    };
    let ty = if g.ty == heapdump_analyze::types::UNKNOWN { String::new() } else { format!(" ({})", g.ty) };
    format!("{bytes} in {} blocks are {}{ty}, e.g. {}", g.blocks, g.kind.as_str(), g.example)
}

/// JUnit XML: one test case per process, its lost groups as failures (one
/// failure element, each group a paragraph of its text), a process that
/// could not be checked as an error.
fn junit(verdicts: &[Verdict], possible: bool) -> String {
    let failures = verdicts.iter().filter(|v| v.failing.blocks > 0).count();
    let errors = verdicts.iter().filter(|v| v.error.is_some()).count();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let what = if possible { "definitely, indirectly or possibly lost" } else { "definitely or indirectly lost" };
    x += &format!("<testsuites name=\"heapdump check\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\">\n", verdicts.len());
    x += &format!(
        "  <testsuite name=\"heapdump check\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\">\n",
        verdicts.len()
    );
    for v in verdicts {
        let name = if v.cmdline.is_empty() { v.program.clone() } else { format!("{} {}", v.program, v.cmdline) };
        x += &format!("    <testcase classname=\"heapdump.check\" name=\"{}\"", escape(&name));
        if let Some(e) = &v.error {
            x += &format!(">\n      <error message=\"{}\" type=\"no verdict\"/>\n    </testcase>\n", escape(e));
        } else if v.failing.blocks > 0 {
            let message = format!("{} bytes in {} blocks {what}", v.failing.bytes, v.failing.blocks);
            let mut text = String::new();
            for (i, g) in v.groups.iter().enumerate() {
                text += &format!("{} in loss record {} of {}\n", record_head(g), i + 1, v.groups.len());
                for (k, f) in g.stack.iter().enumerate() {
                    text += &format!("   {} {f}\n", if k == 0 { "at" } else { "by" });
                }
                text += "\n";
            }
            x +=
                &format!(">\n      <failure message=\"{}\" type=\"leak\">{}</failure>\n    </testcase>\n", escape(&message), escape(&text));
        } else {
            x += "/>\n";
        }
    }
    x += "  </testsuite>\n</testsuites>\n";
    x
}

/// Text as XML 1.0 takes it in an attribute or an element: the five
/// markup characters escaped, the control characters it forbids dropped
/// (a symbol name is not ours to trust).
fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            '\n' => o.push_str("&#10;"),
            '\t' => o.push_str("&#9;"),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {}
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escape_leaves_well_formed_xml() {
        assert_eq!(escape("a<b>&\"c'\u{1}d\n"), "a&lt;b&gt;&amp;&quot;c&apos;d&#10;");
    }
}
