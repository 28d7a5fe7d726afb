//! `heapdump man [COMMAND]`: a page per command, as the top page's SEE
//! ALSO names them, each rendered by groff as man renders it, and all of
//! them written where `man` finds them.

use crate::common::*;

/// The commands `heapdump --help` lists (clap's `help` aside).
fn commands() -> Vec<String> {
    let help = ok(&heapdump().arg("--help").output().unwrap());
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

/// The page as text, as `man` would show it in a UTF-8 terminal (groff's
/// man macros, no hyphenation, long lines), its minus signs and hyphens
/// read as `-`.
fn render(roff: &str) -> String {
    use std::io::Write;
    let mut child = tool("groff")
        .args(["-k", "-man", "-Tutf8", "-P-cbu", "-rHY=0", "-rLL=400n", "-ww"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(roff.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.stderr.is_empty(), "groff warns: {}", String::from_utf8_lossy(&o.stderr));
    ok(&o).replace(['\u{2212}', '\u{2010}'], "-")
}

/// The long options `heapdump COMMAND --help` lists.
fn long_options(command: &str) -> Vec<String> {
    let help = ok(&heapdump().args([command, "--help"]).output().unwrap());
    let mut v: Vec<String> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2 && w != &"--help")
        .map(String::from)
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn every_command_has_a_manual_page_and_all_install_into_a_directory() {
    let commands = commands();
    for c in ["run", "attach", "core", "summary", "top", "leaks", "retained", "path", "diff", "export", "report", "serve", "man"] {
        assert!(commands.iter().any(|x| x == c), "{c} missing from --help: {commands:?}");
    }
    let d = Scratch::new("man");
    let dir = d.path("man1");
    ok(&heapdump().args(["man", "--dir"]).arg(&dir).output().unwrap());
    let top = render(&std::fs::read_to_string(dir.join("heapdump.1")).unwrap());
    assert_eq!(std::fs::read_to_string(dir.join("heapdump.1")).unwrap(), ok(&heapdump().arg("man").output().unwrap()));
    for c in &commands {
        let name = format!("heapdump-{c}");
        let roff = ok(&heapdump().args(["man", c]).output().unwrap());
        assert!(roff.starts_with(".ie") && roff.contains(&format!(".TH {name} 1 ")), "{c}: {}", &roff[..roff.len().min(200)]);
        // The page the top one's SEE ALSO names exists, and is this one.
        assert!(top.contains(&format!("{name}(1)")), "the top page does not name {name}(1)");
        assert_eq!(std::fs::read_to_string(dir.join(format!("{name}.1"))).unwrap(), roff, "--dir's {name}.1");
        let text = render(&roff);
        assert!(text.contains("NAME") && text.contains("SYNOPSIS") && text.contains("OPTIONS"), "{c}:\n{text}");
        assert!(text.contains(&format!("{name} - ")) && text.contains(&format!("heapdump {c} ")), "{c}:\n{text}");
        for opt in long_options(c) {
            assert!(text.contains(&opt), "the page of {c} lacks {opt}:\n{text}");
        }
    }
    // Only the pages: heapdump.1 and one per command.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), commands.len() + 1);
    // An unknown command is bad usage, said in one line.
    let o = heapdump().args(["man", "frobnicate"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("frobnicate") && err.contains("top"), "{err}");
}
